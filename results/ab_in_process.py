"""A/B timing of two builds of one model inside one process, whole calls alternating in blocks.

On a shared machine whose speed drifts by tens of percent within minutes, two figures taken in
separate runs cannot be compared; two models loaded side by side and timed in alternating blocks
can (each block: 2 untimed calls, then 10 timed calls; the block order swaps every block; the
figures are the medians of the block medians, with every block's ratio printed).

    python results/ab_in_process.py MODEL.pb --without-pass "matrix products" [--blocks 16]
        A: the graph pipeline without that pass, B: the full pipeline (fresh caches each).
    python results/ab_in_process.py MODEL.pb --caches CACHE_A CACHE_B [--blocks 16]
        A and B: the model loaded from two tuning/object caches, e.g. filled by two checkouts of
        the code generator (objects are keyed by polytf's version, so each cache keeps its own).
    python results/ab_in_process.py MODEL.pb --openvino [CACHE] [--blocks 16]
        A: OpenVINO's CPU plugin on the same GraphDef (float32, the bench's settings:
        polytf.bench.openvino_baseline), B: polytf loaded from CACHE (default: a fresh one).

Both builds use default recipes unless the caches hold tuned records; 2 threads unless --threads.
Prints the two medians, B/A (below 1: B is faster), the per-block ratios and the largest output
difference between A and B.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

import polytf
import polytf.passes.pipeline as pipeline
from polytf.runtime.sample_inputs import sample_inputs


def _block_median_s(model, inputs, calls: int = 10, warmup: int = 2) -> float:
    for _ in range(warmup):
        model(**inputs)
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        model(**inputs)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="frozen GraphDef (.pb)")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--without-pass", metavar="NAME", help="A runs the graph pipeline without the pass of this name")
    group.add_argument("--caches", nargs=2, metavar=("CACHE_A", "CACHE_B"), help="load A and B from these cache directories")
    group.add_argument("--openvino", nargs="?", const="", metavar="CACHE", help="A is OpenVINO, B polytf from CACHE (default: a fresh cache)")
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    if args.without_pass:
        names = [name for name, _ in pipeline.PASSES]
        if args.without_pass not in names:
            parser.error(f"no pass named {args.without_pass!r}; passes: {', '.join(dict.fromkeys(names))}")
        scratch = tempfile.mkdtemp(prefix="ab_in_process_")
        full = pipeline.PASSES
        pipeline.PASSES = tuple(p for p in full if p[0] != args.without_pass)
        a = polytf.load(args.model, cache_dir=f"{scratch}/a", threads=args.threads)
        pipeline.PASSES = full
        b = polytf.load(args.model, cache_dir=f"{scratch}/b", threads=args.threads)
    elif args.openvino is not None:
        from polytf.bench.openvino_baseline import openvino_function

        b = polytf.load(args.model, cache_dir=args.openvino or tempfile.mkdtemp(prefix="ab_in_process_"), threads=args.threads)
        inputs = sample_inputs(b.input_types)
        call = openvino_function(args.model, inputs, list(b.output_names), args.threads)
        a = lambda **_: dict(zip(b.output_names, call()))  # noqa: E731 - the same call signature as a model
    else:
        a = polytf.load(args.model, cache_dir=args.caches[0], threads=args.threads)
        b = polytf.load(args.model, cache_dir=args.caches[1], threads=args.threads)
    inputs = sample_inputs(b.input_types)
    out_a, out_b = a(**inputs), b(**inputs)
    difference = max(float(np.abs(out_a[k] - out_b[k]).max()) for k in out_a)
    print(f"kernels A {len(getattr(a, 'kernels', ())) or 'OpenVINO'}, B {len(b.kernels)}; max |A - B| over the outputs {difference:.3g}")
    blocks = {"A": [], "B": []}
    for block in range(args.blocks):
        order = (("A", a), ("B", b)) if block % 2 == 0 else (("B", b), ("A", a))
        for name, model in order:
            blocks[name].append(_block_median_s(model, inputs))
    median_a, median_b = statistics.median(blocks["A"]), statistics.median(blocks["B"])
    ratios = [round(y / x, 2) for x, y in zip(blocks["A"], blocks["B"])]
    print(f"A {median_a * 1e3:.3f} ms  B {median_b * 1e3:.3f} ms  B/A {median_b / median_a:.3f}  per block B/A {ratios}")


if __name__ == "__main__":
    main()
