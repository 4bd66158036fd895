"""``polytf bench --target cuda`` without a GPU: the one runner on a CUDA backend of the
emulated device (the CUDA target's own kernels, each launch run on the CPU), its report
through the shared writer, and the choice of the library baseline."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, graph_conv_bias_relu, graph_matmul_bias_relu, placeholder

from polytf.bench.cpu_bench import CpuBenchRun
from polytf.bench.cuda_baselines import check_fp32_settings, library_baseline
from polytf.bench.cuda_bench import CudaBenchRun
from polytf.bench.options import BenchOptions
from polytf.bench.runner import run_bench
from polytf.compiler.backends import CudaBackend
from polytf.errors import DependencyMissingError, PolytfError
from polytf.graph import Node
from polytf.runtime.cuda.emulation import EmulatedDevice
from polytf.targets.cuda import CudaDevice, CudaTarget

#: a: [6, 5] @ b: [5, 4] -> Relu, as a text GraphDef
MATMUL_RELU_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 5 } dim { size: 4 } } } } }
node { name: "mm" op: "MatMul" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""
#: 1 SM x 128 lanes x 2 x 1 GHz = 256 GFLOP/s
DEVICE = CudaDevice(name="emulated sm_90", compute_capability="sm_90", multiprocessors=1, clock_rate_khz=1_000_000)


def run_emulated(tmp_path, tensorflow: bool):
    model = tmp_path / "matmul_relu.pbtxt"
    model.write_text(MATMUL_RELU_PBTXT)
    options = BenchOptions(target="cuda", entries=(str(model),), trials=0, rounds=2, repeats=3, warmup=1, out=tmp_path / "report", tensorflow=tensorflow)
    device = EmulatedDevice()
    code = run_bench(options, backend=CudaBackend(CudaTarget(DEVICE), 1, device))
    return code, json.loads((tmp_path / "report.json").read_text()), (tmp_path / "report.md").read_text(), device


@pytest.mark.parametrize("tensorflow", [False, True], ids=["numpy reference", "tensorflow reference"])
def test_the_gpu_bench_runs_verifies_and_reports_on_the_emulated_device(tmp_path, tensorflow):
    if tensorflow and importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    code, result, text, device = run_emulated(tmp_path, tensorflow)
    assert code == 0
    assert result["target"] == "cuda" and result["device"]["fp32_peak_tflops"] == pytest.approx(0.256)
    (row,) = result["rows"]
    assert row["reference"] == ("TensorFlow (CPU)" if tensorflow else "numpy")
    assert row["max_abs_error"] < 1e-5 and row["flops"] == 2 * 6 * 5 * 4
    for system in ("polytf", "polytf_untuned", "polytf_call"):
        median_s = row["systems"][system]["median_s"]
        assert len(row["systems"][system]["round_medians_s"]) == 2 and median_s > 0
        assert row["tflops"][system] == pytest.approx(240 / median_s / 1e12)
        assert row["percent_of_peak"][system] == pytest.approx(100 * 240 / median_s / DEVICE.fp32_peak_flops)
    (kernel,) = row["kernel_profile"]
    assert "gpu" in kernel["recipe"] and kernel["median_s"] > 0 and kernel["block"][0] >= 1
    assert device.counts["launch"] >= 2 * 2 * (1 + 3)  # two models timed in two rounds of 1 + 3 runs
    assert "# polytf bench --target cuda" in text and "| polytf TFLOP/s | % FP32 peak |" in text
    assert "--target cuda" in result["settings"]["command"] and (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")


def test_the_bench_measures_the_backend_it_is_given_without_choosing_one(tmp_path, monkeypatch):
    from polytf.bench import runner

    monkeypatch.setattr(runner, "select_backend", lambda *args, **kwargs: pytest.fail("the bench chose a backend of its own"))
    assert runner.BENCH_RUNS == {"cpu": CpuBenchRun, "cuda": CudaBenchRun}
    code, result, _, device = run_emulated(tmp_path, tensorflow=False)
    assert code == 0 and result["device"]["backend"] == device.describe() and device.counts["launch"] > 0


def test_a_wrong_gpu_result_stops_the_bench_before_timing(tmp_path, monkeypatch):
    monkeypatch.setattr(CudaBenchRun, "reference", lambda self, path, inputs, names: ({name: np.full((6, 4), 7.0, np.float32) for name in names}, "numpy"))
    with pytest.raises(PolytfError, match="polytf's output 'out' differs from the numpy reference"):
        run_emulated(tmp_path, tensorflow=False)
    result = json.loads((tmp_path / "report.json").read_text())
    assert result["rows"] == [] and "differs from the numpy reference" in result["failure"]


def test_baselines_are_chosen_by_the_model_s_one_contraction():
    rng = np.random.default_rng(0)
    two = build_graph(
        [
            placeholder("x", (4, 5)),
            const("w", rng.standard_normal((5, 6)).astype(np.float32)),
            const("v", rng.standard_normal((6, 3)).astype(np.float32)),
            Node("first", "MatMul", ("x:0", "w:0")),
            Node("second", "MatMul", ("first:0", "v:0")),
        ],
        ["second:0"],
    )
    baseline, note = library_baseline(two)
    assert baseline is None and "2 contractions" in note
    if importlib.util.find_spec("torch") is None:
        baseline, note = library_baseline(graph_conv_bias_relu())
        assert baseline is None and note.startswith("PyTorch is not installed")
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(DependencyMissingError, match="install cupy-cuda12x"):
            library_baseline(graph_matmul_bias_relu())


def test_tf32_for_cublas_is_refused(monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "1")
    with pytest.raises(PolytfError, match="CUPY_TF32=1 lets cuBLAS compute in TF32"):
        check_fp32_settings()
    monkeypatch.setenv("CUPY_TF32", "0")
    check_fp32_settings()
