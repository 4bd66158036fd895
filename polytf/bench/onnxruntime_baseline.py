"""ONNX Runtime as a baseline of ``polytf bench``: the frozen GraphDef converted to ONNX by
tf2onnx (opset 17) and run by ONNX Runtime's CPU execution provider with the bench's thread
count.

tf2onnx reads the GraphDef through TensorFlow (``tf2onnx.convert.from_graph_def``), with the
inputs' static shapes given (``shape_override``), so ONNX Runtime sees the same shapes as the
other systems; it cannot convert every graph (e.g. it writes an ``Erfc`` node, which opset 17
does not have, for Keras' exact GELU), and the bench then reports its message as this
system's error. The session runs with ``intra_op_num_threads`` threads,
``inter_op_num_threads=1`` (sequential execution), all graph optimisations
(``ORT_ENABLE_ALL``) and ``CPUExecutionProvider`` only. Source of the settings: ONNX
Runtime's "Thread management" and "Graph optimizations" documentation.

ONNX Runtime and tf2onnx are benchmark-only dependencies: ``pip install 'polytf[bench]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from polytf.bench.engine_calls import describe_error, tensor_name
from polytf.errors import DependencyMissingError, PolytfError

__all__ = ["ONNX_OPSET", "onnx_model", "onnxruntime_function"]

#: The ONNX opset tf2onnx writes.
ONNX_OPSET = 17


def onnx_model(path: str | os.PathLike, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> bytes:
    """The GraphDef at ``path`` as a serialized ONNX model (tf2onnx, opset :data:`ONNX_OPSET`).

    Args:
        path: frozen GraphDef (``.pb`` or ``.pbtxt``).
        feeds: placeholder name -> array (their shapes are the ONNX inputs' shapes).
        outputs: output tensors (``"Identity"`` or ``"node:1"``).

    Raises:
        DependencyMissingError: tf2onnx or TensorFlow is not installed.
        PolytfError: tf2onnx cannot convert the graph (its message's first line).
    """
    try:
        import tf2onnx
    except ImportError as error:
        raise DependencyMissingError(f"tf2onnx is not installed ({error}): pip install 'polytf[bench]'") from None
    from polytf.model_zoo.tensorflow_runner import load_tf_graphdef

    graph_def = load_tf_graphdef(path)  # DependencyMissingError without TensorFlow
    shapes = {tensor_name(name): list(np.shape(value)) for name, value in feeds.items()}
    try:
        model, _ = tf2onnx.convert.from_graph_def(
            graph_def,
            input_names=list(shapes),
            output_names=[tensor_name(name) for name in outputs],
            opset=ONNX_OPSET,
            shape_override=shapes,
        )
    except Exception as error:  # noqa: BLE001 - tf2onnx raises whatever its handlers raise
        raise PolytfError(f"tf2onnx cannot convert '{os.path.basename(os.fspath(path))}': {describe_error(error)}") from None
    return model.SerializeToString()


def onnxruntime_function(
    path: str | os.PathLike, feeds: Mapping[str, np.ndarray], outputs: Sequence[str], threads: int
) -> Callable[[], list[np.ndarray]]:
    """A call running the GraphDef at ``path`` with ONNX Runtime on ``feeds``.

    Args:
        path: frozen GraphDef (``.pb`` or ``.pbtxt``).
        feeds: placeholder name -> array, bound once (not copied by the timed call).
        outputs: output tensors (``"Identity"`` or ``"node:1"``), in the order returned.
        threads: ``intra_op_num_threads``.

    Returns:
        ``call() -> [array per output]``: one ``InferenceSession.run``.

    Raises:
        DependencyMissingError: ONNX Runtime, tf2onnx or TensorFlow is not installed.
        PolytfError: tf2onnx cannot convert the graph, or ONNX Runtime cannot load the result.
    """
    try:
        import onnxruntime
    except ImportError as error:
        raise DependencyMissingError(f"ONNX Runtime is not installed ({error}): pip install 'polytf[bench]'") from None
    model = onnx_model(path, feeds, outputs)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: warnings go to the log, not to the bench's terminal
    try:
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001 - onnxruntime raises its own pybind11 exception classes
        raise PolytfError(f"ONNX Runtime cannot load the ONNX model of '{os.path.basename(os.fspath(path))}': {describe_error(error)}") from None
    inputs = {tensor_name(name): np.ascontiguousarray(value) for name, value in feeds.items()}
    fetches = [tensor_name(name) for name in outputs]

    def call() -> list[np.ndarray]:
        return session.run(fetches, inputs)

    return call
