"""The baselines polytf is measured against, on the same GraphDef and the same thread count:

* ``numpy``: the graph run node by node with the op registry's numpy references (the
  executable specification; MatMul is ``np.matmul``, i.e. numpy's BLAS; Conv2D accumulates
  in float64 via ``np.tensordot``, one call per filter tap);
* ``tensorflow``: TensorFlow running the GraphDef through ``tf.function``
  (:func:`polytf.model_zoo.tensorflow_runner.tensorflow_function`);
* ``xla``: the same with ``jit_compile=True``;
* ``openvino``: OpenVINO's CPU plugin in float32 on the GraphDef converted in memory
  (:mod:`polytf.bench.openvino_baseline`);
* ``onnxruntime``: ONNX Runtime on the GraphDef converted by tf2onnx at opset 17
  (:mod:`polytf.bench.onnxruntime_baseline`).

The engines (OpenVINO, ONNX Runtime: :mod:`polytf.bench.engines`) run when TensorFlow does
(not with ``--no-tensorflow``, which times numpy only) and are checked against TensorFlow's
outputs (numpy's when TensorFlow failed) with the end-to-end tolerance: an engine that is not
installed, cannot convert the graph, or returns a wrong result is an error of its system, not
timed.

TensorFlow's thread pools and OpenBLAS's threads are sized once, when they start, so each
thread count gets its own child process (:class:`BaselineWorker`): ``python -m
polytf.bench.baselines --threads N [--no-tensorflow]``, started with ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to N; it also limits BLAS with threadpoolctl and
sets TensorFlow's intra-op pool to N threads and its inter-op pool to 1. It reads one JSON request
per line on stdin and answers one JSON line on stdout:

* ``{"op": "info"}`` -> threads, BLAS libraries (threadpoolctl), TensorFlow version or why not,
  the engines' package versions (``None``: not installed);
* ``{"op": "load", "model": PATH, "inputs": {NAME: FILE.npy}, "outputs": [NAME], "warmup": W,
  "outputs_file": FILE.npz (optional)}`` -> the systems ready to time, per-system errors, every
  baseline's max abs error against numpy, and XLA's and the engines' against TensorFlow;
  TensorFlow's outputs written to ``outputs_file`` if given;
* ``{"op": "round", "repeats": R, "warmup": W}`` -> ``{"median_s": {system: seconds}}``, one
  round: per system, W untimed calls then the median of R timed calls;
* ``{"op": "quit"}``.

Every timed call returns numpy arrays. numpy takes numpy arrays, as ``CompiledModel.__call__``
does; TensorFlow and XLA take tensors made once before timing (converting arrays in every call
would add TensorFlow's per-op overhead to its time); OpenVINO and ONNX Runtime take the arrays
bound once, without a copy per call.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polytf.bench.engine_calls import describe_error
from polytf.bench.engines import ENGINES, NOT_INSTALLED, engine_function, engine_versions, tolerance_error
from polytf.errors import DependencyMissingError, PolytfError
from polytf.runtime.timing import call_latencies

__all__ = ["NumpyGraph", "BaselineWorker", "round_median_s", "SETTLE_S", "SYSTEMS"]

#: Baseline systems, in report order.
SYSTEMS = ("numpy", "tensorflow", "xla", *ENGINES)
#: Pause before each system's round (seconds), so that the spinning worker threads of the
#: system timed before (OpenBLAS, OpenMP, Eigen) have gone to sleep.
SETTLE_S = 0.1


def round_median_s(call: Callable[[], Any], repeats: int, warmup: int = 0) -> float:
    """Median wall time of ``repeats`` calls of ``call()`` after ``warmup`` untimed ones, seconds."""
    return statistics.median(call_latencies(call, max(1, repeats), max(0, warmup)))


def _output_key(tensor: str) -> str:
    from polytf.graph import split_tensor_name

    node, port = split_tensor_name(tensor)
    return node if port == 0 else f"{node}:{port}"


class NumpyGraph:
    """A frozen GraphDef evaluated with numpy, node by node in topological order, with the op
    registry's ``reference(node, inputs)`` (constants folded by shape inference are reused).

    Args:
        path: ``.pb``/``.pbtxt`` GraphDef.
        outputs: output node or tensor names; default the graph's sinks.
        input_shapes: placeholder name -> shape, for unknown dimensions.

    Call it as ``graph(**{placeholder: array}) -> {output name: array}``; output names are node
    names, with ``:port`` when the port is not 0 (as :class:`CompiledModel` returns them).

    Raises:
        GraphError, UnsupportedOpError, ShapeError: as :func:`polytf.load` would.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        outputs: Sequence[str] | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        from polytf.frontend import load_graph
        from polytf.graph import split_tensor_name
        from polytf.lowering.shape_inference import infer_types
        from polytf.ops import NO_OUTPUT, lookup
        from polytf.passes.pruning import prune_to_outputs

        graph, _ = prune_to_outputs(infer_types(load_graph(path, outputs=outputs), input_shapes))
        self.input_types = {n.name: graph.types[n.output(0)] for n in graph.placeholders}
        self.output_names = tuple(_output_key(t) for t in graph.outputs)
        self._outputs = tuple(graph.outputs)
        self._constants = dict(graph.constants)
        ports: dict[str, list[str]] = {}
        for tensor in graph.types:
            ports.setdefault(split_tensor_name(tensor)[0], []).append(tensor)
        self._steps = []
        placeholders = {placeholder.name for placeholder in graph.placeholders}
        for node in graph.nodes.values():
            definition = lookup(node.op)
            produced = sorted(ports.get(node.name, []), key=lambda t: split_tensor_name(t)[1])
            if node.name in placeholders or definition.category == NO_OUTPUT or not produced:
                continue
            if all(t in self._constants for t in produced):
                continue
            dtypes = [graph.types[t].dtype for t in produced]
            self._steps.append((node, definition.reference, tuple(node.inputs), produced, dtypes))

    def __call__(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        missing = sorted(set(self.input_types) - set(feeds))
        if missing:
            raise PolytfError(f"numpy baseline: missing inputs {missing}")
        values: dict[str, Any] = dict(self._constants)
        for name, tensor_type in self.input_types.items():
            values[f"{name}:0"] = np.asarray(feeds[name], dtype=tensor_type.dtype)
        for node, reference, inputs, produced, dtypes in self._steps:
            results = reference(node, [values[t] for t in inputs])
            for tensor, result, dtype in zip(produced, results, dtypes):
                values[tensor] = np.asarray(result, dtype=dtype)
        return {key: np.asarray(values[t]) for key, t in zip(self.output_names, self._outputs)}


def max_abs_error(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> float:
    """Largest ``|actual - expected|`` over all outputs (inf on a shape mismatch or a missing output)."""
    worst = 0.0
    for name, reference in expected.items():
        value = actual.get(name)
        if value is None or np.shape(value) != np.shape(reference):
            return float("inf")
        if np.size(reference):
            worst = max(worst, float(np.max(np.abs(np.asarray(value, np.float64) - np.asarray(reference, np.float64)))))
    return worst


class BaselineSession:
    """The child process's state: its thread settings and the loaded model's timed systems."""

    def __init__(self, threads: int, tensorflow: bool) -> None:
        self.threads = int(threads)
        self.engines = bool(tensorflow)  # --no-tensorflow: numpy only
        self.tensorflow_version: str | None = None
        self.tensorflow_error: str | None = None if tensorflow else "skipped (--no-tensorflow)"
        try:
            from threadpoolctl import threadpool_limits

            self._limits = threadpool_limits(limits=self.threads, user_api="blas")
        except ImportError:
            self._limits = None
        if tensorflow:
            try:
                from polytf.model_zoo.keras_models import import_tensorflow

                tf = import_tensorflow()
                tf.config.threading.set_intra_op_parallelism_threads(self.threads)
                tf.config.threading.set_inter_op_parallelism_threads(1)
                self.tensorflow_version = tf.__version__
            except PolytfError as error:
                self.tensorflow_error = f"skipped: {error}"
        self.systems: dict[str, Callable[[], Any]] = {}

    def info(self) -> dict[str, Any]:
        from polytf.bench.machine import blas_info

        return {
            "threads": self.threads,
            "blas": blas_info(),
            "tensorflow": self.tensorflow_version,
            "tensorflow_error": self.tensorflow_error,
            "engines": engine_versions(),
        }

    def load(
        self, model: str, inputs: Mapping[str, str], outputs: Sequence[str], warmup: int = 3, outputs_file: str | None = None
    ) -> dict[str, Any]:
        """Make the systems ready to time; with ``outputs_file``, TensorFlow's outputs (when it
        runs) are also written there (``.npz``, keyed by output name) for the parent to compare.
        The previous model's systems are released first: two rows' compiled models at once
        (a batch-8 CNN's in TensorFlow, XLA, OpenVINO and ONNX Runtime) are gigabytes."""
        self.systems = {}
        gc.collect()
        feeds = {name: np.load(path) for name, path in inputs.items()}
        graph = NumpyGraph(model, outputs=list(outputs), input_shapes={n: a.shape for n, a in feeds.items()})
        expected = graph(**feeds)
        self.systems = {"numpy": lambda: graph(**feeds)}
        errors: dict[str, str] = {}
        accuracy: dict[str, float] = {}
        versus_tensorflow: dict[str, float] = {}
        tensorflow_outputs: dict[str, np.ndarray] | None = None
        if self.tensorflow_version is not None:
            from polytf.model_zoo.keras_models import import_tensorflow
            from polytf.model_zoo.tensorflow_runner import tensorflow_function

            tf = import_tensorflow()
            # Inputs become tensors once, outside the timed call (as time_graphdef_with_tensorflow
            # does): converting numpy arrays costs ~0.15 ms per input per call, which would flatter polytf.
            names, tensors = list(feeds), [tf.constant(feeds[n]) for n in feeds]
            for system, xla in (("tensorflow", False), ("xla", True)):
                try:
                    function = tensorflow_function(model, names, list(graph.output_names), xla=xla)

                    def call(function=function) -> dict[str, np.ndarray]:
                        results = function(*tensors)
                        results = results if isinstance(results, (list, tuple)) else [results]
                        return {key: value.numpy() for key, value in zip(graph.output_names, results)}

                    results = call()
                    accuracy[system] = max_abs_error(results, expected)
                    if system == "tensorflow":
                        tensorflow_outputs = results
                        if outputs_file:
                            np.savez(outputs_file, **results)
                    elif tensorflow_outputs is not None:
                        versus_tensorflow[system] = max_abs_error(results, tensorflow_outputs)
                    for _ in range(max(0, warmup)):
                        call()
                    self.systems[system] = call
                except Exception as error:  # noqa: BLE001 - a baseline that fails is reported, not fatal
                    errors[system] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        if self.engines:
            reference, reference_name = (
                (tensorflow_outputs, "TensorFlow") if tensorflow_outputs is not None else (expected, "numpy")
            )
            for engine in ENGINES:
                try:
                    function = engine_function(engine, model, feeds, list(graph.output_names), self.threads)

                    def call(function=function) -> dict[str, np.ndarray]:
                        return dict(zip(graph.output_names, function()))

                    results = call()
                except DependencyMissingError as error:
                    errors[engine] = f"{NOT_INSTALLED}: {error}"
                    continue
                except Exception as error:  # noqa: BLE001 - an engine that cannot convert the graph is reported, not fatal
                    errors[engine] = str(error) if isinstance(error, PolytfError) else describe_error(error)
                    continue
                accuracy[engine] = max_abs_error(results, expected)
                if tensorflow_outputs is not None:
                    versus_tensorflow[engine] = max_abs_error(results, tensorflow_outputs)
                wrong = tolerance_error(results, reference, reference_name)
                if wrong:
                    errors[engine] = wrong
                    continue
                for _ in range(max(0, warmup)):
                    call()
                self.systems[engine] = call
        for _ in range(max(0, warmup)):
            self.systems["numpy"]()
        return {
            "systems": list(self.systems),
            "errors": errors,
            "max_abs_error_vs_numpy": accuracy,
            "max_abs_error_vs_tensorflow": versus_tensorflow,
        }

    def round(self, repeats: int, warmup: int = 3) -> dict[str, Any]:
        medians = {}
        for system, call in self.systems.items():
            time.sleep(SETTLE_S)
            medians[system] = round_median_s(call, repeats, warmup)
        return {"median_s": medians}


def serve(threads: int, tensorflow: bool) -> int:
    """The child's loop: JSON requests on stdin, JSON answers on the original stdout (anything
    else printed to stdout, e.g. by TensorFlow's C++ code, is sent to stderr)."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        session = BaselineSession(threads, tensorflow)
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            op = request.pop("op", None)
            if op == "quit":
                break
            try:
                if op == "info":
                    reply = session.info()
                elif op == "load":
                    reply = session.load(**request)
                elif op == "round":
                    reply = session.round(**request)
                else:
                    raise PolytfError(f"unknown request {op!r}")
                reply["ok"] = True
            except Exception as error:  # noqa: BLE001 - reported to the parent, which decides
                reply = {
                    "ok": False,
                    "error": f"{type(error).__name__}: {error}" if not isinstance(error, PolytfError) else str(error),
                }
            channel.write(json.dumps(reply) + "\n")
    except KeyboardInterrupt:
        return 130
    return 0


class BaselineWorker:
    """Client of a baseline child process for one thread count.

    Args:
        threads: threads for numpy's BLAS and TensorFlow's intra-op pool.
        tensorflow: also time TensorFlow and XLA.
        log_path: file receiving the child's stderr (shown when it fails).

    Raises:
        PolytfError: the child could not start or answered with an error.
    """

    def __init__(self, threads: int, tensorflow: bool, log_path: Path) -> None:
        self.threads = int(threads)
        self.log_path = Path(log_path)
        env = dict(os.environ)
        for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[variable] = str(self.threads)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        command = [sys.executable, "-m", "polytf.bench.baselines", "--threads", str(self.threads)] + (
            [] if tensorflow else ["--no-tensorflow"]
        )
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env
        )
        self.info = self.request({"op": "info"})

    def request(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its answer."""
        try:
            self.process.stdin.write(json.dumps(dict(message)) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = self.process.poll()
            raise PolytfError(
                f"the baseline process for {self.threads} threads stopped (exit status {code}); its log ends with:\n{self._log_tail()}"
            )
        reply = json.loads(line)
        if not reply.pop("ok", False):
            raise PolytfError(f"baseline process ({self.threads} threads): {reply.get('error')}")
        return reply

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """Ask the child to quit; kill it if it does not within 10 s."""
        try:
            if self.process.poll() is None:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=10)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            self._log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m polytf.bench.baselines",
        description="Baseline timing process of polytf bench (JSON lines on stdin/stdout).",
    )
    parser.add_argument("--threads", type=int, required=True, help="threads for numpy's BLAS and TensorFlow's intra-op pool")
    parser.add_argument("--no-tensorflow", action="store_true", help="time numpy only")
    args = parser.parse_args(argv)
    return serve(args.threads, not args.no_tensorflow)


if __name__ == "__main__":
    sys.exit(main())
