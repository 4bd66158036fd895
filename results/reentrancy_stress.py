"""Thread-stress a tuned model: many threads call one CompiledModel at once, and every
result must equal, bit for bit, the single-threaded result for the same input.

Usage::

    python results/reentrancy_stress.py [--model cifar_cnn] [--batch 1] [--threads 4] [--calls 500]
        [--trials 8] [--runs 3] [--out results/reentrancy_stress.md]

For each run, a child process tunes the zoo model into a fresh cache (``--trials`` per
kernel; 0 keeps the default recipes), loads it with ``polytf.load``, computes the
single-threaded output of ``--inputs`` distinct random inputs, then starts ``--threads``
Python threads that each make ``--calls`` calls (cycling through the inputs) and counts
the results that differ bit for bit. The child runs in its own process so that an
abort (a double free, a segmentation fault) is counted instead of ending the program.
Needs TensorFlow (to write the zoo model).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def stress(model_path: str, cache_dir: str, threads: int, calls: int, input_count: int, trials: int) -> dict:
    """Tune, load and hammer one model; returns counts (runs in the child process)."""
    import numpy as np

    import polytf

    started = time.perf_counter()
    if trials:
        polytf.tune(model_path, trials=trials, cache_dir=cache_dir)
    tuning_s = time.perf_counter() - started
    model = polytf.load(model_path, cache_dir=cache_dir)
    (name, input_type), = model.input_types.items()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(input_type.shape).astype(np.float32) for _ in range(input_count)]
    expected = [model(**{name: x}) for x in inputs]
    differing = [0] * threads
    errors: list[str] = []
    barrier = threading.Barrier(threads)

    def work(worker: int) -> None:
        try:
            barrier.wait()
            for call in range(calls):
                index = (worker * 7 + call) % input_count
                result = model(**{name: inputs[index]})
                if any(not np.array_equal(result[key], expected[index][key]) for key in result):
                    differing[worker] += 1
        except Exception as error:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(error).__name__}: {error}")

    pool = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    begin = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return {
        "calls": threads * calls,
        "differing": sum(differing),
        "errors": errors,
        "contexts": model.context_count,
        "kernels": len(model.kernels),
        "tuned_kernels": len(getattr(model, "tuned_kernels", ())),
        "tuning_s": tuning_s,
        "stress_s": time.perf_counter() - begin,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cifar_cnn")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--inputs", type=int, default=8)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default="results/reentrancy_stress.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        model_path, cache_dir = args.child.split("|")
        print(json.dumps(stress(model_path, cache_dir, args.threads, args.calls, args.inputs, args.trials)))
        return 0

    from polytf.bench.machine import describe_machine, machine_summary
    from polytf.model_zoo import write_model

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        model_path = str(write_model(args.model, Path(folder) / f"{args.model}.pb", batch=args.batch))
        for run in range(args.runs):
            cache_dir = str(Path(folder) / f"cache{run}")
            command = [sys.executable, __file__, "--child", f"{model_path}|{cache_dir}", "--threads", str(args.threads), "--calls", str(args.calls), "--inputs", str(args.inputs), "--trials", str(args.trials)]
            child = subprocess.run(command, capture_output=True, text=True)
            if child.returncode != 0:
                rows.append({"run": run, "returncode": child.returncode, "stderr": child.stderr[-400:]})
            else:
                rows.append({"run": run, "returncode": 0, **json.loads(child.stdout.strip().splitlines()[-1])})
            print(rows[-1], flush=True)
    machine = describe_machine()
    lines = [
        f"# Thread stress: {args.model} (batch {args.batch}), {args.threads} threads × {args.calls} calls",
        "",
        f"{datetime.date.today().isoformat()}; {machine_summary(machine)}.",
        f"Each kernel runs on the default thread count (all usable CPUs); tuned with {args.trials} trials per kernel into a fresh cache per run.",
        f"Command: `python results/reentrancy_stress.py --model {args.model} --batch {args.batch} --threads {args.threads} --calls {args.calls} --trials {args.trials} --runs {args.runs}`",
        "",
        "| run | exit | calls | results differing bit for bit | exceptions | execution contexts | kernels (tuned) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row["returncode"]:
            lines.append(f"| {row['run']} | {row['returncode']} (crash) | | | | | |")
        else:
            lines.append(f"| {row['run']} | 0 | {row['calls']} | {row['differing']} | {len(row['errors'])} | {row['contexts']} | {row['kernels']} ({row['tuned_kernels']}) |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(r["returncode"] == 0 and r["differing"] == 0 and not r["errors"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
