"""Winograd F(2×2,3×3) and F(4×4,3×3) against the direct convolution on 3×3 layers.

For each 3×3 stride-1 layer of ResNet50, DenseNet121, InceptionV3 and VGG16 (SAME, Conv2D +
BiasAdd + Relu as one kernel, as a frozen Keras model gives it; batch 1, and batch 8 for
some): the direct convolution's analytic recipe and each Winograd variant's analytic recipe
(:mod:`polytf.schedules.winograd`, :func:`~polytf.schedules.winograd.winograd_tiles`; the
filter transform runs once, before timing, as when a model is built), and which of them the
untuned default picks (:func:`~polytf.schedules.winograd.preferred_winograd`). Each figure
is the median over ``--rounds`` rounds of the median of ``--repeats`` kernel calls after
warm-up (caches flushed before each call), the algorithms alternating within a round.

Error: the largest ``|got - ref| / max|ref|`` of the convolution alone (no Relu, which
would hide negative errors) against a float64 numpy reference, random normal inputs and
filters scaled by ``1/sqrt(9·C)``, for the direct kernel and each Winograd variant.

Usage: python results/winograd.py [--threads 2] [--rounds 5] [--repeats 20] [--out results/winograd.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
from pathlib import Path

import numpy as np

from polytf.compiler.kernel_compilation import constant_arrays
from polytf.config import MeasurementConfig
from polytf.graph import Graph, Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.lowering.shape_inference import infer_types
from polytf.passes.fusion import partition
from polytf.passes.pruning import prune_to_outputs
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.winograd import WINOGRAD_ALGORITHMS
from polytf.targets.cpu import CpuTarget

#: (name, batch, H = W, C, O)
LAYERS = [
    ("ResNet50 conv2_x 3x3", 1, 56, 64, 64),
    ("ResNet50 conv3_x 3x3", 1, 28, 128, 128),
    ("ResNet50 conv4_x 3x3", 1, 14, 256, 256),
    ("ResNet50 conv5_x 3x3", 1, 7, 512, 512),
    ("ResNet50 conv3_x 3x3", 8, 28, 128, 128),
    ("ResNet50 conv4_x 3x3", 8, 14, 256, 256),
    ("ResNet50 conv5_x 3x3", 8, 7, 512, 512),
    ("DenseNet121 block 1 3x3", 1, 56, 128, 32),
    ("DenseNet121 block 2 3x3", 1, 28, 128, 32),
    ("DenseNet121 block 3 3x3", 1, 14, 128, 32),
    ("InceptionV3 35x35 3x3", 1, 35, 64, 96),
    ("InceptionV3 35x35 3x3", 1, 35, 96, 96),
    ("InceptionV3 stem 3x3", 1, 147, 32, 64),
    ("InceptionV3 8x8 3x3", 1, 8, 448, 384),
    ("InceptionV3 8x8 3x3", 8, 8, 448, 384),
    ("VGG16 conv1_2", 1, 224, 64, 64),
    ("VGG16 conv3_x", 1, 56, 256, 256),
]
ALGORITHMS = ("direct", *WINOGRAD_ALGORITHMS)


def conv_graph(size: int, channels: int, outputs: int, epilogue: bool, seed: int = 0, batch: int = 1) -> Graph:
    """``x: [batch, size, size, channels]`` -> Conv2D 3×3 SAME (+ BiasAdd + Relu when ``epilogue``)."""
    rng = np.random.default_rng(seed)
    weights = (rng.standard_normal((3, 3, channels, outputs)) / np.sqrt(9 * channels)).astype(np.float32)
    nodes = [
        Node("x", "Placeholder", attrs={"dtype": "float32", "shape": (batch, size, size, channels)}),
        Node("f", "Const", attrs={"dtype": "float32", "value": weights}),
        Node(
            "conv",
            "Conv2D",
            ("x:0", "f:0"),
            attrs={"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)},
        ),
    ]
    output = "conv:0"
    if epilogue:
        nodes.append(Node("b", "Const", attrs={"dtype": "float32", "value": rng.standard_normal(outputs).astype(np.float32)}))
        nodes.append(Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}))
        nodes.append(Node("relu", "Relu", ("bias:0",)))
        output = "relu:0"
    graph = Graph(nodes={n.name: n for n in nodes}, outputs=(output,), source="<winograd layer>")
    return prune_to_outputs(infer_types(graph))[0]


def reference64(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """SAME 3×3 stride-1 convolution in float64: [N, H, W, C] x [3, 3, C, O] -> [N, H, W, O]."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = x.shape[1:3]
    result = np.zeros((*x.shape[:3], weights.shape[3]))
    for kh in range(3):
        for kw in range(3):
            result += padded[:, kh : kh + height, kw : kw + width, :] @ weights[kh, kw].astype(np.float64)
    return result


def kernel_of(graph: Graph):
    (group,) = partition(graph)
    return lower_group(graph, group)


def algorithm_recipes(target: CpuTarget, kernel, threads: int) -> dict:
    """Algorithm -> its analytic recipe (the direct convolution's and each Winograd variant's)."""
    space = target.search_space(kernel.scop, threads)
    recipes = {"direct": space.recipe(dict(space.analytic))}
    recipes.update((algorithm, space.recipe(dict(params))) for algorithm, params in space.winograd)
    return recipes


def relative_error(target: CpuTarget, batch: int, size: int, channels: int, outputs: int, algorithm: str, threads: int) -> float:
    kernel = kernel_of(conv_graph(size, channels, outputs, epilogue=False, batch=batch))
    recipe = algorithm_recipes(target, kernel, threads)[algorithm]
    compiled = target.compile(kernel.scop, recipe, constant_arrays(kernel))
    bench = KernelBench(kernel, seed=1)
    bench.verify(compiled, threads, MeasurementConfig(rtol=1.0, atol_scale=1.0))
    (output,) = kernel.output_arrays
    got = bench.arrays[bench.index[output.name]]
    (x,) = [a for a in kernel.input_arrays if a.name not in kernel.constant_values]
    (weights,) = kernel.constant_values.values()
    expected = reference64(bench.inputs[x.name], weights)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--layers", type=int, default=len(LAYERS), help="only the first N layers")
    parser.add_argument("--out", default="results/winograd.md")
    args = parser.parse_args()
    target = CpuTarget()
    config = MeasurementConfig(repeats=args.repeats, min_repeat_s=0.0)
    rows = []
    for name, batch, size, channels, outputs in LAYERS[: args.layers]:
        kernel = kernel_of(conv_graph(size, channels, outputs, epilogue=True, batch=batch))
        recipes = algorithm_recipes(target, kernel, args.threads)
        default = target.search_space(kernel.scop, args.threads).default_recipe().algorithm
        bench = KernelBench(kernel, seed=2)
        tables = {}
        for algorithm in ALGORITHMS:
            compiled = target.compile(kernel.scop, recipes[algorithm], constant_arrays(kernel))
            error, _ = bench.verify(compiled, args.threads, MeasurementConfig())
            if error is not None:
                raise SystemExit(f"{name} {algorithm}: {error}")
            tables[algorithm] = (compiled, bench.table(compiled))
        medians = {algorithm: [] for algorithm in ALGORITHMS}
        for _ in range(args.rounds):
            for algorithm, (compiled, table) in tables.items():
                medians[algorithm].append(statistics.median(bench.time(compiled, args.threads, config, table=table)))
        latency_ms = {algorithm: 1e3 * statistics.median(values) for algorithm, values in medians.items()}
        errors = {algorithm: relative_error(target, batch, size, channels, outputs, algorithm, args.threads) for algorithm in ALGORITHMS}
        rows.append((name, batch, size, channels, outputs, latency_ms, errors, default))
        print(name, batch, {a: f"{latency_ms[a]:.3f} ms, error {errors[a]:.2e}" for a in ALGORITHMS}, "default", default, flush=True)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    lines = [
        "# Winograd F(2×2,3×3) and F(4×4,3×3) against the direct convolution",
        "",
        f"CPU: {cpu} (LLVM `{llvm.get_host_cpu_name()}`), {args.threads} threads, Conv2D 3×3 SAME + BiasAdd + Relu as one kernel, "
        f"each algorithm's analytic recipe; median of {args.rounds} round medians of {args.repeats} calls (caches flushed before each). "
        "Default: the algorithm of the untuned default recipe; default / direct: its time over the direct convolution's. "
        "Error: max |got − ref| / max |ref| of the convolution alone against float64 numpy. Produced by `results/winograd.py`.",
        "",
        "| layer | N | H=W | C | O | direct ms | F(2,3) ms | F(4,3) ms | default | default / direct | error direct | error F(2,3) | error F(4,3) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    short = {"direct": "direct", "winograd_f2x2_3x3": "F(2,3)", "winograd_f4x4_3x3": "F(4,3)"}
    for name, batch, size, channels, outputs, latency_ms, errors, default in rows:
        cells = [f"{latency_ms[a]:.3f}" for a in ALGORITHMS]
        error_cells = [f"{errors[a]:.1e}" for a in ALGORITHMS]
        ratio = latency_ms[default] / latency_ms["direct"]
        lines.append(
            f"| {name} | {batch} | {size} | {channels} | {outputs} | {' | '.join(cells)} | {short[default]} | {ratio:.2f} | {' | '.join(error_cells)} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
