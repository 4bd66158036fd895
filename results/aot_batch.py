"""``polytf compile`` of a model with a ``None`` batch (the batch an argument of ``NAME_run``)
against the model exported at each fixed batch: writes results/aot_batch.md.

For each zoo model frozen with its ``None`` batch (:mod:`polytf.model_zoo.dynamic_models`),
default recipes, one fresh cache:

1. export it once with the batch as an argument (:mod:`polytf.export.batch_layout`: every
   kernel runs its batch-1 code on the batch's slices), and at each batch B of ``--batches``
   with the batch fixed (``input_shapes``);
2. link the benchmark program of :mod:`polytf.export.benchmark_program` against each object;
   run it at B and check that the two programs' outputs agree (rtol 1e-5);
3. time both programs at B (``NAME_run_with_workspace``, one workspace, the median of
   ``--repeats`` calls), in ``--rounds`` alternating rounds, and report the median of the
   rounds and the ratio.

    python results/aot_batch.py [MODEL ...] [--batches 1,8] [--threads 2] [--rounds 5] [--repeats 30]
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
from polytf.export.benchmark_program import Toolchain, build_program, run_program
from polytf.model_zoo.dynamic_models import dynamic_model_inputs, write_dynamic_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["cifar_cnn", "mobilenet_v2", "resnet50"])
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    toolchain = Toolchain("cc")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for name in args.models:
            path = write_dynamic_model(name, work / f"{name}.pb")
            (input_name, declared, _), = dynamic_model_inputs(name)
            cache = work / "cache"
            begin = time.perf_counter()
            batched = polytf.compile(path, work / f"{name}_any", threads=args.threads, cache_dir=cache)
            batched_s = time.perf_counter() - begin
            batched_program = build_program(batched, toolchain)
            for batch in batches:
                shape = (batch, *declared[1:])
                fixed = polytf.compile(path, work / f"{name}_b{batch}", name=f"{name}_b{batch}", threads=args.threads, cache_dir=cache, input_shapes={input_name: shape})
                fixed_program = build_program(fixed, toolchain)
                x = {input_name: np.random.default_rng(batch).standard_normal(shape).astype(np.float32)}
                samples: dict[str, list[float]] = {"batched": [], "fixed": []}
                outputs = {}
                for _ in range(args.rounds):
                    for kind, exported, program in (("batched", batched, batched_program), ("fixed", fixed, fixed_program)):
                        run = run_program(exported, program, x, toolchain, threads=args.threads, repeats=args.repeats)
                        if run.status != 0:
                            raise SystemExit(f"{name} {kind} at batch {batch}: status {run.status}: {run.stderr}")
                        samples[kind].append(run.median_s)
                        outputs[kind] = next(iter(run.outputs.values()))
                difference = float(np.max(np.abs(outputs["batched"] - outputs["fixed"].reshape(outputs["batched"].shape))))
                times = {kind: statistics.median(values) for kind, values in samples.items()}
                rows.append((name, batch, times, difference, len(batched.kernels), batched_s))
                print(name, batch, {k: f"{v * 1e3:.3f} ms" for k, v in times.items()}, f"{difference:.1e}", flush=True)
    lines = [
        "# The batch as an argument of an exported model, against the model exported at a fixed batch",
        "",
        f"{time.strftime('%Y-%m-%d')}; {machine_summary(describe_machine())}; {args.threads} threads; default recipes; each figure the median of "
        f"{args.rounds} alternating rounds, each round the median of {args.repeats} calls of `NAME_run_with_workspace` (one workspace) "
        "in the benchmark program (polytf.export.benchmark_program). Written by `python results/aot_batch.py`.",
        "",
        "`batch argument`: one object for every batch (the model frozen with its `None` batch; each kernel runs its batch-1 code on",
        "the batch's slices, one call spread over the threads). `fixed batch`: an object exported with `input_shapes` at that batch.",
        "",
        "| model | batch | batch argument | fixed batch | argument / fixed | max abs diff | kernels | export (batch argument) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, batch, times, difference, kernels, batched_s in rows:
        lines.append(
            f"| {name} | {batch} | {times['batched'] * 1e3:.3f} ms | {times['fixed'] * 1e3:.3f} ms | {times['batched'] / times['fixed']:.3f} | "
            f"{difference:.1e} | {kernels} | {batched_s:.1f} s |"
        )
    Path(__file__).with_name("aot_batch.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
