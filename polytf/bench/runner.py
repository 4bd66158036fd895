"""``polytf bench``: for every entry and thread count, in one run, write the GraphDef, build it
untuned (default recipes, an empty cache), tune it with polytf, load it, verify both against
numpy (and against TensorFlow when it runs), then time polytf tuned and untuned, numpy,
TensorFlow and XLA with the same thread count, profile the tuned model kernel by kernel, and
write the report after every finished row (so Ctrl-C keeps the rows already measured).

The machine's float32 peak is measured once per thread count at the start
(:func:`polytf.bench.peak.measure_fp32_peak`); GFLOP/s figures are also given as a percentage
of it. A row whose model polytf cannot build or tune is recorded as failed, with the error, and
the run goes on; a polytf result that differs from numpy stops the run.

polytf is timed in this process; the baselines in a child process per thread count
(:class:`polytf.bench.baselines.BaselineWorker`). Rounds alternate between the systems: a
polytf round (``model(**inputs)``), a polytf untuned round, a polytf kernels-only round, then
one round of each baseline; every figure is the median of the round medians.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from polytf.bench.accuracy import WrongResultError, check_outputs
from polytf.bench.report import columns, conclude_run
from polytf.bench.suite import DEFAULT_SUITE, Workload, resolve_entries
from polytf.errors import DependencyMissingError, PolytfError
from polytf.runtime.sample_inputs import sample_inputs

__all__ = ["BenchOptions", "BenchDisplay", "run_bench", "tuning_progress"]


@dataclass(frozen=True)
class BenchOptions:
    """Settings of one ``polytf bench`` run.

    Attributes:
        entries: entry specs (see :mod:`polytf.bench.suite`); empty: the suite.
        suite: suite name (default ``issue3`` when there are no entries).
        threads: thread counts overriding every entry's own; ``None``: the entries' own.
        trials: trials per kernel (``None``: polytf's default, 20).
        rounds: timing rounds per system.
        repeats: timed calls per round.
        warmup: untimed calls before each round.
        out: report path without suffix (``OUT.md``, ``OUT.json``, ``OUT.png``).
        cache_dir: tuning-record cache to use and reuse; ``None``: a fresh temporary one, so
            every kernel is tuned in this run and the tuning time is real.
        tensorflow: time TensorFlow and XLA too (when TensorFlow is installed).
        seed: seed of the tuner and of the random inputs.
        time_budget_s: wall-clock budget of tuning one model, seconds (``--time-budget``);
            ``None``: no budget (the trials alone bound it).
    """

    entries: tuple[str, ...] = ()
    suite: str | None = None
    threads: tuple[int, ...] | None = None
    trials: int | None = None
    rounds: int = 5
    repeats: int = 30
    warmup: int = 3
    out: Path = Path("results/bench")
    cache_dir: Path | None = None
    tensorflow: bool = True
    seed: int = 0
    time_budget_s: float | None = None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class BenchDisplay:
    """Two progress bars: rows done, and the current phase (trials of a kernel, rounds)."""

    def __init__(self, console: Console, total: int) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        )
        self.rows = self.progress.add_task("bench", total=total)
        self.phase = self.progress.add_task("", total=None)

    def __enter__(self) -> BenchDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def step(self, description: str, total: int | None = None) -> None:
        self.progress.update(self.phase, description=f"  {description}", total=total, completed=0)

    def advance(self) -> None:
        self.progress.advance(self.phase)


def tuning_progress(display: BenchDisplay, label: str) -> Any:
    from polytf.autotune.model_tuner import TuningProgress

    class Progress(TuningProgress):
        def kernel_started(self, kernel, trials):
            display.step(f"{label}: tuning {kernel.scop.name} ({'+'.join(op for _, op in kernel.scop.ops)})", trials)

        def trial_done(self, kernel):
            return lambda *args: display.advance()

        def message(self, text):
            display.step(f"{label}: {text}")

    return Progress()


def _speedups(systems: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Baseline time / polytf time per baseline, and ``best_baseline`` (the fastest one's)."""
    from polytf.bench.baselines import SYSTEMS

    polytf_s = systems["polytf"]["median_s"]
    baselines = {s: systems[s]["median_s"] for s in SYSTEMS if "median_s" in systems.get(s, {})}
    speedup = {s: t / polytf_s for s, t in baselines.items()}
    if baselines:
        speedup["best_baseline"] = min(baselines.values()) / polytf_s
    return speedup


def _ratio_to(systems: dict[str, dict[str, Any]], baseline: str) -> dict[str, float]:
    """polytf time / ``baseline`` time, tuned and untuned (below 1: polytf faster); empty when
    the baseline has no time."""
    base_s = systems.get(baseline, {}).get("median_s")
    if not base_s:
        return {}
    pairs = (("tuned", "polytf"), ("untuned", "polytf_untuned"))
    return {name: systems[s]["median_s"] / base_s for name, s in pairs if systems.get(s, {}).get("median_s")}


def convolution_summary(profile: dict[str, Any]) -> dict[str, Any]:
    """Median % of peak of a profile's Conv2D kernels by filter size (``"1x1"``, ``"3x3"``, ...)
    and how many kernels each median is of; depthwise convolutions apart, under ``"depthwise"``.

    Args:
        profile: :meth:`polytf.runtime.cpu.profile.ModelProfile.to_dict`.
    """
    groups: dict[str, list[float]] = {}
    for kernel in profile.get("kernels", []):
        ops = {op for _, op in kernel["ops"]}
        if kernel.get("percent_of_peak") is None or not kernel.get("filter_size"):
            continue
        if "Conv2D" in ops:
            key = "x".join(map(str, kernel["filter_size"]))
        elif "DepthwiseConv2dNative" in ops:
            key = "depthwise"
        else:
            continue
        groups.setdefault(key, []).append(kernel["percent_of_peak"])
    return {key: {"median_percent_of_peak": statistics.median(values), "kernels": len(values)} for key, values in groups.items()}


@dataclass(frozen=True)
class _Prepared:
    """An entry ready to run: its GraphDef, random inputs (arrays and .npy files) and numpy's
    outputs on them."""

    path: Path
    arrays: dict[str, Any]
    files: dict[str, str]
    expected: dict[str, Any]


class _Run:
    """State of one bench run: options, work folder, baseline processes, the result dict."""

    def __init__(self, options: BenchOptions, console: Console, workdir: Path) -> None:
        self.options = options
        self.console = console
        self.workdir = workdir
        self.cache_dir = options.cache_dir or workdir / "cache"
        self.tensorflow = options.tensorflow and importlib.util.find_spec("tensorflow") is not None
        self.workers: dict[int, Any] = {}
        self.models: dict[str, _Prepared] = {}

    def worker(self, threads: int, result: dict) -> Any:
        from polytf.bench.baselines import BaselineWorker

        if threads not in self.workers:
            worker = BaselineWorker(threads, self.tensorflow, self.workdir / f"baselines_{threads}.log")
            self.workers[threads] = worker
            result["machine"].setdefault("baseline_blas", {})[str(threads)] = worker.info["blas"]
            if worker.info.get("tensorflow"):
                result["machine"]["tensorflow"] = worker.info["tensorflow"]
            elif worker.info.get("tensorflow_error") and not any("TensorFlow" in n for n in result["notes"]):
                result["notes"].append(f"TensorFlow and XLA not timed: {worker.info['tensorflow_error']}")
        return self.workers[threads]

    def prepare(self, workload: Workload, display: BenchDisplay) -> _Prepared:
        """Write the GraphDef, its random inputs (also as .npy) and numpy's outputs, once per entry."""
        import numpy as np

        from polytf.bench.baselines import NumpyGraph
        from polytf.ops.blas_threads import single_threaded_blas

        if workload.spec not in self.models:
            display.step(f"{workload.label}: writing the GraphDef and the numpy reference")
            path = workload.write(self.workdir / "models")
            graph = NumpyGraph(path)
            inputs = sample_inputs(graph.input_types, self.options.seed)
            files = {}
            for index, (name, value) in enumerate(inputs.items()):
                files[name] = str(self.workdir / "models" / f"entry{len(self.models)}_input{index}.npy")
                Path(files[name]).parent.mkdir(parents=True, exist_ok=True)
                np.save(files[name], value)
            with single_threaded_blas():  # no spinning BLAS workers beside polytf's threads
                expected = graph(**inputs)
            self.models[workload.spec] = _Prepared(path, inputs, files, expected)
        return self.models[workload.spec]

    def tune(self, path: Path, trials: int, threads: int, display: BenchDisplay, label: str) -> Any:
        """Tune the model into the run's cache (with ``--time-budget`` when given)."""
        from polytf.autotune.model_tuner import tune_model
        from polytf.compiler.build_options import BuildOptions

        budget = {"time_budget_s": self.options.time_budget_s} if self.options.time_budget_s is not None else {}
        return tune_model(
            path,
            options=BuildOptions(cache_dir=self.cache_dir, threads=threads),
            trials=trials,
            seed=self.options.seed,
            progress=tuning_progress(display, label),
            measure_model=False,  # the bench times the whole model itself, in alternating rounds
            **budget,
        )

    def measure(self, workload: Workload, threads: int, display: BenchDisplay, result: dict) -> dict[str, Any]:
        """One row: build untuned, tune, load, verify, alternate timing rounds, profile."""
        import numpy as np

        import polytf
        from polytf.bench.baselines import max_abs_error
        from polytf.config import TuningConfig
        from polytf.poly.flops import contraction_flops
        from polytf.runtime.cpu.profile import gflops as gflops_of
        from polytf.runtime.cpu.profile import percent_of_peak, profile_model

        options = self.options
        label = f"{workload.label} ({threads} thread{'s' if threads > 1 else ''})"
        row_number = len(result["rows"])
        prepared = self.prepare(workload, display)
        path, arrays = prepared.path, prepared.arrays
        display.step(f"{label}: building the untuned model (default recipes) and verifying it against numpy")
        untuned = polytf.load(path, cache_dir=tempfile.mkdtemp(prefix="untuned-", dir=self.workdir), threads=threads)
        untuned_error = check_outputs(untuned(**arrays), prepared.expected, f"{label}, untuned")
        flops = sum(contraction_flops(kernel.scop) for kernel in untuned.kernels) or None
        trials = options.trials or TuningConfig().trials
        started = time.perf_counter()
        report = self.tune(path, trials, threads, display, label)
        tune_wall_s = time.perf_counter() - started
        if report.interrupted:
            raise KeyboardInterrupt
        display.step(f"{label}: loading and verifying against numpy")
        model = polytf.load(path, cache_dir=self.cache_dir, threads=threads)
        max_error = check_outputs(model(**arrays), prepared.expected, label)

        worker = self.worker(threads, result)
        tensorflow_file = self.workdir / "models" / f"row{row_number}_tensorflow.npz"
        request = {
            "op": "load",
            "model": str(path),
            "inputs": prepared.files,
            "outputs": list(model.output_names),
            "warmup": options.warmup,
            "outputs_file": str(tensorflow_file),
        }
        loaded = worker.request(request)
        errors_vs_tensorflow = None
        if tensorflow_file.is_file():
            with np.load(tensorflow_file) as stored:
                tensorflow_outputs = {name: stored[name] for name in stored.files}
            errors_vs_tensorflow = {
                "tuned": max_abs_error(model(**arrays), tensorflow_outputs),
                "untuned": max_abs_error(untuned(**arrays), tensorflow_outputs),
            }
        display.step(f"{label}: timing", options.rounds)
        rounds = self.time_rounds(model, untuned, arrays, worker, loaded["systems"], display)
        systems: dict[str, dict[str, Any]] = {
            s: {"median_s": statistics.median(r), "round_medians_s": r} for s, r in rounds.items()
        }
        for system, error in loaded["errors"].items():
            systems[system] = {"error": error}
        peak = result["machine"].get("fp32_peak", {}).get(str(threads), {}).get("gflops")
        display.step(f"{label}: profiling each kernel")
        profile = profile_model(model, arrays, repeats=options.repeats, peak_gflops=peak, warmup=options.warmup).to_dict()
        gflops = {s: gflops_of(flops, data["median_s"]) for s, data in systems.items() if flops and "median_s" in data}
        return {
            "entry": workload.label,
            "spec": workload.public_spec,
            "threads": threads,
            "inputs": {name: list(value.shape) for name, value in arrays.items()},
            "outputs": list(model.output_names),
            "flops": flops,
            "kernels": len(model.kernels),
            "tuning": {
                "wall_s": tune_wall_s,
                "elapsed_s": report.elapsed_s,
                "trials_per_kernel": trials,
                "time_budget_s": options.time_budget_s,
                "new_trials": report.new_trials,
                "failed_trials": sum(k.failed_trials for k in report.kernels),
                "statuses": sorted({k.status for k in report.kernels}),
                "model_default_latency_s": _finite(report.model_default_latency_s),
                "model_tuned_latency_s": _finite(report.model_tuned_latency_s),
                "recipes": {k.kernel: k.recipe for k in report.kernels},
            },
            "max_abs_error": max_error,
            "untuned_max_abs_error": untuned_error,
            "max_abs_error_vs_tensorflow": errors_vs_tensorflow,
            "baseline_max_abs_error_vs_numpy": loaded["max_abs_error_vs_numpy"],
            "systems": systems,
            "gflops": gflops,
            "peak_gflops": peak,
            "percent_of_peak": {s: percent_of_peak(value, peak) for s, value in gflops.items() if peak and s.startswith("polytf")},
            "speedup": _speedups(systems),
            "ratio_to_tensorflow": _ratio_to(systems, "tensorflow"),
            "profile": profile,
            "convolutions": convolution_summary(profile),
        }

    def time_rounds(
        self, model: Any, untuned: Any, arrays: dict, worker: Any, baselines: list[str], display: BenchDisplay
    ) -> dict[str, list[float]]:
        """Per system, the median of each round, seconds: a polytf round (``model(**arrays)``), an
        untuned round (the same call of the model built with default recipes), a kernels-only
        round (inputs bound once), then one round of each baseline in the child."""
        from polytf.bench.baselines import SETTLE_S, round_median_s

        repeats, warmup = self.options.repeats, self.options.warmup
        rounds: dict[str, list[float]] = {"polytf": [], "polytf_untuned": [], "polytf_kernels": [], **{s: [] for s in baselines}}
        for _ in range(self.options.rounds):
            time.sleep(SETTLE_S)
            rounds["polytf"].append(round_median_s(lambda: model(**arrays), repeats, warmup))
            time.sleep(SETTLE_S)
            rounds["polytf_untuned"].append(round_median_s(lambda: untuned(**arrays), repeats, warmup))
            time.sleep(SETTLE_S)
            rounds["polytf_kernels"].append(statistics.median(model.latency_s(arrays, repeats, warmup)))
            answer = worker.request({"op": "round", "repeats": repeats, "warmup": warmup})
            for system, median_s in answer["median_s"].items():
                rounds[system].append(median_s)
            display.advance()
        return rounds

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()


def _summary_table(rows: list[dict[str, Any]]) -> Table:
    """The report's table for the terminal."""
    table = Table(title="polytf bench (ratios: baseline time / polytf time, above 1: polytf faster)")
    chosen = columns(rows)
    for title, _ in chosen:
        table.add_column(title, justify="left" if title == "entry" else "right")
    for row in rows:
        table.add_row(*(cell(row).replace("**", "") for _, cell in chosen))  # Markdown bold: plain here
    return table


def _command(options: BenchOptions, plan: list) -> str:
    """The ``polytf bench`` command line that repeats this run (entries spelled out)."""
    words = ["polytf", "bench"]
    if options.suite or not options.entries:
        words += ["--suite", options.suite or DEFAULT_SUITE]
    words += [w.public_spec for w, _ in plan[len(plan) - len(options.entries) :]]
    if options.threads:
        words += ["--threads", ",".join(map(str, options.threads))]
    if options.trials:
        words += ["--trials", str(options.trials)]
    if options.time_budget_s is not None:
        words += ["--time-budget", f"{options.time_budget_s:g}s"]
    words += ["--rounds", str(options.rounds), "--repeats", str(options.repeats), "--warmup", str(options.warmup)]
    if not options.tensorflow:
        words.append("--no-tensorflow")
    return " ".join(words)


def run_bench(options: BenchOptions, console: Console | None = None, stdout: Console | None = None) -> int:
    """Run the benchmark and write ``OUT.md``, ``OUT.json`` and ``OUT.png``.

    Returns:
        0; 1 when some rows failed (a model polytf cannot build or tune: each is a row with its
        error, and the other rows ran); 130 when interrupted (finished rows are written).

    Raises:
        DependencyMissingError: matplotlib or threadpoolctl is not installed (``polytf[bench]``),
            or a zoo entry needs TensorFlow.
        PolytfError: an unknown entry or suite, bad settings (before anything runs), or a
            polytf result that differs from numpy (WrongResultError, after writing finished rows).
    """
    from polytf.bench.machine import describe_machine
    from polytf.bench.report import write_report
    from polytf.config import TuningConfig

    console = console or Console(stderr=True)
    stdout = stdout or Console()
    plan = resolve_entries(options.entries, options.suite, options.threads)
    missing = [name for name in ("matplotlib", "threadpoolctl") if importlib.util.find_spec(name) is None]
    if missing:
        raise DependencyMissingError(f"polytf bench needs {' and '.join(missing)}: pip install 'polytf[bench]'")
    if options.rounds < 1 or options.repeats < 1 or options.warmup < 0 or (options.trials is not None and options.trials < 1):
        raise PolytfError("--rounds, --repeats and --trials must be at least 1 (--warmup at least 0)")
    if options.time_budget_s is not None and not options.time_budget_s > 0:
        raise PolytfError(f"--time-budget must be more than 0 seconds, not {options.time_budget_s:g}")
    steps = [(workload, threads) for workload, counts in plan for threads in counts]
    result: dict[str, Any] = {
        "machine": describe_machine(),
        "settings": {
            "entries": [w.public_spec for w, _ in plan],
            "threads": sorted({t for _, t in steps}),
            "trials_per_kernel": options.trials or TuningConfig().trials,
            "rounds": options.rounds,
            "repeats": options.repeats,
            "warmup": options.warmup,
            "cache": "records reused from --cache-dir" if options.cache_dir else "fresh cache: every kernel tuned in this run",
            "seed": options.seed,
            "time_budget_s": options.time_budget_s,
            "command": _command(options, plan),
        },
        "rows": [],
        "notes": [],
        "interrupted": False,
        "failure": None,
    }
    result["machine"]["tensorflow"] = None
    if not options.tensorflow:
        result["notes"].append("TensorFlow and XLA not timed: --no-tensorflow")
    elif importlib.util.find_spec("tensorflow") is None:
        result["notes"].append("TensorFlow and XLA not timed: TensorFlow is not installed (pip install 'polytf[tensorflow]')")
    result["notes"].append(
        "numpy runs the op registry's reference code: np.matmul (BLAS) for MatMul; Conv2D as float64 np.tensordot per filter tap."
    )
    code = 0
    with tempfile.TemporaryDirectory(prefix="polytf-bench-") as folder:
        run = _Run(options, console, Path(folder))
        try:
            with BenchDisplay(console, len(steps)) as display:
                _measure_peaks(result, sorted({t for _, t in steps}), display)
                for index, (workload, threads) in enumerate(steps):
                    display.progress.update(
                        display.rows, description=f"[{index + 1}/{len(steps)}] {workload.label}, {threads} thread(s)"
                    )
                    result["rows"].append(_row_or_failure(run, workload, threads, display, result))
                    write_report(result, options.out)
                    display.progress.advance(display.rows)
        except KeyboardInterrupt:
            result["interrupted"] = True
            code = 130
        except PolytfError as error:
            result["failure"] = str(error)
            write_report(result, options.out)
            raise
        finally:
            run.close()
    return conclude_run(result, options.out, code, _summary_table, lambda row: f"{row['entry']} ({row['threads']} threads)", console, stdout)


def _measure_peaks(result: dict[str, Any], thread_counts: list[int], display: BenchDisplay) -> None:
    """The float32 peak for each thread count of the run, once, into ``result["machine"]["fp32_peak"]``
    (thread count as text -> :class:`polytf.bench.peak.PeakMeasurement` fields); a note instead
    when it cannot be measured."""
    from polytf.bench.peak import measure_fp32_peak

    peaks = result["machine"].setdefault("fp32_peak", {})
    for threads in thread_counts:
        display.step(f"measuring the float32 FMA peak on {threads} thread(s)")
        try:
            peaks[str(threads)] = measure_fp32_peak(threads).to_dict()
        except PolytfError as error:
            result["notes"].append(f"float32 peak not measured ({threads} threads): {error}")


def _row_or_failure(run: _Run, workload: Workload, threads: int, display: BenchDisplay, result: dict) -> dict[str, Any]:
    """The measured row, or a failed row naming the error when polytf cannot build, tune or time
    the model (a result that differs from numpy, a missing dependency and Ctrl-C still stop the run)."""
    try:
        return run.measure(workload, threads, display, result)
    except (WrongResultError, DependencyMissingError):
        raise
    except Exception as error:  # noqa: BLE001 - one model polytf cannot compile must not end the run
        message = str(error) if isinstance(error, PolytfError) else f"{type(error).__name__}: {error}"
        return {"entry": workload.label, "spec": workload.public_spec, "threads": threads, "error": message.strip() or type(error).__name__}


def options_from_arguments(args: Any) -> BenchOptions:
    """:class:`BenchOptions` from the ``polytf bench`` command line (see :mod:`polytf.cli`)."""
    from polytf.bench.suite import parse_threads
    from polytf.durations import parse_duration

    return BenchOptions(
        entries=tuple(args.entries or ()),
        suite=args.suite,
        threads=parse_threads(args.threads) if args.threads else None,
        trials=args.trials,
        rounds=args.rounds,
        repeats=args.repeats,
        warmup=args.warmup,
        out=Path(args.out or "results/bench"),
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        tensorflow=not args.no_tensorflow,
        seed=args.seed,
        time_budget_s=parse_duration(args.time_budget) if getattr(args, "time_budget", None) else None,
    )
