"""Tuning on a real GPU: the device bench with CUDA events, the worker process for the CUDA
target, records keyed by the GPU's fingerprint, and the GPU bench against cuBLAS."""

from __future__ import annotations

import json

import numpy as np
import pytest

import polytf

pytestmark = pytest.mark.gpu


def test_device_bench_verifies_and_times_the_default_recipe(cupy, matmul_model):
    from polytf.compiler.preparation import prepare_model
    from polytf.config import MeasurementConfig
    from polytf.runtime.cpu.kernel_bench import reference_data
    from polytf.runtime.cuda.backend import CupyBackend
    from polytf.runtime.cuda.kernel_bench import CudaKernelBench
    from polytf.targets.cuda import CudaTarget

    (kernel,) = prepare_model(matmul_model).kernels
    target = CudaTarget()
    compiled = target.compile(kernel.scop, target.search_space(kernel.scop).default_recipe())
    inputs, expected = reference_data(kernel, seed=0)
    measurement = CudaKernelBench(kernel.scop, inputs, expected, CupyBackend()).measure(compiled, MeasurementConfig(repeats=5))
    assert measurement.ok, measurement.error
    assert len(measurement.latencies_s) >= 5 and 0 < measurement.median_s < 0.1


def test_a_cuda_worker_measures_candidates(cupy, matmul_model):
    from polytf.autotune.isolation import CandidateEvaluator
    from polytf.compiler.preparation import prepare_model
    from polytf.runtime.cpu.kernel_bench import Measurement
    from polytf.targets.cuda import CudaTarget

    (kernel,) = prepare_model(matmul_model).kernels
    space = CudaTarget().search_space(kernel.scop)
    with CandidateEvaluator(kernel, 1, target_name="cuda") as evaluator:
        for recipe in [space.default_recipe(), *space.heuristic_recipes()[:2]]:
            outcome = evaluator.evaluate(recipe)
            assert isinstance(outcome, Measurement) and outcome.ok, outcome
        assert evaluator.workers_started == 1


def test_tuned_gpu_records_are_used_by_the_gpu_model_only(cupy, matmul_model, matmul_reference, tmp_path):
    cache = tmp_path / "cache"
    report = polytf.tune(matmul_model, trials=3, cache_dir=cache, target="cuda")
    assert report.target == "cuda" and [row.status for row in report.kernels] == ["tuned"]
    assert report.model_tuned_latency_s > 0
    records = list((cache / "records").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["key"]["target"]["target"] == "cuda"
    gpu = polytf.load(matmul_model, target="cuda", cache_dir=cache)
    assert gpu.tuned_kernels == (gpu.kernels[0].scop.name,)
    cpu = polytf.load(matmul_model, cache_dir=cache)
    assert cpu.tuned_kernels == ()  # a GPU record never reaches the CPU
    x = np.random.default_rng(3).standard_normal((37, 45)).astype(np.float32)
    np.testing.assert_allclose(gpu(x=x)["relu"], matmul_reference(x), rtol=1e-5, atol=1e-5)


def test_gpu_bench_against_cublas(cupy, tmp_path):
    from polytf.bench.options import BenchOptions
    from polytf.bench.runner import run_bench

    model = tmp_path / "matmul.pbtxt"
    model.write_text(
        'node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 256 } dim { size: 128 } } } } }\n'
        'node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 128 } dim { size: 192 } } } } }\n'
        'node { name: "mm" op: "MatMul" input: "a" input: "b" }\n'
    )
    options = BenchOptions(target="cuda", entries=(str(model),), trials=2, rounds=2, repeats=5, warmup=2, out=tmp_path / "report", tensorflow=False)
    assert run_bench(options) == 0
    (row,) = json.loads((tmp_path / "report.json").read_text())["rows"]
    assert row["systems"]["cublas"]["median_s"] > 0 and row["speedup"]["cublas"] > 0
    assert 0 < row["percent_of_peak"]["polytf"] < 100 and 0 < row["percent_of_peak"]["cublas"] < 100
    assert "cuBLAS" in (tmp_path / "report.md").read_text()
