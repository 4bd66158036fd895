"""A tuned model against its untuned model, timed in a fresh process (issue 28's protocol).

For each model the script writes the frozen GraphDef (``python -m polytf.model_zoo``), tunes
it with ``polytf tune --time-budget BUDGET`` into a fresh cache (a process of its own; what
the tuner prints as "model latency: default -> tuned" is kept), then, in another fresh
process, loads it twice with ``polytf.load`` — untuned (a cache without tuning records) and
tuned (the tuning cache) — and times whole calls ``model(input=x)`` of the two alternating in
blocks (``--blocks`` blocks of ``--calls`` calls each, the first model of a block swapped every
block, one untimed call before each block); each figure is the median over all calls of a
model. A second fresh process times the untuned model against a second instance of itself
the same way (the A/A control: how far a ratio strays when nothing differs, e.g. by where
each instance's buffers landed). The table has both figures per row, their ratio, the
control, the tuner's own figures and the kernels the tuner rejected inside the model.

Usage::

    python results/tuned_vs_untuned.py --models mobilenet_v2,resnet50 --budget 5m --threads 2
    python results/tuned_vs_untuned.py --models cifar_cnn --budget 90s --threads 1 --out results/tuned_vs_untuned_cifar

Writes ``--out``.md and ``--out``.json (default ``results/tuned_vs_untuned``). Needs
TensorFlow (to write the zoo models). Run it on a quiet machine: other processes on the
cores make both columns noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = sys.executable
#: The tuner's summary line (polytf.cli.tune.print_tune_report).
MODEL_LINE = re.compile(r"model latency: default (?P<default>[\d.]+ \S+) -> tuned (?P<tuned>[\d.]+ \S+)")
REJECTED_LINE = re.compile(r"rejected inside the model: (?P<count>\d+)")
UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def seconds(text: str) -> float:
    """``"1.25 ms"`` -> 0.00125."""
    value, unit = text.split()
    return float(value) * UNITS[unit]


def cpu_name() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    model_name = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return f"{model_name} (LLVM {llvm.get_host_cpu_name()})"


def time_fresh(model_path: str, tuned_cache: str, untuned_cache: str, threads: int, blocks: int, calls: int) -> dict:
    """In this (fresh) process: the untuned and the tuned model loaded with ``polytf.load``,
    whole calls alternating in blocks; medians, and each model's kernel times inside a call."""
    import numpy as np

    import polytf
    from polytf.runtime.sample_inputs import sample_inputs

    models = {
        "untuned": polytf.load(model_path, cache_dir=untuned_cache, threads=threads),
        "tuned": polytf.load(model_path, cache_dir=tuned_cache, threads=threads),
    }
    inputs = sample_inputs(models["tuned"].input_types, 0)
    outputs = {which: model(**inputs) for which, model in models.items()}
    worst = max(float(np.max(np.abs(outputs["tuned"][k] - outputs["untuned"][k]))) for k in outputs["tuned"])
    samples: dict[str, list[float]] = {"untuned": [], "tuned": []}
    for block in range(blocks):
        for which in ("untuned", "tuned") if block % 2 == 0 else ("tuned", "untuned"):
            model = models[which]
            model(**inputs)
            for _ in range(calls):
                begin = time.perf_counter()
                model(**inputs)
                samples[which].append(time.perf_counter() - begin)
    return {
        "untuned_s": statistics.median(samples["untuned"]),
        "tuned_s": statistics.median(samples["tuned"]),
        # block by block, each tuned block against the untuned block beside it (median over the blocks)
        "paired_ratio": statistics.median(
            statistics.median(samples["tuned"][start : start + calls])
            / statistics.median(samples["untuned"][start : start + calls])
            for start in range(0, len(samples["tuned"]), calls)
        ),
        "calls": len(samples["tuned"]),
        "tuned_kernels": len(models["tuned"].tuned_kernels),
        "kernels": len(models["tuned"].kernels),
        "max_abs_difference": worst,
    }


def fresh_timing(model: Path, tuned_cache: Path, untuned_cache: Path, threads: int, blocks: int, calls: int) -> dict:
    """:func:`time_fresh` in a fresh process."""
    command = [PYTHON, __file__, "--time-fresh", str(model), str(tuned_cache), str(untuned_cache)]
    fresh = subprocess.run(
        [*command, "--threads", str(threads), "--blocks", str(blocks), "--calls", str(calls)], capture_output=True, text=True
    )
    if fresh.returncode != 0:
        raise SystemExit(f"timing {model.name} in a fresh process failed:\n{fresh.stderr[-4000:]}")
    return json.loads(fresh.stdout.strip().splitlines()[-1])


def run_model(name: str, batch: int, budget: str, threads: int, blocks: int, calls: int, work: Path) -> dict:
    """Write, tune (a process), time fresh (another process) one zoo model."""
    model = work / f"{name}_b{batch}.pb"
    subprocess.run(
        [PYTHON, "-m", "polytf.model_zoo", name, "--batch", str(batch), "-o", str(model)], check=True, capture_output=True
    )
    tuned_cache, untuned_cache = work / f"{name}_b{batch}_cache", work / f"{name}_b{batch}_untuned_cache"
    started = time.perf_counter()
    tune = subprocess.run(
        [
            PYTHON,
            "-m",
            "polytf.cli",
            "tune",
            str(model),
            "--time-budget",
            budget,
            "--threads",
            str(threads),
            "--cache-dir",
            str(tuned_cache),
        ],
        capture_output=True,
        text=True,
    )
    tune_s = time.perf_counter() - started
    if tune.returncode != 0:
        raise SystemExit(f"polytf tune {name} failed:\n{tune.stderr[-4000:]}")
    print(tune.stdout, flush=True)
    line = MODEL_LINE.search(tune.stdout)
    rejected = REJECTED_LINE.search(tune.stdout)
    row = fresh_timing(model, tuned_cache, untuned_cache, threads, blocks, calls)
    # the A/A control: the untuned model against a second instance of itself, the same protocol
    control = fresh_timing(model, untuned_cache, untuned_cache, threads, blocks, calls)
    row["control_ratio"] = control["tuned_s"] / control["untuned_s"]
    row["control_paired_ratio"] = control["paired_ratio"]
    row.update(
        model=name,
        batch=batch,
        budget=budget,
        tune_wall_s=tune_s,
        tuner_default_s=seconds(line["default"]) if line else None,
        tuner_tuned_s=seconds(line["tuned"]) if line else None,
        rejected_in_model=int(rejected["count"]) if rejected else 0,
    )
    return row


def markdown(rows: list[dict], arguments: argparse.Namespace, cpu: str) -> str:
    lines = [
        "# Tuned vs untuned polytf in a fresh process",
        "",
        f"CPU: {cpu}; {arguments.threads} thread(s); tuning budget {arguments.budget} per model; fresh-process timing: "
        f"untuned and tuned `polytf.load` models alternating in {arguments.blocks} blocks of {arguments.calls} calls, medians.",
        "",
        "| model | batch | untuned (fresh) | tuned (fresh) | tuned / untuned | paired by block | A/A control | tuner: default -> tuned | tuned kernels | rejected in model |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        tuner = f"{row['tuner_default_s'] * 1e3:.3f} -> {row['tuner_tuned_s'] * 1e3:.3f} ms" if row["tuner_default_s"] else "-"
        lines.append(
            f"| {row['model']} | {row['batch']} | {row['untuned_s'] * 1e3:.3f} ms | {row['tuned_s'] * 1e3:.3f} ms | "
            f"**{row['tuned_s'] / row['untuned_s']:.3f}** | {row['paired_ratio']:.3f} | {row['control_ratio']:.3f} | {tuner} | {row['tuned_kernels']}/{row['kernels']} | {row['rejected_in_model']} |"
        )
    lines += [
        "",
        "tuned / untuned ≤ 1.0 on every row is issue 28's acceptance (a tuned model is never slower than its untuned one). "
        "A/A control: the untuned model against a second instance of itself loaded in the same fresh process, same protocol: "
        "how far from 1.0 a ratio strays on this machine when nothing differs.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet50", help="zoo names, comma-separated; NAME@B for batch B")
    parser.add_argument("--budget", default="5m", help="tuning budget per model (polytf tune --time-budget)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--work", help="directory for the models and caches (default: a temporary one)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("tuned_vs_untuned")))
    parser.add_argument("--time-fresh", nargs=3, metavar=("MODEL", "TUNED_CACHE", "UNTUNED_CACHE"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.time_fresh:
        print(json.dumps(time_fresh(*arguments.time_fresh, arguments.threads, arguments.blocks, arguments.calls)))
        return
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(arguments.work or temporary)
        work.mkdir(parents=True, exist_ok=True)
        rows = []
        for entry in arguments.models.split(","):
            name, _, batch = entry.strip().partition("@")
            rows.append(
                run_model(name, int(batch or 1), arguments.budget, arguments.threads, arguments.blocks, arguments.calls, work)
            )
            print(json.dumps(rows[-1]), flush=True)
    cpu = cpu_name()
    Path(arguments.out + ".json").write_text(
        json.dumps(
            {
                "cpu": cpu,
                "threads": arguments.threads,
                "python": platform.python_version(),
                "cores": os.cpu_count(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    text = markdown(rows, arguments, cpu)
    Path(arguments.out + ".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
