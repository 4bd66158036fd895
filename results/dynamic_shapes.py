"""Models with a ``None`` batch: polytf's dynamic model against a static compile of the same
size and against OpenVINO given the same dynamic dimension. Writes results/dynamic_shapes.md.

For each model (frozen with its ``None`` batch: :mod:`polytf.model_zoo.dynamic_models`) and
batch size, in one process, default recipes, one fresh cache directory for the run:

- **static**: ``polytf.load(path, input_shapes={"input": (B, ...)})``;
- **dynamic**: ``polytf.load(path)`` (no shapes: the batch is the size symbol ``N``), called
  with a batch of B: built on the model at batch 1, its sample-separable kernels running
  the batch-1 kernels once per sample (:mod:`polytf.compiler.sliced_kernels`);
- **OpenVINO dynamic**: ``openvino.convert_model(path)`` with the ``-1`` batch left dynamic,
  compiled once (float32, LATENCY hint, the same threads), called with a batch of B.

Timed in alternating blocks (static, dynamic, OpenVINO; 3 calls each, 7 rounds after one
warm-up round), each figure the median call. ``identical`` says whether the dynamic model's
output equals the static one's bit for bit (else the largest difference), ``sliced`` how
many of the dynamic model's kernels run as the batch-1 kernels, and ``build`` the seconds
the dynamic model took to reach batch B (at batch 1: its load).

**Cold load**: ``polytf.load`` into an empty cache directory, the dynamic model (built at batch
1) against the static model of batch 1, alternating, the faster of two each (the process has
loaded a model before, so neither pays the first import of the compiler's modules).

Usage: ``python results/dynamic_shapes.py [--models resnet50,...] [--batches 1,8] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import polytf
from polytf.bench.machine import describe_machine, machine_summary
from polytf.bench.openvino_baseline import openvino_settings
from polytf.model_zoo.dynamic_models import dynamic_model_inputs, write_dynamic_model
from polytf.runtime.cpu.sliced_kernel import SampleLoop

ROUNDS, CALLS = 7, 3


def median_call_s(calls: dict) -> dict[str, float]:
    """Each call's median seconds over :data:`ROUNDS` rounds of :data:`CALLS` calls, the calls
    alternating round by round, after one untimed round (also used by bucket_tuning.py)."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(ROUNDS + 1):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(CALLS):
                call()
            if round_:  # the first round warms up
                samples[name].append((time.perf_counter() - start) / CALLS)
    return {name: statistics.median(values) for name, values in samples.items()}


def cold_load_s(path: Path, input_name: str, shape: tuple[int, ...], threads: int, work: Path) -> dict[str, float]:
    """The faster of two cold loads (each into an empty cache directory) of the dynamic model
    and of the static model of ``shape``, alternating."""
    samples: dict[str, list[float]] = {"dynamic": [], "static": []}
    for attempt in range(2):
        for kind in samples:
            shapes = {input_name: shape} if kind == "static" else None
            start = time.perf_counter()
            polytf.load(path, cache_dir=work / f"cold-{kind}-{attempt}", threads=threads, input_shapes=shapes, progress=False)
            samples[kind].append(time.perf_counter() - start)
    return {kind: min(values) for kind, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,transformer_encoder")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import openvino

    rows, cold = [], {}
    with tempfile.TemporaryDirectory() as work:
        cache = Path(work) / "cache"
        for name in args.models.split(","):
            path = write_dynamic_model(name, Path(work) / f"{name}.pb")
            (input_name, declared, _), = dynamic_model_inputs(name)
            polytf.load(path, cache_dir=Path(work) / "warm-up", threads=args.threads, progress=False)  # the compiler's modules imported
            cold[name] = cold_load_s(path, input_name, (1, *declared[1:]), args.threads, Path(work))
            print(name, "cold load", cold[name], flush=True)
            start = time.perf_counter()
            dynamic = polytf.load(path, cache_dir=cache, threads=args.threads, progress=False)
            loaded_s = time.perf_counter() - start
            core = openvino.Core()
            compiled = core.compile_model(openvino.convert_model(str(path)), "CPU", openvino_settings(args.threads))
            request = compiled.create_infer_request()
            for batch in (int(b) for b in args.batches.split(",")):
                shape = (batch, *declared[1:])
                x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                start = time.perf_counter()
                at_batch = dynamic.at_sizes(N=batch)
                build_s = loaded_s if batch == 1 else time.perf_counter() - start
                sliced = sum(isinstance(kernel.function, SampleLoop) for kernel in at_batch.kernels)
                static = polytf.load(path, cache_dir=cache, threads=args.threads, input_shapes={input_name: shape}, progress=False)
                difference = max(float(np.max(np.abs(a - b))) for a, b in zip(static(input=x).values(), dynamic(input=x).values()))
                openvino_out = request.infer({0: x})
                reference = next(iter(static(input=x).values()))
                error = float(np.max(np.abs(np.asarray(next(iter(openvino_out.values()))) - reference)))
                times = median_call_s({"static": lambda: static(input=x), "dynamic": lambda: dynamic(input=x), "openvino": lambda: request.infer({0: x})})
                rows.append((name, batch, times, difference, error, sliced, len(at_batch.kernels), build_s))
                print(name, batch, {k: f"{v * 1e3:.2f} ms" for k, v in times.items()}, difference, f"{error:.1e}", sliced, flush=True)
    lines = [
        "# Dynamic batch: polytf's dynamic model vs a static compile and vs OpenVINO's dynamic model",
        "",
        f"{time.strftime('%Y-%m-%d')}; {machine_summary(describe_machine())}; {args.threads} threads; default recipes; median call of "
        f"{ROUNDS} alternating rounds of {CALLS} calls (after a warm-up round). Written by `python results/dynamic_shapes.py`.",
        "",
        "The dynamic model is `polytf.load(path)` of the model frozen with its `None` batch (no `input_shapes`); static is",
        "`input_shapes={'input': (B, ...)}`; OpenVINO is `convert_model(path)` with the `-1` batch kept dynamic, compiled once.",
        "A batch above 1 is built on the batch-1 model: each sample-separable kernel large enough runs the batch-1 kernel once per sample",
        "(`sliced`: no isl or LLVM work for it), the others are compiled at B (`build`: reading the graph, the passes, compiling those, packing",
        "the weights); static compiles every kernel at B.",
        "",
        "| model | batch | static | dynamic | dynamic / static | OpenVINO dynamic | dynamic / OpenVINO | sliced kernels | build | max abs diff vs static | max abs diff vs OpenVINO |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, batch, times, difference, error, sliced, kernels, build_s in rows:
        lines.append(
            f"| {name} | {batch} | {times['static'] * 1e3:.2f} ms | {times['dynamic'] * 1e3:.2f} ms | {times['dynamic'] / times['static']:.3f} | "
            f"{times['openvino'] * 1e3:.2f} ms | {times['dynamic'] / times['openvino']:.2f} | {sliced} of {kernels} | {build_s:.2f} s | "
            f"{'0 (identical)' if difference == 0 else f'{difference:.1e}'} | {error:.1e} |"
        )
    lines += [
        "",
        "## Cold load: the dynamic model against the static model of batch 1",
        "",
        "Empty cache directories, default recipes, the faster of two alternating loads each (this process loaded the model once before).",
        "",
        "| model | dynamic model (built at batch 1) | static model of batch 1 | dynamic / static |",
        "|---|---|---|---|",
    ]
    for name, times in cold.items():
        lines.append(f"| {name} | {times['dynamic']:.2f} s | {times['static']:.2f} s | {times['dynamic'] / times['static']:.2f} |")
    Path(__file__).with_name("dynamic_shapes.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
