"""The one-command GPU check (``python -m polytf.bench.gpu_check``) and its wheel helper, on a
machine without a GPU: the dry run goes through every step and row on the CPU emulation of
the device, so the script cannot rot before the next GPU machine comes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from polytf.bench.gpu_check import lay_out_source_tree
from polytf.bench.gpu_check_report import check_markdown
from polytf.bench.gpu_check_rows import DRY_RUN_SIZES, check_rows
from polytf.bench.gpu_check_steps import test_outcomes as junit_outcomes
from polytf.bench.gpu_wheels import GPU_IMAGE_PACKAGES, keep_only, missing_requirements, normalise

ROOT = Path(__file__).resolve().parents[3]
STEPS = ["wheels", "environment", "tests", "bench"]


def _check(*arguments: str, timeout: float = 900) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "POLYTF_GPU_CHECK_BOOTSTRAP"}
    return subprocess.run(
        [sys.executable, "-m", "polytf.bench.gpu_check", *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout
    )


def test_the_dry_run_goes_through_every_step_and_row(tmp_path):
    result = _check("--dry-run", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [step["step"] for step in report["steps"]] == STEPS
    assert all(step["status"] == "ok" for step in report["steps"]), report["steps"]
    assert report["finished"] and report["dry_run"] and report["device"]["emulated"]
    gpu_tests = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "gpu").glob("test_*.py"))
    collected = {outcome["test"].split("::")[0] for outcome in report["tests"]["outcomes"]}
    assert collected == set(gpu_tests) and all(t["outcome"] == "collected" for t in report["tests"]["outcomes"])
    labels = [row.label for row in check_rows(DRY_RUN_SIZES)]
    assert len(labels) == 2 + 20 + 2 and len(set(labels)) == len(labels)  # 2 matmuls, ResNet50's 20 distinct conv layers, 2 models
    assert report["planned_rows"] == labels == [row["row"] for row in report["rows"]]
    for row in report["rows"]:
        assert row["status"] == "ok" and row["polytf_s"] > 0 and row["max_abs_error"] < 1e-3 and row["kernels"] >= 1, row
    assert report["rows"][-1]["kernels"] > 50  # the whole ResNet50
    markdown = (tmp_path / "gpu_check.md").read_text()
    for text in [*STEPS, *labels, *(t["test"] for t in report["tests"]["outcomes"])]:
        assert text in markdown
    assert "[" in result.stdout and "step bench: ok: 24 of 24 rows" in result.stdout  # progress as it goes


def test_rows_past_the_time_limit_are_left_out_and_the_report_says_so(tmp_path):
    result = _check("--dry-run", "--skip-tests", "--time-limit", "0", "--out", str(tmp_path), timeout=300)
    assert result.returncode == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["rows"] == [] and not report["finished"] and "left out 24 rows" in report["stopped"]
    assert "not run (the time limit" in (tmp_path / "gpu_check.md").read_text()


def test_sigterm_keeps_the_report_of_the_rows_that_finished(tmp_path):
    environment = {key: value for key, value in os.environ.items() if key != "POLYTF_GPU_CHECK_BOOTSTRAP"}
    command = [sys.executable, "-m", "polytf.bench.gpu_check", "--dry-run", "--skip-tests", "--out", str(tmp_path)]
    process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if "row 3/" in line:  # two rows finished
            process.send_signal(signal.SIGTERM)
            break
    process.stdout.read()
    assert process.wait(timeout=120) == 130
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["stopped"] == "interrupted (Ctrl-C or SIGTERM)" and not report["finished"]
    assert 2 <= len(report["rows"]) < len(report["planned_rows"]) and report["steps"][-1]["status"] == "interrupted"


def test_without_a_gpu_the_real_check_stops_after_saying_why(tmp_path):
    from polytf.compiler.backends import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("this machine has a GPU")
    result = _check("--out", str(tmp_path), timeout=300)
    assert result.returncode == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    environment_step = report["steps"][1]
    assert environment_step["status"] == "failed" and "no GPU to check" in environment_step["detail"] and "--dry-run" in environment_step["detail"]
    assert report["stopped"] == "the environment step failed" and not report["rows"]


def test_a_source_tree_laid_out_imports_as_installed(tmp_path):
    folder = lay_out_source_tree(ROOT, tmp_path / "source")
    code = "import polytf, polytf.targets.cpu_kinds, polytf.schedules.recipe, polytf.autotune; print(polytf.__file__); print(polytf.targets.__file__)"
    environment = {**os.environ, "PYTHONPATH": str(folder)}
    result = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True)
    if sys.version_info < (3, 11):
        pytest.skip("python -P needs Python 3.11")
    assert result.returncode == 0, result.stderr
    package, targets = result.stdout.split()
    assert package.startswith(str(folder)) and Path(targets).resolve() == ROOT / "targets" / "__init__.py"


def test_junit_outcomes_give_every_test_its_outcome_and_message(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_passes():\n    assert True\n"
        "def test_fails():\n    assert 1 == 2, 'one is not two'\n"
        "@pytest.mark.skip(reason='no device')\ndef test_skips():\n    pass\n"
    )
    junit = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_sample.py"), f"--junitxml={junit}"],
                   cwd=tmp_path, capture_output=True)  # fmt: skip
    outcomes = {outcome["test"].split("::")[1]: outcome for outcome in junit_outcomes(junit)}
    assert {name: o["outcome"] for name, o in outcomes.items()} == {"test_passes": "passed", "test_fails": "failed", "test_skips": "skipped"}
    assert "one is not two" in outcomes["test_fails"]["message"] and "no device" in outcomes["test_skips"]["message"]


def test_the_report_of_a_failed_row_says_why_and_what_was_not_run():
    report = {
        "steps": [{"step": "bench", "status": "ok", "seconds": 1.0, "detail": "1 of 3 rows"}],
        "device": {"name": "NVIDIA H200", "compute_capability": "sm_90", "multiprocessors": 132, "clock_rate_khz": 1980000, "fp32_peak_tflops": 66.9},
        "rows": [
            {"row": "matmul 4096x4096x4096", "status": "ok", "kernels": 1, "compile_s": 1.0, "polytf_s": 0.004, "flops": 2 * 4096**3,
             "max_abs_error": 1e-4, "baseline": {"system": "cublas", "median_s": 0.003}, "baseline_over_polytf": 0.75},
            {"row": "conv 56x56 64->64 3x3 s1 b8", "status": "failed", "error": "CompileError: the CUDA driver rejected the PTX"},
        ],
        "planned_rows": ["matmul 4096x4096x4096", "conv 56x56 64->64 3x3 s1 b8", "resnet50 b8"],
        "stopped": "interrupted (Ctrl-C or SIGTERM)",
    }  # fmt: skip
    markdown = check_markdown(report)
    assert "| matmul 4096x4096x4096 | ok | 1 | 1.0 | 4.000 | 34.36 | 51.4% | cublas | 3.000 | 0.75 |" in markdown
    assert "conv 56x56 64->64 3x3 s1 b8: **failed**: CompileError: the CUDA driver rejected the PTX" in markdown
    assert "not run (interrupted (Ctrl-C or SIGTERM)): resnet50 b8" in markdown and "**cut short**" in markdown


def test_the_wheels_are_what_polytf_needs_and_the_gpu_image_lacks():
    needed = missing_requirements()
    assert {"islpy", "optuna", "platformdirs"} <= set(needed)
    assert not set(needed) & GPU_IMAGE_PACKAGES  # numpy, llvmlite, CuPy... are on the image
    assert {"numpy", "llvmlite", "protobuf", "rich", "tqdm", "pyyaml"} <= GPU_IMAGE_PACKAGES
    assert all(version == metadata.version(name) for name, version in needed.items())  # the versions tested here
    assert "psycopg" not in needed and "tensorflow-cpu" not in needed  # extras are not brought


def test_the_wheel_folder_keeps_one_version_of_each_package(tmp_path):
    for name in ("islpy-2026.2.2-cp312-cp312-manylinux_2_28_x86_64.whl", "islpy-2025.1-cp312-cp312-manylinux_2_28_x86_64.whl",
                 "SQLAlchemy-2.1.9-cp312-cp312-manylinux_2_17_x86_64.whl", "colorlog-6.12.0-py3-none-any.whl"):  # fmt: skip
        (tmp_path / name).write_bytes(b"wheel")
    kept = keep_only({"islpy": "2026.2.2", normalise("SQLAlchemy"): "2.1.9"}, tmp_path)
    assert [path.name.split("-")[0] for path in kept] == ["SQLAlchemy", "islpy"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(path.name for path in kept)
