"""Models with a ``None`` batch: polytf's dynamic model against a static compile of the same
size and against OpenVINO given the same dynamic dimension. Writes results/dynamic_shapes.md.

For each model (frozen with its ``None`` batch: :mod:`polytf.model_zoo.dynamic_models`) and
batch size, in one process, default recipes, one fresh cache directory for the run:

- **static**: ``polytf.load(path, input_shapes={"input": (B, ...)})``;
- **dynamic**: ``polytf.load(path)`` (no shapes: the batch is the size symbol ``N``), called
  with a batch of B;
- **OpenVINO dynamic**: ``openvino.convert_model(path)`` with the ``-1`` batch left dynamic,
  compiled once (float32, LATENCY hint, the same threads), called with a batch of B.

Timed in alternating blocks (static, dynamic, OpenVINO; 3 calls each, 7 rounds after one
warm-up round), each figure the median call. ``identical`` says whether the dynamic model's
output equals the static one's bit for bit.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,transformer_encoder")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import openvino

    rows = []
    with tempfile.TemporaryDirectory() as work:
        cache = Path(work) / "cache"
        for name in args.models.split(","):
            path = write_dynamic_model(name, Path(work) / f"{name}.pb")
            (input_name, declared, _), = dynamic_model_inputs(name)
            dynamic = polytf.load(path, cache_dir=cache, threads=args.threads, progress=False)
            core = openvino.Core()
            compiled = core.compile_model(openvino.convert_model(str(path)), "CPU", openvino_settings(args.threads))
            request = compiled.create_infer_request()
            for batch in (int(b) for b in args.batches.split(",")):
                shape = (batch, *declared[1:])
                x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                static = polytf.load(path, cache_dir=cache, threads=args.threads, input_shapes={input_name: shape}, progress=False)
                identical = all(np.array_equal(a, b) for a, b in zip(static(input=x).values(), dynamic(input=x).values()))
                openvino_out = request.infer({0: x})
                reference = next(iter(static(input=x).values()))
                error = float(np.max(np.abs(np.asarray(next(iter(openvino_out.values()))) - reference)))
                times = median_call_s({"static": lambda: static(input=x), "dynamic": lambda: dynamic(input=x), "openvino": lambda: request.infer({0: x})})
                rows.append((name, batch, times, identical, error))
                print(name, batch, {k: f"{v * 1e3:.2f} ms" for k, v in times.items()}, identical, f"{error:.1e}", flush=True)
    lines = [
        "# Dynamic batch: polytf's dynamic model vs a static compile and vs OpenVINO's dynamic model",
        "",
        f"{time.strftime('%Y-%m-%d')}; {machine_summary(describe_machine())}; {args.threads} threads; default recipes; median call of "
        f"{ROUNDS} alternating rounds of {CALLS} calls (after a warm-up round). Written by `python results/dynamic_shapes.py`.",
        "",
        "The dynamic model is `polytf.load(path)` of the model frozen with its `None` batch (no `input_shapes`); static is",
        "`input_shapes={'input': (B, ...)}`; OpenVINO is `convert_model(path)` with the `-1` batch kept dynamic, compiled once.",
        "Each size of polytf's dynamic model is still built as the static model of that size (kernels are not yet parametric).",
        "",
        "| model | batch | static | dynamic | dynamic / static | OpenVINO dynamic | dynamic / OpenVINO | identical to static | max abs diff vs OpenVINO |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, batch, times, identical, error in rows:
        lines.append(
            f"| {name} | {batch} | {times['static'] * 1e3:.2f} ms | {times['dynamic'] * 1e3:.2f} ms | {times['dynamic'] / times['static']:.3f} | "
            f"{times['openvino'] * 1e3:.2f} ms | {times['dynamic'] / times['openvino']:.2f} | {'yes' if identical else 'no'} | {error:.1e} |"
        )
    Path(__file__).with_name("dynamic_shapes.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
