"""The frontend under mutated and hostile GraphDefs.

Usage::

    python results/frontend_fuzz.py [--cases 1000] [--seed 0] [--out results/frontend_fuzz.md]

1. ``--cases`` mutated GraphDefs (tests/fuzz/graphdef_mutations.py), each through
   ``prepare_model`` in a forked child (tests/fuzz/fuzz_runner.py): counts by outcome
   (ok / polytf error / traceback / crash / hang), the slowest case and the largest peak
   resident memory.
2. A constant bomb: a GraphDef of a few hundred bytes holding a 20000 x 20000 float32
   ``Const`` given by one value, unused and used, through ``polytf show`` in a fresh
   process: exit status, seconds, peak resident memory.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))


def bomb(path: Path, used: bool) -> None:
    """A GraphDef: ``Identity(Relu(x))``, or ``Identity(Relu(x) + bomb)`` when ``used``,
    with ``bomb`` a 20000 x 20000 float32 Const of one ``float_val``."""
    from tensorboard.compat.proto import graph_pb2, types_pb2

    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for size in (20000, 20000):
        x.attr["shape"].shape.dim.add(size=size)
    constant = graph.node.add(name="bomb", op="Const")
    constant.attr["dtype"].type = types_pb2.DT_FLOAT
    tensor = constant.attr["value"].tensor
    tensor.dtype = types_pb2.DT_FLOAT
    for size in (20000, 20000):
        tensor.tensor_shape.dim.add(size=size)
    tensor.float_val.append(1.0)
    graph.node.add(name="relu", op="Relu", input=["x"]).attr["T"].type = types_pb2.DT_FLOAT
    last = "relu"
    if used:
        graph.node.add(name="add", op="AddV2", input=["relu", "bomb"]).attr["T"].type = types_pb2.DT_FLOAT
        last = "add"
    graph.node.add(name="Identity", op="Identity", input=[last])
    path.write_bytes(graph.SerializeToString())


def run_bomb(folder: Path, used: bool) -> dict:
    path = folder / f"bomb_{'used' if used else 'unused'}.pb"
    bomb(path, used)
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-m", "polytf.cli", "show", path.name], cwd=folder, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak resident memory
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    last = (stdout + stderr).strip().splitlines()
    return {
        "case": f"{'used' if used else 'unused'} 20000x20000 one-value Const ({path.stat().st_size} bytes)",
        "exit": child.returncode,
        "seconds": seconds,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "output": " ".join(" ".join(last).split())[:300],
        "traceback": "Traceback" in stderr,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/frontend_fuzz.md")
    args = parser.parse_args(argv)

    from fuzz_runner import run

    from polytf.bench.machine import describe_machine, machine_summary

    started = time.perf_counter()
    outcomes = run(args.cases, args.seed, 60.0)
    fuzz_s = time.perf_counter() - started
    counts = Counter(o.outcome for o in outcomes)
    slowest = max(outcomes, key=lambda o: o.seconds)
    largest = max(outcomes, key=lambda o: o.peak_rss_mb)
    with tempfile.TemporaryDirectory() as folder:
        bombs = [run_bomb(Path(folder), used) for used in (False, True)]
    lines = [
        "# Frontend under mutated GraphDefs",
        "",
        f"{datetime.date.today().isoformat()}; {machine_summary(describe_machine())}.",
        f"Command: `python results/frontend_fuzz.py --cases {args.cases} --seed {args.seed}`",
        "",
        f"## {args.cases} mutated GraphDefs (seeds {args.seed} to {args.seed + args.cases - 1}), `prepare_model` in a forked child each",
        "",
        "| outcome | cases |",
        "|---|---|",
        *(f"| {name} | {counts.get(name, 0)} |" for name in ("ok", "error", "traceback", "crash", "hang")),
        "",
        f"Slowest case: {slowest.seconds:.2f} s (case {slowest.seed}: {slowest.description}). "
        f"Largest peak resident memory of a case: {largest.peak_rss_mb:.0f} MB (case {largest.seed}: {largest.description}). "
        f"Whole run: {fuzz_s:.0f} s.",
        "",
    ]
    failures = [o for o in outcomes if o.outcome not in ("ok", "error")]
    if failures:
        lines += ["Failures:", "", *(f"- case {o.seed} ({o.description}): {o.outcome}: {o.detail}" for o in failures), ""]
    lines += ["## A constant bomb through `polytf show`, in a fresh process", "", "| case | exit status | seconds | peak RSS (MB) | traceback | last output |", "|---|---|---|---|---|---|"]
    lines += [f"| {b['case']} | {b['exit']} | {b['seconds']:.2f} | {b['peak_rss_mb']:.0f} | {'yes' if b['traceback'] else 'no'} | {b['output']} |" for b in bombs]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({"counts": counts, "bombs": bombs}, default=str), file=sys.stderr)
    return 1 if failures or any(b["traceback"] for b in bombs) else 0


if __name__ == "__main__":
    sys.exit(main())
