"""How compile time grows with the length of an element-wise chain.

Usage::

    python results/compile_time.py [--lengths 125,250,500,1000,2000,4000] [--passes-lengths 10000]
        [--chains relu,mixed,mixed+fanout] [--out results/compile_time.md]

Chains (:mod:`polytf.model_zoo.chains`, built from the GraphDef protos without TensorFlow):
``relu`` is ``x[1, 64] -> Relu -> ... -> Relu -> Identity``; ``mixed`` repeats ``Relu, AddV2
(const), Mul (const), Tanh`` (arithmetic simplification and CSE have work: every seventh
constant is 1.0, the constants repeat); ``mixed+fanout`` adds a second consumer (a ``Relu``
graph output) to every fourth node, so fusion groups have outputs in the middle.

For each length and chain, one fresh process runs :func:`polytf.load` on an empty cache
directory and times each stage inside that call (by wrapping the functions
:func:`polytf.compiler.loading.load_model` calls, in the modules that call them): reading and shape inference, the
graph passes (:func:`polytf.passes.pipeline.optimize`), partition, lowering, the cache
lookup (Scop fingerprints), and scheduling + LLVM code generation + JIT of every kernel with
its default recipe (``build_model``); the total is the whole ``polytf.load`` call. The model
then runs once and is compared with numpy. For ``--passes-lengths`` only
:func:`~polytf.compiler.preparation.prepare_graph` runs (read, shape inference, graph passes).
Writes a Markdown table with the machine named.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHAINS = {"relu": ("Relu",), "mixed": ("Relu", "AddV2", "Mul", "Tanh"), "mixed+fanout": ("Relu", "AddV2", "Mul", "Tanh")}
#: stages timed inside polytf.load, in the order they run: (column, module that calls the function, function)
STAGES = (
    ("passes_s", "polytf.compiler.preparation", "optimize"),
    ("partition_s", "polytf.lowering.host_fallback", "partition"),
    ("lower_s", "polytf.lowering.host_fallback", "lower_group"),
    ("cache_s", "polytf.compiler.recorded_recipes", "cached_recipes"),
    ("build_s", "polytf.compiler.backends", "build_model"),
)


def measure(length: int, chain: str, passes_only: bool) -> dict:
    """Compile one chain in this process (the child side); returns seconds per stage."""
    import importlib

    import numpy as np

    import polytf
    from polytf.compiler import preparation
    from polytf.model_zoo.chains import chain_reference, elementwise_chain

    seconds = {column: 0.0 for column, _, _ in STAGES}

    def timed(column, function):
        def wrapper(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[column] += time.perf_counter() - begin

        return wrapper

    for column, module_name, name in STAGES:
        module = importlib.import_module(module_name)
        setattr(module, name, timed(column, getattr(module, name)))
    kinds = CHAINS[chain]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "chain.pb"
        path.write_bytes(elementwise_chain(length, kinds, fanout=chain.endswith("fanout")).SerializeToString())
        begin = time.perf_counter()
        if passes_only:
            graph, _ = preparation.prepare_graph(path)
            total_s = time.perf_counter() - begin
            return {"length": length, "chain": chain, "nodes": len(graph.nodes), "passes_s": seconds["passes_s"], "prepare_s": total_s}
        nodes = {}
        prepare = preparation.prepare_graph

        def counting_prepare(*args, **kwargs):
            graph, reports = prepare(*args, **kwargs)
            nodes["after"] = len(graph.nodes)
            return graph, reports

        preparation.prepare_graph = counting_prepare
        model = polytf.load(path, cache_dir=Path(folder) / "cache", threads=2)
        total_s = time.perf_counter() - begin
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    expected = chain_reference(x, length, kinds)
    error = float(np.max(np.abs(model(x=x)["Identity"] - expected)))
    scale = float(np.max(np.abs(expected))) or 1.0
    read_s = total_s - sum(seconds.values())  # read + shape inference (+ the few ms between stages)
    return {"length": length, "chain": chain, "nodes": nodes["after"], "kernels": len(model.kernels),
            "read_s": read_s, **seconds, "total_s": total_s, "relative_error": error / scale}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="125,250,500,1000,2000,4000")
    parser.add_argument("--passes-lengths", default="10000")
    parser.add_argument("--chains", default=",".join(CHAINS))
    parser.add_argument("--out", default="results/compile_time.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        length, chain, passes_only = args.child.split("|")
        print(json.dumps(measure(int(length), chain, passes_only == "1")))
        return 0

    from polytf.bench.machine import describe_machine, machine_summary
    from polytf.config import GraphPassConfig

    rows = []
    jobs = [(int(n), chain, False) for n in args.lengths.split(",") if n for chain in args.chains.split(",")]
    jobs += [(int(n), chain, True) for n in args.passes_lengths.split(",") if n for chain in args.chains.split(",")]
    for length, chain, passes_only in jobs:
        child = subprocess.run([sys.executable, __file__, "--child", f"{length}|{chain}|{int(passes_only)}"], capture_output=True, text=True)
        if child.returncode:
            print(child.stderr[-2000:], file=sys.stderr)
            return 1
        rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    command = f"python results/compile_time.py --lengths {args.lengths} --passes-lengths {args.passes_lengths} --chains {args.chains}"
    lines = [
        "# Compile time of element-wise chains",
        "",
        f"{datetime.date.today().isoformat()}; {machine_summary(describe_machine())}.",
        f"`polytf.load` on an empty cache, one process per row; fusion groups hold at most {GraphPassConfig().max_fusion_group_nodes} nodes "
        "(`GraphPassConfig.max_fusion_group_nodes`); every kernel compiled with its default recipe, 2 threads. "
        "Seconds are wall-clock on a 2-core machine shared with other jobs (a few tens of percent of noise).",
        f"Command: `{command}`",
        "",
        "Before (issue 9, measured on main at 653485b, one fusion group per chain): 125 / 250 / 500 Relus compiled in "
        "2.9 / 18 / 130 s, 2,000 did not finish; the graph passes took 31 s on a 10,000-node chain.",
        "",
        "| chain | length | nodes after passes | read + shape inference (s) | graph passes (s) | partition (s) | lowering (s) | cache lookup (s) "
        "| schedule + LLVM + JIT (s) | total `polytf.load` (s) | kernels | max error / max value |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "build_s" in row:
            lines.append(
                f"| {row['chain']} | {row['length']} | {row['nodes']} | {row['read_s']:.2f} | {row['passes_s']:.2f} | {row['partition_s']:.2f} "
                f"| {row['lower_s']:.2f} | {row['cache_s']:.2f} | {row['build_s']:.2f} | {row['total_s']:.2f} | {row['kernels']} | {row['relative_error']:.1e} |"
            )
    passes_rows = [row for row in rows if "build_s" not in row]
    if passes_rows:
        lines += [
            "",
            "Graph passes alone (`prepare_graph`: read, shape inference, `optimize`, shape inference of the result):",
            "",
            "| chain | length | nodes after passes | graph passes `optimize` (s) | whole `prepare_graph` (s) |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {row['chain']} | {row['length']} | {row['nodes']} | {row['passes_s']:.2f} | {row['prepare_s']:.2f} |" for row in passes_rows]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
