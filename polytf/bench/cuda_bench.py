"""``polytf bench --target cuda``: polytf's GPU kernels against cuBLAS and cuDNN on one GPU.

For every entry (default: the ``cuda`` suite: MatMul 4096³, a 3×3 64→64 convolution at
56×56 batch 32, ResNet50 and the Transformer encoder at batch 32), in one run:

1. write the GraphDef and its seeded random inputs, and compute the reference outputs with
   TensorFlow on the CPU (numpy's references without TensorFlow);
2. build the model with default GPU recipes (:class:`~polytf.runtime.cuda.model.CudaModel`),
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
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import time
from pathlib import Path
from typing import Any, ClassVar

from polytf.bench.accuracy import check_outputs
from polytf.bench.baselines import SETTLE_S, NumpyGraph, round_median_s
from polytf.bench.bench_run import BenchRun
from polytf.bench.cuda_baselines import LibraryBaseline, check_fp32_settings, library_baseline
from polytf.bench.display import BenchDisplay
from polytf.bench.options import BenchOptions
from polytf.bench.suite import Workload
from polytf.compiler.backends import Backend
from polytf.compiler.preparation import prepare_model
from polytf.config import TuningConfig
from polytf.errors import DependencyMissingError
from polytf.model_zoo import run_graphdef_with_tensorflow
from polytf.ops.blas_threads import single_threaded_blas
from polytf.poly.flops import contraction_flops
from polytf.runtime.cuda.backend import CupyBackend
from polytf.runtime.model import Model
from polytf.runtime.sample_inputs import sample_inputs

__all__ = ["CudaBenchRun"]


def _median_of(values: list[float]) -> float:
    return float(statistics.median(values))


def _throughput(flops: int | None, seconds: float | None, peak_flops: float | None) -> tuple[float | None, float | None]:
    """(TFLOP/s, % of peak) of ``flops`` in ``seconds``; None where a figure is missing."""
    if not flops or not seconds or seconds <= 0:
        return None, None
    rate = flops / seconds
    return rate / 1e12, (100.0 * rate / peak_flops if peak_flops else None)


class CudaBenchRun(BenchRun):
    """A bench run on one GPU (module docstring): one row per entry. The library baselines
    (cuBLAS, cuDNN) run on a GPU through CuPy, not on the CPU emulation of the device."""

    default_suite: ClassVar[str] = "cuda"
    default_out: ClassVar[Path] = Path("results/bench_cuda")
    folder_prefix: ClassVar[str] = "polytf-bench-cuda-"
    target_words: ClassVar[tuple[str, ...]] = ("--target", "cuda")
    thread_counts: ClassVar[bool] = False
    minimum_trials: ClassVar[int] = 0
    settings_message: ClassVar[str] = "--rounds and --repeats must be at least 1, --warmup and --trials at least 0"

    def __init__(self, options: BenchOptions, backend: Backend, workdir: Path) -> None:
        super().__init__(options, backend, workdir)
        self.device = backend.target.device
        self.baselines = isinstance(backend.device, CupyBackend)
        self.peak_flops = float(self.device.fp32_peak_flops) or None
        if self.baselines:
            check_fp32_settings()

    @classmethod
    def check(cls, options: BenchOptions, console: Any) -> None:
        if importlib.util.find_spec("matplotlib") is None:
            raise DependencyMissingError("polytf bench needs matplotlib for its chart: pip install 'polytf[bench]'")
        super().check(options, console)

    @classmethod
    def rows(cls, plan: list[tuple[Workload, tuple[int, ...]]]) -> list[tuple[Workload, int]]:
        return [(workload, 1) for workload, _ in plan]

    def header(self) -> dict[str, Any]:
        device = dataclasses.asdict(self.device) if dataclasses.is_dataclass(self.device) else {"name": str(self.device)}
        device["fp32_peak_tflops"] = float(self.device.fp32_peak_flops) / 1e12
        device["backend"] = self.backend.device.describe()
        return {"target": "cuda", "device": device}

    def trials_setting(self) -> int | None:
        return self.options.trials

    def notes(self) -> list[str]:
        if self.tensorflow:
            return []
        return ["reference outputs from numpy's references (TensorFlow " + ("not used: --no-tensorflow)" if not self.options.tensorflow else "is not installed)")]

    def describe_row(self, workload: Workload, threads: int) -> str:
        return f"{workload.label} (cuda)"

    def failed_row(self, workload: Workload, threads: int, message: str) -> dict[str, Any]:
        return {"entry": workload.label, "spec": workload.public_spec, "target": "cuda", "threads": threads, "error": message}

    def reference(self, path: Path, inputs: dict, output_names: tuple[str, ...]) -> tuple[dict, str]:
        """The reference outputs on ``inputs``, and what computed them."""
        if self.tensorflow:
            return run_graphdef_with_tensorflow(path, inputs, list(output_names)), "TensorFlow (CPU)"
        with single_threaded_blas():
            return NumpyGraph(path)(**inputs), "numpy"

    def measure(self, workload: Workload, threads: int, display: BenchDisplay, result: dict[str, Any]) -> dict[str, Any]:
        """One row (module docstring)."""
        options = self.options
        label = f"{workload.label} (cuda)"
        display.step(f"{label}: writing the GraphDef")
        path = workload.write(self.workdir / "models")
        prepared = prepare_model(path)
        display.step(f"{label}: building the untuned model (default GPU recipes)")
        untuned = self.backend.build_model(prepared)
        inputs = sample_inputs(untuned.input_types, options.seed)
        display.step(f"{label}: reference outputs")
        expected, reference = self.reference(path, inputs, untuned.output_names)
        untuned_error = check_outputs(untuned(**inputs), expected, f"{label}, untuned", reference)
        trials = TuningConfig().trials if options.trials is None else options.trials
        tuning: dict[str, Any] = {"trials_per_kernel": trials, "time_budget_s": options.time_budget_s, "new_trials": 0, "failed_trials": 0, "wall_s": 0.0}
        tuned = untuned
        if trials > 0:
            tuned, report, tune_wall_s = self.tuned_model(path, prepared, self.backend, trials, display, label)
            tuning.update(
                wall_s=tune_wall_s, new_trials=report.new_trials, failed_trials=sum(k.failed_trials for k in report.kernels),
                statuses=sorted({k.status for k in report.kernels}), recipes={k.kernel: k.recipe for k in report.kernels},
            )
        max_error = check_outputs(tuned(**inputs), expected, label, reference)

        baseline, baseline_note = library_baseline(prepared.graph) if self.baselines else (None, "baselines not run")
        device_inputs = {name: self.backend.device.upload(value) for name, value in inputs.items()}
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
            "threads": self.backend.threads,
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

    def time_rounds(self, tuned: Model, untuned: Model, device_inputs: dict, baseline: LibraryBaseline | None, display: BenchDisplay) -> dict[str, list[float]]:
        """Per system, the median of each round, seconds (module docstring, step 3)."""
        repeats, warmup = self.options.repeats, self.options.warmup
        rounds: dict[str, list[float]] = {"polytf": [], "polytf_untuned": [], "polytf_call": []}
        if baseline is not None:
            rounds[baseline.system] = []

        def whole_call() -> None:
            tuned(**device_inputs)
            self.backend.device.synchronize()

        for _ in range(self.options.rounds):
            rounds["polytf"].append(_median_of(tuned.latency_s(device_inputs, repeats, warmup)))
            rounds["polytf_untuned"].append(_median_of(untuned.latency_s(device_inputs, repeats, warmup)))
            rounds["polytf_call"].append(round_median_s(whole_call, repeats, warmup))
            if baseline is not None:
                time.sleep(SETTLE_S)
                rounds[baseline.system].append(baseline.median_s(repeats, warmup))
            display.advance()
        return rounds

    def kernel_profile(self, model: Model, device_inputs: dict) -> list[dict[str, Any]]:
        """Each kernel of ``model`` alone: median device seconds, TFLOP/s, % of peak, recipe."""
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
