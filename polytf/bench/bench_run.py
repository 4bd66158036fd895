"""BenchRun: what one ``polytf bench`` run asks of the backend it measures.

The runner (:func:`polytf.bench.runner.run_bench`) is the same for every backend: check
the settings, plan the rows, write the report after each row, keep the finished rows on
Ctrl-C, record a model polytf cannot build as a failed row. What differs is a
:class:`BenchRun`: :class:`~polytf.bench.cpu_bench.CpuBenchRun` (polytf against numpy,
TensorFlow and XLA on this CPU, per thread count) or
:class:`~polytf.bench.cuda_bench.CudaBenchRun` (polytf's GPU kernels against cuBLAS and
cuDNN on one device), made for the :class:`~polytf.compiler.backends.Backend` chosen once
from ``--target``. Both build a row's models through the backend (the model with default
recipes; :meth:`BenchRun.tuned_model`: the model's kernels tuned into the run's cache by
:func:`polytf.autotune.model_tuner.tune_model`, the model built from those records), and
state their settings the same way (:meth:`BenchRun.result`).
"""

from __future__ import annotations

import abc
import importlib.util
import time
from pathlib import Path
from typing import Any, ClassVar

from polytf.autotune import model_tuner
from polytf.bench.display import BenchDisplay, tuning_progress
from polytf.bench.machine import describe_machine
from polytf.bench.options import BenchOptions
from polytf.bench.suite import Workload, resolve_entries
from polytf.compiler.backends import Backend
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.preparation import PreparedModel
from polytf.compiler.recorded_recipes import stored_recipes
from polytf.config import CodegenConfig
from polytf.errors import PolytfError
from polytf.runtime.model import Model

__all__ = ["BenchRun"]


class BenchRun(abc.ABC):
    """One run of the bench on one backend.

    Args:
        options: the run's settings.
        backend: the backend measured (its target, thread count, device).
        workdir: the run's work folder (models, inputs, the fresh cache, logs).

    Attributes:
        cache_dir: the tuning-record cache of the run (``--cache-dir``, else a fresh one).
        tensorflow: TensorFlow is used (asked for and installed).
    """

    #: the suite of a run without entries; the report of a run without ``--out``
    default_suite: ClassVar[str]
    default_out: ClassVar[Path]
    #: whether the run measures each entry on thread counts of its own (``--threads``)
    thread_counts: ClassVar[bool] = True
    #: the fewest ``--trials`` a run may ask for
    minimum_trials: ClassVar[int] = 1
    #: what :meth:`check` says of rounds, repeats, warm-up calls and trials out of range
    settings_message: ClassVar[str] = "--rounds, --repeats and --trials must be at least 1 (--warmup at least 0)"
    #: the prefix of the run's temporary work folder
    folder_prefix: ClassVar[str]
    #: the words that choose the backend in the command line that repeats a run
    target_words: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: BenchOptions, backend: Backend, workdir: Path) -> None:
        self.options = options
        self.backend = backend
        self.workdir = workdir
        self.cache_dir = options.cache_dir or workdir / "cache"
        self.tensorflow = options.tensorflow and importlib.util.find_spec("tensorflow") is not None

    @classmethod
    def check(cls, options: BenchOptions, console: Any) -> None:
        """Refuse bad settings and missing packages before anything runs (a setting the
        backend ignores is said on ``console``).

        Raises:
            DependencyMissingError: a package the run needs is missing.
            PolytfError: rounds, repeats, warm-up calls, trials or the time budget out of range.
        """
        if options.threads and not cls.thread_counts:
            console.print(f"[yellow]--threads is ignored with --target {options.target}[/]")
        if options.rounds < 1 or options.repeats < 1 or options.warmup < 0 or (options.trials is not None and options.trials < cls.minimum_trials):
            raise PolytfError(cls.settings_message)
        if options.time_budget_s is not None and not options.time_budget_s > 0:
            raise PolytfError(f"--time-budget must be more than 0 seconds, not {options.time_budget_s:g}")

    @classmethod
    def plan(cls, options: BenchOptions) -> list[tuple[Workload, tuple[int, ...]]]:
        """The entries of the run and their thread counts (:func:`~polytf.bench.suite.resolve_entries`).

        Raises:
            PolytfError: an unknown entry or suite.
        """
        return resolve_entries(options.entries, options.suite or (None if options.entries else cls.default_suite), options.threads)

    @classmethod
    def rows(cls, plan: list[tuple[Workload, tuple[int, ...]]]) -> list[tuple[Workload, int]]:
        """The rows of the run: ``(workload, threads)`` in order (each thread count of an
        entry on the CPU)."""
        return [(workload, threads) for workload, counts in plan for threads in counts]

    def result(self, plan: list[tuple[Workload, tuple[int, ...]]]) -> dict[str, Any]:
        """The report's dict before any row (:mod:`polytf.bench.report`): what the backend adds
        first (:meth:`header`: the device), the machine, the settings and the notes."""
        options = self.options
        settings = {
            "entries": [w.public_spec for w, _ in plan],
            **self.plan_settings(plan),
            "trials_per_kernel": self.trials_setting(),
            "rounds": options.rounds,
            "repeats": options.repeats,
            "min_round_s": options.min_round_s,
            "warmup": options.warmup,
            "cache": "no tuning" if options.trials == 0 else "records reused from --cache-dir" if options.cache_dir else "fresh cache: every kernel tuned in this run",
            "seed": options.seed,
            "time_budget_s": options.time_budget_s,
        }
        return {**self.header(), "machine": describe_machine(), "settings": settings, "rows": [], "notes": self.notes(), "interrupted": False, "failure": None}

    def header(self) -> dict[str, Any]:
        """What the report names before the machine (default: nothing)."""
        return {}

    def plan_settings(self, plan: list[tuple[Workload, tuple[int, ...]]]) -> dict[str, Any]:
        """Settings of the plan beyond its entries (default: none)."""
        return {}

    @abc.abstractmethod
    def trials_setting(self) -> int | None:
        """The trials per kernel the report states."""

    @abc.abstractmethod
    def notes(self) -> list[str]:
        """The report's notes before any row."""

    def start(self, result: dict[str, Any], display: BenchDisplay) -> None:
        """What the run measures once, before its rows (default: nothing)."""

    @abc.abstractmethod
    def describe_row(self, workload: Workload, threads: int) -> str:
        """The row's name on the progress bar."""

    @abc.abstractmethod
    def measure(self, workload: Workload, threads: int, display: BenchDisplay, result: dict[str, Any]) -> dict[str, Any]:
        """One row of the report.

        Raises:
            WrongResultError: a polytf result differs from the reference (stops the run).
        """

    @abc.abstractmethod
    def failed_row(self, workload: Workload, threads: int, message: str) -> dict[str, Any]:
        """The row of a model polytf could not build, tune or time."""

    def close(self) -> None:
        """Stop what the run started (baseline processes)."""

    def tuned_model(self, path: Path, prepared: PreparedModel, backend: Backend, trials: int, display: BenchDisplay, label: str) -> tuple[Model, Any, float]:
        """Tune the model at ``path`` into the run's cache on ``backend`` (with ``--time-budget``
        when given) and build ``prepared`` from the records: ``(model, the tuning's
        report, its wall time in seconds)``.

        Raises:
            KeyboardInterrupt: the tuning was interrupted.
        """
        budget = {"time_budget_s": self.options.time_budget_s} if self.options.time_budget_s is not None else {}
        options = BuildOptions(threads=backend.threads, target=backend.name, cache_dir=self.cache_dir)
        started = time.perf_counter()
        report = model_tuner.tune_model(
            path,
            options,
            trials=trials,
            seed=self.options.seed,
            progress=tuning_progress(display, label),
            # measure_model (default): the final choice is timed inside the model and a tuned recipe
            # that loses there is replaced by its default, so the bench's tuned row is what load gives
            **budget,
        )
        tune_wall_s = time.perf_counter() - started
        if report.interrupted:
            raise KeyboardInterrupt
        display.step(f"{label}: building the tuned model from its records")
        cached = stored_recipes(prepared, options, backend.target, backend.threads, CodegenConfig())
        return backend.build_model(prepared, cached=cached), report, tune_wall_s
