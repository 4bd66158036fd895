"""Tuning a model with a ``None`` batch per size bucket against tuning the static model of each
size with the same budget. Writes results/bucket_tuning.md.

For a zoo model frozen with its ``None`` batch (:mod:`polytf.model_zoo.dynamic_models`), in one
process, each in its own fresh cache directory:

- **buckets**: ``polytf.tune(path, buckets={"N": BATCHES}, trials=T)``, then ``polytf.load(path)``
  (the dynamic model) called at each batch;
- **static**: for each batch B, ``polytf.tune(path, input_shapes={"input": (B, ...)}, trials=T)``
  and ``polytf.load`` of the same shapes.

The two models of a batch are timed in alternating rounds (3 calls each, 7 rounds after a
warm-up round), each figure the median call.

Usage: ``python results/bucket_tuning.py [--model transformer_encoder] [--batches 1,8] [--trials 5] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from dynamic_shapes import CALLS, ROUNDS, median_call_s  # results/, beside this program

import polytf
from polytf.bench.machine import describe_machine, machine_summary
from polytf.model_zoo.dynamic_models import dynamic_model_inputs, write_dynamic_model
from polytf.runtime.cpu.sliced_kernel import SampleLoop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="transformer_encoder")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    batches = tuple(int(b) for b in args.batches.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        path = write_dynamic_model(args.model, Path(work) / f"{args.model}.pb")
        (input_name, declared, _), = dynamic_model_inputs(args.model)
        started = time.perf_counter()
        polytf.tune(path, trials=args.trials, cache_dir=Path(work) / "buckets", threads=args.threads, progress=False, buckets={"N": batches})
        bucket_tuning_s = time.perf_counter() - started
        dynamic = polytf.load(path, cache_dir=Path(work) / "buckets", threads=args.threads, progress=False)
        for batch in batches:
            shapes = {input_name: (batch, *declared[1:])}
            started = time.perf_counter()
            polytf.tune(path, trials=args.trials, cache_dir=Path(work) / "static", threads=args.threads, progress=False, input_shapes=shapes)
            static_tuning_s = time.perf_counter() - started
            static = polytf.load(path, cache_dir=Path(work) / "static", threads=args.threads, progress=False, input_shapes=shapes)
            x = np.random.default_rng(0).standard_normal(shapes[input_name]).astype(np.float32)
            at_batch = dynamic.at_sizes(N=batch)
            same = at_batch.recipes == static.recipes
            sliced = sum(isinstance(kernel.function, SampleLoop) for kernel in at_batch.kernels)
            tuned = len(at_batch.tuned_kernels)
            times = median_call_s({"buckets": lambda: dynamic(input=x), "static": lambda: static(input=x)})
            rows.append((batch, times, same, static_tuning_s, f"{tuned} tuned, {sliced} sliced of {len(at_batch.kernels)}"))
            print(batch, {k: f"{v * 1e3:.3f} ms" for k, v in times.items()}, same, flush=True)
    lines = [
        "# Tuning per size bucket against a static tune of each size",
        "",
        f"{time.strftime('%Y-%m-%d')}; {machine_summary(describe_machine())}; {args.threads} threads; model `{args.model}` frozen with a `None` batch; "
        f"{args.trials} trials per kernel for every tune; median call of {ROUNDS} alternating rounds of {CALLS} calls. "
        "Written by `python results/bucket_tuning.py`.",
        "",
        f"`polytf.tune(path, buckets={{'N': {batches}}})` took {bucket_tuning_s:.1f} s for the {len(batches)} buckets; "
        "each static tune's time is in the table. In the dynamic model, a kernel with a tuning record at its bucket is compiled with",
        "the record's recipe; the others run as the batch-1 kernels, slice by slice (`sliced`; polytf.compiler.sliced_kernels).",
        "",
        "| batch | dynamic model, bucket-tuned | static model, tuned | bucket / static | dynamic model's kernels | same recipes | static tune |",
        "|---|---|---|---|---|---|---|",
    ]
    for batch, times, same, tuning_s, kernels in rows:
        lines.append(
            f"| {batch} | {times['buckets'] * 1e3:.3f} ms | {times['static'] * 1e3:.3f} ms | {times['buckets'] / times['static']:.3f} | "
            f"{kernels} | {'yes' if same else 'no'} | {tuning_s:.1f} s |"
        )
    Path(__file__).with_name("bucket_tuning.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
