"""Each kernel of a model timed alone and inside a whole call: where "call / sum of kernels"
comes from.

``polytf bench`` and ``polytf show --profile`` time every kernel alone, repeated on the same
arrays (its weights and inputs stay in the caches), and compare the sum with a whole call. This
program also times each kernel *in sequence*: one whole call after another, with a clock
read between kernels, so that each kernel finds the caches as the kernels before it left
them. The tuner measures candidates alone too, so a recipe that wins alone may lose in
sequence; ``--order natural`` builds the same model with the analytic default's loop order
forced to program order (no weight-panel-outer order), to compare the two orders both ways.

Usage::

    python results/sequence_vs_isolation.py resnet50 --batch 1 [--order natural] [--top 8]

Prints the whole-call median, the sums of the isolated and in-sequence medians, and the
kernels that lose the most in sequence. Untuned models (analytic default recipes), a fresh
cache, random normal inputs. Needs TensorFlow (to write the zoo model).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np


def _force_natural_order() -> None:
    import polytf.schedules.search_space as search_space

    analytic = search_space.analytic_blocking

    def natural(*args, **kwargs):
        blocking = analytic(*args, **kwargs)
        return None if blocking is None else dataclasses.replace(blocking, weights_outer=False)

    search_space.analytic_blocking = natural


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="zoo model name, e.g. resnet50")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--order", choices=("analytic", "natural"), default="analytic")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    if args.order == "natural":
        _force_natural_order()
    import polytf
    from polytf.model_zoo import write_model_with_info

    with tempfile.TemporaryDirectory() as folder:
        info = write_model_with_info(args.model, Path(folder) / "model.pb", batch=args.batch)
        model = polytf.load(info.path, cache_dir=Path(folder) / "cache", threads=args.threads)
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(t.shape).astype(t.dtype) for name, t in model.input_types.items()}
    alone = {kernel.scop.name: float(np.median(s)) for kernel, s in model.kernel_latency_s(inputs, repeats=args.repeats, warmup=1)}
    call = float(np.median(model.latency_s(inputs, repeats=2 * args.repeats)))
    with model._bound_context(inputs) as context:  # noqa: SLF001 - a measurement of the runtime itself
        context.run(args.threads)
        runs = []
        for _ in range(args.repeats):
            stamps = [time.perf_counter()]
            for table in context._tables:  # noqa: SLF001
                table.run(args.threads)
                stamps.append(time.perf_counter())
            runs.append(np.diff(stamps))
    in_sequence = np.median(np.array(runs), axis=0)
    names = [kernel.scop.name for kernel in model.kernels]
    outer = sum(1 for kernel in model.kernels if kernel.recipe.tile_order and kernel.recipe.tile_order[0] != 0)
    print(
        f"{args.model} batch {args.batch}, {args.threads} threads, order {args.order}: whole call {call * 1e3:.1f} ms; "
        f"kernels alone {sum(alone.values()) * 1e3:.1f} ms; in sequence {in_sequence.sum() * 1e3:.1f} ms; "
        f"weight-panel-outer kernels {outer}/{len(names)}"
    )
    rows = sorted(zip(names, in_sequence), key=lambda row: alone[row[0]] - row[1])
    for name, seconds in rows[: args.top]:
        print(f"  {name[:60]:60s} alone {alone[name] * 1e3:7.2f} ms  in sequence {seconds * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
