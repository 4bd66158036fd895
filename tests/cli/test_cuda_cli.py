"""``--target cuda`` on the command line: documented in the help of tune, run and bench, and
a clear one-line error (no traceback) on a machine without CuPy or an NVIDIA GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from polytf.compiler.backends import cuda_unavailable_reason

PBTXT = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 3 } } } } }
node { name: "out" op: "Relu" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
"""


def polytf(*args, cache_dir):
    env = dict(os.environ, POLYTF_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, "-m", "polytf.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def test_the_help_of_tune_run_and_bench_documents_the_cuda_target(tmp_path):
    from polytf.compiler import backends, build_options

    assert backends.TARGET_NAMES is build_options.TARGET_NAMES  # --target's choices are the backends'
    for command in ("tune", "run", "bench"):
        result = polytf(command, "--help", cache_dir=tmp_path)
        assert result.returncode == 0
        text = " ".join(result.stdout.split())
        assert "--target {cpu,cuda}" in text and "cupy-cuda12x" in text, command


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="this machine has CuPy and a GPU")
def test_cuda_without_cupy_or_a_gpu_is_one_clear_error(tmp_path):
    model = tmp_path / "relu.pbtxt"
    model.write_text(PBTXT)
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    runs = {
        "tune": polytf("tune", model, "--target", "cuda", "--trials", "1", cache_dir=tmp_path / "cache"),
        "run": polytf("run", model, "--target", "cuda", "--input", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "out.npz", cache_dir=tmp_path / "cache"),
        "bench": polytf("bench", "--target", "cuda", str(model), "--out", tmp_path / "report", cache_dir=tmp_path / "cache"),
    }
    for command, result in runs.items():
        assert result.returncode == 1, (command, result.stderr)
        assert "Traceback" not in result.stderr, command
        message = " ".join(result.stderr.split())
        assert "error: target 'cuda' needs CuPy and an NVIDIA GPU" in message, (command, message)
        assert "install cupy-cuda12x and run on a machine with an NVIDIA GPU" in message, command
    assert not (tmp_path / "out.npz").exists() and not (tmp_path / "report.md").exists()


MATMUL_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 24 } dim { size: 20 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 20 } dim { size: 36 } } } } }
node { name: "mm" op: "MatMul" input: "a" input: "b" }
node { name: "out" op: "Relu" input: "mm" }
"""


def test_tune_then_run_for_cuda_on_the_emulated_device(tmp_path, monkeypatch):
    """POLYTF_CUDA_EMULATION=1: the whole GPU path without a GPU (GPU recipes tuned in worker
    processes on the emulated device, records under the offline CUDA target's key, the CUDA
    model built from them); the CPU never uses those records."""
    monkeypatch.setenv("POLYTF_CUDA_EMULATION", "1")
    model = tmp_path / "matmul.pbtxt"
    model.write_text(MATMUL_PBTXT)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((24, 20)).astype(np.float32), rng.standard_normal((20, 36)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    cache = tmp_path / "cache"
    tuned = polytf("tune", model, "--target", "cuda", "--trials", "3", cache_dir=cache)
    assert tuned.returncode == 0, tuned.stderr
    assert "target cuda" in tuned.stdout and "new trials: 3" in tuned.stdout and "tuned" in tuned.stdout
    (record,) = (cache / "records").glob("*.json")
    key = json.loads(record.read_text())["key"]
    assert key["target"]["target"] == "cuda" and key["target"]["gpu"] == "offline" and key["threads"] == 1
    inputs = ("--input", f"a={tmp_path / 'a.npy'}", "--input", f"b={tmp_path / 'b.npy'}")
    ran = polytf("run", model, "--target", "cuda", *inputs, "--output", tmp_path / "gpu.npz", cache_dir=cache)
    assert ran.returncode == 0, ran.stderr
    assert "1/1 kernels tuned" in ran.stdout
    with np.load(tmp_path / "gpu.npz") as outputs:
        np.testing.assert_allclose(outputs["out"], np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    monkeypatch.delenv("POLYTF_CUDA_EMULATION")
    on_cpu = polytf("run", model, *inputs, "--output", tmp_path / "cpu.npz", cache_dir=cache)
    assert on_cpu.returncode == 0 and "0/1 kernels tuned" in on_cpu.stdout


def test_gpu_bench_tunes_on_the_emulated_device(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYTF_CUDA_EMULATION", "1")
    model = tmp_path / "matmul.pbtxt"
    model.write_text(MATMUL_PBTXT)
    out = tmp_path / "report"
    args = ("bench", "--target", "cuda", model, "--trials", "2", "--rounds", "1", "--repeats", "2", "--warmup", "1", "--no-tensorflow", "--out", out)
    result = polytf(*args, cache_dir=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert row["tuning"]["new_trials"] == 2 and row["reference"] == "numpy" and row["max_abs_error"] < 1e-4
    assert "gpu" in row["kernel_profile"][0]["recipe"] and row["systems"]["polytf"]["median_s"] > 0
    assert "| polytf ms |" in out.with_suffix(".md").read_text()


def test_show_prints_a_kernels_gpu_schedule_launches_and_ptx_without_a_gpu(tmp_path):
    model = tmp_path / "relu.pbtxt"
    model.write_text(PBTXT)
    result = polytf("show", model, "--kernel", "k0_out", "--target", "cuda", "--arch", "sm_90", "--assembly", cache_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "gpu_blocks" in result.stdout and "gpu_threads" in result.stdout  # the mapped loop AST
    assert "kernel: grid [1, 1, 1], block [3, 2, 1]" in result.stdout  # 2 x 3 outputs, one per thread
    assert ".target sm_90" in result.stdout and ".entry k0_out(" in result.stdout
    wrong = polytf("show", model, "--kernel", "k0_out", "--target", "cuda", "--arch", "volta", cache_dir=tmp_path)
    assert wrong.returncode != 0 and "unknown compute capability 'volta'" in wrong.stderr and "Traceback" not in wrong.stderr
