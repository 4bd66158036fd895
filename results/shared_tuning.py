"""Tuning shared through PostgreSQL: two ``polytf tune --storage postgresql://...`` processes
against one, each kernel's trials split between them, and a third process that loads the
tuned model from the database without tuning.

Usage::

    python results/shared_tuning.py [--model cifar_cnn] [--trials 20] [--repeats 3] [--out results/shared_tuning.md]

The program starts its own PostgreSQL server (from the installed binaries, as the tests do:
``tests/postgresql_server.py``), writes the zoo model (``python -m polytf.model_zoo``; needs
TensorFlow), and for each repeat, on a fresh database and fresh cache directories:

- **one**: one ``polytf tune MODEL --storage URL --threads 1 --trials T`` process;
- **two**: two such processes started together, each with ``--trials T`` and its own cache
  directory (as on two machines: each has its own ``measurement`` lock, so their timings
  overlap on the cores). ``--trials`` is the total of each kernel's study over every tuner
  sharing it, so both runs measure the same T trials per kernel; the two processes split
  them. The wall time is from the first start to the last exit.

Runs alternate (one, two / two, one, ...) so that a slow phase of the machine hits both.
After the last repeat a third process loads the model with ``polytf.load(MODEL,
storage=URL, cache_dir=<new empty directory>, threads=1)`` and reports how many kernels
came from the database's records. Each process gets ``--threads 1``: on a 2-core machine
the two tuners have a core each. Benchmark on a quiet machine: another job on the cores
slows whichever run it meets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY / "tests"))  # the test suite's PostgreSQL server starter

LOAD_PROGRAM = """
import json, sys, time
from pathlib import Path
import polytf
model_path, url, cache = sys.argv[1:4]
started = time.perf_counter()
model = polytf.load(model_path, storage=url, cache_dir=cache, threads=1)
print(json.dumps({"seconds": time.perf_counter() - started, "kernels": len(model.kernels), "tuned": len(model.tuned_kernels),
                  "cache_dir_created": Path(cache).exists()}))
"""


def tune_command(model: Path, url: str, cache: Path, trials: int) -> list[str]:
    return [sys.executable, "-m", "polytf.cli", "tune", str(model), "--storage", url, "--cache-dir", str(cache), "--threads", "1", "--trials", str(trials)]


def busy_cpu_s() -> float:
    """CPU seconds the machine has spent busy since it started (all CPUs, from ``/proc/stat``)."""
    with open("/proc/stat") as handle:
        fields = handle.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds used by this program's finished child processes (the tuners and their workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_tuners(commands: list[list[str]]) -> dict:
    """Start ``commands`` together and wait for all; wall time from the first start to the last exit,
    and the CPU time other processes took meanwhile (what disturbed the run)."""
    environment = dict(os.environ, COLUMNS="1000")
    environment.pop("POLYTF_STORAGE", None)
    busy_before, children_before = busy_cpu_s(), children_cpu_s()
    started = time.perf_counter()
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment) for command in commands]
    outputs = [process.communicate() for process in processes]
    wall_s = time.perf_counter() - started
    tuners_cpu_s = children_cpu_s() - children_before
    other_cpu_s = max(0.0, busy_cpu_s() - busy_before - tuners_cpu_s)
    tuners = []
    for process, (out, err) in zip(processes, outputs):
        if process.returncode != 0:
            raise SystemExit(f"polytf tune failed with status {process.returncode}:\n{err[-3000:]}")
        new = re.search(r"new trials: (\d+); elapsed ([\d.]+) s", out)
        latency = re.search(r"model latency: default (.+?) -> tuned (.+?) \(", out)
        tuners.append({"new_trials": int(new.group(1)), "elapsed_s": float(new.group(2)), "model_latency": latency.groups() if latency else None})
    return {"wall_s": wall_s, "tuners": tuners, "tuners_cpu_s": tuners_cpu_s, "other_cpu_s": other_cpu_s}


def study_trials(url: str) -> list[dict]:
    """Per study: kernel name, trial count, failed trials, trials per owner (tuner process)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql(
                "SELECT s.study_name, t.trial_id, t.state, "
                "(SELECT value_json FROM study_user_attributes a WHERE a.study_id = s.study_id AND a.key = 'kernel'), "
                "(SELECT value_json FROM trial_user_attributes a WHERE a.trial_id = t.trial_id AND a.key = 'owner') "
                "FROM studies s LEFT JOIN trials t ON t.study_id = s.study_id"
            ).all()
    finally:
        engine.dispose()
    studies: dict[str, dict] = {}
    for name, trial_id, state, kernel, owner in rows:
        study = studies.setdefault(name, {"kernel": json.loads(kernel) if kernel else name, "trials": 0, "failed": 0, "owners": {}})
        if trial_id is None:
            continue
        study["trials"] += 1
        study["failed"] += state == "FAIL"
        owner = json.loads(owner) if owner else "?"
        study["owners"][owner] = study["owners"].get(owner, 0) + 1
    return sorted(studies.values(), key=lambda study: study["kernel"])


def load_in_a_third_process(model: Path, url: str, cache: Path) -> dict:
    environment = dict(os.environ)
    environment.pop("POLYTF_STORAGE", None)
    result = subprocess.run([sys.executable, "-c", LOAD_PROGRAM, str(model), url, str(cache)], capture_output=True, text=True, env=environment)
    if result.returncode != 0:
        raise SystemExit(f"the third process failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace, workdir: Path) -> dict:
    from postgresql_server import start_server

    model = workdir / f"{args.model}.pb"
    subprocess.run([sys.executable, "-m", "polytf.model_zoo", args.model, "-o", str(model)], check=True, capture_output=True)
    runs: dict[str, list[dict]] = {"one": [], "two": []}
    with start_server() as server:
        for repeat in range(args.repeats):
            for kind in ("one", "two") if repeat % 2 == 0 else ("two", "one"):
                url = server.create_database(f"{kind}_{repeat}")
                caches = [workdir / f"{kind}_{repeat}_{tuner}" for tuner in range(1 if kind == "one" else 2)]
                run = run_tuners([tune_command(model, url, cache, args.trials) for cache in caches])
                run["studies"] = study_trials(url)
                runs[kind].append(run)
                print(f"repeat {repeat} {kind}: {run['wall_s']:.1f} s", file=sys.stderr)
        third = load_in_a_third_process(model, server.url(f"two_{args.repeats - 1}"), workdir / "third_machine_cache")
    return {"runs": runs, "third": third}


def report(args: argparse.Namespace, machine: dict, measured: dict, seconds: float) -> str:
    from polytf.bench.machine import machine_summary

    one = [run["wall_s"] for run in measured["runs"]["one"]]
    two = [run["wall_s"] for run in measured["runs"]["two"]]
    median_one, median_two = statistics.median(one), statistics.median(two)
    lines = [
        f"# Tuning shared through PostgreSQL: {args.model}, {args.trials} trials per kernel, one tuner vs two",
        "",
        f"{machine['date'][:10]}; {machine_summary(machine)}.",
        f"Command: `python results/shared_tuning.py --model {args.model} --trials {args.trials} --repeats {args.repeats}` ({seconds / 60:.1f} min).",
        "",
        f"Each run tunes every kernel of `{args.model}` on a fresh database of a PostgreSQL server on this machine, each "
        f"`polytf tune` process with `--threads 1` and its own fresh cache directory (as on separate machines). `--trials "
        f"{args.trials}` is the total of each kernel's study over every tuner that shares it: *one* measures {args.trials} trials "
        f"per kernel in one process, *two* the same {args.trials} per kernel split between two processes started together. "
        "Wall time: from the first start to the last exit, median of the repeats (runs alternate between the two kinds).",
        "",
        "| | wall time, median (s) | each repeat (s) |",
        "|---|---|---|",
        f"| one tuner | {median_one:.1f} | {', '.join(f'{value:.1f}' for value in one)} |",
        f"| two tuners | {median_two:.1f} | {', '.join(f'{value:.1f}' for value in two)} |",
        "",
        f"**Two tuners took {median_two / median_one:.2f}x the wall time of one ({abs(1 - median_two / median_one) * 100:.0f}% "
        f"{'less' if median_two < median_one else 'more'}; a speed-up of {median_one / median_two:.2f}x)** on {machine['usable_cpus']} cores.",
        "",
        "CPU time of the tuners (their workers included) / of every other process (the PostgreSQL server included) "
        "during each run, s: " + ", ".join(
            f"{kind} {run['tuners_cpu_s']:.0f} / {run['other_cpu_s']:.1f}" for kind in ("one", "two") for run in measured["runs"][kind]
        ) + ". Other processes' time is what disturbed the run: a few seconds is a quiet machine; tens of seconds mean "
        "another job shared the cores and the wall times are noisy.",
        "",
        "## Trials per kernel (last repeat of *two*)",
        "",
        "| kernel | trials (asked: %d) | failed | split between the two tuners |" % args.trials,
        "|---|---|---|---|",
    ]
    last = measured["runs"]["two"][-1]
    for study in last["studies"]:
        split = " + ".join(str(count) for _, count in sorted(study["owners"].items()))
        lines.append(f"| {study['kernel']} | {study['trials']} | {study['failed']} | {split} |")
    counts = [study["trials"] for run in measured["runs"]["two"] + measured["runs"]["one"] for study in run["studies"]]
    new_trials = [[tuner["new_trials"] for tuner in run["tuners"]] for run in measured["runs"]["two"]]
    lines += [
        "",
        f"Over every run: {len(counts)} kernel studies, trials per study from {min(counts)} to {max(counts)} (asked {args.trials}); "
        f"none above. Trials each of the two tuners ran, per repeat: {'; '.join(' + '.join(map(str, pair)) for pair in new_trials)} "
        f"(= {len(last['studies'])} kernels x {args.trials}: each trial ran in exactly one tuner).",
        "",
        "Whole-model latency after tuning (each tuner's own final timing, default -> tuned): "
        + "; ".join(
            f"{kind}: " + ", ".join(f"{t['model_latency'][0]} -> {t['model_latency'][1]}" for run in measured["runs"][kind] for t in run["tuners"] if t["model_latency"])
            for kind in ("one", "two")
        )
        + ".",
        "",
        "## A third process loads the model from the database",
        "",
    ]
    third = measured["third"]
    lines.append(
        f"`polytf.load({args.model}.pb, storage=URL, cache_dir=<new empty directory>, threads=1)` in a new process: "
        f"{third['tuned']} of {third['kernels']} kernels built from the database's records, in {third['seconds']:.2f} s; "
        f"no tuning, and the cache directory was {'created' if third['cache_dir_created'] else 'never created'}."
    )
    lines += [
        "",
        "Why two tuners do not halve the time: each tuner measures every kernel's default recipe itself (the baseline is "
        "not a trial), starts its own worker processes, waits at the end of each kernel for the other's last trial, and "
        "times the whole model once at the end; only the trials are split. Here both tuners share one 2-core machine "
        "(a core each, one memory system); on two machines each would have a machine of its own.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cifar_cnn", help="zoo model (python -m polytf.model_zoo NAME)")
    parser.add_argument("--trials", type=int, default=20, help="trials per kernel, in total over the tuners sharing a study")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind (one tuner, two tuners); the median is reported")
    parser.add_argument("--out", default=str(REPOSITORY / "results" / "shared_tuning.md"))
    args = parser.parse_args(argv)
    from polytf.bench.machine import describe_machine

    started = time.perf_counter()
    machine = describe_machine()
    with tempfile.TemporaryDirectory(prefix="polytf-shared-tuning-") as workdir:
        measured = measure(args, Path(workdir))
    text = report(args, machine, measured, time.perf_counter() - started)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps({"machine": machine, **measured}, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
