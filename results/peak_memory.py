"""Peak memory (peak RSS) of loading a model and calling it 10 times: polytf against the engines
a user deploys a frozen TensorFlow model with (OpenVINO, ONNX Runtime) and TensorFlow itself.

Each system runs in a fresh Python process of its own (``--child``), which imports only what
that system needs, records its RSS after the imports (the interpreter and libraries: the
baseline), loads the model, calls it ``--calls`` times on the same random inputs, and reports
its peak resident set (``VmHWM`` of ``/proc/self/status``, nothing subtracted). Not
``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries that over ``fork`` and ``execve`` from the
parent (which has imported TensorFlow), so every child would report the parent's peak;
``VmHWM`` is the high-water mark of the process's own address space, made anew by ``execve``.
The parent writes each model once (the zoo, with TensorFlow), its inputs (``.npz``), its ONNX
model (tf2onnx, opset 17) and its OpenVINO IR (``save_model(..., compress_to_fp16=False)``):
what a user ships. The systems:

* ``polytf``: ``polytf.load(pb, cache_dir=...)`` with the kernels' object code already in the
  cache (a deployed model's load: no isl, no LLVM); TensorFlow is never imported (checked);
* ``polytf_cold``: the same load with ``compile_cache=False`` (every kernel compiled in the
  process, as on a first load);
* ``openvino``: the IR read and compiled (``INFERENCE_PRECISION_HINT=f32``, ``LATENCY``);
* ``openvino_pb``: the ``.pb`` converted in the process (``openvino.convert_model``), then compiled;
* ``onnxruntime``: the ``.onnx`` model in an ``InferenceSession`` (``ORT_ENABLE_ALL``);
* ``tensorflow``: the GraphDef as a ``tf.function``.

Every system runs with ``--threads`` threads and is checked against TensorFlow's outputs
(max abs error reported). Usage (on a quiet machine)::

    .venv/bin/python results/peak_memory.py --models resnet50,mobilenetv2 --batch 1 [--threads 2] [--out results/peak_memory]

writes ``OUT.md`` and ``OUT.json``. ``--cache-dir DIR`` loads polytf's tuned records from DIR
(``polytf tune`` first) instead of a fresh cache (default recipes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SYSTEMS = ("polytf", "polytf_cold", "openvino", "openvino_pb", "onnxruntime", "tensorflow")
#: what each system's process loads, for the report
LOADS = {
    "polytf": "`polytf.load(.pb)`, object code from the cache",
    "polytf_cold": "`polytf.load(.pb, compile_cache=False)`: compiles",
    "openvino": "OpenVINO IR (f32) read + compiled",
    "openvino_pb": "`openvino.convert_model(.pb)` + compiled",
    "onnxruntime": "`.onnx` (tf2onnx, opset 17) in an InferenceSession",
    "tensorflow": "GraphDef as a `tf.function`",
}


def _status_mb(field: str) -> float:
    """A field of ``/proc/self/status`` in MB (the kernel gives kB); NaN where there is none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def current_rss_mb() -> float:
    """Resident set now (``VmRSS``), MB."""
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    """Peak resident set of this process's address space (``VmHWM``), MB; where ``/proc`` has
    none, ``ru_maxrss`` (which may include the parent's peak: module docstring)."""
    peak = _status_mb("VmHWM")
    return peak if peak == peak else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def child(system: str, files: dict, threads: int, calls: int, cache_dir: str | None) -> dict:
    """One system in this fresh process: imports, load, ``calls`` calls; the RSS figures."""
    with np.load(files["inputs"]) as stored:
        feeds = {name: stored[name] for name in stored.files}
    outputs = files["outputs"]
    started = time.perf_counter()
    if system in ("polytf", "polytf_cold"):
        import polytf

        imported = (current_rss_mb(), peak_rss_mb())
        started = time.perf_counter()
        model = polytf.load(files["pb"], cache_dir=cache_dir, threads=threads, compile_cache=system == "polytf")

        def call():
            results = model(**feeds)
            return [results[name] for name in outputs]

    elif system in ("openvino", "openvino_pb"):
        import openvino

        imported = (current_rss_mb(), peak_rss_mb())
        started = time.perf_counter()
        settings = {"INFERENCE_NUM_THREADS": str(threads), "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
        core = openvino.Core()
        if system == "openvino":
            source = core.read_model(files["ir"])
        else:
            shapes = [(_tensor(name), list(value.shape)) for name, value in feeds.items()]
            source = openvino.convert_model(files["pb"], input=shapes, output=[_tensor(name) for name in outputs])
        compiled = core.compile_model(source, "CPU", settings)
        del source
        request = compiled.create_infer_request()
        ports = [compiled.output(_tensor(name)) for name in outputs]
        inputs = {_tensor(name): value for name, value in feeds.items()}

        def call():
            results = request.infer(inputs, share_inputs=True)
            return [np.asarray(results[port]) for port in ports]

    elif system == "onnxruntime":
        import onnxruntime

        imported = (current_rss_mb(), peak_rss_mb())
        started = time.perf_counter()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = onnxruntime.InferenceSession(files["onnx"], options, providers=["CPUExecutionProvider"])
        inputs = {_tensor(name): value for name, value in feeds.items()}
        fetches = [_tensor(name) for name in outputs]

        def call():
            return session.run(fetches, inputs)

    elif system == "tensorflow":
        from polytf.model_zoo.keras_models import import_tensorflow
        from polytf.model_zoo.tensorflow_runner import tensorflow_function

        tf = import_tensorflow()
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        imported = (current_rss_mb(), peak_rss_mb())
        started = time.perf_counter()
        function = tensorflow_function(files["pb"], list(feeds), outputs)
        tensors = [tf.constant(value) for value in feeds.values()]

        def call():
            results = function(*tensors)
            results = results if isinstance(results, (list, tuple)) else [results]
            return [value.numpy() for value in results]

    else:
        raise SystemExit(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")
    results = call()
    load_s = time.perf_counter() - started
    for _ in range(calls - 1):
        results = call()
    peak = peak_rss_mb()
    with np.load(files["reference"]) as stored:
        error = max(
            float(np.max(np.abs(np.asarray(r, np.float64) - stored[name]), initial=0.0)) for name, r in zip(outputs, results)
        )
    return {
        "system": system,
        "rss_after_imports_mb": imported[0],
        "peak_rss_after_imports_mb": imported[1],
        "peak_rss_mb": peak,
        "load_and_first_call_s": load_s,
        "max_abs_error_vs_tensorflow": error,
        "tensorflow_imported": "tensorflow" in sys.modules,
    }


def run_child(system: str, files: dict, args: argparse.Namespace, cache_dir: str | None) -> dict:
    """``system`` in a fresh process; its JSON answer (or the error it died with)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    command = [
        sys.executable,
        __file__,
        "--child",
        system,
        "--files",
        json.dumps(files),
        "--threads",
        str(args.threads),
        "--calls",
        str(args.calls),
    ]
    if cache_dir:
        command += ["--cache-dir", cache_dir]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        tail = (completed.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"system": system, "error": f"exit status {completed.returncode}: {tail}"}
    return json.loads(lines[-1])


def prepare(name: str, batch: int, folder: Path) -> dict:
    """The model's files: GraphDef, inputs, TensorFlow's outputs, ONNX model, OpenVINO IR."""
    from polytf.bench.baselines import NumpyGraph
    from polytf.bench.onnxruntime_baseline import onnx_model
    from polytf.model_zoo import write_model
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow
    from polytf.runtime.sample_inputs import sample_inputs

    pb = write_model(name, folder / f"{name}_b{batch}.pb", batch=batch)
    graph = NumpyGraph(pb)
    feeds = sample_inputs(graph.input_types, 0)
    outputs = list(graph.output_names)
    np.savez(folder / f"{name}_inputs.npz", **feeds)
    reference = run_graphdef_with_tensorflow(pb, feeds, outputs)
    reference = reference if isinstance(reference, dict) else dict(zip(outputs, reference))
    np.savez(folder / f"{name}_reference.npz", **{key: np.asarray(reference[key], np.float64) for key in outputs})
    files = {
        "pb": str(pb),
        "inputs": str(folder / f"{name}_inputs.npz"),
        "reference": str(folder / f"{name}_reference.npz"),
        "outputs": outputs,
    }
    try:
        (folder / f"{name}.onnx").write_bytes(onnx_model(pb, feeds, outputs))
        files["onnx"] = str(folder / f"{name}.onnx")
    except Exception as error:  # noqa: BLE001 - a model tf2onnx cannot convert: that system's row says why
        files["onnx_error"] = str(error)
    import openvino

    shapes = [(_tensor(key), list(value.shape)) for key, value in feeds.items()]
    converted = openvino.convert_model(pb, input=shapes, output=[_tensor(key) for key in outputs])
    openvino.save_model(converted, folder / f"{name}.xml", compress_to_fp16=False)
    files["ir"] = str(folder / f"{name}.xml")
    return files


MODEL_ALIASES = {"mobilenetv2": "mobilenet_v2", "inceptionv3": "inception_v3", "efficientnetb0": "efficientnet_b0"}


def markdown(result: dict) -> str:
    lines = [
        "# Peak memory: load + calls, a fresh process per system",
        "",
        f"Machine: {result['machine']['cpu']}; Python {result['machine']['python']}; {result['threads']} threads; "
        f"{result['calls']} calls after the load; batch {result['batch']}; {result['date']}.",
        "",
        "Peak RSS is the high-water mark of the system's own process (`VmHWM`) after the load and the calls "
        "(nothing subtracted); *after imports* is its RSS once the system's packages are imported, before the load "
        "(the interpreter and libraries). MB = 2^20 bytes. "
        + (
            "**A polytf process imported TensorFlow: its figures include it.**"
            if any(row.get("tensorflow_imported") for row in result["rows"] if row["system"].startswith("polytf"))
            else "polytf's processes did not import TensorFlow (checked in each)."
        ),
        "",
        "| model | system | loads | after imports MB | peak RSS MB | peak - after imports MB | load + first call s | max abs err vs TF |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        if row.get("error"):
            lines.append(
                f"| {row['model']} | {row['system']} | {LOADS[row['system']]} | - | **failed** | - | - | {row['error'][:120]} |"
            )
            continue
        after, peak = row["rss_after_imports_mb"], row["peak_rss_mb"]
        lines.append(
            f"| {row['model']} | {row['system']} | {LOADS[row['system']]} | {after:.0f} | **{peak:.0f}** | {peak - after:.0f} | "
            f"{row['load_and_first_call_s']:.2f} | {row['max_abs_error_vs_tensorflow']:.2e} |"
        )
    lines += ["", "polytf peak / OpenVINO peak (the lower of its two ways to load), per model:", ""]
    for model in dict.fromkeys(row["model"] for row in result["rows"]):
        peaks = {row["system"]: row["peak_rss_mb"] for row in result["rows"] if row["model"] == model and not row.get("error")}
        openvino = min((peaks[s] for s in ("openvino", "openvino_pb") if s in peaks), default=None)
        if openvino and "polytf" in peaks:
            lines.append(f"- {model}: {peaks['polytf']:.0f} / {openvino:.0f} MB = **{peaks['polytf'] / openvino:.2f}**")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", default="resnet50,mobilenet_v2", help="zoo models, comma-separated (mobilenetv2 = mobilenet_v2)"
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--cache-dir", default=None, help="polytf's tuning-record cache (default: a fresh one: default recipes)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("peak_memory")))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--files", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.files), args.threads, args.calls, args.cache_dir)), flush=True)
        return
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="peak-memory-") as workdir:
        folder = Path(workdir)
        warm_cache = args.cache_dir or str(folder / "cache")
        for model in (m.strip() for m in args.models.split(",") if m.strip()):
            name = MODEL_ALIASES.get(model, model)
            print(f"{name} b{args.batch}: writing the GraphDef, inputs, ONNX model and OpenVINO IR", file=sys.stderr, flush=True)
            files = prepare(name, args.batch, folder)
            for system in systems:
                if system == "onnxruntime" and "onnx" not in files:
                    rows.append({"model": name, "system": system, "error": files.get("onnx_error", "no ONNX model")})
                    continue
                cache_dir = warm_cache if system.startswith("polytf") else None
                if system == "polytf":  # fill the code cache first (not measured): the measured load is a deployed model's
                    run_child("polytf", files, args, cache_dir)
                print(f"{name} b{args.batch}: {system}", file=sys.stderr, flush=True)
                rows.append({"model": name, **run_child(system, files, args, cache_dir)})
                print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    result = {
        "machine": {"cpu": cpu, "python": platform.python_version(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "threads": args.threads,
        "calls": args.calls,
        "batch": args.batch,
        "tuned_records": bool(args.cache_dir),
        "rows": rows,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
