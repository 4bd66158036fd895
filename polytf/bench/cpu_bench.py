"""``polytf bench`` on this CPU: for every entry and thread count, write the GraphDef, build it
untuned (default recipes), tune it with polytf, build it from the records, verify both against
numpy (and against TensorFlow when it runs), then time polytf tuned and untuned, numpy,
TensorFlow and XLA with the same thread count, and profile the tuned model kernel by kernel.

The machine's float32 peak is measured once per thread count at the start
(:func:`polytf.bench.peak.measure_fp32_peak`); GFLOP/s figures are also given as a percentage
of it. polytf is timed in this process; the baselines in a child process per thread count
(:class:`polytf.bench.baselines.BaselineWorker`). Rounds alternate between the systems: a
polytf round (``model(**inputs)``), a polytf untuned round, a polytf kernels-only round, then
one round of each baseline; every figure is the median of the round medians.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from polytf.bench.accuracy import check_outputs
from polytf.bench.baselines import SETTLE_S, SYSTEMS, BaselineWorker, NumpyGraph, max_abs_error, round_median_s
from polytf.bench.bench_run import BenchRun
from polytf.bench.display import BenchDisplay
from polytf.bench.engines import ratio_to_best_engine
from polytf.bench.options import BenchOptions
from polytf.bench.peak import measure_fp32_peak
from polytf.bench.suite import DEFAULT_SUITE, Workload
from polytf.compiler.backends import Backend
from polytf.compiler.preparation import prepare_model
from polytf.config import TuningConfig
from polytf.errors import DependencyMissingError, PolytfError
from polytf.ops.blas_threads import single_threaded_blas
from polytf.poly.flops import contraction_flops
from polytf.runtime.cpu.profile import DEPTHWISE, executed_flops, percent_of_peak, profile_model
from polytf.runtime.cpu.profile import gflops as gflops_of
from polytf.runtime.machine_load import check_machine_load
from polytf.runtime.model import Model
from polytf.runtime.sample_inputs import sample_inputs

__all__ = ["MAX_CALLS_PER_ROUND", "CpuBenchRun", "calls_per_round", "convolution_summary"]

#: the most timed calls of one system in one round, however fast the row's model
MAX_CALLS_PER_ROUND = 1000


def calls_per_round(latency_s: float, repeats: int, min_round_s: float) -> int:
    """Timed calls of each system per round of a row whose polytf call takes ``latency_s``
    seconds: ``repeats``, or as many as fill ``min_round_s`` seconds of polytf calls when that
    is more (at most :data:`MAX_CALLS_PER_ROUND`). A sub-millisecond model timed 10 times per
    round gives a median of a few calls, which one burst of a shared machine's noise moves by
    10-30%; a few hundred calls do not.

    Args:
        latency_s: one polytf call, seconds (a short probe before the rounds).
        repeats: ``--repeats``, the least number of calls.
        min_round_s: ``--min-round-time``, seconds; 0: ``repeats``.
    """
    if min_round_s <= 0 or not latency_s > 0 or not math.isfinite(latency_s):
        return repeats
    return max(repeats, min(MAX_CALLS_PER_ROUND, math.ceil(min_round_s / latency_s)))


def _finite(value: float | None) -> float | None:
    return value if value is not None and np.isfinite(value) else None


def _speedups(systems: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Baseline time / polytf time per baseline, and ``best_baseline`` (the fastest one's)."""
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
    """Median % of peak of a profile's convolution kernels by filter size (``"1x1"``, ``"3x3"``,
    ...) and how many kernels each median is of; depthwise convolutions apart, under
    ``"depthwise"`` (:attr:`~polytf.runtime.cpu.profile.KernelProfile.convolution`).

    Args:
        profile: :meth:`polytf.runtime.cpu.profile.ModelProfile.to_dict`.
    """
    groups: dict[str, list[float]] = {}
    for kernel in profile.get("kernels", []):
        if kernel.get("percent_of_peak") is None or not kernel.get("filter_size") or not kernel.get("convolution"):
            continue
        key = DEPTHWISE if kernel["convolution"] == DEPTHWISE else "x".join(map(str, kernel["filter_size"]))
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


def _executed(model: Model) -> int:
    """FLOPs the contractions of ``model``'s kernels execute under their recipes."""
    return sum(executed_flops(kernel.scop, kernel.recipe) for kernel in model.kernels)


class CpuBenchRun(BenchRun):
    """A bench run on this CPU (module docstring): one row per entry and thread count."""

    default_suite: ClassVar[str] = DEFAULT_SUITE
    default_out: ClassVar[Path] = Path("results/bench")
    folder_prefix: ClassVar[str] = "polytf-bench-"

    def __init__(self, options: BenchOptions, backend: Backend, workdir: Path) -> None:
        super().__init__(options, backend, workdir)
        self.workers: dict[int, BaselineWorker] = {}
        self.models_of: dict[str, _Prepared] = {}
        self.busy_noted = False  # a busy machine is said once per run

    @classmethod
    def check(cls, options: BenchOptions, console: Any) -> None:
        missing = [name for name in ("matplotlib", "threadpoolctl") if importlib.util.find_spec(name) is None]
        if missing:
            raise DependencyMissingError(f"polytf bench needs {' and '.join(missing)}: pip install 'polytf[bench]'")
        super().check(options, console)

    def result(self, plan: list[tuple[Workload, tuple[int, ...]]]) -> dict[str, Any]:
        result = super().result(plan)
        result["machine"]["tensorflow"] = None  # the baseline process says which one it timed
        return result

    def plan_settings(self, plan: list[tuple[Workload, tuple[int, ...]]]) -> dict[str, Any]:
        return {"threads": sorted({t for _, counts in plan for t in counts})}

    def trials_setting(self) -> int:
        return self.options.trials or TuningConfig().trials

    def notes(self) -> list[str]:
        notes = []
        if not self.options.tensorflow:
            notes.append("TensorFlow and XLA not timed: --no-tensorflow")
        elif not self.tensorflow:
            notes.append("TensorFlow and XLA not timed: TensorFlow is not installed (pip install 'polytf[tensorflow]')")
        return [*notes, "numpy runs the op registry's reference code: np.matmul (BLAS) for MatMul; Conv2D as float64 np.tensordot per filter tap."]

    def start(self, result: dict[str, Any], display: BenchDisplay) -> None:
        """The float32 peak for each thread count of the run, once, into ``result["machine"]["fp32_peak"]``
        (thread count as text -> :class:`polytf.bench.peak.PeakMeasurement` fields); a note instead
        when it cannot be measured."""
        peaks = result["machine"].setdefault("fp32_peak", {})
        for threads in result["settings"]["threads"]:
            display.step(f"measuring the float32 FMA peak on {threads} thread(s)")
            try:
                peaks[str(threads)] = measure_fp32_peak(threads).to_dict()
            except PolytfError as error:
                result["notes"].append(f"float32 peak not measured ({threads} threads): {error}")

    def describe_row(self, workload: Workload, threads: int) -> str:
        return f"{workload.label}, {threads} thread(s)"

    def failed_row(self, workload: Workload, threads: int, message: str) -> dict[str, Any]:
        return {"entry": workload.label, "spec": workload.public_spec, "threads": threads, "error": message}

    def worker(self, threads: int, result: dict) -> BaselineWorker:
        """The baseline process of ``threads`` threads (started once)."""
        if threads not in self.workers:
            worker = BaselineWorker(threads, self.tensorflow, self.workdir / f"baselines_{threads}.log")
            self.workers[threads] = worker
            result["machine"].setdefault("baseline_blas", {})[str(threads)] = worker.info["blas"]
            result["machine"]["engines"] = worker.info.get("engines", {})
            if worker.info.get("tensorflow"):
                result["machine"]["tensorflow"] = worker.info["tensorflow"]
            elif worker.info.get("tensorflow_error") and not any("TensorFlow" in n for n in result["notes"]):
                result["notes"].append(f"TensorFlow and XLA not timed: {worker.info['tensorflow_error']}")
        return self.workers[threads]

    def prepare(self, workload: Workload, display: BenchDisplay) -> _Prepared:
        """Write the GraphDef, its random inputs (also as .npy) and numpy's outputs, once per entry."""
        if workload.spec not in self.models_of:
            display.step(f"{workload.label}: writing the GraphDef and the numpy reference")
            path = workload.write(self.workdir / "models")
            graph = NumpyGraph(path)
            inputs = sample_inputs(graph.input_types, self.options.seed)
            files = {}
            for index, (name, value) in enumerate(inputs.items()):
                files[name] = str(self.workdir / "models" / f"entry{len(self.models_of)}_input{index}.npy")
                Path(files[name]).parent.mkdir(parents=True, exist_ok=True)
                np.save(files[name], value)
            with single_threaded_blas():  # no spinning BLAS workers beside polytf's threads
                expected = graph(**inputs)
            self.models_of[workload.spec] = _Prepared(path, inputs, files, expected)
        return self.models_of[workload.spec]

    def measure(self, workload: Workload, threads: int, display: BenchDisplay, result: dict[str, Any]) -> dict[str, Any]:
        """One row: build untuned, tune, build tuned, verify, alternate timing rounds, profile."""
        options = self.options
        label = f"{workload.label} ({threads} thread{'s' if threads > 1 else ''})"
        row_number = len(result["rows"])
        prepared = self.prepare(workload, display)
        path, arrays = prepared.path, prepared.arrays
        backend = self.backend.with_threads(threads)
        display.step(f"{label}: building the untuned model (default recipes) and verifying it against numpy")
        graph = prepare_model(path)
        untuned = backend.build_model(graph)
        untuned_error = check_outputs(untuned(**arrays), prepared.expected, f"{label}, untuned")
        flops = sum(contraction_flops(kernel.scop) for kernel in untuned.kernels) or None
        trials = options.trials or TuningConfig().trials
        model, report, tune_wall_s = self.tuned_model(path, graph, backend, trials, display, label)
        if model.recipes == untuned.recipes:
            # no tuned recipe was kept (each lost inside the model, or tuning changed nothing): the
            # tuned model is the untuned one, so one model is timed for both rows, and a difference
            # between two loaded copies of the same code (their buffers placed differently, a few
            # percent on a shared machine) is not reported as the effect of tuning
            model = untuned
        display.step(f"{label}: verifying against numpy")
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
        self.check_machine_load(threads, result)
        display.step(f"{label}: timing", options.rounds)
        calls = calls_per_round(round_median_s(lambda: model(**arrays), 3, 1), options.repeats, options.min_round_s)
        rounds = self.time_rounds(model, untuned, arrays, worker, loaded["systems"], display, calls)
        systems: dict[str, dict[str, Any]] = {s: {"median_s": statistics.median(r), "round_medians_s": r} for s, r in rounds.items()}
        for system, error in loaded["errors"].items():
            systems[system] = {"error": error}
        peak = result["machine"].get("fp32_peak", {}).get(str(threads), {}).get("gflops")
        display.step(f"{label}: profiling each kernel")
        profile = profile_model(model, arrays, repeats=options.repeats, peak_gflops=peak, warmup=options.warmup).to_dict()
        # polytf's GFLOP/s (and % of peak) count what its kernels execute: a Winograd kernel's
        # batched GEMM, not the convolution it replaces, whose FLOPs could exceed the peak
        tuned_flops = _executed(model)
        executed = {"polytf": tuned_flops, "polytf_kernels": tuned_flops, "polytf_untuned": tuned_flops if untuned is model else _executed(untuned)}
        gflops = {s: gflops_of(executed.get(s, flops), data["median_s"]) for s, data in systems.items() if flops and "median_s" in data}
        return {
            "entry": workload.label,
            "spec": workload.public_spec,
            "threads": threads,
            "inputs": {name: list(value.shape) for name, value in arrays.items()},
            "outputs": list(model.output_names),
            "flops": flops,
            "executed_flops": executed,
            "kernels": len(model.kernels),
            "calls_per_round": calls,
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
            "tuned_is_untuned": model is untuned,
            "max_abs_error": max_error,
            "untuned_max_abs_error": untuned_error,
            "max_abs_error_vs_tensorflow": errors_vs_tensorflow,
            "baseline_max_abs_error_vs_numpy": loaded["max_abs_error_vs_numpy"],
            "baseline_max_abs_error_vs_tensorflow": loaded.get("max_abs_error_vs_tensorflow", {}),
            "systems": systems,
            "gflops": gflops,
            "peak_gflops": peak,
            "percent_of_peak": {s: percent_of_peak(value, peak) for s, value in gflops.items() if peak and s.startswith("polytf")},
            "speedup": _speedups(systems),
            "ratio_to_tensorflow": _ratio_to(systems, "tensorflow"),
            "ratio_to_best_engine": ratio_to_best_engine(systems),
            "profile": profile,
            "convolutions": convolution_summary(profile),
        }

    def check_machine_load(self, threads: int, result: dict[str, Any]) -> None:
        """Before a row's timing: when other processes keep the cores too busy for ``threads``
        threads, say so once (a BusyMachineWarning) and in the report's notes."""
        if self.busy_noted:
            return
        load = check_machine_load(threads, "timing the systems")
        if load is not None and load.is_busy(threads):
            self.busy_noted = True
            result["notes"].append(f"Timings unreliable: {load.message(threads, 'timing the systems')}.")

    def time_rounds(
        self, model: Model, untuned: Model, arrays: dict, worker: BaselineWorker, baselines: list[str], display: BenchDisplay, repeats: int | None = None
    ) -> dict[str, list[float]]:
        """Per system, the median of each round, seconds: a polytf round (``model(**arrays)``), an
        untuned round (the same call of the model built with default recipes; none when ``untuned``
        is ``model``: its rounds are the tuned ones), a kernels-only round (inputs bound once),
        then one round of each baseline in the child. A round is ``repeats`` timed calls of one
        system (default ``--repeats``; :func:`calls_per_round` for a fast model)."""
        repeats = repeats or self.options.repeats
        warmup = self.options.warmup
        rounds: dict[str, list[float]] = {"polytf": [], "polytf_untuned": [], "polytf_kernels": [], **{s: [] for s in baselines}}
        for _ in range(self.options.rounds):
            time.sleep(SETTLE_S)
            rounds["polytf"].append(round_median_s(lambda: model(**arrays), repeats, warmup))
            if untuned is model:
                rounds["polytf_untuned"].append(rounds["polytf"][-1])
            else:
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
