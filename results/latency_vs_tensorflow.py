"""Whole-model latency: polytf (tuned) against TensorFlow executing the same GraphDef.

For each model the script writes the frozen GraphDef (polytf.model_zoo), tunes it with
``polytf.tune`` (default settings: 20 trials per kernel) into a fresh cache, loads it
with ``polytf.load``, checks its output against TensorFlow, and times, in the same
process and alternating rounds, polytf's ``model(input=x)`` and TensorFlow's call of the
same GraphDef (with and without XLA). Each figure is the median of ``--rounds`` round
medians, each round ``--repeats`` calls after warm-up; both sides include copying the
input in and the output out.

Usage: python results/latency_vs_tensorflow.py [--threads 2] [--trials 20] [--out results/latency_vs_tensorflow]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from polytf.runtime.timing import call_latencies

MODELS = [("mlp", 1, (1, 784)), ("cifar_cnn", 1, (1, 32, 32, 3)), ("cifar_cnn", 32, (32, 32, 32, 3))]


def median_latency(call, repeats: int, warmup: int = 5) -> float:
    return statistics.median(call_latencies(call, repeats, warmup))


def machine() -> dict:
    import llvmlite.binding as llvm
    import tensorflow as tf

    model_name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), platform.processor())
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    return {
        "cpu": model_name,
        "llvm_cpu_name": llvm.get_host_cpu_name(),
        "avx512f": bool(features.get("avx512f")),
        "avx2": bool(features.get("avx2")),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=str(Path(__file__).with_name("latency_vs_tensorflow")))
    args = parser.parse_args()

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    import polytf
    from polytf.model_zoo import write_model
    from polytf.model_zoo.tensorflow_runner import tensorflow_function

    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, batch, shape in MODELS:
            path = write_model(name, Path(workdir) / f"{name}_b{batch}.pb", batch=batch)
            cache = Path(workdir) / f"cache_{name}_{batch}"
            started = time.perf_counter()
            report = polytf.tune(path, trials=args.trials, cache_dir=cache, threads=args.threads)
            tune_s = time.perf_counter() - started
            model = polytf.load(path, cache_dir=cache, threads=args.threads)
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            tf_call = tensorflow_function(path, ["input"], ["Identity"])
            xla_call = tensorflow_function(path, ["input"], ["Identity"], xla=True)
            x_tensor = tf.constant(x)
            expected = np.asarray(tf_call(x_tensor)[0])
            actual = model(input=x)["Identity"]
            max_error = float(np.max(np.abs(actual - expected)))
            polytf_rounds, tf_rounds, xla_rounds = [], [], []
            for _ in range(args.rounds):
                polytf_rounds.append(median_latency(lambda: model(input=x), args.repeats))
                tf_rounds.append(median_latency(lambda: tf_call(x_tensor)[0].numpy(), args.repeats))
                xla_rounds.append(median_latency(lambda: xla_call(x_tensor)[0].numpy(), args.repeats))
            row = {
                "model": name,
                "batch": batch,
                "kernels": len(model.kernels),
                "tune_s": round(tune_s, 1),
                "new_trials": report.new_trials,
                "polytf_default_s": report.model_default_latency_s,
                "polytf_s": statistics.median(polytf_rounds),
                "tensorflow_s": statistics.median(tf_rounds),
                "xla_s": statistics.median(xla_rounds),
                "max_abs_error_vs_tensorflow": max_error,
            }
            row["tensorflow_over_polytf"] = row["tensorflow_s"] / row["polytf_s"]
            row["xla_over_polytf"] = row["xla_s"] / row["polytf_s"]
            rows.append(row)
            print(json.dumps(row))

    info = machine()
    info.update({"threads": args.threads, "trials_per_kernel": args.trials, "rounds": args.rounds, "repeats": args.repeats, "date": time.strftime("%Y-%m-%d")})
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Whole-model latency: polytf (tuned) vs TensorFlow on the same GraphDef",
        "",
        f"Machine: {info['cpu']} (LLVM CPU `{info['llvm_cpu_name']}`, AVX-512: {info['avx512f']}, AVX2: {info['avx2']}), "
        f"{info['cores']} cores; {args.threads} threads for polytf and for TensorFlow's intra-op pool; TensorFlow {info['tensorflow']} (oneDNN CPU build). "
        f"polytf tuned with {args.trials} trials per kernel. Median of {args.rounds} round medians of {args.repeats} calls after warm-up, "
        "rounds alternating between systems; each call copies the input in and the output out. Produced by `python results/latency_vs_tensorflow.py`.",
        "",
        "| model | batch | kernels | tune time | polytf default | polytf tuned | TensorFlow | TF XLA | TF / polytf | XLA / polytf | max abs error vs TF |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['kernels']} | {r['tune_s']} s | {r['polytf_default_s'] * 1e3:.3f} ms | {r['polytf_s'] * 1e3:.3f} ms | "
            f"{r['tensorflow_s'] * 1e3:.3f} ms | {r['xla_s'] * 1e3:.3f} ms | {r['tensorflow_over_polytf']:.2f} | {r['xla_over_polytf']:.2f} | {r['max_abs_error_vs_tensorflow']:.2e} |"
        )
    lines += ["", "A ratio above 1 means polytf is faster."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
