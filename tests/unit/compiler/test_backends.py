"""The backend record: chosen once by name (and the CUDA-emulation switch), it holds the
target, the thread count, the device, how to build a model and how to measure a kernel."""

from __future__ import annotations

import pytest

from polytf.compiler.backends import (
    CUDA_THREADS,
    TARGET_NAMES,
    CpuBackend,
    CudaBackend,
    backend_for,
    select_backend,
    target_threads,
)
from polytf.config import MeasurementConfig
from polytf.errors import PolytfError
from polytf.runtime.cpu.kernel_bench import Measurement, reference_data
from polytf.runtime.cuda.emulation import EmulatedDevice
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import DEFAULT_COMPUTE_CAPABILITY, CudaTarget

CONFIG = MeasurementConfig(warmup_runs=1, repeats=2, min_repeat_s=0.0)


def test_the_cpu_backend_is_chosen_by_name_with_its_threads():
    backend = select_backend("cpu", threads=3)
    assert isinstance(backend, CpuBackend) and backend.name == "cpu" and TARGET_NAMES == ("cpu", "cuda")
    assert isinstance(backend.target, CpuTarget) and backend.threads == 3 and backend.device is None
    assert not backend.restarts_after_foreign_error
    assert backend.with_threads(1).threads == 1 and backend.with_threads(1).target is backend.target
    assert target_threads(backend.target, 3) == 3


def test_the_emulation_switch_chooses_the_offline_cuda_target_on_the_emulated_device(monkeypatch):
    monkeypatch.setenv("POLYTF_CUDA_EMULATION", "1")
    backend = select_backend("cuda", threads=8)
    assert isinstance(backend, CudaBackend) and backend.name == "cuda" and backend.restarts_after_foreign_error
    assert isinstance(backend.target, CudaTarget) and backend.target.device.compute_capability == DEFAULT_COMPUTE_CAPABILITY
    assert isinstance(backend.device, EmulatedDevice)
    assert backend.threads == CUDA_THREADS == 1 and backend.with_threads(8) is backend  # --threads does not reach the GPU
    assert target_threads(backend.target, 8) == CUDA_THREADS


def test_an_unknown_target_name_is_refused():
    with pytest.raises(PolytfError, match="unknown target 'tpu'; choose one of cpu, cuda"):
        select_backend("tpu")


def test_a_backend_for_a_target_at_hand():
    cuda = CudaTarget(compute_capability="sm_90")
    device = EmulatedDevice()
    assert backend_for(cuda, 4, device) == CudaBackend(cuda, CUDA_THREADS, device)
    cpu = CpuTarget()
    assert backend_for(cpu, 4) == CpuBackend(cpu, 4)


@pytest.mark.parametrize(
    "backend",
    [CpuBackend(CpuTarget(), 2), CudaBackend(CudaTarget(compute_capability="sm_80"), 1, EmulatedDevice())],
    ids=["cpu", "cuda"],
)
def test_each_backend_measures_its_own_kernels_with_one_signature(small_kernels, backend):
    (kernel,) = small_kernels("matmul_bias_relu")
    inputs, expected = reference_data(kernel, seed=1)
    measure = backend.kernel_measurer(kernel.scop, inputs, expected)
    compiled = backend.target.compile(kernel.scop, backend.target.search_space(kernel.scop, backend.threads).default_recipe())
    timed = measure(compiled, CONFIG, float("inf"), True)
    assert isinstance(timed, Measurement) and timed.ok and len(timed.latencies_s) == 2 and timed.max_error < 1e-4
    verified = measure(compiled, CONFIG, float("inf"), False)
    assert verified.error is None and verified.latencies_s == ()
    (name,) = expected
    wrong = backend.kernel_measurer(kernel.scop, inputs, {name: expected[name] + 1.0})(compiled, CONFIG, float("inf"), True)
    assert wrong.error.startswith(f"wrong result in output {name}") and wrong.latencies_s == ()
