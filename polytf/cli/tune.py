"""``polytf tune MODEL``: tune every kernel of a model and print the table of what it did.

Calls :func:`polytf.autotune.model_tuner.tune_model` with the model and build options of the
arguments (:mod:`polytf.cli.model_options`), once per size bucket of a model with size symbols
(``--buckets N=1,8``; default each symbol's smallest size), showing progress as it goes
(:class:`~polytf.autotune.tuning_display.RichTuningProgress`); exit status 130 when Ctrl-C
stopped it (finished work is saved). The table has, per kernel tuned by this run, its
verdict inside the model (kept or rejected, with its time there under the default and the
tuned recipe: :mod:`polytf.autotune.in_model_check`), and the model latency line is the
default and the tuned model timed against each other there.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from rich.table import Table

from polytf.autotune.model_tuner import KernelReport, TuneReport, tune_model
from polytf.autotune.tuning_display import RichTuningProgress
from polytf.cli.console import console, format_seconds, print_host_nodes, stdout
from polytf.cli.model_options import bucket_sizes, build_options, model_source
from polytf.compiler.symbolic_inputs import sized_sources
from polytf.config import TuningConfig
from polytf.durations import format_duration
from polytf.graph.size_symbols import sizes_text

__all__ = ["execute", "in_model_cell", "print_tune_report", "summarize_failures"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf tune``; returns the exit status."""
    config = TuningConfig()
    if arguments.candidate_timeout is not None:  # a positive number of seconds (the parser checks)
        config = replace(config, candidate_time_limit_s=arguments.candidate_timeout)
    if arguments.time_budget is not None and arguments.trials is not None:
        raise SystemExit("error: give --trials or --time-budget, not both")
    source = model_source(arguments, outputs=arguments.output)
    options = build_options(arguments)
    sized = sized_sources(source, bucket_sizes(arguments.buckets))
    for sizes, sized_source in sized:
        if sizes:  # a model with size symbols: each bucket is tuned as the static model of its sizes
            stdout.print(f"size bucket {sizes_text(sizes)} ({len(sized)} bucket{'s' if len(sized) > 1 else ''}: --buckets)", markup=False, highlight=False)
        with RichTuningProgress(console) as progress:
            report = tune_model(
                sized_source, options, trials=arguments.trials, time_budget_s=arguments.time_budget, retune=arguments.retune, seed=arguments.seed,
                progress=progress, config=config,
            )
        print_tune_report(report)
        if report.interrupted:
            console.print("[yellow]interrupted: finished kernels and the best recipe found so far are saved; run again to continue[/]")
            return 130
    return 0



def print_tune_report(report: TuneReport) -> None:
    """The table of ``polytf tune``: a row per kernel, the model's latency, failed trials, host nodes."""
    budget = report.time_budget_s is not None
    where = "target cuda" if report.target == "cuda" else f"{report.threads} thread{'s' if report.threads > 1 else ''}"
    table = Table(title=f"polytf tune {report.model} ({where})")
    judged = any(row.in_model for row in report.kernels)  # the final choice timed inside the model
    columns = ("kernel", "ops", "default", "tuned", "speedup", "trials", *(("budget spent",) if budget else ()), "status", *(("in the model",) if judged else ()))
    for column in columns:
        table.add_column(column, justify="right" if column in ("default", "tuned", "speedup", "trials", "budget spent") else "left")
    for row in report.kernels:
        trials = f"{row.trials}" + (f" ({row.failed_trials} failed)" if row.failed_trials else "")
        # under a budget: the trials this run gave the kernel and the seconds they took
        spent = (f"{row.trials_here} trial{'s' if row.trials_here != 1 else ''}, {row.tuning_s:.1f} s" if row.status in ("tuned", "interrupted") else "-",) if budget else ()
        speedup = f"{row.speedup:.2f}x" if row.speedup == row.speedup else "-"  # NaN: a kernel the budget skipped
        in_model = (in_model_cell(row),) if judged else ()
        table.add_row(row.kernel, "+".join(row.ops), format_seconds(row.default_latency_s), format_seconds(row.tuned_latency_s), speedup, trials, *spent, row.status, *in_model)
    stdout.print(table)
    if budget:
        tuning_s = sum(row.tuning_s for row in report.kernels)
        skipped = sum(row.status == "skipped" for row in report.kernels)
        stdout.print(
            f"time budget {format_duration(report.time_budget_s)}: {tuning_s:.1f} s spent tuning kernels"
            + (f"; {skipped} kernel{'s' if skipped > 1 else ''} skipped (the budget ended before their turn: they keep the default recipe)" if skipped else "")
        )
    if report.model_tuned_latency_s == report.model_tuned_latency_s:
        speedup = report.model_default_latency_s / report.model_tuned_latency_s
        calls = f"; {report.model_timing_calls} calls of each, alternating blocks, medians; {report.model_timing_s:.1f} s" if report.model_timing_calls else ""
        stdout.print(
            f"model latency: default {format_seconds(report.model_default_latency_s)} -> tuned {format_seconds(report.model_tuned_latency_s)} ({speedup:.2f}x)"
            + f" (timed inside the model{calls})"
        )
    if report.rejected_in_model:
        count = len(report.rejected_in_model)
        why = (
            f"the recipes tuned now did not make the model faster as a whole ({format_seconds(report.model_all_tuned_latency_s)} with all of them)"
            if report.rejected_as_a_whole
            else "their tuned recipe lost to the default one there"
        )
        stdout.print(
            f"rejected inside the model: {count} kernel{'s' if count > 1 else ''} ({', '.join(report.rejected_in_model)}): {why}; their records hold the default recipe",
            markup=False, highlight=False, soft_wrap=True,
        )
    for row in report.kernels:
        if row.failures:
            count = f"{len(row.failures)} failed trial{'s' if len(row.failures) > 1 else ''}"
            stdout.print(f"{row.kernel}: {count}: {summarize_failures(row.failures)}", markup=False, highlight=False, soft_wrap=True)
    print_host_nodes(report.host_nodes)
    if report.busy_machine:
        stdout.print(
            "the machine was busy while tuning (see the warning above): these timings and recipes are unreliable; "
            "run `polytf tune --retune` again on a quiet machine",
            markup=False, highlight=False, soft_wrap=True,
        )
    throughput = f" ({report.trials_per_minute:.0f} per minute of tuning)" if report.trials_per_minute == report.trials_per_minute else ""
    stdout.print(f"new trials: {report.new_trials}{throughput}; elapsed {report.elapsed_s:.1f} s; records in {report.cache_dir}")


def in_model_cell(row: KernelReport) -> str:
    """``"kept (1.2 ms -> 0.9 ms)"``: a kernel's verdict inside the model, with its time there
    under the default and the tuned recipe ("" when it was not judged)."""
    if not row.in_model:
        return ""
    if row.in_model_default_s == row.in_model_default_s:  # NaN: judged with the whole model, or a shared kernel
        return f"{row.in_model} ({format_seconds(row.in_model_default_s)} -> {format_seconds(row.in_model_tuned_s)})"
    return row.in_model


def summarize_failures(failures, limit: int = 6) -> str:
    """``"trial 3: signal 11 (SIGSEGV); trials 5, 9: timed out after 10 s"``: failed trials
    grouped by cause (causes cut to 160 characters), at most ``limit`` groups."""
    groups: dict[str, list[str]] = {}
    for failure in failures:
        label, _, cause = failure.partition(": ")
        number = label.removeprefix("trial ")
        cause = cause if len(cause) <= 160 else cause[:157] + "..."
        groups.setdefault(cause, []).append(number)
    parts = [f"trial{'s' if len(numbers) > 1 else ''} {', '.join(numbers)}: {cause}" for cause, numbers in list(groups.items())[:limit]]
    if len(groups) > limit:
        parts.append(f"and {len(groups) - limit} other causes")
    return "; ".join(parts)
