"""``polytf bench``: one runner for every backend.

For the backend chosen once from ``--target`` (:func:`polytf.compiler.backends.select_backend`),
the runner checks the settings before anything runs, plans the rows (entries, and on the CPU
their thread counts), then measures one row after the other with the backend's
:class:`~polytf.bench.bench_run.BenchRun` (:class:`~polytf.bench.cpu_bench.CpuBenchRun`:
polytf against numpy, TensorFlow, XLA, OpenVINO and ONNX Runtime on this CPU; :class:`~polytf.bench.cuda_bench.CudaBenchRun`:
polytf's GPU kernels against cuBLAS and cuDNN), and writes the report
(:mod:`polytf.bench.report`: ``OUT.md``, ``OUT.json``, ``OUT.png``) after every finished row,
so Ctrl-C keeps the rows already measured. A row whose model polytf cannot build or tune is
recorded as failed, with the error, and the run goes on; a polytf result that differs from
its reference stops the run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from polytf.bench.accuracy import WrongResultError
from polytf.bench.bench_run import BenchRun
from polytf.bench.cpu_bench import CpuBenchRun
from polytf.bench.cuda_bench import CudaBenchRun
from polytf.bench.display import BenchDisplay
from polytf.bench.options import BenchOptions
from polytf.bench.report import conclude_run, write_report
from polytf.bench.suite import Workload
from polytf.compiler.backends import Backend, select_backend
from polytf.errors import DependencyMissingError, PolytfError
from polytf.output_paths import writable_folder

__all__ = ["BENCH_RUNS", "run_bench"]

#: the backend's name -> how the bench measures it
BENCH_RUNS: dict[str, type[BenchRun]] = {"cpu": CpuBenchRun, "cuda": CudaBenchRun}


def run_bench(options: BenchOptions, console: Console | None = None, stdout: Console | None = None, *, backend: Backend | None = None) -> int:
    """Run the benchmark and write ``OUT.md``, ``OUT.json`` and ``OUT.png``.

    Args:
        options: the run's settings (``options.target`` chooses the backend).
        console, stdout: where progress and messages, and the summary, go.
        backend: the backend to measure (default: :func:`~polytf.compiler.backends.select_backend`
            of ``options.target``; tests pass an offline CUDA target on the emulated device).

    Returns:
        0; 1 when some rows failed (a model polytf cannot build or tune: each is a row with its
        error, and the other rows ran); 130 when interrupted (finished rows are written).

    Raises:
        DependencyMissingError: a package the run needs is missing (matplotlib, threadpoolctl:
            ``polytf[bench]``), ``--target cuda`` without CuPy or a GPU, or a zoo entry needs
            TensorFlow.
        PolytfError: an unknown entry or suite, bad settings, a report folder that cannot be
            written (ArgumentError), ``CUPY_TF32`` set (before anything runs), or a polytf result that differs from its reference
            (WrongResultError, after writing finished rows).
    """
    console = console or Console(stderr=True)
    stdout = stdout or Console()
    backend = backend or select_backend(options.target)
    kind = BENCH_RUNS[backend.name]
    kind.check(options, console)
    plan = kind.plan(options)
    rows = kind.rows(plan)
    out = Path(options.out or kind.default_out)
    writable_folder(out.parent, "--out")  # the report's folder, before hours of tuning and timing
    code = 0
    with tempfile.TemporaryDirectory(prefix=kind.folder_prefix) as folder:
        run = kind(options, backend, Path(folder))
        result = run.result(plan)
        result["settings"]["command"] = _command(options, plan, kind)
        try:
            with BenchDisplay(console, len(rows)) as display:
                run.start(result, display)
                for index, (workload, threads) in enumerate(rows):
                    display.row(f"[{index + 1}/{len(rows)}] {run.describe_row(workload, threads)}")
                    result["rows"].append(_row_or_failure(run, workload, threads, display, result))
                    write_report(result, out)
                    display.row_done()
        except KeyboardInterrupt:
            result["interrupted"] = True
            code = 130
        except PolytfError as error:
            result["failure"] = str(error)
            write_report(result, out)
            raise
        finally:
            run.close()
    return conclude_run(result, out, code, console, stdout)


def _row_or_failure(run: BenchRun, workload: Workload, threads: int, display: BenchDisplay, result: dict) -> dict[str, Any]:
    """The measured row, or a failed row naming the error when polytf cannot build, tune or time
    the model (a result that differs from its reference, a missing dependency and Ctrl-C still
    stop the run)."""
    try:
        return run.measure(workload, threads, display, result)
    except (WrongResultError, DependencyMissingError):
        raise
    except Exception as error:  # noqa: BLE001 - one model polytf cannot compile must not end the run
        message = str(error) if isinstance(error, PolytfError) else f"{type(error).__name__}: {error}"
        return run.failed_row(workload, threads, message.strip() or type(error).__name__)


def _command(options: BenchOptions, plan: list, kind: type[BenchRun]) -> str:
    """The ``polytf bench`` command line that repeats this run (entries spelled out)."""
    words = ["polytf", "bench", *kind.target_words]
    if options.suite or not options.entries:
        words += ["--suite", options.suite or kind.default_suite]
    words += [w.public_spec for w, _ in plan[len(plan) - len(options.entries) :]]
    if options.threads and kind.thread_counts:
        words += ["--threads", ",".join(map(str, options.threads))]
    if options.trials is not None:
        words += ["--trials", str(options.trials)]
    if options.time_budget_s is not None:
        words += ["--time-budget", f"{options.time_budget_s:g}s"]
    words += ["--rounds", str(options.rounds), "--repeats", str(options.repeats), "--warmup", str(options.warmup)]
    if options.target == "cpu":
        words += ["--min-round-time", f"{options.min_round_s:g}"]
    if not options.tensorflow:
        words.append("--no-tensorflow")
    return " ".join(words)
