"""Grouped convolutions: polytf against TensorFlow on single layers and on two zoo models.

Layers (frozen ``tf.nn.conv2d`` with a grouped filter, or ``tf.nn.depthwise_conv2d``, no
epilogue): a RegNet-like grouped 3x3 (group width 8), ConvNeXt's 7x7 depthwise written as a
grouped Conv2D (``groups = C``) and as DepthwiseConv2dNative, a grouped 3x3 of group width 24
and a ResNeXt-like 3x3 of group width 4. Models: the zoo's ``regnetx_200mf`` and
``convnext_tiny`` (Keras ``Conv2D(groups=G)``, loaded with no host fallback).

polytf runs its untuned default recipes (``polytf.load``); TensorFlow runs the same GraphDef
(oneDNN build; TensorFlow has no grouped CPU kernel inside a fused Conv2D, so Grappler's
remapper is off for the whole run) and with XLA. Each figure is the median of ``--rounds``
round medians, rounds alternating between systems, each round ``--repeats`` calls after
warm-up; every call copies the input in and the output out. GFLOP/s counts the contraction
FLOPs polytf executes (2 per multiply-add, padding taps excluded, ``polytf.poly.flops``).

Usage: python results/grouped_conv.py [--threads 1] [--rounds 5] [--out results/grouped_conv]
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

#: (name, input shape, kernel, filter in-channels, output channels, depthwise)
LAYERS = [
    ("RegNet-like 3x3, G=8 (group width 8)", (1, 56, 56, 64), 3, 8, 64, False),
    ("ConvNeXt-like 7x7, Conv2D groups=C=96", (1, 56, 56, 96), 7, 1, 96, False),
    ("ConvNeXt-like 7x7, DepthwiseConv2dNative", (1, 56, 56, 96), 7, 96, 1, True),
    ("3x3, G=4 (group width 24)", (1, 56, 56, 96), 3, 24, 96, False),
    ("ResNeXt-like 3x3, G=32 (group width 4)", (1, 56, 56, 128), 3, 4, 128, False),
]
MODELS = ["regnetx_200mf", "convnext_tiny"]


def machine(threads: int) -> dict:
    import llvmlite.binding as llvm
    import tensorflow as tf

    model_name = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    return {
        "cpu": model_name,
        "llvm_cpu_name": llvm.get_host_cpu_name(),
        "avx512f": bool(features.get("avx512f")),
        "cores": os.cpu_count(),
        "threads": threads,
        "tensorflow": tf.__version__,
    }


def write_layer(path: Path, shape, kernel: int, group_channels: int, filters: int, depthwise: bool) -> None:
    import tensorflow as tf

    from polytf.model_zoo import freeze_to_graphdef

    weights = np.random.default_rng(1).standard_normal((kernel, kernel, group_channels, filters)).astype(np.float32)

    def layer(x):
        if depthwise:
            return tf.nn.depthwise_conv2d(x, weights, [1, 1, 1, 1], "SAME")
        return tf.nn.conv2d(x, weights, 1, "SAME")

    path.write_bytes(freeze_to_graphdef(layer, [("input", shape)]).SerializeToString())


def compare(path: Path, shape, threads: int, rounds: int, repeats: int) -> dict:
    """Load with polytf (into a fresh cache: the load compiles every kernel), check against
    TensorFlow, time both alternately."""
    import polytf
    from polytf.model_zoo import run_graphdef_with_tensorflow
    from polytf.model_zoo.tensorflow_runner import tensorflow_function
    from polytf.poly.flops import contraction_flops

    begin = time.perf_counter()
    model = polytf.load(path, fallback=False, threads=threads, cache_dir=path.with_suffix(".cache"))
    load_s = time.perf_counter() - begin
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    got = model(input=x)["Identity"]
    reference = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"])["Identity"]
    import tensorflow as tf

    tensor = tf.constant(x)
    calls = {"polytf": lambda: model(input=x)}
    for name, xla in (("TensorFlow", False), ("TF XLA", True)):
        function = tensorflow_function(path, ["input"], ["Identity"], xla=xla)
        calls[name] = lambda function=function: [r.numpy() for r in function(tensor)]
    medians: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            medians[name].append(statistics.median(call_latencies(call, repeats, warmup=3)))
    latency = {name: statistics.median(values) for name, values in medians.items()}
    return {
        "kernels": len(model.kernels),
        "grouped_kernels": sum(op == "GroupedConv2D" for kernel in model.kernels for _, op in kernel.scop.ops),
        "load_s": load_s,
        "gflop": sum(contraction_flops(kernel.scop) for kernel in model.kernels) / 1e9,
        "latency_ms": {name: value * 1e3 for name, value in latency.items()},
        "max_abs_error": float(np.max(np.abs(got - reference))),
        "max_abs_reference": float(np.max(np.abs(reference))),
    }


def graph_sizes(path: Path) -> dict:
    from polytf.compiler.preparation import prepare_graph
    from polytf.frontend.graphdef import parse_graphdef

    proto = parse_graphdef(path)
    prepared, _ = prepare_graph(path)
    return {
        "graphdef_nodes": len(proto.node),
        "library_functions": len(proto.library.function),
        "nodes_after_passes": len(prepared.nodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).with_name("grouped_conv")))
    arguments = parser.parse_args()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(arguments.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.optimizer.set_experimental_options({"remapping": False})
    results = {"machine": machine(arguments.threads), "layers": [], "models": []}
    with tempfile.TemporaryDirectory() as directory:
        for name, shape, kernel, group_channels, filters, depthwise in LAYERS:
            path = Path(directory) / f"layer{len(results['layers'])}.pb"
            write_layer(path, shape, kernel, group_channels, filters, depthwise)
            row = {"layer": name, **compare(path, shape, arguments.threads, arguments.rounds, arguments.repeats)}
            print(json.dumps(row), flush=True)
            results["layers"].append(row)
        from polytf.model_zoo import write_model

        for name in MODELS:
            path = write_model(name, Path(directory) / f"{name}.pb")
            row = {
                "model": name,
                **graph_sizes(path),
                **compare(path, (1, 224, 224, 3), arguments.threads, arguments.rounds, max(5, arguments.repeats // 4)),
            }
            print(json.dumps(row), flush=True)
            results["models"].append(row)
    Path(arguments.out + ".json").write_text(json.dumps(results, indent=1) + "\n")
    Path(arguments.out + ".md").write_text(report(results))


def report(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# Grouped convolutions: polytf vs TensorFlow",
        "",
        f"Machine: {m['cpu']} (LLVM CPU `{m['llvm_cpu_name']}`, AVX-512: {m['avx512f']}), {m['cores']} cores shared with other jobs; "
        f"{m['threads']} thread(s) for polytf and for TensorFlow's intra-op pool; TensorFlow {m['tensorflow']} (Grappler remapper off: "
        "its fused Conv2D has no groups). polytf untuned (default recipes); load: a cold load into an empty cache (lowering, "
        "scheduling and LLVM for every kernel). Produced by `python results/grouped_conv.py`.",
        "",
        "| layer | polytf | GFLOP/s | TensorFlow | TF XLA | TF / polytf | XLA / polytf | max abs error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in results["layers"]:
        t = row["latency_ms"]
        lines.append(
            f"| {row['layer']} | {t['polytf']:.3f} ms | {row['gflop'] / t['polytf'] * 1e3:.1f} | {t['TensorFlow']:.3f} ms | {t['TF XLA']:.3f} ms | "
            f"{t['TensorFlow'] / t['polytf']:.2f} | {t['TF XLA'] / t['polytf']:.2f} | {row['max_abs_error']:.2e} |"
        )
    lines += [
        "",
        "| model | GraphDef nodes (+ functions) | nodes after passes | kernels | grouped | load | polytf | TensorFlow | TF XLA | max abs error (max abs output) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["models"]:
        t = row["latency_ms"]
        lines.append(
            f"| {row['model']} | {row['graphdef_nodes']} (+{row['library_functions']}) | {row['nodes_after_passes']} | {row['kernels']} | {row['grouped_kernels']} | "
            f"{row['load_s']:.1f} s | {t['polytf']:.2f} ms | {t['TensorFlow']:.2f} ms | {t['TF XLA']:.2f} ms | {row['max_abs_error']:.2e} ({row['max_abs_reference']:.2e}) |"
        )
    lines += ["", "A ratio above 1 means polytf is faster."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
