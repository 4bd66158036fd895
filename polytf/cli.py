"""The ``polytf`` command line: tune, run, bench, show, cache, ops.

Every failure polytf anticipates prints ``error: <message>`` (naming the file, node
or op and what to do) and exits with status 1; Ctrl-C exits with 130 after saving
finished work.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from polytf.config import VERIFY_TIME_LIMIT_S, TuningConfig
from polytf.errors import PolytfError
from polytf.version import __version__

console = Console(stderr=True)
#: ``--target`` values (polytf.compiler.backends.TARGET_NAMES, without importing the runtime)
TARGET_CHOICES = ("cpu", "cuda")
# Wide tables when writing to a file or a pipe (rich assumes 80 columns there).
stdout = Console(width=None if sys.stdout.isatty() else 160)


def format_seconds(value: float) -> str:
    """``1.5e-5`` -> ``"15.0 µs"``."""
    if value != value or value == float("inf"):
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} µs"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.2f} s"


def _input_shapes(specs: list[str]) -> dict:
    from polytf.frontend import parse_input_spec

    shapes = {}
    for spec in specs or []:
        try:
            name, shape = parse_input_spec(spec)
        except ValueError as error:
            raise SystemExit(f"error: --input {spec!r}: {error}") from None
        shapes[name] = shape
    return shapes


class RichTuningProgress:
    """Shows tuning progress: one bar per kernel, its best latency so far and how many of its trials failed."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("best {task.fields[best]}"),
            TextColumn("{task.fields[failed]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task = None
        self.failed = 0

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def model_prepared(self, kernel_count: int, unique_count: int) -> None:
        console.print(f"[bold]{kernel_count}[/] kernels ({unique_count} distinct) to tune")

    def kernel_started(self, kernel, trials: int) -> None:
        ops = "+".join(op for _, op in kernel.scop.ops)
        self.task = self.progress.add_task(f"{kernel.scop.name} ({ops})", total=trials, best="-", failed="")
        self.failed = 0

    def trial_done(self, kernel):
        def update(number, recipe, measurement, failure, best_s):
            self.failed += failure is not None
            if self.task is not None:
                self.progress.update(self.task, advance=1, best=format_seconds(best_s), failed=f"{self.failed} failed" if self.failed else "")
            if self.deadline is not None:
                self._show_budget(self.deadline - time.monotonic())

        return update

    # under a time budget: one bar per kernel across its slices, and a row with the budget left
    deadline: float | None = None

    def budget_started(self, budget_s: float, task_count: int) -> None:
        self.deadline = time.monotonic() + budget_s
        self.budget_task = self.progress.add_task("", total=budget_s, best="", failed="")
        self.kernel_tasks, self.kernel_failed = {}, {}
        self._show_budget(budget_s)

    def _show_budget(self, remaining_s: float) -> None:
        from polytf.durations import format_duration

        total = self._task(self.budget_task).total
        self.progress.update(self.budget_task, completed=min(total, total - remaining_s), description=f"time budget: {format_duration(remaining_s)} left")

    def slice_started(self, kernel, trials: int, remaining_s: float) -> None:
        name = kernel.scop.name
        if name not in self.kernel_tasks:
            ops = "+".join(op for _, op in kernel.scop.ops)
            self.kernel_tasks[name] = self.progress.add_task(f"{name} ({ops})", total=0, best="-", failed="")
            self.kernel_failed[name] = 0
        self.task, self.failed = self.kernel_tasks[name], self.kernel_failed[name]
        self.progress.update(self.task, total=self._task(self.task).total + trials)
        self._show_budget(remaining_s)

    def slice_finished(self, report, remaining_s: float) -> None:
        self.kernel_failed[report.kernel] = self.failed
        self.progress.update(self.task, completed=self._task(self.task).total, best=format_seconds(report.tuned_latency_s))
        self.task = None
        self._show_budget(remaining_s)

    def _task(self, task_id):
        return next(task for task in self.progress.tasks if task.id == task_id)

    def kernel_finished(self, report) -> None:
        if report.status == "cached":
            console.print(f"  {report.kernel}: cached record reused ({format_seconds(report.tuned_latency_s)})")
        elif self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[-1].total, best=format_seconds(report.tuned_latency_s))
        self.task = None

    def message(self, text: str) -> None:
        console.print(text)


def print_tune_report(report) -> None:
    budget = report.time_budget_s is not None
    where = "target cuda" if report.target == "cuda" else f"{report.threads} thread{'s' if report.threads > 1 else ''}"
    table = Table(title=f"polytf tune {report.model} ({where})")
    columns = ("kernel", "ops", "default", "tuned", "speedup", "trials", *(("budget spent",) if budget else ()), "status")
    for column in columns:
        table.add_column(column, justify="right" if column in ("default", "tuned", "speedup", "trials", "budget spent") else "left")
    for row in report.kernels:
        trials = f"{row.trials}" + (f" ({row.failed_trials} failed)" if row.failed_trials else "")
        # under a budget: the trials this run gave the kernel and the seconds they took
        spent = (f"{row.trials_here} trial{'s' if row.trials_here != 1 else ''}, {row.tuning_s:.1f} s" if row.status in ("tuned", "interrupted") else "-",) if budget else ()
        speedup = f"{row.speedup:.2f}x" if row.speedup == row.speedup else "-"  # NaN: a kernel the budget skipped
        table.add_row(row.kernel, "+".join(row.ops), format_seconds(row.default_latency_s), format_seconds(row.tuned_latency_s), speedup, trials, *spent, row.status)
    stdout.print(table)
    if budget:
        from polytf.durations import format_duration

        tuning_s = sum(row.tuning_s for row in report.kernels)
        skipped = sum(row.status == "skipped" for row in report.kernels)
        stdout.print(
            f"time budget {format_duration(report.time_budget_s)}: {tuning_s:.1f} s spent tuning kernels"
            + (f"; {skipped} kernel{'s' if skipped > 1 else ''} skipped (the budget ended before their turn: they keep the default recipe)" if skipped else "")
        )
    if report.model_tuned_latency_s == report.model_tuned_latency_s:
        speedup = report.model_default_latency_s / report.model_tuned_latency_s
        stdout.print(
            f"model latency: default {format_seconds(report.model_default_latency_s)} -> tuned {format_seconds(report.model_tuned_latency_s)} ({speedup:.2f}x)"
        )
    for row in report.kernels:
        if row.failures:
            count = f"{len(row.failures)} failed trial{'s' if len(row.failures) > 1 else ''}"
            stdout.print(f"{row.kernel}: {count}: {summarize_failures(row.failures)}", markup=False, highlight=False, soft_wrap=True)
    print_host_nodes(report.host_nodes)
    stdout.print(f"new trials: {report.new_trials}; elapsed {report.elapsed_s:.1f} s; records in {report.cache_dir}")


def print_host_nodes(host_nodes) -> None:
    """One line per node that runs on the host through its numpy reference, with the reason."""
    for node in host_nodes:
        stdout.print(f"runs on the host: node '{node.name}' ({node.op}): {node.reason}", markup=False, highlight=False, soft_wrap=True)


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


def _duration_argument(text: str) -> float:
    """``--time-budget`` as seconds (:func:`polytf.durations.parse_duration`), or argparse's error."""
    from polytf.durations import parse_duration

    try:
        return parse_duration(text)
    except PolytfError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def command_tune(args) -> int:
    from dataclasses import replace

    from polytf.autotune.model_tuner import tune_model

    config = TuningConfig()
    if args.candidate_timeout is not None:
        if args.candidate_timeout <= 0:
            raise SystemExit("error: --candidate-timeout must be a positive number of seconds")
        config = replace(config, candidate_time_limit_s=args.candidate_timeout)

    if args.time_budget is not None and args.trials is not None:
        raise SystemExit("error: give --trials or --time-budget, not both")
    with RichTuningProgress() as progress:
        report = tune_model(
            args.model,
            trials=args.trials,
            time_budget_s=args.time_budget,
            cache_dir=args.cache_dir,
            retune=args.retune,
            input_shapes=_input_shapes(args.input),
            outputs=args.output or None,
            threads=args.threads,
            seed=args.seed,
            progress=progress,
            config=config,
            fallback=args.fallback,
            signature=args.signature,
            target=args.target,
            storage=args.storage,
        )
    print_tune_report(report)
    if report.interrupted:
        console.print("[yellow]interrupted: finished kernels and the best recipe found so far are saved; run again to continue[/]")
        return 130
    return 0


def command_run(args) -> int:
    import numpy as np

    import polytf
    from polytf.frontend import parse_input_file_spec

    feeds = {}
    for spec in args.input or []:
        try:
            name, path = parse_input_file_spec(spec)
        except ValueError as error:
            raise SystemExit(f"error: --input {spec!r}: {error}") from None
        try:
            feeds[name] = np.load(path)
        except (OSError, ValueError) as error:
            raise SystemExit(f"error: cannot read input '{name}' from {path}: {error}") from None
    model = polytf.load(
        args.model,
        cache_dir=args.cache_dir,
        input_shapes={n: v.shape for n, v in feeds.items()},
        outputs=args.fetch or None,
        threads=args.threads,
        fallback=args.fallback,
        signature=args.signature,
        target=args.target,
        storage=args.storage,
    )
    results = model(**feeds)  # numpy arrays in, numpy arrays out (on the GPU too)
    np.savez(args.output, **results)
    for name, value in results.items():
        stdout.print(f"{name}: {value.dtype}{list(value.shape)}")
    stdout.print(f"wrote {args.output} ({len(getattr(model, 'tuned_kernels', ()))}/{len(model.kernels)} kernels tuned)")
    return 0


def command_compile(args) -> int:
    from rich.markup import escape

    from polytf.export import RUNTIME_LIBRARIES, c_parameters, compile_model

    with console.status("compiling kernels") as status:
        exported = compile_model(
            args.model,
            args.output_dir,
            name=args.name,
            target_triple=args.target_triple,
            cpu=args.cpu,
            features=args.features,
            threads=args.threads,
            cache_dir=args.cache_dir,
            input_shapes=_input_shapes(args.input),
            outputs=args.output or None,
            signature=args.signature,
            fallback=args.fallback,
            embed_limit_bytes=int(args.embed_weights_limit_mb * 1024 * 1024),
            shared_library=args.shared_library,
            progress=lambda kernel: status.update(f"compiling {escape(kernel)}"),
            storage=args.storage,
        )
    untuned = len(exported.kernels) - len(exported.tuned_kernels)
    stdout.print(
        f"{exported.name}: {len(exported.kernels)} kernels for {exported.triple} ({exported.cpu}), "
        f"{len(exported.tuned_kernels)} with tuned recipes (threads {exported.threads}), {untuned} with default recipes"
    )
    written = [exported.object_path, exported.header_path, exported.weights_path, exported.shared_library_path]
    for path in written:
        if path is not None:
            stdout.print(f"wrote {path} ({path.stat().st_size} bytes)")
    if exported.shared_library_path is None and args.shared_library:
        stdout.print("no C compiler for this target: no shared library (link the object instead)")
    stdout.print(f"entry point: int {exported.name}_run({c_parameters(exported.inputs, exported.outputs)}, int threads)", highlight=False)
    stdout.print(f"link with: cc program.c {exported.object_path} {' '.join(RUNTIME_LIBRARIES)}", highlight=False)
    return 0


def command_show(args) -> int:
    from polytf.compiler.model_builder import cache_key, constant_arrays, default_recipe, prepare_model
    from polytf.config import CodegenConfig, default_thread_count
    from polytf.errors import PolytfError
    from polytf.passes.pipeline import summary
    from polytf.schedules.recipe import ScheduleRecipe
    from polytf.storage.cache import KernelCache, warn_ignored_record
    from polytf.storage.tuning_storage import open_tuning_storage
    from polytf.targets.compile_driver import emit_kernel
    from polytf.targets.cpu import CpuTarget

    if args.profile:
        return show_profile(args)
    if args.passes:
        prepared = prepare_model(args.model, _input_shapes(args.input), fallback=args.fallback, signature=args.signature)
        print_pass_reports(args.model, prepared.passes)
        print_host_nodes(prepared.host_nodes)
        return 0
    prepared = prepare_model(args.model, _input_shapes(args.input), fallback=args.fallback, signature=args.signature)
    threads = args.threads or default_thread_count()
    if not args.kernel:
        host = f", {len(prepared.host_nodes)} on the host" if prepared.host_nodes else ""
        stdout.print(f"{args.model}: {len(prepared.graph.nodes)} nodes, {len(prepared.kernels)} kernels{host}")
        stdout.print(f"  graph passes: {summary(prepared.passes)} (per pass: --passes)")
        kernels = iter(prepared.kernels)
        for group in prepared.groups:
            if group.on_host:
                node = prepared.graph.nodes[group.nodes[0]]
                stdout.print(f"  {group.name}: {node.name} ({node.op}) on the host")
            else:
                kernel = next(kernels)
                stdout.print(f"  {kernel.scop.name}: {' + '.join(f'{n} ({op})' for n, op in kernel.scop.ops)}")
        print_host_nodes(prepared.host_nodes)
        stdout.print("show one with --kernel NAME")
        return 0
    matches = [k for k in prepared.kernels if k.scop.name == args.kernel]
    if not matches:
        raise SystemExit(f"error: no kernel {args.kernel!r}; kernels: {', '.join(k.scop.name for k in prepared.kernels)}")
    kernel = matches[0]
    if args.target == "cuda":  # code only: no device needed (without one, PTX for --arch or sm_80)
        from polytf.compiler.backends import CUDA_THREADS
        from polytf.targets.cuda import CudaTarget

        target = CudaTarget(compute_capability=args.arch) if args.arch else CudaTarget()
        threads = CUDA_THREADS
    else:
        target = CpuTarget()
    constants = constant_arrays(kernel)  # shown as the model runs it: weights packed ahead of time
    emitted = None
    if args.recipe:
        recipe = ScheduleRecipe.from_json(Path(args.recipe).read_text())
    else:
        key = cache_key(kernel, target, threads, CodegenConfig())
        storage = open_tuning_storage(args.storage, KernelCache(args.cache_dir))
        with contextlib.closing(storage), storage.translating_errors("read a tuning record from"):
            record, where = storage.load(key), storage.record_location(key)
        recipe = None if record is None else record.schedule_recipe
        if recipe is not None:
            try:
                emitted = emit_kernel(kernel.scop, recipe, target, constants)
            except PolytfError as error:
                warn_ignored_record(where, f"its recipe cannot be used: {error}")
                recipe = None
        if recipe is None:
            recipe = default_recipe(kernel, threads, target)
    # scheduled once, for every section below
    emitted = emitted or emit_kernel(kernel.scop, recipe, target, constants)
    scheduled = emitted.scheduled
    sections = [("scop", str(kernel.scop)), ("recipe", recipe.to_json())]
    if scheduled.scop is not kernel.scop:
        sections.append(("scop after data-layout transformations (packing, padding, im2col)", str(scheduled.scop)))
    sections += [
        ("schedule tree", str(scheduled.schedule)),
        ("loop AST", emitted.ast.to_C_str()),
    ]
    if scheduled.launch is not None:
        launches = [*scheduled.launch.prologue, scheduled.launch]
        sections.append(
            (
                "launches",
                "\n".join(
                    f"{'copy' if i < len(launches) - 1 else 'kernel'}: grid {list(launch.grid)}, block {list(launch.block)}, "
                    f"{launch.shared_memory_bytes} bytes of shared memory ({', '.join(launch.shared_arrays) or 'none'}), "
                    f"registers: {', '.join(name for name, _ in launch.private_arrays) or 'none'}"
                    for i, launch in enumerate(launches)
                ),
            )
        )
    if args.llvm:
        sections.append(("LLVM IR", str(target.optimise(emitted.code, kernel.scop.name))))
    if args.assembly:
        sections.append(("assembly", target.assembly_of(emitted.code, kernel.scop.name)))
    for title, text in sections:
        stdout.rule(title)
        stdout.print(text, markup=False, highlight=False)
    return 0


def show_profile(args) -> int:
    """``polytf show MODEL --profile``: the model as ``polytf.load`` builds it, timed kernel by
    kernel on seeded random normal inputs, against the float32 peak measured for its threads."""

    import polytf
    from polytf.bench.peak import measure_fp32_peak
    from polytf.runtime.cpu.profile import profile_model
    from polytf.runtime.sample_inputs import sample_inputs

    if args.repeats < 1:
        raise SystemExit("error: --repeats must be at least 1")
    model = polytf.load(
        args.model, cache_dir=args.cache_dir, input_shapes=_input_shapes(args.input), threads=args.threads, fallback=args.fallback, signature=args.signature,
        storage=args.storage,
    )
    inputs = sample_inputs(model.input_types, seed=0)
    peak = measure_fp32_peak(model.threads)
    profile = profile_model(model, inputs, repeats=args.repeats, peak_gflops=peak.gflops)
    tuned = len(getattr(model, "tuned_kernels", ()))
    stdout.print(f"{args.model}: {len(model.kernels)} kernels ({tuned} from tuning records), {model.threads} threads", highlight=False)
    stdout.print(
        f"float32 peak: {peak.gflops:.1f} GFLOP/s on {peak.threads} threads (FMA loop on <{peak.vector_lanes} x float>, LLVM CPU {peak.cpu_name})",
        highlight=False,
    )
    stdout.print(profile.table())
    stdout.print(profile.totals(), highlight=False)
    return 0


def print_pass_reports(model: str, reports) -> None:
    """One table row per graph pass run (node and edge counts before and after), then the totals."""
    from polytf.passes.pipeline import summary

    table = Table(title=f"graph passes of {model}")
    for column in ("round", "pass", "nodes before", "nodes after", "edges before", "edges after", "rewrites"):
        table.add_column(column, justify="left" if column in ("pass", "rewrites") else "right")
    for report in reports:
        table.add_row(
            str(report.round),
            report.name,
            str(report.nodes_before),
            str(report.nodes_after),
            str(report.edges_before),
            str(report.edges_after),
            report.detail or ("-" if not report.changed else str(report.rewrites)),
        )
    total = summary(tuple(reports))
    table.add_section()
    table.add_row("", "total", str(total.nodes_before), str(total.nodes_after), str(total.edges_before), str(total.edges_after), f"{total.rewrites} rewrites")
    stdout.print(table)
    removed = total.nodes_before - total.nodes_after
    share = removed / total.nodes_before if total.nodes_before else 0.0
    stdout.print(
        f"total: {total.nodes_before} -> {total.nodes_after} nodes ({removed} removed, {share:.0%}), "
        f"{total.edges_before} -> {total.edges_after} edges, {len(reports)} pass runs in {total.round} round{'s' if total.round > 1 else ''}",
        markup=False,
        highlight=False,
    )


def command_cache(args) -> int:
    from polytf.storage.cache import KernelCache

    cache = KernelCache(args.cache_dir)
    if args.action == "path":
        stdout.print(str(cache.directory))
    elif args.action == "clear":
        report = cache.clear()
        stdout.print(f"removed {report.records} records and {report.studies_removed} studies from {cache.directory}")
        if report.studies_kept:
            stdout.print(f"kept {report.studies_kept} studies a running tuner is using; run `polytf cache clear` again when it has finished")
    elif args.action == "verify":
        return verify_cache(cache, args.models, args.time_limit)
    else:
        entries = cache.entries()
        invalid = sum(entry.record is None for entry in entries)
        table = Table(title=f"{len(entries)} tuning records in {cache.directory}" + (f" ({invalid} invalid, never used)" if invalid else ""))
        for column in ("kernel", "ops", "default", "tuned", "speedup", "trials", "complete"):
            table.add_column(column)
        for entry in entries:
            r = entry.record
            if r is None:
                table.add_row(entry.path.name, f"invalid: {entry.problem}", "", "", "", "", "")
                continue
            table.add_row(r.kernel, "+".join(r.ops), format_seconds(r.default_latency_s), format_seconds(r.best_latency_s), f"{r.speedup:.2f}x", str(r.trials), str(r.complete))
        stdout.print(table)
    return 0


def verify_cache(cache, models: list[str], time_limit_s: float) -> int:
    """``polytf cache verify``: one line per record, a summary; 1 if any record failed."""
    from polytf.autotune.record_verification import FAILED, verify_records

    def show(check) -> None:
        where = f"{check.path.name} ({check.kernel} of {check.model})" if check.kernel else check.path.name
        stdout.print(f"{'FAILED' if check.status == FAILED else check.status:7s} {where}: {check.detail}", markup=False, highlight=False, soft_wrap=True)

    checks = verify_records(cache, models, time_limit_s=time_limit_s, on_check=show)
    counts = {status: sum(check.status == status for check in checks) for status in ("ok", "failed", "skipped")}
    stdout.print(f"{len(checks)} records in {cache.directory}: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped", markup=False, highlight=False, soft_wrap=True)
    return 1 if counts["failed"] else 0


def command_ops(args) -> int:
    """``polytf ops``: the supported-op table; with ``--model``, each op of a model and how it runs."""
    from polytf.ops.coverage import op_rows

    if not args.model:
        table = Table(title="ops polytf supports")
        for column in ("op", "category", "run-time dtypes", "runs as"):
            table.add_column(column)
        for row in op_rows():
            how = "compiled" if row.compiled else "host (numpy reference)"
            table.add_row(row.op, row.category, ", ".join(row.dtypes), how)
        stdout.print(table)
        return 0
    return _model_coverage(args)


def _model_coverage(args) -> int:
    """Each op of a model after the graph passes: node count and compiled / host (why) /
    unsupported; ops folded away or removed by the passes are listed as such."""
    from collections import Counter

    from polytf.compiler.model_builder import prepare_model
    from polytf.errors import UnsupportedOpError
    from polytf.frontend import load_graph
    from polytf.ops import lookup
    from polytf.passes.fusion import is_compute

    original = load_graph(args.model, signature=args.signature)
    before = Counter(node.op for node in original.nodes.values())
    unsupported = {op for op in before if lookup(op) is None}
    statuses: dict[str, Counter] = {op: Counter() for op in before}
    reasons: dict[str, str] = {}
    if unsupported:
        for op in unsupported:
            statuses[op]["unsupported"] = before[op]
    else:
        try:
            prepared = prepare_model(args.model, _input_shapes(args.input), signature=args.signature)
        except UnsupportedOpError as error:
            raise SystemExit(f"error: {error}") from None
        host = {node.name: node for node in prepared.host_nodes}
        for name, node in prepared.graph.nodes.items():
            if name in host:
                statuses[node.op]["host"] += 1
                reasons.setdefault(node.op, host[name].reason)
            elif is_compute(prepared.graph, name):
                statuses.setdefault(node.op, Counter())["compiled"] += 1
            else:
                statuses.setdefault(node.op, Counter())["no code"] += 1
    table = Table(title=f"ops of {args.model}")
    for column in ("op", "nodes in the file", "after the graph passes", "note"):
        table.add_column(column)
    for op in sorted(statuses):
        counts = statuses[op]
        after = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        note = reasons.get(op, "polytf does not support this op" if op in unsupported else "")
        if not after:
            rewritten = _rewritten_ops()
            after = "rewritten" if op in rewritten else "folded or removed"
            note = note or rewritten.get(op, "")
        table.add_row(op, str(before.get(op, 0)), after, note)
    stdout.print(table)
    return 1 if unsupported else 0


def _rewritten_ops() -> dict[str, str]:
    """Ops the graph passes replace by compiled ops, with a note naming the pass."""
    from polytf.ops.coverage import rewritten_ops

    return rewritten_ops()


def command_bench(args) -> int:
    from polytf.bench.options import options_from_arguments
    from polytf.bench.runner import run_bench

    return run_bench(options_from_arguments(args), console=console, stdout=stdout)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="polytf", description="Polyhedral compiler and autotuner for frozen TensorFlow graphs (GraphDef .pb / .pbtxt).")
    parser.add_argument("--version", action="version", version=f"polytf {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def storage_argument(sub, reading_only: bool = True):
        what = "tuning records are read from" if reading_only else "Optuna studies and tuning records are kept in"
        sub.add_argument(
            "--storage",
            metavar="URL",
            help=f"postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE: the database the {what}, shared by machines "
            "(default: $POLYTF_STORAGE, else the cache directory; needs pip install 'polytf[postgresql]')",
        )

    def common(sub, inputs=True):
        sub.add_argument("model", help="frozen GraphDef (binary .pb or text .pbtxt) or SavedModel directory")
        sub.add_argument("--signature", metavar="NAME", help="SavedModel signature to compile (default serving_default)")
        sub.add_argument("--cache-dir", help="tuning-record cache (default: $POLYTF_CACHE_DIR or the user cache directory)")
        sub.add_argument("--threads", type=int, help="threads per kernel (default: $POLYTF_THREADS or all CPUs)")
        if inputs:
            sub.add_argument("--input", action="append", metavar="NAME:SHAPE", help="fix a placeholder's shape, e.g. --input x:1,784 (repeatable)")
        sub.add_argument(
            "--no-fallback",
            dest="fallback",
            action="store_false",
            help="refuse the model when a node cannot be compiled, instead of running that node's numpy reference on the host "
            "between the compiled kernels (the default; tune and show list such nodes and why)",
        )

    tune = commands.add_parser("tune", help="tune every kernel of a model and cache the winners", description="Compile a model, tune each kernel with an Optuna study (every candidate verified against numpy), and cache the best recipes.")
    common(tune)
    storage_argument(tune, reading_only=False)
    tune.add_argument("--trials", type=int, help=f"candidate schedules per kernel (default {TuningConfig.trials})")
    tune.add_argument(
        "--time-budget",
        type=_duration_argument,
        metavar="DURATION",
        help="tune for this much wall time instead of --trials per kernel, e.g. 600, 600s, 10m, 1h: trials go a few at a time to the "
        "kernels whose improvement lowers the model's latency most (Ansor's task scheduler); kernels differing only in shape "
        "warm-start from each other. Records are written as it goes and reused by the next run; with --retune every kernel "
        "starts afresh within the budget",
    )
    tune.add_argument(
        "--target",
        choices=TARGET_CHOICES,
        default="cpu",
        help="cpu (default): native code for this CPU. cuda: GPU kernels (PTX) for the current NVIDIA GPU, each candidate verified "
        "and timed with CUDA events on it; needs CuPy (install cupy-cuda12x) and a GPU. Records are per target",
    )
    tune.add_argument("--retune", action="store_true", help="ignore cached records and tune again")
    tune.add_argument("--output", action="append", metavar="NAME", help="output node (repeatable; default: the graph's sink nodes)")
    tune.add_argument("--seed", type=int, default=0, help="seed of the sampler and of the random test inputs")
    tune.add_argument(
        "--candidate-timeout",
        type=float,
        metavar="S",
        help=f"wall-clock limit of one candidate (compile, verify, time) in its worker process; a candidate over it fails (default {TuningConfig.candidate_time_limit_s:g})",
    )
    tune.set_defaults(handler=command_tune)

    run = commands.add_parser("run", help="run a model on inputs from .npy files", description="Run a model (tuned kernels from the cache, default recipes elsewhere) and write its outputs to an .npz file.")
    common(run, inputs=False)
    storage_argument(run)
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", required=True, help="an input array (repeatable); its shape fixes the placeholder's")
    run.add_argument("--output", required=True, metavar="OUT.npz", help="where to write the outputs (keyed by output node name)")
    run.add_argument("--fetch", action="append", metavar="NAME", help="output node to compute (repeatable; default: the graph's sink nodes)")
    run.add_argument(
        "--target",
        choices=TARGET_CHOICES,
        default="cpu",
        help="cpu (default) or cuda: run on the current NVIDIA GPU (CuPy; install cupy-cuda12x), with the records of polytf tune --target cuda",
    )
    run.set_defaults(handler=command_run)

    compile_ = commands.add_parser(
        "compile",
        help="compile a model ahead of time into an object file, a C header and a shared library",
        description="Write DIR/NAME.o (every kernel with its tuned recipe from the cache, else its default recipe, the weights, and "
        "an entry function NAME_run that runs the whole model), DIR/NAME.h (its C declarations, shapes and dtypes) and DIR/NAME.so "
        "when a C compiler for the target is installed. A program links NAME.o with -lgomp -lm and needs no Python, TensorFlow "
        "or polytf. --target-triple aarch64-unknown-linux-gnu cross-compiles for 64-bit Arm (NEON).",
    )
    common(compile_)
    storage_argument(compile_)
    compile_.add_argument("-o", "--output-dir", required=True, metavar="DIR", help="where to write the files (created if needed)")
    compile_.add_argument("--name", help="C prefix of the symbols and stem of the files (default: from the model's file name)")
    compile_.add_argument(
        "--target-triple",
        metavar="TRIPLE",
        help="LLVM target triple (default: this machine), e.g. aarch64-unknown-linux-gnu (or aarch64) or x86_64-unknown-linux-gnu",
    )
    compile_.add_argument("--cpu", help="LLVM CPU name, e.g. neoverse-n1, znver4, generic (default: this CPU; generic for another triple)")
    compile_.add_argument("--features", help="LLVM feature string, e.g. +neon,+sve or +avx2,+fma (default: this CPU's; the CPU's own for another triple)")
    compile_.add_argument("--output", action="append", metavar="NAME", help="output node (repeatable; default: the graph's sink nodes)")
    compile_.add_argument(
        "--embed-weights-limit-mb",
        type=float,
        default=256.0,
        metavar="MB",
        help="weights up to this size go into the object's read-only data, larger ones to DIR/NAME.weights, read by NAME_init (default 256)",
    )
    compile_.add_argument("--no-shared-library", dest="shared_library", action="store_false", help="do not link DIR/NAME.so")
    compile_.set_defaults(handler=command_compile)

    bench = commands.add_parser(
        "bench",
        help="time polytf against numpy, TensorFlow and XLA; write OUT.md/.json/.png",
        description="For each entry and thread count: write the GraphDef, tune it, load it, verify it against numpy, then time polytf, "
        "numpy, TensorFlow and TensorFlow+XLA with the same threads (baselines in a child process per thread count). "
        "An entry is a zoo model spec (NAME or NAME:BATCH, matmul:MxKxN; models: mlp, cifar_cnn, odd_matmul, conv_bias_relu, "
        "conv3x3_bias_relu_56, matmul, mobilenet_v2, transformer_encoder, resnet50, inception_v3, densenet121, efficientnet_b0) "
        "or a .pb/.pbtxt file. Without entries: the suite (default issue3). The report also gives the untuned model's time, "
        "GFLOP/s as a percentage of the measured float32 peak, and a per-kernel profile of each model.",
    )
    bench.add_argument("entries", nargs="*", metavar="ENTRY", help="zoo model spec (e.g. matmul:1024x1024x1024, cifar_cnn:32) or GraphDef file")
    bench.add_argument(
        "--suite", help="run a named suite (issue3, issue4, models, smoke, cuda); default issue3 when no ENTRY is given (cuda with --target cuda)"
    )
    bench.add_argument(
        "--target",
        choices=TARGET_CHOICES,
        default="cpu",
        help="cpu (default): polytf against numpy, TensorFlow and XLA on this CPU. cuda: polytf's GPU kernels on the current NVIDIA GPU "
        "(CuPy; install cupy-cuda12x): ms, TFLOP/s and %% of the GPU's FP32 peak, against cuBLAS (cupy.matmul) for a MatMul and cuDNN "
        "(PyTorch, when installed) for a convolution, FP32 with TF32 off; outputs checked against TensorFlow on the CPU",
    )
    bench.add_argument("--threads", metavar="N[,N...]", help="thread counts for every entry, e.g. 1,2 (default: each entry's own, else 2)")
    bench.add_argument("--trials", type=int, help="trials per kernel (default 20; with --target cuda, 0 measures the default recipes untuned)")
    bench.add_argument("--rounds", type=int, default=5, help="timing rounds per system; the figure is the median of round medians (default 5)")
    bench.add_argument("--repeats", type=int, default=30, help="timed calls per round (default 30)")
    bench.add_argument("--warmup", type=int, default=3, help="untimed calls before each round (default 3)")
    bench.add_argument(
        "--out", help="report path without suffix: writes OUT.md, OUT.json, OUT.png (default results/bench, results/bench_cuda with --target cuda)"
    )
    bench.add_argument("--cache-dir", help="tuning-record cache to use and reuse (default: a fresh temporary cache, so every kernel is tuned)")
    bench.add_argument(
        "--no-tensorflow",
        action="store_true",
        help="do not time TensorFlow and XLA (with --target cuda: check polytf's outputs against numpy's references, not TensorFlow's)",
    )
    bench.add_argument("--seed", type=int, default=0, help="seed of the tuner and of the random inputs")
    bench.add_argument(
        "--time-budget", metavar="DURATION", help="wall-clock budget of tuning each model, e.g. 600, 600s, 10m, 1h (default: none)"
    )
    bench.set_defaults(handler=command_bench)

    show = commands.add_parser(
        "show",
        help="show graph passes, kernels, schedule trees, loop ASTs and code",
        description="Without --kernel: the model's kernels. With --passes: what each graph pass (pruning, identity removal, constant folding, "
        "arithmetic simplification, batch-norm folding, common-subexpression elimination) changed, as node and edge counts before "
        "and after, round by round, with totals. With --kernel: its Scop, recipe, schedule tree and loop AST (add --llvm / --assembly). "
        "With --profile: each kernel's median time, FLOPs, GFLOP/s and % of the machine's measured float32 peak, and the whole call.",
    )
    common(show)
    storage_argument(show)
    show.add_argument("--passes", action="store_true", help="print node and edge counts before and after each graph pass, and the totals")
    show.add_argument("--kernel", help="kernel name (as listed without --kernel)")
    show.add_argument("--recipe", help="JSON recipe file (default: the cached record, else the default recipe)")
    show.add_argument("--llvm", action="store_true", help="also print the optimised LLVM IR")
    show.add_argument("--assembly", action="store_true", help="also print the host assembly (PTX with --target cuda)")
    show.add_argument(
        "--target",
        choices=TARGET_CHOICES,
        default="cpu",
        help="cpu (default) or cuda: the kernel's GPU schedule, launches, NVPTX IR and PTX (no GPU needed: PTX for --arch)",
    )
    show.add_argument("--arch", metavar="sm_XY", help="with --target cuda and no GPU: the compute capability to emit PTX for (default sm_80)")
    show.add_argument(
        "--profile",
        action="store_true",
        help="time each kernel of the model (cached recipes, seeded random inputs) and print its GFLOP/s and %% of the measured float32 peak",
    )
    show.add_argument("--repeats", type=int, default=10, help="timed calls per kernel and of the whole call with --profile (default 10)")
    show.set_defaults(handler=command_show)

    cache = commands.add_parser(
        "cache",
        help="list, locate, clear or verify tuning records",
        description="Tuning records: list them (invalid ones with the reason; the default), print the cache directory, clear the "
        "records and the studies no running tuner uses, or verify them (recompile each in a worker process and check it against "
        "the numpy reference; exit status 1 if one fails).",
    )
    cache_directory_help = "cache directory (default: $POLYTF_CACHE_DIR or the user cache directory)"
    cache.add_argument("--cache-dir", help=cache_directory_help)
    actions = cache.add_subparsers(dest="action", metavar="ACTION")
    for name, text in (("list", "list every record (the default)"), ("path", "print the cache directory"), ("clear", "delete the records and idle studies")):
        # SUPPRESS: an action's --cache-dir only overrides the one given before the action when it is given
        actions.add_parser(name, help=text).add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_directory_help)
    verify = actions.add_parser("verify", help="recompile every record in a worker process and check it against numpy")
    verify.add_argument("models", nargs="*", metavar="MODEL", help="only the records tuned from these model files")
    verify.add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_directory_help)
    verify.add_argument(
        "--time-limit", type=float, default=VERIFY_TIME_LIMIT_S, metavar="S", help=f"seconds per record's worker process (default {VERIFY_TIME_LIMIT_S:g})"
    )
    cache.set_defaults(handler=command_cache)

    ops = commands.add_parser(
        "ops",
        help="list the TensorFlow ops polytf supports, or how each op of a model runs",
        description="Without --model: every supported op (category, run-time dtypes, compiled or host). With --model: each op of "
        "the model, its node count in the file and after the graph passes, and whether it is compiled, runs on the host "
        "(and why) or is unsupported; exit status 1 when some op is unsupported.",
    )
    ops.add_argument("--model", help="a frozen GraphDef or SavedModel directory to report on")
    ops.add_argument("--signature", metavar="NAME", help="SavedModel signature (default serving_default)")
    ops.add_argument("--input", action="append", metavar="NAME:SHAPE", help="fix a placeholder's shape (repeatable)")
    ops.set_defaults(handler=command_ops)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with polytf_warnings_as_lines():
            return args.handler(args)
    except PolytfError as error:
        console.print(f"[bold red]error:[/] {error}", markup=True, highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130


@contextlib.contextmanager
def polytf_warnings_as_lines():
    """While active, a PolytfWarning (e.g. an ignored tuning record) prints as one
    ``warning: <message>`` line on stderr instead of Python's file:line format."""
    import warnings

    from rich.markup import escape

    from polytf.errors import PolytfWarning

    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, PolytfWarning):
            console.print(f"[bold yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
