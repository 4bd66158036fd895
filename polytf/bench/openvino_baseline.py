"""OpenVINO as a baseline of ``polytf bench``: the frozen GraphDef read by OpenVINO's TensorFlow
frontend and run by its CPU plugin in float32, with the bench's thread count.

The model is converted in memory (``openvino.convert_model(path, input=..., output=...)``,
inputs given with the static shapes of the bench's arrays) and compiled directly, so its
weights stay float32 (``openvino.save_model`` would store them as float16 by default, which
gives a 2% error on ResNet50); the CPU plugin is asked for float32 inference
(``INFERENCE_PRECISION_HINT=f32``; without it the plugin may choose bfloat16 where the CPU has
it), ``INFERENCE_NUM_THREADS`` threads and the ``LATENCY`` performance hint (one stream, as a
user serving one request at a time would pick). Source of the settings: OpenVINO's
"CPU Device" and "Precision Control" documentation (``openvino.properties.hint``).

OpenVINO is a benchmark-only dependency: ``pip install 'polytf[bench]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from polytf.bench.engine_calls import describe_error, tensor_name
from polytf.errors import DependencyMissingError, PolytfError

__all__ = ["openvino_settings", "openvino_function"]


def openvino_settings(threads: int) -> dict[str, str]:
    """The CPU plugin's properties for ``threads`` threads (module docstring)."""
    return {"INFERENCE_NUM_THREADS": str(int(threads)), "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}


def _import_openvino():
    try:
        import openvino
    except ImportError as error:
        raise DependencyMissingError(f"OpenVINO is not installed ({error}): pip install 'polytf[bench]'") from None
    return openvino


def openvino_function(
    path: str | os.PathLike, feeds: Mapping[str, np.ndarray], outputs: Sequence[str], threads: int
) -> Callable[[], list[np.ndarray]]:
    """A call running the GraphDef at ``path`` with OpenVINO on ``feeds``.

    Args:
        path: frozen GraphDef (``.pb`` or ``.pbtxt``).
        feeds: placeholder name -> array (shapes and dtypes fix the compiled model's inputs);
            made into the request once, not copied by the timed call.
        outputs: output tensors (``"Identity"`` or ``"node:1"``), in the order returned.
        threads: ``INFERENCE_NUM_THREADS``.

    Returns:
        ``call() -> [array per output]``: one synchronous inference, outputs copied out as numpy
        float arrays (as polytf's ``model(**inputs)`` returns them).

    Raises:
        DependencyMissingError: OpenVINO is not installed.
        PolytfError: OpenVINO cannot convert or compile the graph (its message's first line).
    """
    openvino = _import_openvino()
    names = [tensor_name(name) for name in feeds]
    shapes = [(tensor, list(np.shape(value))) for tensor, value in zip(names, feeds.values())]
    fetches = [tensor_name(name) for name in outputs]
    try:
        converted = openvino.convert_model(os.fspath(path), input=shapes, output=fetches)
        compiled = openvino.Core().compile_model(converted, "CPU", openvino_settings(threads))
        ports = [compiled.output(tensor) for tensor in fetches]
        request = compiled.create_infer_request()
    except Exception as error:  # noqa: BLE001 - OpenVINO raises plain RuntimeError/Exception
        raise PolytfError(f"OpenVINO cannot run '{os.path.basename(os.fspath(path))}': {describe_error(error)}") from None
    inputs = {tensor: np.ascontiguousarray(value) for tensor, value in zip(names, feeds.values())}

    def call() -> list[np.ndarray]:
        results = request.infer(inputs, share_inputs=True, share_outputs=False)
        return [np.asarray(results[port]) for port in ports]

    return call
