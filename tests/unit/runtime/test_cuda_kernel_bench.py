"""Tuning for the GPU without a GPU: the device bench (verify, then time each launch on the
device) on the emulated device, and the worker's answer when CUDA is asked for on a
machine that has none."""

from __future__ import annotations

import math

import pytest
from hand_built_graphs import GRAPHS, kernels_of

from polytf.autotune.isolation import CandidateEvaluator
from polytf.autotune.model_tuner import tune_model
from polytf.autotune.tuner import KernelTuning
from polytf.compiler.backends import cuda_unavailable_reason
from polytf.compiler.build_options import BuildOptions
from polytf.config import MeasurementConfig
from polytf.errors import DependencyMissingError, TuningError
from polytf.runtime.cpu.kernel_bench import reference_data
from polytf.runtime.cuda.emulation import EmulatedDevice
from polytf.runtime.cuda.kernel_bench import CudaKernelBench
from polytf.schedules.recipe import GpuRecipe
from polytf.targets.cuda import CudaTarget

CONFIG = MeasurementConfig(warmup_runs=1, repeats=3, min_repeat_s=0.0)
#: the CUDA target without a device (PTX for sm_80)
TARGET = CudaTarget(compute_capability="sm_80")


def bench_and_kernel(graph_name: str, device: EmulatedDevice):
    (kernel,) = kernels_of(GRAPHS[graph_name]())
    inputs, expected = reference_data(kernel, seed=1)
    compiled = TARGET.compile(kernel.scop, TARGET.search_space(kernel.scop).default_recipe())
    return CudaKernelBench(kernel.scop, inputs, expected, device), compiled


@pytest.mark.parametrize("graph_name", ["matmul_bias_relu", "conv_same_stride2", "softmax", "broadcast_chain"])
def test_a_correct_gpu_kernel_verifies_and_gets_device_latencies(graph_name):
    device = EmulatedDevice()
    bench, compiled = bench_and_kernel(graph_name, device)
    measurement = bench.measure(compiled, CONFIG)
    assert measurement.ok, measurement.error
    assert len(measurement.latencies_s) == 3 and measurement.max_error < 1e-4
    assert device.counts["launch"] == 1 + 1 + 3  # verification, warm-up, timed launches


def test_a_wrong_result_gets_no_latency():
    device = EmulatedDevice()
    bench, compiled = bench_and_kernel("matmul_bias_relu", device)
    (name,) = bench.expected
    bench.expected[name] = bench.expected[name] + 1.0
    measurement = bench.measure(compiled, CONFIG)
    assert not measurement.ok and measurement.latencies_s == ()
    assert measurement.error.startswith(f"wrong result in output {name}: max abs error 1")
    assert device.counts["launch"] == 1  # never timed


def test_outputs_start_unwritten_so_a_kernel_that_skips_them_fails():
    device = EmulatedDevice()
    bench, compiled = bench_and_kernel("matmul_bias_relu", device)
    (name,) = bench.expected
    arguments = bench.arguments(compiled)
    device.run_kernel = lambda kernel, buffers: None  # a kernel that writes nothing
    error, _ = bench.verify(arguments, CONFIG)
    assert error == f"non-finite values in output {name} (elements not written, or overflow)"


def test_a_slow_warm_up_launch_is_the_only_one_timed():
    device = EmulatedDevice()
    bench, compiled = bench_and_kernel("broadcast_chain", device)
    latencies = bench.time(bench.arguments(compiled), MeasurementConfig(warmup_runs=2, repeats=5), cutoff_s=0.0)
    assert len(latencies) == 1 and device.counts["launch"] == 1
    assert math.isfinite(latencies[0])


def test_the_tuner_sends_the_target_name_to_its_worker():
    (kernel,) = kernels_of(GRAPHS["matmul_bias_relu"]())
    with KernelTuning(kernel, TARGET, threads=1) as tuning:
        assert tuning._isolated.target_name == "cuda"
        assert isinstance(tuning.space.default_recipe(), GpuRecipe)


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="this machine has CuPy and a GPU")
def test_a_cuda_worker_without_a_gpu_says_what_to_install():
    (kernel,) = kernels_of(GRAPHS["matmul_bias_relu"]())
    with CandidateEvaluator(kernel, 1, target_name="cuda") as evaluator:
        with pytest.raises(TuningError, match=r"did not start: DependencyMissingError: target 'cuda' needs CuPy.*install cupy-cuda12x"):
            evaluator.evaluate(TARGET.search_space(kernel.scop).default_recipe())


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="this machine has CuPy and a GPU")
def test_tuning_for_cuda_without_a_gpu_fails_before_reading_the_model(tmp_path):
    with pytest.raises(DependencyMissingError, match="install cupy-cuda12x and run on a machine with an NVIDIA GPU"):
        tune_model(tmp_path / "absent.pb", BuildOptions(cache_dir=tmp_path / "cache", target="cuda"), trials=1)
    assert not (tmp_path / "cache").exists()
