"""Running a frozen GraphDef with TensorFlow itself: the reference for tests and benchmarks.

The graph is imported with ``tf.compat.v1.import_graph_def`` inside ``tf.compat.v1.wrap_function``
and pruned to the requested feeds and fetches, giving a TF2 concrete function, which is always
called through ``tf.function`` (``jit_compile=True`` with ``xla=True``): calling the pruned
function directly adds milliseconds of overhead per call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from polytf.errors import GraphError
from polytf.model_zoo.keras_models import import_tensorflow
from polytf.runtime.timing import call_latencies

__all__ = ["load_tf_graphdef", "tensorflow_function", "run_graphdef_with_tensorflow", "time_graphdef_with_tensorflow"]


def _tensor(name: str) -> str:
    node, sep, port = name.rpartition(":")
    return name if sep and port.isdigit() else f"{name}:0"


def load_tf_graphdef(path_or_graphdef: Any) -> Any:
    """A ``tf.compat.v1.GraphDef`` from a path (binary or text), a GraphDef proto of TF's or
    tensorboard's classes, or serialized bytes."""
    tf = import_tensorflow()
    from google.protobuf import text_format

    if isinstance(path_or_graphdef, tf.compat.v1.GraphDef):
        return path_or_graphdef
    if isinstance(path_or_graphdef, (bytes, bytearray)):
        return tf.compat.v1.GraphDef.FromString(bytes(path_or_graphdef))
    if hasattr(path_or_graphdef, "SerializeToString"):  # e.g. tensorboard's GraphDef class
        return tf.compat.v1.GraphDef.FromString(path_or_graphdef.SerializeToString())
    path = os.fspath(path_or_graphdef)
    with open(path, "rb") as f:
        data = f.read()
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(data)
        if len(graph_def.node) and all(n.op for n in graph_def.node):
            return graph_def
    except Exception:  # noqa: BLE001 - fall back to text
        pass
    graph_def = tf.compat.v1.GraphDef()
    try:
        text_format.Parse(data.decode("utf-8"), graph_def)
    except Exception:  # noqa: BLE001
        raise GraphError(f"cannot read '{path}' as a GraphDef with TensorFlow") from None
    return graph_def


def tensorflow_function(path_or_graphdef: Any, inputs: Sequence[str], outputs: Sequence[str], xla: bool = False) -> Any:
    """A TF2 function ``f(*arrays) -> list of tensors`` running the graph from ``inputs`` to ``outputs``.

    Names may be node names (``"input"``) or tensor names (``"input:0"``); arrays are converted
    to tensors of the placeholders' dtypes.
    """
    tf = import_tensorflow()
    graph_def = load_tf_graphdef(path_or_graphdef)

    def import_graph() -> None:
        tf.compat.v1.import_graph_def(graph_def, name="")

    wrapped = tf.compat.v1.wrap_function(import_graph, [])
    graph = wrapped.graph
    feeds = [graph.as_graph_element(_tensor(n)) for n in inputs]
    fetches = [graph.as_graph_element(_tensor(n)) for n in outputs]
    pruned = wrapped.prune(feeds=feeds, fetches=fetches)
    dtypes = [t.dtype for t in feeds]
    # Always run through tf.function: calling the pruned WrappedFunction directly costs
    # milliseconds of per-call overhead, which would make TensorFlow look slower than it is.
    compiled = tf.function(lambda *args: pruned(*args), jit_compile=bool(xla), autograph=False)

    def call(*arrays: Any) -> Any:
        return compiled(*(tf.convert_to_tensor(a, dtype=d) for a, d in zip(arrays, dtypes)))

    return call


def _prepare(feeds: Mapping[str, np.ndarray]) -> tuple[list[str], list[np.ndarray]]:
    names = list(feeds)
    return names, [np.asarray(feeds[n]) for n in names]


def run_graphdef_with_tensorflow(
    path_or_graphdef: Any,
    feeds: Mapping[str, np.ndarray],
    outputs: Sequence[str],
    xla: bool = False,
) -> dict[str, np.ndarray]:
    """Execute a frozen GraphDef with TensorFlow.

    Args:
        path_or_graphdef: a ``.pb``/``.pbtxt`` path or a GraphDef proto.
        feeds: placeholder name (``"input"`` or ``"input:0"``) -> array.
        outputs: node or tensor names to fetch, e.g. ``["Identity"]``.
        xla: compile with XLA (``jit_compile=True``).

    Returns:
        ``{name as given in outputs: numpy array}``.
    """
    if isinstance(outputs, str):
        outputs = [outputs]
    names, arrays = _prepare(feeds)
    fn = tensorflow_function(path_or_graphdef, names, outputs, xla=xla)
    results = fn(*arrays)
    if not isinstance(results, (list, tuple)):
        results = [results]
    return {name: np.asarray(value) for name, value in zip(outputs, results)}


def time_graphdef_with_tensorflow(
    path_or_graphdef: Any,
    feeds: Mapping[str, np.ndarray],
    outputs: Sequence[str],
    repeats: int = 20,
    warmup: int = 3,
    xla: bool = False,
) -> list[float]:
    """Per-call latencies in seconds of TensorFlow running the graph, after ``warmup`` calls.

    Inputs are converted to tensors once; each timed call includes fetching the outputs to numpy.
    """
    tf = import_tensorflow()
    if isinstance(outputs, str):
        outputs = [outputs]
    names, arrays = _prepare(feeds)
    fn = tensorflow_function(path_or_graphdef, names, outputs, xla=xla)
    tensors = [tf.constant(a) for a in arrays]

    def call() -> None:
        results = fn(*tensors)
        for r in results if isinstance(results, (list, tuple)) else [results]:
            r.numpy()

    return call_latencies(call, max(1, repeats), max(0, warmup))
