"""``polytf bench``: report files (Markdown, JSON, PNG) for a tiny entry, with and without
TensorFlow (untuned and tuned polytf, measured peak, per-kernel profile); a failed row that
does not stop the run; ``--time-budget``; entry parsing, suites and the zoo's single-op models;
help and errors."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from polytf.bench.suite import SUITES, contraction_flops, parse_entry, parse_threads, resolve_entries
from polytf.errors import PolytfError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: a: [6, 5] @ b: [5, 4] -> Relu, two placeholders, as a text GraphDef (no TensorFlow needed).
MATMUL_RELU_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 5 } dim { size: 4 } } } } }
node { name: "mm" op: "MatMul" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""


def polytf(*args, timeout=600):
    command = [sys.executable, "-m", "polytf.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=dict(os.environ), timeout=timeout)


def bench(*args):
    """Run ``polytf bench`` in this process (saves an interpreter and TensorFlow start)."""
    from polytf.cli import main

    return main(["bench", *map(str, args)])


def check_report(out, entries, systems, threads=(1,)):
    """The three files exist; the JSON rows and fields are there with positive times."""
    md, js, png = (out.with_name(out.name + suffix) for suffix in (".md", ".json", ".png"))
    assert md.is_file() and js.is_file() and png.is_file()
    assert png.read_bytes()[:8] == PNG_MAGIC

    result = json.loads(js.read_text())
    assert [(row["entry"], row["threads"]) for row in result["rows"]] == [(e, t) for e in entries for t in threads]
    for row in result["rows"]:
        for system in ("polytf", "polytf_untuned", "polytf_kernels", *systems):
            data = row["systems"][system]
            assert data["median_s"] > 0 and len(data["round_medians_s"]) == 1 and all(t > 0 for t in data["round_medians_s"])
        for system in systems:
            assert row["speedup"][system] == pytest.approx(
                row["systems"][system]["median_s"] / row["systems"]["polytf"]["median_s"]
            )
        assert row["speedup"]["best_baseline"] > 0
        assert row["flops"] > 0 and row["gflops"]["polytf"] > 0
        assert row["tuning"]["wall_s"] > 0 and row["tuning"]["new_trials"] >= 1
        assert row["tuning"]["recipes"] and all(isinstance(r, str) and r for r in row["tuning"]["recipes"].values())
        assert 0 <= row["max_abs_error"] < 1e-3 and 0 <= row["untuned_max_abs_error"] < 1e-3
        if row["tuned_is_untuned"]:  # no tuned recipe kept: one model, timed once for both rows
            assert row["systems"]["polytf"]["round_medians_s"] == row["systems"]["polytf_untuned"]["round_medians_s"]
        peak = result["machine"]["fp32_peak"][str(row["threads"])]
        assert peak["threads"] == row["threads"] and peak["gflops"] >= row["threads"] and row["peak_gflops"] == peak["gflops"]
        for system in ("polytf", "polytf_untuned"):
            assert row["percent_of_peak"][system] == pytest.approx(100 * row["gflops"][system] / peak["gflops"])
        profile = row["profile"]
        assert len(profile["kernels"]) == row["kernels"] and profile["call_s"] > 0
        assert profile["call_to_kernels_ratio"] >= 1.0 and profile["alone_kernels_s"] > 0
        assert profile["flops"] == row["flops"] and profile["peak_gflops"] == peak["gflops"]
    machine = result["machine"]
    assert machine["cpu"] and machine["llvm_cpu"]["name"] and machine["cores"] >= 1
    assert {"avx2", "fma"} <= set(machine["llvm_cpu"]["notable"]) or machine["llvm_cpu"]["notable"] == {}
    assert not result["interrupted"] and result["failure"] is None

    text = md.read_text()
    assert machine["cpu"] in text and machine["llvm_cpu"]["name"] in text
    blas = [lib for lib in machine["blas"] if lib["user_api"] == "blas"]
    if blas:  # threadpoolctl found numpy's BLAS
        assert blas[0]["version"] in text and ("OpenBLAS" in text or blas[0]["internal_api"] in text)
    assert f"numpy {np.__version__}" in text
    assert "| entry | threads | polytf ms | untuned ms |" in text and "GFLOP/s" in text and "% peak" in text
    assert "**float32 peak (measured):**" in text and f"LLVM CPU `{machine['fp32_peak'][str(threads[0])]['cpu_name']}`" in text
    for row in result["rows"]:
        assert f"## {row['entry']}, {row['threads']} thread" in text and "call / sum of kernels" in text
    check_figures_agree(result, text)
    assert ("the tuned model is the untuned one" in text) == any(row["tuned_is_untuned"] for row in result["rows"])
    return result, text


def main_table(text):
    """The report's first table: one dict per row, header -> cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| entry |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))))
    return rows


def check_figures_agree(result, text):
    """Each figure of a row agrees between the table, the row's text and the JSON: a time in
    the table is the JSON's to the printed digits, and the text quotes the table's cells."""
    table = main_table(text)
    assert len(table) == len(result["rows"])
    for row, cells in zip(result["rows"], table):
        for column, system in (("polytf ms", "polytf"), ("untuned ms", "polytf_untuned"), ("polytf kernels ms", "polytf_kernels"), ("numpy ms", "numpy")):
            assert float(cells[column]) == pytest.approx(row["systems"][system]["median_s"] * 1e3, abs=6e-4), column
        section = text[text.index(f"## {row['entry']}, {row['threads']} thread") :]
        section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]  # this row's section only
        whole_call = re.search(r"Whole call `model\(\*\*inputs\)` ([\d.]+) ms", section)
        assert whole_call and whole_call.group(1) == cells["polytf ms"]  # one figure for the call, not two
        throughput = re.search(r"polytf tuned ([\d.]+) GFLOP/s \(([^)]+) of peak\)", section)
        assert throughput and throughput.groups() == (cells["polytf GFLOP/s"], cells["% peak"])
        assert cells["call / kernels"] == f"{row['profile']['call_to_kernels_ratio']:.3f}" and f"call / sum of kernels {cells['call / kernels']}" in section


def test_bench_without_tensorflow(tmp_path):
    model = tmp_path / "matmul_relu.pbtxt"
    model.write_text(MATMUL_RELU_PBTXT)
    out = tmp_path / "report" / "bench"
    code = bench(
        model,
        "--no-tensorflow",
        "--threads",
        "1",
        "--trials",
        "2",
        "--rounds",
        "1",
        "--repeats",
        "3",
        "--warmup",
        "1",
        "--out",
        out,
    )
    assert code == 0
    result, text = check_report(out, ["matmul_relu"], ["numpy"])
    row = result["rows"][0]
    assert row["flops"] == 2 * 6 * 5 * 4 and row["inputs"] == {"a": [6, 5], "b": [5, 4]} and row["outputs"] == ["out"]
    assert "tensorflow" not in row["systems"] and "xla" not in row["systems"]
    assert "not timed: --no-tensorflow" in text and "TF ms" not in text and "XLA ms" not in text
    assert str(tmp_path) not in out.with_name("bench.json").read_text()  # no absolute paths of the machine


def test_a_wrong_result_stops_the_bench_loudly(tmp_path, monkeypatch, capsys):
    from polytf.bench.baselines import NumpyGraph

    original = NumpyGraph.__call__
    monkeypatch.setattr(NumpyGraph, "__call__", lambda self, **feeds: {k: v + 1.0 for k, v in original(self, **feeds).items()})
    model = tmp_path / "matmul_relu.pbtxt"
    model.write_text(MATMUL_RELU_PBTXT)
    out = tmp_path / "bench"
    code = bench(model, "--no-tensorflow", "--threads", "1", "--trials", "1", "--rounds", "1", "--repeats", "1", "--out", out)
    assert code == 1
    assert "differs from the numpy reference" in " ".join(capsys.readouterr().err.split())  # rich wraps lines
    result = json.loads(out.with_name("bench.json").read_text())
    assert result["rows"] == [] and "differs from the numpy reference" in result["failure"]
    assert "Stopped by an error" in out.with_name("bench.md").read_text()


@pytest.mark.tensorflow
def test_bench_zoo_matmul_with_tensorflow_and_xla(tmp_path):
    pytest.importorskip("tensorflow")
    out = tmp_path / "bench"
    code = bench(
        "matmul:32x48x40", "--threads", "1", "--trials", "2", "--rounds", "1", "--repeats", "3", "--warmup", "1", "--out", out
    )
    assert code == 0
    result, text = check_report(out, ["matmul 32x48x40"], ["numpy", "tensorflow", "xla"])
    row = result["rows"][0]
    assert row["flops"] == 2 * 32 * 48 * 40
    # a microsecond model gets more calls per round than --repeats 3: those of --min-round-time 0.2 s
    assert 3 < row["calls_per_round"] <= 1000 and f"Timed with {row['calls_per_round']} calls per round." in text
    assert "--min-round-time 0.2" in result["settings"]["command"]
    assert all(error < 1e-3 for error in row["baseline_max_abs_error_vs_numpy"].values())
    assert result["machine"]["tensorflow"] and f"TensorFlow: {result['machine']['tensorflow']}" in text
    assert "| TF ms | XLA ms |" in text and "| untuned / TF | tuned / TF |" in text
    assert all(error < 1e-3 for error in row["max_abs_error_vs_tensorflow"].values())
    assert set(row["max_abs_error_vs_tensorflow"]) == {"tuned", "untuned"} and "vs TensorFlow: tuned" in text
    tensorflow_s = row["systems"]["tensorflow"]["median_s"]
    assert row["ratio_to_tensorflow"]["tuned"] == pytest.approx(row["systems"]["polytf"]["median_s"] / tensorflow_s)
    assert row["ratio_to_tensorflow"]["untuned"] == pytest.approx(row["systems"]["polytf_untuned"]["median_s"] / tensorflow_s)
    assert "1" in result["machine"]["baseline_blas"]
    # the engines beside TensorFlow (OpenVINO, ONNX Runtime: polytf[bench]), checked against TensorFlow's outputs
    from polytf.bench.engines import ENGINE_SYSTEMS, ENGINES, PACKAGES

    for engine in ENGINES:
        if all(importlib.util.find_spec(package) for package in PACKAGES[engine]):
            assert row["systems"][engine]["median_s"] > 0 and row["baseline_max_abs_error_vs_tensorflow"][engine] < 1e-3
    fastest = min(row["systems"][s]["median_s"] for s in ENGINE_SYSTEMS if "median_s" in row["systems"].get(s, {}))
    assert row["ratio_to_best_engine"]["tuned"] == pytest.approx(row["systems"]["polytf"]["median_s"] / fastest)
    assert "| best engine | untuned / best engine | tuned / best engine |" in text


def test_entry_specs_and_suites(tmp_path):
    assert parse_entry("matmul:1024x1024x1024").sizes == (1024, 1024, 1024)
    assert parse_entry("cifar_cnn:32").batch == 32 and parse_entry("cifar_cnn:32").label == "cifar_cnn b32"
    assert parse_entry("conv3x3_bias_relu_56").batch is None
    for bad in ("resnet9000", "matmul:12x3", "mlp:0", "mlp:2x3", "missing/model.pb"):
        with pytest.raises(PolytfError):
            parse_entry(bad)
    assert parse_threads("1, 2,2") == (1, 2)
    with pytest.raises(PolytfError):
        parse_threads("two")

    plan = resolve_entries([], None, None)  # the default suite: issue3
    assert [(w.label, t) for w, t in plan][:2] == [("matmul 1024x1024x1024", (1, 2)), ("matmul 384x1000x257", (2,))]
    assert len(plan) == len(SUITES["issue3"]) == 7
    assert all(t == (1,) for _, t in resolve_entries([], "issue3", (1,)))  # --threads overrides an entry's own
    assert [w.label for w, _ in resolve_entries(["mlp:4"], None, None)] == ["mlp b4"]

    model = tmp_path / "m.pbtxt"
    model.write_text(MATMUL_RELU_PBTXT)
    assert parse_entry(str(model)).path == model and contraction_flops(model) == 240


@pytest.mark.tensorflow
def test_zoo_single_op_models(tmp_path):
    pytest.importorskip("tensorflow")
    from polytf.bench.baselines import NumpyGraph
    from polytf.model_zoo import write_model_with_info

    info = write_model_with_info("matmul", tmp_path / "mm.pb", sizes=(3, 4, 5))
    assert info.placeholders == (("a", (3, 4)), ("b", (4, 5))) and info.output_names == ("Identity",)
    a, b = np.ones((3, 4), np.float32), np.full((4, 5), 2.0, np.float32)
    np.testing.assert_array_equal(NumpyGraph(info.path)(a=a, b=b)["Identity"], a @ b)
    with pytest.raises(ValueError):
        write_model_with_info("matmul", tmp_path / "bad.pb", batch=4)

    result = subprocess.run(
        [sys.executable, "-m", "polytf.model_zoo", "conv3x3_bias_relu_56", "-o", tmp_path / "conv.pb"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "input: input:1,56,56,64" in result.stdout
    taps = 3 * 56 - 2  # SAME 3x3: per axis, the taps that read inside the input
    assert contraction_flops(tmp_path / "conv.pb") == 2 * taps * taps * 64 * 64


def test_a_model_polytf_cannot_build_is_a_failed_row_and_the_run_goes_on(tmp_path, monkeypatch):
    from polytf.autotune import model_tuner

    budgets = []
    original = model_tuner.tune_model

    def tune_model(path, options, **settings):  # records the budget; tune_model may not take it yet
        budgets.append(settings.pop("time_budget_s", None))
        return original(path, options, **settings)

    monkeypatch.setattr(model_tuner, "tune_model", tune_model)
    unsupported = tmp_path / "cumsum.pbtxt"
    unsupported.write_text(MATMUL_RELU_PBTXT.replace('op: "Relu"', 'op: "Cumsum"'))
    model = tmp_path / "matmul_relu.pbtxt"
    model.write_text(MATMUL_RELU_PBTXT)
    out = tmp_path / "bench"
    options = ["--no-tensorflow", "--threads", "1", "--trials", "1", "--rounds", "1", "--repeats", "2", "--warmup", "0"]
    code = bench(unsupported, model, *options, "--time-budget", "10m", "--out", out)
    assert code == 1  # rows failed: the report has them, the status says so
    result = json.loads(out.with_name("bench.json").read_text())
    failed, measured = result["rows"]
    assert failed["entry"] == "cumsum" and "Cumsum" in failed["error"] and "systems" not in failed
    assert measured["entry"] == "matmul_relu" and measured["systems"]["polytf"]["median_s"] > 0
    assert budgets == [600.0] and measured["tuning"]["time_budget_s"] == 600.0
    assert result["settings"]["time_budget_s"] == 600.0 and "--time-budget 600s" in result["settings"]["command"]
    assert result["failure"] is None
    text = out.with_name("bench.md").read_text()
    assert "| cumsum | 1 | **failed** |" in text and "cumsum, 1 thread(s): **failed**: " in text
    assert "time budget of 600 s per model" in text


def test_bench_help():
    result = polytf("bench", "--help")
    assert result.returncode == 0
    for option in (
        "--suite",
        "--threads",
        "--trials",
        "--rounds",
        "--repeats",
        "--out",
        "--cache-dir",
        "--no-tensorflow",
        "--time-budget",
        "ENTRY",
    ):
        assert option in result.stdout
    assert "bench" in polytf("--help").stdout


def test_unknown_entry_is_a_clear_error(tmp_path):
    result = polytf("bench", "resnet9000", "--out", tmp_path / "bench")
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and "resnet9000" in result.stderr and "cifar_cnn" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())  # nothing ran, nothing written
    bad_threads = polytf("bench", "mlp", "--threads", "0", "--out", tmp_path / "bench")
    assert bad_threads.returncode == 1 and bad_threads.stderr.startswith("error:")
