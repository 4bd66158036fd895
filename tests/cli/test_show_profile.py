"""``polytf show MODEL --profile``: a per-kernel table (execution order) with GFLOP/s and % of
the measured peak, and a totals line."""

from __future__ import annotations

import re

import pytest

from polytf.cli import main

MATMUL_RELU_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 32 } dim { size: 48 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 48 } dim { size: 40 } } } } }
node { name: "mm" op: "MatMul" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""


def show_profile(capsys, *args):
    code = main(["show", *map(str, args), "--profile"])
    captured = capsys.readouterr()
    return code, " ".join(captured.out.split()), captured.err  # rich may wrap cells


def test_profile_of_a_graphdef_without_tensorflow(tmp_path, capsys):
    model = tmp_path / "mm.pbtxt"
    model.write_text(MATMUL_RELU_PBTXT)
    code, out, err = show_profile(capsys, model, "--cache-dir", tmp_path / "cache", "--threads", "1", "--repeats", "2")
    assert code == 0, err
    assert "1 kernels (0 from tuning records), 1 threads" in out
    assert re.search(r"float32 peak: [0-9.]+ GFLOP/s on 1 threads \(FMA loop on <\d+ x float>", out)
    for header in ("kernel", "median ms", "MFLOP", "GFLOP/s", "% peak", "recipe"):
        assert header in out
    assert "MatMul + Relu" in out and "32x40" in out and f"{2 * 32 * 48 * 40 / 1e6:.1f}" in out
    totals = re.search(
        r"total: call ([0-9.]+) ms, sum of kernels in the call ([0-9.]+) ms, call / kernels ([0-9.]+), "
        r"kernels alone \(hot caches\) ([0-9.]+) ms, ([0-9.]+) GFLOP/s, ([0-9.]+)% of",
        out,
    )
    assert totals and float(totals.group(1)) > 0 and float(totals.group(5)) > 0
    assert float(totals.group(1)) >= float(totals.group(2)) and float(totals.group(3)) >= 1.0
    assert "alone ms" in out


def test_profile_of_a_zoo_model_in_execution_order(frozen_model, tmp_path, capsys):
    model = frozen_model("conv_bias_relu")  # frozen once per session, shared with test_cli
    code, out, err = show_profile(capsys, model, "--cache-dir", tmp_path / "cache", "--threads", "2", "--repeats", "1")
    assert code == 0, err
    names = re.findall(r"│ (k\d+)_", out)
    assert names and names == sorted(names, key=lambda name: int(name[1:]))  # execution order
    assert "Conv2D" in out and "% of" in out


def test_bad_repeats(tmp_path):
    model = tmp_path / "mm.pbtxt"
    model.write_text(MATMUL_RELU_PBTXT)
    with pytest.raises(SystemExit) as exited:  # argparse's usage error, before the model is read
        main(["show", str(model), "--profile", "--repeats", "0"])
    assert exited.value.code == 2
