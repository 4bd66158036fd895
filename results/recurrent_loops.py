"""Recurrent layers: the unrolled while loop against a host loop over a compiled body, and TensorFlow.

polytf compiles a Keras ``LSTM``/``GRU`` layer's while loop by unrolling it in the frontend
(polytf.frontend.while_loops): one copy of the cell per step, every step's kernels in one
compiled model. The alternative is a loop on the host: compile the cell alone (a polytf model
of inputs ``x_t``, ``h``, ``c``) and call it once per step from Python, copying the state
between calls. For LSTM(64) and GRU(64) over 20 and 200 steps (batch 1, 32 features, random
weights and biases) the script measures, each approach in a fresh process with a fresh cache:

* compile time: ``polytf.load`` of the frozen model (unrolled) or of the cell (host loop),
  cold (empty cache directory, nothing tuned: analytic recipes);
* latency: one whole sequence, ``model(input=x)`` or the loop of ``steps`` calls; the median
  of ``--rounds`` round medians of ``--repeats`` calls each, after warm-up;
* TensorFlow running the same frozen GraphDef (its own while loop), in the parent process.

Both polytf approaches are checked against TensorFlow's output first (rtol 1e-4, atol
1e-5 * max|reference| + 1e-6).

Usage: python results/recurrent_loops.py [--threads 1] [--rounds 5] [--repeats 20] [--out results/recurrent_loops]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FEATURES = 32
UNITS = 64
CASES = [("lstm", 20), ("gru", 20), ("lstm", 200), ("gru", 200)]


def _median_latency(call, rounds: int, repeats: int) -> float:
    from polytf.runtime.timing import call_latencies

    call_latencies(call, 0, warmup=5)
    return statistics.median(statistics.median(call_latencies(call, repeats)) for _ in range(rounds))


def _close(got: np.ndarray, reference: np.ndarray) -> bool:
    return bool(np.allclose(got, reference, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(reference))) + 1e-6))


def _state_names(kind: str) -> list[str]:
    return ["h", "c"] if kind == "lstm" else ["h"]


def freeze(kind: str, steps: int, folder: Path) -> dict:
    """Write ``model.pb`` (the layer), ``cell.pb`` (one step of the same cell, inputs ``x``,
    ``h`` (, ``c``), outputs the new state) and ``data.npz`` (an input, TensorFlow's output)."""
    from polytf.model_zoo import freeze_to_graphdef, run_graphdef_with_tensorflow
    from polytf.model_zoo.recurrent_models import gru, lstm

    model = (lstm if kind == "lstm" else gru)(steps=steps, units=UNITS, features=FEATURES)
    graph_def = freeze_to_graphdef(model, [("input", (1, steps, FEATURES))])
    (folder / "model.pb").write_bytes(graph_def.SerializeToString())
    cell = model.layers[-1].cell

    def step(x, *state):
        _, new_state = cell(x, list(state), training=False)
        return tuple(new_state) if isinstance(new_state, (list, tuple)) else new_state  # outputs Identity, Identity_1

    specs = [("x", (1, FEATURES))] + [(name, (1, UNITS)) for name in _state_names(kind)]
    (folder / "cell.pb").write_bytes(freeze_to_graphdef(step, specs).SerializeToString())
    x = np.random.default_rng(7).standard_normal((1, steps, FEATURES)).astype(np.float32)
    reference = run_graphdef_with_tensorflow(folder / "model.pb", {"input": x}, ["Identity"])["Identity"]
    np.savez(folder / "data.npz", x=x, reference=reference)
    return {"nodes": len(graph_def.node)}


def tensorflow_latency(folder: Path, rounds: int, repeats: int) -> float:
    from polytf.model_zoo import time_graphdef_with_tensorflow

    x = np.load(folder / "data.npz")["x"]
    medians = [
        statistics.median(time_graphdef_with_tensorflow(folder / "model.pb", {"input": x}, ["Identity"], repeats, 5))
        for _ in range(rounds)
    ]
    return statistics.median(medians)


def child(approach: str, kind: str, steps: int, folder: Path, threads: int, rounds: int, repeats: int) -> dict:
    """One approach in this (fresh) process: cold compile, check, latency."""
    import polytf

    data = np.load(folder / "data.npz")
    x, reference = data["x"], data["reference"]
    cache = Path(tempfile.mkdtemp(prefix=f"cache_{approach}_", dir=folder))
    start = time.perf_counter()
    if approach == "unrolled":
        model = polytf.load(folder / "model.pb", cache_dir=cache, fallback=False, threads=threads)
        compile_s = time.perf_counter() - start

        def run() -> np.ndarray:
            return model(input=x)["Identity"]

        kernels = len(model.kernels) if hasattr(model, "kernels") else None
    else:
        cell = polytf.load(folder / "cell.pb", cache_dir=cache, fallback=False, threads=threads)
        compile_s = time.perf_counter() - start
        names = _state_names(kind)
        outputs = ["Identity"] + [f"Identity_{k}" for k in range(1, len(names))]
        inputs = [np.ascontiguousarray(x[:, t]) for t in range(steps)]
        zeros = np.zeros((1, UNITS), np.float32)

        def run() -> np.ndarray:
            state = dict.fromkeys(names, zeros)
            for x_t in inputs:
                result = cell(x=x_t, **state)
                state = {name: np.array(result[output]) for name, output in zip(names, outputs)}
            return state["h"]

        kernels = len(cell.kernels) if hasattr(cell, "kernels") else None
    matches = _close(run(), reference)
    result = {"approach": approach, "compile_s": compile_s, "matches_tensorflow": matches, "kernels": kernels}
    if approach != "unrolled":
        return {**result, "latency_s": _median_latency(run, rounds, repeats)}
    # the experiment: the same model with one packed copy per weight instead of one per kernel
    with _packed_weights_shared():
        shared = polytf.load(folder / "model.pb", cache_dir=cache, fallback=False, threads=threads)

    def run_shared() -> np.ndarray:
        return shared(input=x)["Identity"]

    matches_shared = _close(run_shared(), reference)
    plain, same = [], []
    for _ in range(rounds):  # alternating rounds, so that both see the same machine
        plain.append(_median_latency(run, 1, repeats))
        same.append(_median_latency(run_shared, 1, repeats))
    return {
        **result,
        "latency_s": statistics.median(plain),
        "constant_bytes": sum(v.nbytes for v in model._constants.values()),
        "shared_packing": {
            "latency_s": statistics.median(same),
            "constant_bytes": sum(v.nbytes for v in shared._constants.values()),
            "matches_tensorflow": matches_shared,
        },
    }


@contextlib.contextmanager
def _packed_weights_shared():
    """While active, ``ModelConstants.packed`` keeps one copy of identical packed arrays: an
    experiment (polytf packs a weight once per kernel that reads it; an unrolled loop has one
    such kernel per step)."""
    from polytf.plan import constant_layout

    original = constant_layout.ModelConstants.packed

    def packed(self, lowered, kernel):
        keys = original(self, lowered, kernel)
        seen = self.__dict__.setdefault("_by_content", {})
        for name, key in list(keys.items()):
            value = self.values[key]
            digest = (value.shape, value.dtype.str, hashlib.sha256(value.tobytes()).hexdigest())
            if digest in seen and np.array_equal(self.values[seen[digest]], value):
                del self.values[key]
                keys[name] = seen[digest]
            else:
                seen[digest] = key
        return keys

    constant_layout.ModelConstants.packed = packed
    try:
        yield
    finally:
        constant_layout.ModelConstants.packed = original


def machine(threads: int) -> dict:
    import llvmlite.binding as llvm
    import tensorflow as tf

    llvm.initialize_native_target()
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    model_name = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), platform.processor())
    return {
        "cpu": model_name,
        "llvm_cpu_name": llvm.get_host_cpu_name(),
        "cores": os.cpu_count(),
        "threads": threads,
        "load_average_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
    }


def report(results: list[dict], info: dict) -> str:
    lines = [
        "# Recurrent layers: unrolled loop vs host loop over a compiled cell vs TensorFlow",
        "",
        "Written by `python results/recurrent_loops.py` (its docstring says what is measured). Keras `LSTM(64)` and",
        "`GRU(64)`, batch 1, 32 features, random weights and biases, frozen with `convert_variables_to_constants_v2`",
        "(TF1 while loop with TensorList ops). Compile: cold `polytf.load` in a fresh process and cache, no tuning.",
        "Latency: one whole sequence, median of round medians after warm-up; host loop = the compiled cell called",
        "once per step from Python, state copied between calls. TensorFlow: the same GraphDef through `tf.function`.",
        "",
        f"Machine: {info['cpu']} (LLVM `{info['llvm_cpu_name']}`), {info['cores']} cores, {info['threads']} thread(s) for polytf "
        f"and TensorFlow; load average {info['load_average_at_start']:.2f} at the start (a shared machine: other jobs may have run; "
        "repeated runs here moved single figures by up to 2x, the orderings within a row less often).",
        "",
        "| model | steps | unrolled: compile s | kernels | latency ms | constants MB | shared packing (experiment): "
        "latency ms | constants MB | host loop: compile s | latency ms | TensorFlow: latency ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        unrolled, host, tf_ms = result["unrolled"], result["host_loop"], result["tensorflow_latency_s"] * 1e3
        shared = unrolled["shared_packing"]
        lines.append(
            f"| {result['kind'].upper()}(64) | {result['steps']} | {unrolled['compile_s']:.1f} | {unrolled['kernels']} | "
            f"{unrolled['latency_s'] * 1e3:.3f} | {unrolled['constant_bytes'] / 1e6:.2f} | {shared['latency_s'] * 1e3:.3f} | "
            f"{shared['constant_bytes'] / 1e6:.2f} | {host['compile_s']:.1f} | {host['latency_s'] * 1e3:.3f} | {tf_ms:.3f} |"
        )
    lines.append("")
    for result in results:
        unrolled, host, tf_s = result["unrolled"], result["host_loop"], result["tensorflow_latency_s"]
        best = min(unrolled["latency_s"], unrolled["shared_packing"]["latency_s"])

        def compared(ratio: float) -> str:
            return f"{ratio:.2f}x faster than" if ratio >= 1 else f"{1 / ratio:.2f}x slower than"

        lines.append(
            f"- {result['kind'].upper()}(64), {result['steps']} steps: the unrolled call is "
            f"{compared(host['latency_s'] / unrolled['latency_s'])} the host loop ({compared(host['latency_s'] / best)} it with shared "
            f"packing) and {compared(tf_s / unrolled['latency_s'])} TensorFlow; it compiles in "
            f"{unrolled['compile_s'] / host['compile_s']:.1f}x the host loop's time."
        )
    checked = [r[a]["matches_tensorflow"] for r in results for a in ("unrolled", "host_loop")]
    checked += [r["unrolled"]["shared_packing"]["matches_tensorflow"] for r in results]
    lines += [
        "",
        "Every polytf result matched TensorFlow's output."
        if all(checked)
        else "SOME RESULTS DID NOT MATCH TENSORFLOW (see the JSON).",
        "",
    ]
    lines += [
        "Shared packing (experiment): the unrolled model loaded again with one packed copy of each weight, where",
        "polytf packs a weight into panels once per kernel that reads it (`polytf.plan.constant_layout`): an unrolled",
        "loop of n steps holds n packed copies of each recurrent weight, which outgrow the caches at 200 steps.",
        "Measured in the same process as the plain unrolled model, alternating rounds.",
        "",
        "Reading: the unrolled model runs a whole sequence as one call of straight-line kernels (no Python, no",
        "argument checks or state copies between steps), so its call is the faster one; the host loop compiles one",
        "cell instead of one per step, so it compiles faster, and its compile time does not grow with the sequence.",
        "polytf unrolls (`polytf.frontend.while_loops`, up to `MAX_ITERATIONS` steps); sharing packed weights between",
        "the kernels of the steps is what would close the gap to TensorFlow at 200 steps.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).with_name("recurrent_loops")))
    parser.add_argument("--cases", default=",".join(f"{k}{s}" for k, s in CASES), help="e.g. lstm20,gru200")
    parser.add_argument("--child", nargs=4, metavar=("APPROACH", "KIND", "STEPS", "FOLDER"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        approach, kind, steps, folder = arguments.child
        result = child(approach, kind, int(steps), Path(folder), arguments.threads, arguments.rounds, arguments.repeats)
        print(json.dumps(result))
        return

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(arguments.threads)
    tf.config.threading.set_inter_op_parallelism_threads(arguments.threads)
    info = machine(arguments.threads)
    results = []
    with tempfile.TemporaryDirectory(prefix="recurrent_loops_") as work:
        chosen = arguments.cases.split(",")
        for kind, steps in [(k, s) for k, s in CASES if f"{k}{s}" in chosen]:
            folder = Path(work) / f"{kind}{steps}"
            folder.mkdir()
            entry = {"kind": kind, "steps": steps, **freeze(kind, steps, folder)}
            for approach in ("unrolled", "host_loop"):
                command = [sys.executable, __file__, "--threads", str(arguments.threads), "--rounds", str(arguments.rounds)]
                command += ["--repeats", str(arguments.repeats), "--child", approach, kind, str(steps), str(folder)]
                environment = {**os.environ, "POLYTF_THREADS": str(arguments.threads), "OMP_NUM_THREADS": str(arguments.threads)}
                finished = subprocess.run(command, capture_output=True, text=True, env=environment)
                if finished.returncode != 0:
                    raise SystemExit(f"{approach} {kind}{steps} failed:\n{finished.stderr[-3000:]}")
                output = finished.stdout
                entry[approach] = json.loads(output.strip().splitlines()[-1])
            entry["tensorflow_latency_s"] = tensorflow_latency(folder, arguments.rounds, arguments.repeats)
            print(json.dumps(entry), flush=True)
            results.append(entry)
    out = Path(arguments.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "results": results}, indent=2) + "\n")
    out.with_suffix(".md").write_text(report(results, info))
    print(report(results, info))


if __name__ == "__main__":
    main()
