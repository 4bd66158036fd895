"""The inference engines a user would deploy a frozen TensorFlow model with instead of polytf,
as baselines of ``polytf bench``: OpenVINO (:mod:`polytf.bench.openvino_baseline`) and ONNX
Runtime through tf2onnx (:mod:`polytf.bench.onnxruntime_baseline`).

Each engine is built by the baseline process (:mod:`polytf.bench.baselines`) from the
GraphDef, the bench's inputs and outputs and its thread count; an engine that is not
installed, cannot convert the graph, or returns outputs beyond the end-to-end tolerance of
TensorFlow's is a per-system error of the row, never the end of the run. The report's
*best engine* is the fastest of TensorFlow, XLA and these (:data:`ENGINE_SYSTEMS`).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from polytf.config import MeasurementConfig

__all__ = [
    "ENGINES",
    "ENGINE_SYSTEMS",
    "PACKAGES",
    "NOT_INSTALLED",
    "engine_function",
    "engine_versions",
    "tolerance_error",
    "ratio_to_best_engine",
]

#: The deployment engines, in report order (bench system names).
ENGINES = ("openvino", "onnxruntime")
#: The systems the report's *best engine* is chosen from (numpy, the reference, is not one).
ENGINE_SYSTEMS = ("tensorflow", "xla", *ENGINES)
#: The distributions each engine needs (besides TensorFlow for tf2onnx), as pip names them.
PACKAGES = {"openvino": ("openvino",), "onnxruntime": ("onnxruntime", "tf2onnx", "onnx")}
#: How the error of an engine that is not installed starts (the report's cell says "not installed").
NOT_INSTALLED = "not installed"


def engine_function(
    engine: str, path: str | os.PathLike, feeds: Mapping[str, np.ndarray], outputs: Sequence[str], threads: int
) -> Callable[[], list[np.ndarray]]:
    """The timed call of ``engine`` on the GraphDef at ``path``: ``call() -> [array per output]``.

    Args:
        engine: one of :data:`ENGINES`.
        path: frozen GraphDef (``.pb`` or ``.pbtxt``).
        feeds: placeholder name -> array.
        outputs: output tensors (``"Identity"`` or ``"node:1"``), in the order returned.
        threads: the engine's intra-op threads.

    Raises:
        DependencyMissingError: the engine (or TensorFlow, for tf2onnx) is not installed.
        PolytfError: the engine cannot convert, compile or load the graph.
        KeyError: ``engine`` is not one of :data:`ENGINES`.
    """
    if engine == "openvino":
        from polytf.bench.openvino_baseline import openvino_function

        return openvino_function(path, feeds, outputs, threads)
    if engine == "onnxruntime":
        from polytf.bench.onnxruntime_baseline import onnxruntime_function

        return onnxruntime_function(path, feeds, outputs, threads)
    raise KeyError(engine)


def engine_versions() -> dict[str, str | None]:
    """Installed version of each engine's distributions (``None``: not installed), read from the
    package metadata without importing them."""
    versions: dict[str, str | None] = {}
    for distributions in PACKAGES.values():
        for distribution in distributions:
            try:
                versions[distribution] = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                versions[distribution] = None
    return versions


def tolerance_error(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], reference: str) -> str | None:
    """Why ``actual`` is not ``expected`` within the end-to-end tolerance (``None`` when it is).

    The tolerance is the bench's and the end-to-end tests' (:mod:`polytf.bench.accuracy`):
    ``|actual - expected| <= rtol·|expected| + atol_scale·max|expected| + 1e-6`` per output.

    Args:
        reference: what computed ``expected``, for the message (``"TensorFlow"``).
    """
    config = MeasurementConfig()
    for name, values in expected.items():
        value = actual.get(name)
        if value is None or np.shape(value) != np.shape(values):
            shape = None if value is None else np.shape(value)
            return f"wrong result: output '{name}' has shape {shape}, {reference}'s {np.shape(values)}"
        values64 = np.asarray(values, np.float64)
        atol = config.atol_scale * float(np.max(np.abs(values64), initial=0.0)) + 1e-6
        if not np.allclose(np.asarray(value, np.float64), values64, rtol=config.rtol, atol=atol, equal_nan=True):
            worst = float(np.max(np.abs(np.asarray(value, np.float64) - values64), initial=0.0))
            return (
                f"wrong result: output '{name}' differs from {reference}'s by {worst:.3g} at most, beyond the tolerance "
                f"(rtol {config.rtol}, atol {atol:.3g}); not timed"
            )
    return None


def ratio_to_best_engine(systems: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
    """polytf time / the best engine's time, tuned and untuned: the report's one ratio convention
    (below 1: polytf is faster; above 1: polytf is slower).

    Args:
        systems: a bench row's systems (system -> ``{"median_s": seconds}`` or ``{"error": ...}``).

    Returns:
        ``{"engine": fastest of ENGINE_SYSTEMS timed, "engine_s": its seconds, "tuned": ratio,
        "untuned": ratio}`` (a ratio only where polytf has that time); empty when no engine was timed.
    """
    timed = {system: systems[system]["median_s"] for system in ENGINE_SYSTEMS if (systems.get(system) or {}).get("median_s")}
    if not timed:
        return {}
    engine = min(timed, key=timed.get)
    ratios: dict[str, object] = {"engine": engine, "engine_s": timed[engine]}
    for name, system in (("tuned", "polytf"), ("untuned", "polytf_untuned")):
        seconds = (systems.get(system) or {}).get("median_s")
        if seconds:
            ratios[name] = seconds / timed[engine]
    return ratios
