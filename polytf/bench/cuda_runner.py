"""``polytf bench --target cuda``: polytf's GPU kernels against cuBLAS and cuDNN on one GPU.

For every entry (default: the ``cuda`` suite: MatMul 4096³, a 3×3 64→64 convolution at
56×56 batch 32, ResNet50 and the Transformer encoder at batch 32), in one run:

1. write the GraphDef and its seeded random inputs, and compute the reference outputs with
   TensorFlow on the CPU (numpy's references without TensorFlow);
2. build the model with default GPU recipes (:class:`~polytf.runtime.cuda.cuda_model.CudaModel`),
   tune it for the GPU (``polytf tune --target cuda``: candidates verified and timed with
   CUDA events in a worker process), build it again from the records; check both against
   the reference with the end-to-end tolerance (:mod:`polytf.bench.accuracy`): a wrong
   result stops the run;
3. time, in rounds that alternate between systems (the figure is the median of the round
   medians): the tuned model's kernels (CUDA events from the first kernel's start to the
   last one's end, inputs already on the device), the untuned model's, a whole call
   ``model(**device_arrays)`` by the wall clock (with the runtime's Python between
   launches), and the library baseline (:mod:`polytf.bench.cuda_baselines`);
4. time each kernel of the tuned model alone.

Throughput is TFLOP/s of the contractions (2 FLOPs per multiply-add executed) and a
percentage of the device's FP32 peak without tensor cores
(:attr:`polytf.targets.cuda.CudaDevice.fp32_peak_flops`: SMs × FP32 lanes × 2 × clock).
The report (``OUT.md``, ``OUT.json``, ``OUT.png``) goes through
:func:`polytf.bench.report.write_report` after every row, so Ctrl-C keeps the rows done.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from polytf.bench.accuracy import WrongResultError, check_outputs
from polytf.bench.suite import Workload, resolve_entries
from polytf.errors import DependencyMissingError, PolytfError

__all__ = ["CudaBenchOptions", "run_cuda_bench", "cuda_options_from_arguments", "DEFAULT_CUDA_SUITE"]

#: The suite of a ``--target cuda`` run without entries.
DEFAULT_CUDA_SUITE = "cuda"


@dataclass(frozen=True)
class CudaBenchOptions:
    """Settings of one ``polytf bench --target cuda`` run.

    Attributes:
        entries: entry specs (:mod:`polytf.bench.suite`); empty: the suite.
        suite: suite name (default ``cuda`` when there are no entries).
        trials: trials per kernel (``None``: polytf's default, 20; 0: no tuning, the default
            recipes are measured as "tuned" too).
        rounds, repeats, warmup: timing rounds per system, timed calls per round, untimed
            calls before each round.
        out: report path without suffix.
        cache_dir: tuning-record cache to use and reuse (``None``: a fresh temporary one).
        tensorflow: reference outputs from TensorFlow on the CPU (else numpy's references).
        seed: seed of the tuner and of the random inputs.
        time_budget_s: wall-clock budget of tuning one model, seconds (``None``: none).
    """

    entries: tuple[str, ...] = ()
    suite: str | None = None
    trials: int | None = None
    rounds: int = 5
    repeats: int = 30
    warmup: int = 3
    out: Path = Path("results/bench_cuda")
    cache_dir: Path | None = None
    tensorflow: bool = True
    seed: int = 0
    time_budget_s: float | None = None


def _median_of(values: list[float]) -> float:
    return float(statistics.median(values))


def _throughput(flops: int | None, seconds: float | None, peak_flops: float | None) -> tuple[float | None, float | None]:
    """(TFLOP/s, % of peak) of ``flops`` in ``seconds``; None where a figure is missing."""
    if not flops or not seconds or seconds <= 0:
        return None, None
    rate = flops / seconds
    return rate / 1e12, (100.0 * rate / peak_flops if peak_flops else None)


class _CudaRun:
    """State of one GPU bench run: options, work folder, device, target, backend."""

    def __init__(self, options: CudaBenchOptions, workdir: Path, device: Any, target: Any, backend: Any, baselines: bool) -> None:
        self.options = options
        self.workdir = workdir
        self.device = device
        self.target = target
        self.backend = backend
        self.baselines = baselines
        self.cache_dir = options.cache_dir or workdir / "cache"
        self.peak_flops = float(device.fp32_peak_flops) or None
        self.tensorflow = options.tensorflow and importlib.util.find_spec("tensorflow") is not None

    def reference(self, path: Path, inputs: dict, output_names: tuple[str, ...]) -> tuple[dict, str]:
        """The reference outputs on ``inputs``, and what computed them."""
        if self.tensorflow:
            from polytf.model_zoo import run_graphdef_with_tensorflow

            return run_graphdef_with_tensorflow(path, inputs, list(output_names)), "TensorFlow (CPU)"
        from polytf.bench.baselines import NumpyGraph
        from polytf.ops.blas_threads import single_threaded_blas

        with single_threaded_blas():
            return NumpyGraph(path)(**inputs), "numpy"

    def tune(self, path: Path, trials: int, display: Any, label: str) -> Any:
        from polytf.autotune.model_tuner import tune_model
        from polytf.bench.runner import tuning_progress
        from polytf.compiler.build_options import BuildOptions

        budget = {"time_budget_s": self.options.time_budget_s} if self.options.time_budget_s is not None else {}
        return tune_model(
            path, options=BuildOptions(cache_dir=self.cache_dir, target="cuda"), trials=trials, seed=self.options.seed,
            progress=tuning_progress(display, label), measure_model=False, **budget,
        )

    def measure(self, workload: Workload, display: Any) -> dict[str, Any]:
        """One row (module docstring)."""
        from polytf.bench.cuda_baselines import gpu_baseline
        from polytf.compiler.preparation import prepare_model
        from polytf.compiler.recorded_recipes import cached_recipes
        from polytf.compiler.target_selection import GPU_THREADS
        from polytf.config import CodegenConfig, TuningConfig
        from polytf.poly.flops import contraction_flops
        from polytf.runtime.cuda.cuda_model import build_cuda_model
        from polytf.runtime.sample_inputs import sample_inputs
        from polytf.storage.cache import KernelCache

        options = self.options
        label = f"{workload.label} (cuda)"
        display.step(f"{label}: writing the GraphDef")
        path = workload.write(self.workdir / "models")
        prepared = prepare_model(path)
        display.step(f"{label}: building the untuned model (default GPU recipes)")
        untuned = build_cuda_model(prepared, target=self.target, backend=self.backend)
        inputs = sample_inputs(untuned.input_types, options.seed)
        display.step(f"{label}: reference outputs")
        expected, reference = self.reference(path, inputs, untuned.output_names)
        untuned_error = check_outputs(untuned(**inputs), expected, f"{label}, untuned", reference)
        trials = TuningConfig().trials if options.trials is None else options.trials
        tuning: dict[str, Any] = {"trials_per_kernel": trials, "time_budget_s": options.time_budget_s, "new_trials": 0, "failed_trials": 0, "wall_s": 0.0}
        tuned = untuned
        if trials > 0:
            started = time.perf_counter()
            report = self.tune(path, trials, display, label)
            if report.interrupted:
                raise KeyboardInterrupt
            tuning.update(
                wall_s=time.perf_counter() - started, new_trials=report.new_trials, failed_trials=sum(k.failed_trials for k in report.kernels),
                statuses=sorted({k.status for k in report.kernels}), recipes={k.kernel: k.recipe for k in report.kernels},
            )
            display.step(f"{label}: building the tuned model from its records")
            cached = cached_recipes(prepared, KernelCache(self.cache_dir), self.target, GPU_THREADS, CodegenConfig())
            tuned = build_cuda_model(prepared, target=self.target, backend=self.backend, cached=cached)
        max_error = check_outputs(tuned(**inputs), expected, label, reference)

        baseline, baseline_note = gpu_baseline(prepared.graph) if self.baselines else (None, "baselines not run")
        device_inputs = {name: self.backend.upload(value) for name, value in inputs.items()}
        display.step(f"{label}: timing", options.rounds)
        rounds = self.time_rounds(tuned, untuned, device_inputs, baseline, display)
        systems: dict[str, dict[str, Any]] = {s: {"median_s": _median_of(r), "round_medians_s": r} for s, r in rounds.items()}
        if baseline is not None:
            systems[baseline.system]["label"] = baseline.label
        flops = sum(contraction_flops(kernel.scop) for kernel in tuned.kernels) or None
        tflops, percent = {}, {}
        for system, data in systems.items():
            tflops[system], percent[system] = _throughput(flops, data["median_s"], self.peak_flops)
        polytf_s = systems["polytf"]["median_s"]
        speedup = {}
        if baseline is not None and polytf_s > 0:
            speedup[baseline.system] = systems[baseline.system]["median_s"] / polytf_s
            speedup["best_baseline"] = speedup[baseline.system]
        display.step(f"{label}: timing each kernel")
        return {
            "entry": workload.label,
            "spec": workload.public_spec,
            "target": "cuda",
            "threads": GPU_THREADS,
            "inputs": {name: list(value.shape) for name, value in inputs.items()},
            "outputs": list(tuned.output_names),
            "flops": flops,
            "kernels": len(tuned.kernels),
            "host_nodes": [str(node) for node in tuned.host_nodes],
            "tuning": tuning,
            "reference": reference,
            "max_abs_error": max_error,
            "untuned_max_abs_error": untuned_error,
            "baseline": baseline_note,
            "systems": systems,
            "tflops": tflops,
            "percent_of_peak": percent,
            "speedup": speedup,
            "kernel_profile": self.kernel_profile(tuned, device_inputs),
        }

    def time_rounds(self, tuned: Any, untuned: Any, device_inputs: dict, baseline: Any, display: Any) -> dict[str, list[float]]:
        """Per system, the median of each round, seconds (module docstring, step 3)."""
        from polytf.bench.baselines import SETTLE_S, round_median_s

        repeats, warmup = self.options.repeats, self.options.warmup
        rounds: dict[str, list[float]] = {"polytf": [], "polytf_untuned": [], "polytf_call": []}
        if baseline is not None:
            rounds[baseline.system] = []

        def whole_call() -> None:
            tuned(**device_inputs)
            self.backend.synchronize()

        for _ in range(self.options.rounds):
            rounds["polytf"].append(_median_of(tuned.latency_s(device_inputs, repeats, warmup)))
            rounds["polytf_untuned"].append(_median_of(untuned.latency_s(device_inputs, repeats, warmup)))
            rounds["polytf_call"].append(round_median_s(whole_call, repeats, warmup))
            if baseline is not None:
                time.sleep(SETTLE_S)
                rounds[baseline.system].append(baseline.median_s(repeats, warmup))
            display.advance()
        return rounds

    def kernel_profile(self, model: Any, device_inputs: dict) -> list[dict[str, Any]]:
        """Each kernel of ``model`` alone: median device seconds, TFLOP/s, % of peak, recipe."""
        from polytf.poly.flops import contraction_flops

        rows = []
        for kernel, latencies in model.kernel_latency_s(device_inputs, repeats=max(3, self.options.repeats // 3), warmup=1):
            median_s = _median_of(latencies)
            flops = contraction_flops(kernel.scop) or None
            tflops, percent = _throughput(flops, median_s, self.peak_flops)
            rows.append({
                "kernel": kernel.scop.name, "ops": [list(pair) for pair in kernel.scop.ops], "recipe": kernel.recipe.describe(),
                "grid": list(kernel.launch.grid), "block": list(kernel.launch.block), "shared_memory_bytes": kernel.launch.shared_memory_bytes,
                "median_s": median_s, "flops": flops, "tflops": tflops, "percent_of_peak": percent,
            })
        return rows


def _device_summary(device: Any, backend: Any) -> dict[str, Any]:
    summary = dataclasses.asdict(device) if dataclasses.is_dataclass(device) else {"name": str(device)}
    summary["fp32_peak_tflops"] = float(device.fp32_peak_flops) / 1e12
    summary["backend"] = backend.describe()
    return summary


def _command(options: CudaBenchOptions, plan: list) -> str:
    """The command line that repeats this run."""
    words = ["polytf", "bench", "--target", "cuda"]
    if options.suite or not options.entries:
        words += ["--suite", options.suite or DEFAULT_CUDA_SUITE]
    words += [w.public_spec for w, _ in plan[len(plan) - len(options.entries) :]]
    if options.trials is not None:
        words += ["--trials", str(options.trials)]
    if options.time_budget_s is not None:
        words += ["--time-budget", f"{options.time_budget_s:g}s"]
    words += ["--rounds", str(options.rounds), "--repeats", str(options.repeats), "--warmup", str(options.warmup)]
    if not options.tensorflow:
        words.append("--no-tensorflow")
    return " ".join(words)


def _summary_table(rows: list[dict[str, Any]]) -> Table:
    from polytf.bench.cuda_report import columns

    table = Table(title="polytf bench --target cuda (baseline / polytf above 1: polytf faster)")
    chosen = columns(rows)
    for title, _ in chosen:
        table.add_column(title, justify="left" if title == "entry" else "right")
    for row in rows:
        table.add_row(*(cell(row).replace("**", "") for _, cell in chosen))
    return table


def run_cuda_bench(
    options: CudaBenchOptions,
    console: Console | None = None,
    stdout: Console | None = None,
    *,
    device: Any = None,
    target: Any = None,
    backend: Any = None,
    baselines: bool = True,
) -> int:
    """Run the GPU benchmark and write ``OUT.md``, ``OUT.json`` and ``OUT.png``.

    Args:
        device, target, backend: the GPU (:class:`~polytf.targets.cuda.CudaDevice`), its
            target and its device backend; default the current GPU through CuPy (tests pass
            an offline target and the emulated device).
        baselines: time cuBLAS / cuDNN (needs CuPy / PyTorch on a GPU).

    Returns:
        0; 1 when some rows failed (each is a row with its error); 130 when interrupted.

    Raises:
        DependencyMissingError: no CuPy or no GPU (checked before anything runs), or no
            matplotlib.
        PolytfError: an unknown entry or suite, bad settings, ``CUPY_TF32`` set, or a polytf
            result that differs from its reference (after writing finished rows).
    """
    from polytf.bench.cuda_baselines import check_fp32_settings
    from polytf.bench.machine import describe_machine
    from polytf.bench.report import conclude_run, write_report
    from polytf.bench.runner import BenchDisplay

    console = console or Console(stderr=True)
    stdout = stdout or Console()
    if device is None or target is None or backend is None:
        from polytf.compiler.target_selection import cuda_emulated, device_backend, select_target

        target = target or select_target("cuda")  # raises DependencyMissingError without CuPy or a GPU
        device = device or target.device
        backend = backend or device_backend()
        baselines = baselines and not cuda_emulated()
    if baselines:
        check_fp32_settings()
    if importlib.util.find_spec("matplotlib") is None:
        raise DependencyMissingError("polytf bench needs matplotlib for its chart: pip install 'polytf[bench]'")
    if options.rounds < 1 or options.repeats < 1 or options.warmup < 0 or (options.trials is not None and options.trials < 0):
        raise PolytfError("--rounds and --repeats must be at least 1, --warmup and --trials at least 0")
    if options.time_budget_s is not None and not options.time_budget_s > 0:
        raise PolytfError(f"--time-budget must be more than 0 seconds, not {options.time_budget_s:g}")
    plan = resolve_entries(options.entries, options.suite or (None if options.entries else DEFAULT_CUDA_SUITE), None)
    result: dict[str, Any] = {
        "target": "cuda",
        "device": _device_summary(device, backend),
        "machine": describe_machine(),
        "settings": {
            "entries": [w.public_spec for w, _ in plan],
            "trials_per_kernel": options.trials,
            "rounds": options.rounds,
            "repeats": options.repeats,
            "warmup": options.warmup,
            "cache": "no tuning" if options.trials == 0 else "records reused from --cache-dir" if options.cache_dir else "fresh cache: every kernel tuned in this run",
            "seed": options.seed,
            "time_budget_s": options.time_budget_s,
            "command": _command(options, plan),
        },
        "rows": [],
        "notes": [],
        "interrupted": False,
        "failure": None,
    }
    code = 0
    with tempfile.TemporaryDirectory(prefix="polytf-bench-cuda-") as folder:
        run = _CudaRun(options, Path(folder), device, target, backend, baselines)
        if not run.tensorflow:
            result["notes"].append("reference outputs from numpy's references (TensorFlow " + ("not used: --no-tensorflow)" if not options.tensorflow else "is not installed)"))
        try:
            with BenchDisplay(console, len(plan)) as display:
                for index, (workload, _) in enumerate(plan):
                    display.progress.update(display.rows, description=f"[{index + 1}/{len(plan)}] {workload.label} (cuda)")
                    result["rows"].append(_row_or_failure(run, workload, display))
                    write_report(result, options.out)
                    display.progress.advance(display.rows)
        except KeyboardInterrupt:
            result["interrupted"] = True
            code = 130
        except PolytfError as error:
            result["failure"] = str(error)
            write_report(result, options.out)
            raise
    return conclude_run(result, options.out, code, _summary_table, lambda row: row["entry"], console, stdout)


def _row_or_failure(run: _CudaRun, workload: Workload, display: Any) -> dict[str, Any]:
    """The measured row, or a failed row naming the error (a wrong result, a missing
    dependency and Ctrl-C still stop the run)."""
    try:
        return run.measure(workload, display)
    except (WrongResultError, DependencyMissingError):
        raise
    except Exception as error:  # noqa: BLE001 - one model polytf cannot compile must not end the run
        message = str(error) if isinstance(error, PolytfError) else f"{type(error).__name__}: {error}"
        return {"entry": workload.label, "spec": workload.public_spec, "target": "cuda", "threads": 1, "error": message.strip() or type(error).__name__}


def cuda_options_from_arguments(args: Any) -> CudaBenchOptions:
    """:class:`CudaBenchOptions` from the ``polytf bench --target cuda`` command line."""
    from polytf.durations import parse_duration

    return CudaBenchOptions(
        entries=tuple(args.entries or ()),
        suite=args.suite,
        trials=args.trials,
        rounds=args.rounds,
        repeats=args.repeats,
        warmup=args.warmup,
        out=Path(args.out or "results/bench_cuda"),
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        tensorflow=not args.no_tensorflow,
        seed=args.seed,
        time_budget_s=parse_duration(args.time_budget) if getattr(args, "time_budget", None) else None,
    )
