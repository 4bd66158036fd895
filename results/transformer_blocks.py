"""Transformer blocks: kernels and latency before and after the transformer fusions of issue 28.

The fusions: reshape sinking (:mod:`polytf.passes.reshape_sinking`: a ``Dense`` layer's bias
and GELU, a ``MultiHeadAttention`` projection's bias and a residual add move above the
``Reshape`` that follows the contraction, into its kernel) and normalization fusion
(:mod:`polytf.passes.fusion`: a LayerNorm in one kernel, a mask in its softmax's kernel).
"Before" is the same build with both turned off (the reshape-sinking pass removed from the
pipeline, the three normalization rules of the partition off), as the compiler was before.

For each zoo block the script writes the frozen GraphDef, loads it untuned with polytf before
and after (fresh caches), checks both against TensorFlow running the same GraphDef (e2e
tolerance: rtol 1e-4, atol 1e-5 * max|ref| + 1e-6), and times polytf before, polytf after and
TensorFlow in the same process, in alternating rounds: median of ``--rounds`` round medians of
``--repeats`` calls after warm-up, each call copying inputs in and outputs out.

Usage: python results/transformer_blocks.py [--threads 2] [--rounds 7] [--repeats 30]
       [--models transformer_encoder:1,gpt2_block:2,bert_encoder:1] [--out results/transformer_blocks]
Run it on a quiet machine: other processes on the cores make OpenMP kernels several times
slower (NOTES.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from polytf.runtime.timing import call_latencies

#: zoo model : batch (the GPT block at batch 2 is issue 28's "GPT block (2x64x512)": sequence
#: 64, feed-forward width 512); the MLP-Mixer block is the zoo's (196 tokens, 256 channels)
DEFAULT_MODELS = "transformer_encoder:1,gpt2_block:2,bert_encoder:1,mlp_mixer:1"


@contextlib.contextmanager
def without_transformer_fusions(reshape_sinking: bool = True, normalization: bool = True):
    """The compiler as before the change: without the reshape-sinking pass and without the
    normalization fusion rules of the partition (each can be kept: False)."""
    from polytf.passes import fusion, pipeline

    rules = ("_reduction_target", "_sibling_target", "_row_consumer_target") if normalization else ()
    passes, targets = pipeline.PASSES, {rule: getattr(fusion, rule) for rule in rules}
    if reshape_sinking:
        pipeline.PASSES = tuple(entry for entry in passes if entry[0] != "reshape sinking")
    for rule in rules:
        setattr(fusion, rule, lambda *arguments: None)
    try:
        yield
    finally:
        pipeline.PASSES = passes
        for rule, target in targets.items():
            setattr(fusion, rule, target)


def machine() -> dict:
    import llvmlite.binding as llvm
    import tensorflow as tf

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model_name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    llvm.initialize_native_target()
    return {"cpu": model_name, "llvm_cpu_name": llvm.get_host_cpu_name(), "cores": os.cpu_count(), "tensorflow": tf.__version__}


def kernel_ops(model) -> list[str]:
    """One entry per compiled kernel: its fused ops joined with ``+``."""
    return ["+".join(op for _, op in kernel.scop.ops) for kernel in model.kernels]


def within_tolerance(actual: np.ndarray, reference: np.ndarray) -> bool:
    atol = 1e-5 * float(np.max(np.abs(reference))) + 1e-6
    return bool(np.allclose(actual, reference, rtol=1e-4, atol=atol))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--out", default=str(Path(__file__).with_name("transformer_blocks")))
    args = parser.parse_args()

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    import polytf
    from polytf.model_zoo import write_model
    from polytf.model_zoo.language_models import zoo_inputs
    from polytf.model_zoo.tensorflow_runner import tensorflow_function

    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for entry in args.models.split(","):
            name, batch = entry.split(":")
            path = write_model(name, Path(workdir) / f"{name}_b{batch}.pb", batch=int(batch))
            with without_transformer_fusions():
                before = polytf.load(path, cache_dir=Path(workdir) / f"before_{name}", threads=args.threads, fallback=False)
            with without_transformer_fusions(normalization=False):
                normalization_only = polytf.load(
                    path, cache_dir=Path(workdir) / f"norm_{name}", threads=args.threads, fallback=False
                )
            after = polytf.load(path, cache_dir=Path(workdir) / f"after_{name}", threads=args.threads, fallback=False)
            feeds = zoo_inputs(after.input_types, seed=0)
            names = list(feeds)
            tf_call = tensorflow_function(path, names, ["Identity"])
            tensors = [tf.constant(feeds[n]) for n in names]
            reference = np.asarray(tf_call(*tensors)[0])
            outputs = {"before": before(**feeds)["Identity"], "after": after(**feeds)["Identity"]}
            rounds: dict[str, list[float]] = {"before": [], "normalization_only": [], "after": [], "tensorflow": []}
            calls = {
                "before": lambda: before(**feeds),
                "normalization_only": lambda: normalization_only(**feeds),
                "after": lambda: after(**feeds),
                "tensorflow": lambda: tf_call(*tensors)[0].numpy(),
            }
            for _ in range(args.rounds):
                for system, call in calls.items():
                    rounds[system].append(statistics.median(call_latencies(call, args.repeats, 5)))
            row = {
                "model": name,
                "batch": int(batch),
                "kernels_before": len(before.kernels),
                "kernels_after": len(after.kernels),
                "kernel_ops_before": dict(Counter(kernel_ops(before))),
                "kernel_ops_after": dict(Counter(kernel_ops(after))),
                "before_s": statistics.median(rounds["before"]),
                "after_s": statistics.median(rounds["after"]),
                "normalization_only_s": statistics.median(rounds["normalization_only"]),
                "kernels_normalization_only": len(normalization_only.kernels),
                "tensorflow_s": statistics.median(rounds["tensorflow"]),
                "before_within_tolerance": within_tolerance(outputs["before"], reference),
                "after_within_tolerance": within_tolerance(outputs["after"], reference),
                "after_max_abs_error": float(np.max(np.abs(outputs["after"] - reference))),
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if not k.startswith("kernel_ops")}))

    info = machine()
    info.update({"threads": args.threads, "rounds": args.rounds, "repeats": args.repeats, "date": time.strftime("%Y-%m-%d")})
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Transformer blocks: kernels and latency before and after the transformer fusions",
        "",
        f"Machine: {info['cpu']} (LLVM CPU `{info['llvm_cpu_name']}`), {info['cores']} cores; {args.threads} threads for polytf "
        f"and TensorFlow {info['tensorflow']}; batch as named. polytf untuned. Median of {args.rounds} round medians of "
        f"{args.repeats} calls after warm-up, systems alternating within each round. Produced by "
        "`python results/transformer_blocks.py`.",
        "",
        "| block | batch | kernels before | kernels after | polytf before | polytf normalization fusion only | polytf after | "
        "TensorFlow | after / before | after / TF | matches TF (before, after) | max abs error after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['kernels_before']} | {r['kernels_after']} | {r['before_s'] * 1e3:.3f} ms | "
            f"{r['normalization_only_s'] * 1e3:.3f} ms ({r['kernels_normalization_only']} kernels) | {r['after_s'] * 1e3:.3f} ms | {r['tensorflow_s'] * 1e3:.3f} ms | {r['after_s'] / r['before_s']:.2f} | "
            f"{r['after_s'] / r['tensorflow_s']:.2f} | {r['before_within_tolerance']}, {r['after_within_tolerance']} | "
            f"{r['after_max_abs_error']:.2e} |"
        )
    lines += [
        "",
        '"Normalization fusion only": the partition\'s normalization rules on, the reshape-sinking pass off (bias and GELU '
        "in kernels of their own): what each of the two changes gives.",
        "",
        "Kernels by fused ops (count), before -> after:",
        "",
    ]
    for r in rows:
        lines.append(
            f"- **{r['model']}** before: " + ", ".join(f"{ops} x{n}" for ops, n in sorted(r["kernel_ops_before"].items()))
        )
        lines.append("  after: " + ", ".join(f"{ops} x{n}" for ops, n in sorted(r["kernel_ops_after"].items())))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
