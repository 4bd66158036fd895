"""The cost of TensorFlow's float semantics: models built with the default fast-math flags
(``contract`` everywhere, ``reassoc`` on reductions' accumulation, ``nsz`` on
``maximum``/``minimum``: :func:`polytf.targets.statement_codegen.float_flags`) against the
same models built with ``CodegenConfig(fast_math=True)`` (every LLVM fast-math flag, the
old default).

Usage::

    python results/float_semantics_cost.py [--models cifar_cnn,mobilenet_v2,...] [--calls 30]
        [--threads 1] [--out results/float_semantics_cost.md]

Each model is frozen from the zoo, built twice in this process, each from a fresh cache
directory (default recipes, as ``polytf.load`` builds an untuned model), and both builds'
outputs are compared. Then whole calls alternate between the two builds (the order swaps
every round), after warm-up; each call is timed with every kernel inside it
(:meth:`CompiledModel.timed_calls`). Reported: the median call latency of each build and
their ratio, and the kernels whose median time changed most (grouped by the ops fused into
them). Writes a Markdown report naming the CPU (LLVM's name) and the thread count.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
from pathlib import Path

import numpy as np

MODELS = ("cifar_cnn", "mobilenet_v2", "resnet50", "transformer_encoder")


def build(path: Path, cache_dir: Path, fast_math: bool, threads: int):
    """The model at ``path`` built as ``polytf.load`` builds it, with ``CodegenConfig(fast_math=...)``."""
    from polytf.compiler.backends import backend_of_options
    from polytf.compiler.build_options import BuildOptions
    from polytf.compiler.model_source import ModelSource
    from polytf.compiler.preparation import prepare_model
    from polytf.compiler.recorded_recipes import stored_recipes
    from polytf.config import CodegenConfig

    codegen = CodegenConfig(fast_math=fast_math)
    options = BuildOptions(cache_dir=cache_dir, threads=threads, fallback=False)
    backend = backend_of_options(options, codegen)
    prepared = prepare_model(ModelSource.of(path), fallback=options.fallback)
    return backend.build_model(prepared, cached=stored_recipes(prepared, options, backend.target, backend.threads, codegen))


def _family(kernel) -> str:
    """The ops fused into a kernel, in order, repeated ops once (``Conv2D+BiasAdd+Relu6``)."""
    return "+".join(dict.fromkeys(op for _, op in kernel.scop.ops))


def measure(name: str, calls: int, threads: int, workdir: Path) -> dict:
    from polytf.model_zoo import write_model

    path = write_model(name, workdir / f"{name}.pb")
    models = {
        flavour: build(path, workdir / f"cache_{name}_{flavour}", flavour == "fast_math", threads)
        for flavour in ("fast_math", "default")
    }
    (input_name,) = models["default"].input_types
    shape = models["default"].input_types[input_name].shape
    inputs = {input_name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    outputs = {flavour: model(**inputs) for flavour, model in models.items()}
    worst = 0.0
    for key, value in outputs["default"].items():
        reference = outputs["fast_math"][key]
        worst = max(worst, float(np.max(np.abs(value - reference))) / (float(np.max(np.abs(reference))) + 1e-30))
    for model in models.values():
        model.timed_calls(inputs, repeats=1, warmup=3)
    totals = {flavour: [] for flavour in models}
    steps = {flavour: [] for flavour in models}
    for round_ in range(calls):
        order = ("fast_math", "default") if round_ % 2 == 0 else ("default", "fast_math")
        for flavour in order:
            (timing,) = models[flavour].timed_calls(inputs, repeats=1, warmup=0)
            totals[flavour].append(timing.call_s)
            steps[flavour].append(timing.step_s)
    medians = {flavour: statistics.median(values) for flavour, values in totals.items()}
    kernels = models["default"].kernels
    per_family: dict[str, list[float]] = {}
    for flavour in models:
        step_medians = [statistics.median(column) for column in zip(*steps[flavour])]
        for kernel, seconds in zip(kernels, step_medians):
            per_family.setdefault(_family(kernel), [0.0, 0.0])[0 if flavour == "default" else 1] += seconds
    changed = sorted(per_family.items(), key=lambda item: item[1][0] - item[1][1], reverse=True)
    return {
        "model": name,
        "kernels": len(kernels),
        "default_ms": medians["default"] * 1e3,
        "fast_math_ms": medians["fast_math"] * 1e3,
        "ratio": medians["default"] / medians["fast_math"],
        "relative_difference": worst,
        "families": [(family, default * 1e3, fast * 1e3) for family, (default, fast) in changed[:4]],
    }


def report(rows: list[dict], calls: int, threads: int) -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    lines = [
        "# The cost of TensorFlow's float semantics",
        "",
        f"{datetime.date.today()}, CPU `{llvm.get_host_cpu_name()}`, {threads} thread(s), `python results/float_semantics_cost.py "
        f"--calls {calls} --threads {threads}`. Default recipes (untuned), each build from a fresh cache directory; "
        f"medians of {calls} whole calls alternating between the two builds in one process. The machine was shared "
        "with other jobs: ratios, measured in one run, are what to read.",
        "",
        "`default`: `contract` everywhere, `reassoc` on reductions' accumulation, `nsz` on `llvm.maximum`/`llvm.minimum` "
        "(NaN and ±inf as TensorFlow). `fast_math`: `CodegenConfig(fast_math=True)`, every LLVM fast-math flag (the old default).",
        "",
        "| model | kernels | default (ms) | fast_math (ms) | default / fast_math | max relative output difference |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['kernels']} | {row['default_ms']:.3f} | {row['fast_math_ms']:.3f} | {row['ratio']:.3f} | {row['relative_difference']:.1e} |"
        )
    lines += ["", "Kernel families that lost the most time (median ms per call, default vs fast_math):", ""]
    for row in rows:
        listed = "; ".join(f"{family}: {default:.3f} vs {fast:.3f}" for family, default, fast in row["families"])
        lines.append(f"- {row['model']}: {listed}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("float_semantics_cost.md"))
    arguments = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name in arguments.models.split(","):
            rows.append(measure(name, arguments.calls, arguments.threads, Path(directory)))
            print(rows[-1], flush=True)
    arguments.out.write_text(report(rows, arguments.calls, arguments.threads))
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
