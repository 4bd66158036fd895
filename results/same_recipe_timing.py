"""Time the same tuned recipes on two checkouts of polytf: what a runtime change costs per
call, with the tuner's luck taken out.

``polytf bench`` tunes afresh, so two of its runs can pick different recipes (a different
winner among 20 trials), and a kernel's time then moves for reasons that have nothing to do
with the change under test. This program fixes the recipes:

1. ``tune`` (on the newer checkout): for each entry of the issue-3 bench suite and each of
   its thread counts, write the zoo model, tune it (``--trials`` per kernel, fresh cache)
   and store every kernel's winning recipe as JSON.
2. ``time`` (on each checkout, alternately): build every model with exactly those recipes
   (``build_model(prepare_model(path), recipes)``) and time it; ``--rounds`` rounds, each the
   median of ``--repeats`` timed calls after ``--warmup`` untimed ones, of ``model(**inputs)``
   (inputs in, outputs out) and of the kernels alone on bound inputs (``model.latency_s``).
   The figure per entry is the median of the round medians.
3. ``report``: one table of the ``time`` runs grouped by label (the median over each
   label's runs), with the ratio of each label to the first.

Usage::

    python results/same_recipe_timing.py tune --recipes recipes.json
    python results/same_recipe_timing.py time --recipes recipes.json --label before --out before1.json
    python results/same_recipe_timing.py time --recipes recipes.json --label after --out after1.json
    ...  (alternate the checkouts a few times)
    python results/same_recipe_timing.py report before*.json after*.json --out results/same_recipe_timing.md

Needs TensorFlow (to write the zoo models). Only uses APIs that both checkouts share
(``prepare_model``, ``build_model``, ``ScheduleRecipe.from_dict``, ``CompiledModel.latency_s``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

#: (zoo model, batch or matmul sizes, thread counts): the issue-3 bench suite
ENTRIES = (
    ("matmul", (1024, 1024, 1024), (1, 2)),
    ("matmul", (384, 1000, 257), (2,)),
    ("conv3x3_bias_relu_56", 1, (2,)),
    ("cifar_cnn", 32, (2,)),
    ("cifar_cnn", 1, (2,)),
    ("mlp", 64, (2,)),
    ("mlp", 1, (2,)),
)


def _label(name: str, size) -> str:
    return f"{name} {'x'.join(map(str, size))}" if isinstance(size, tuple) else f"{name} b{size}"


def _write(name: str, size, folder: Path):
    """(path, inputs) of a zoo model written to ``folder``."""
    import numpy as np

    from polytf.model_zoo.freeze import write_model_with_info

    path = folder / f"{_label(name, size).replace(' ', '_')}.pb"
    if isinstance(size, tuple):
        info = write_model_with_info(name, path, sizes=size)
    else:
        info = write_model_with_info(name, path, batch=size)
    rng = np.random.default_rng(0)
    placeholders = info.inputs or ((info.input_name, info.input_shape),)
    inputs = {input_name: rng.standard_normal(shape).astype(np.float32) for input_name, shape in placeholders}
    return path, inputs


def tune(args: argparse.Namespace) -> int:
    import polytf

    recipes = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, size, thread_counts in ENTRIES:
            path, _ = _write(name, size, Path(folder))
            for threads in thread_counts:
                key = f"{_label(name, size)} / {threads}"
                started = time.perf_counter()
                cache = Path(folder) / f"cache_{len(recipes)}"
                polytf.tune(path, trials=args.trials, cache_dir=cache, threads=threads)
                model = polytf.load(path, cache_dir=cache, threads=threads)
                recipes[key] = {kernel: recipe.to_dict() for kernel, recipe in model.recipes.items()}
                print(f"{key}: tuned in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    Path(args.recipes).write_text(json.dumps(recipes, indent=1))
    return 0


def time_models(args: argparse.Namespace) -> int:
    from polytf.compiler.model_builder import build_model
    from polytf.compiler.preparation import prepare_model
    from polytf.schedules.recipe import ScheduleRecipe

    recipes = json.loads(Path(args.recipes).read_text())
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, size, thread_counts in ENTRIES:
            path, inputs = _write(name, size, Path(folder))
            for threads in thread_counts:
                key = f"{_label(name, size)} / {threads}"
                chosen = {kernel: ScheduleRecipe.from_dict(recipe) for kernel, recipe in recipes[key].items()}
                model = build_model(prepare_model(path), chosen, threads=threads)
                missing = set(chosen) - set(model.recipes)
                if missing:
                    raise SystemExit(f"{key}: kernels {sorted(missing)} are not in this checkout's model")
                call_rounds, kernel_rounds = [], []
                for _ in range(args.rounds):
                    for _ in range(args.warmup):
                        model(**inputs)
                    latencies = []
                    for _ in range(args.repeats):
                        started = time.perf_counter()
                        model(**inputs)
                        latencies.append(time.perf_counter() - started)
                    call_rounds.append(statistics.median(latencies))
                    kernel_rounds.append(statistics.median(model.latency_s(inputs, args.repeats, args.warmup)))
                rows[key] = {"call_s": statistics.median(call_rounds), "kernels_s": statistics.median(kernel_rounds)}
                print(f"{args.label}: {key}: call {rows[key]['call_s'] * 1e3:.3f} ms, kernels {rows[key]['kernels_s'] * 1e3:.3f} ms", file=sys.stderr)
    settings = {"rounds": args.rounds, "repeats": args.repeats, "warmup": args.warmup}
    Path(args.out).write_text(json.dumps({"label": args.label, "machine": platform.processor() or platform.machine(), "settings": settings, "rows": rows}, indent=1))
    return 0


def report(args: argparse.Namespace) -> int:
    runs = [json.loads(Path(p).read_text()) for p in args.runs]
    labels = list(dict.fromkeys(run["label"] for run in runs))  # in order of first appearance
    by_label = {label: [run for run in runs if run["label"] == label] for label in labels}
    first = runs[0]

    def figure(label: str, key: str, field: str) -> tuple[float, float, float]:
        """(median, min, max) over the label's runs, in ms."""
        values = [run["rows"][key][field] * 1e3 for run in by_label[label]]
        return statistics.median(values), min(values), max(values)

    header = ["entry / threads"]
    for field in ("kernels", "call"):
        header += [f"{label} {field} ms" for label in labels] + [f"{label} / {labels[0]} {field}" for label in labels[1:]]
    lines = [
        "# The same tuned recipes timed on two checkouts",
        "",
        f"Written by `python results/same_recipe_timing.py report` on {time.strftime('%Y-%m-%d')}. {args.note}".rstrip(". ") + ".",
        "",
        f"Runs per checkout: {', '.join(f'{label} {len(by_label[label])}' for label in labels)}, alternating. In one run each figure is "
        f"the median of {first['settings']['rounds']} round medians of {first['settings']['repeats']} timed calls after "
        f"{first['settings']['warmup']} untimed ones; the table gives the median over the runs of that checkout, "
        "with the lowest and highest in brackets. *kernels*: the kernels alone on bound inputs; *call*: `model(**inputs)`, "
        "inputs in and outputs out. A ratio above 1 means slower than the first checkout.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for key in first["rows"]:
        cells = [key]
        for field in ("kernels_s", "call_s"):
            figures = [figure(label, key, field) for label in labels]
            cells += [f"{median:.3f} [{low:.3f}–{high:.3f}]" for median, low, high in figures]
            cells += [f"{median / figures[0][0]:.2f}" for median, _, _ in figures[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    tune_parser = commands.add_parser("tune", help="tune every entry on this checkout and write the winning recipes")
    tune_parser.add_argument("--recipes", required=True, help="JSON file to write")
    tune_parser.add_argument("--trials", type=int, default=20)
    time_parser = commands.add_parser("time", help="time every entry on this checkout with the given recipes")
    time_parser.add_argument("--recipes", required=True, help="JSON file written by `tune`")
    time_parser.add_argument("--label", required=True, help="name of this checkout in the report")
    time_parser.add_argument("--out", required=True, help="JSON file to write")
    time_parser.add_argument("--rounds", type=int, default=5)
    time_parser.add_argument("--repeats", type=int, default=30)
    time_parser.add_argument("--warmup", type=int, default=3)
    report_parser = commands.add_parser("report", help="one Markdown table of several `time` runs")
    report_parser.add_argument("runs", nargs="+", help="JSON files written by `time`, grouped by label; ratios are against the first label")
    report_parser.add_argument("--out", required=True, help="Markdown file to write")
    report_parser.add_argument("--note", default="", help="a sentence naming the machine, threads and checkouts")
    args = parser.parse_args(argv)
    return {"tune": tune, "time": time_models, "report": report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
