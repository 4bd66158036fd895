"""The ``polytf`` command: tune (progress, table, cache reuse), run, show, cache, errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

UNSUPPORTED_PBTXT = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 3 } } } } }
node { name: "a" op: "Lgamma" input: "x" input: "axis" }
node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 1 } } } }
node { name: "b" op: "Erfinv" input: "a" }
node { name: "c" op: "Relu" input: "b" }
"""


def polytf(*args, cache_dir=None, timeout=600):
    env = dict(os.environ)
    if cache_dir is not None:
        env["POLYTF_CACHE_DIR"] = str(cache_dir)
    command = [sys.executable, "-m", "polytf.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def test_help_answers():
    result = polytf("--help")
    assert result.returncode == 0
    for command in ("tune", "run", "show", "cache", "ops"):
        assert command in result.stdout
    tune_help = polytf("tune", "--help").stdout
    assert "--trials" in tune_help and "--cache-dir" in tune_help and "--retune" in tune_help and "NAME:SHAPE" in tune_help


def test_tune_then_reuse_then_run(frozen_model, tmp_path):
    model = frozen_model("conv_bias_relu")
    cache = tmp_path / "cache"
    first = polytf("tune", model, "--trials", "4", "--cache-dir", cache)
    assert first.returncode == 0, first.stderr
    assert "Conv2D+BiasAdd+Relu" in first.stdout and "tuned" in first.stdout
    assert "model latency: default" in first.stdout
    assert "new trials: 4 (" in first.stdout and "per minute of tuning)" in first.stdout
    records = list((cache / "records").glob("*.json"))
    assert len(records) == 1
    stamp = records[0].stat().st_mtime_ns

    second = polytf("tune", model, "--trials", "4", cache_dir=cache)  # via POLYTF_CACHE_DIR
    assert second.returncode == 0, second.stderr
    assert "cached" in second.stdout and "new trials: 0" in second.stdout
    assert records[0].stat().st_mtime_ns == stamp

    x = np.random.default_rng(0).standard_normal((1, 17, 19, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ran = polytf("run", model, "--input", f"input={tmp_path / 'x.npy'}", "--output", tmp_path / "out.npz", "--cache-dir", cache)
    assert ran.returncode == 0, ran.stderr
    assert "1/1 kernels tuned" in ran.stdout
    from polytf.model_zoo import run_graphdef_with_tensorflow

    expected = run_graphdef_with_tensorflow(model, {"input": x}, ["Identity"])["Identity"]
    actual = np.load(tmp_path / "out.npz")["Identity"]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max() + 1e-6)

    listing = polytf("cache", "list", "--cache-dir", cache)
    assert "1 tuning records" in listing.stdout
    compiled = re.search(r"(\d+) compiled kernels and (\d+) default recipes", listing.stdout)
    assert compiled and int(compiled.group(1)) >= 1, listing.stdout  # the tuned and the default model's kernels
    verified = polytf("cache", "verify", "--cache-dir", cache)
    assert verified.returncode == 0 and re.search(r"compiled kernels and default recipes in .*: \d+ ok, 0 failed", verified.stdout), verified.stdout
    cleared = polytf("cache", "clear", "--cache-dir", cache)
    assert cleared.returncode == 0 and f"{int(compiled.group(1)) + int(compiled.group(2))} compiled kernels and default recipes" in cleared.stdout
    assert not list((cache / "objects").glob("*.o.polytf"))


def test_show_prints_tree_ast_and_code(frozen_model):
    model = frozen_model("conv_bias_relu")
    overview = polytf("show", model)
    assert overview.returncode == 0 and "k0_" in overview.stdout
    kernel = overview.stdout.split("k0_")[1].split(":")[0]
    detail = polytf("show", model, "--kernel", f"k0_{kernel}", "--llvm", "--assembly")
    assert detail.returncode == 0, detail.stderr
    for section in ("schedule tree", "loop AST", "LLVM IR", "assembly"):
        assert section in detail.stdout
    assert "for (int c" in detail.stdout and "define" in detail.stdout


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "GraphDef"),
        (b"def f():\n    return 1\n", "GraphDef"),
    ],
)
def test_bad_files_get_a_clear_error(tmp_path, content, message):
    path = tmp_path / "model.pb"
    path.write_bytes(content)
    result = polytf("tune", path, "--cache-dir", tmp_path / "cache")
    assert result.returncode == 1
    assert "error:" in result.stderr and message in result.stderr and "model.pb" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()


def test_truncated_model_gets_a_clear_error(frozen_model, tmp_path):
    data = frozen_model("mlp").read_bytes()
    path = tmp_path / "truncated.pb"
    path.write_bytes(data[: len(data) // 2 + 7])
    result = polytf("tune", path, "--cache-dir", tmp_path / "cache")
    assert result.returncode == 1 and "error:" in result.stderr and "Traceback" not in result.stderr


def test_unsupported_ops_are_all_listed_and_the_cache_is_untouched(tmp_path):
    path = tmp_path / "model.pbtxt"
    path.write_text(UNSUPPORTED_PBTXT)
    result = polytf("tune", path, "--cache-dir", tmp_path / "cache")
    assert result.returncode == 1
    assert "node 'a' (op Lgamma)" in result.stderr and "node 'b' (op Erfinv)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()


def test_an_unknown_batch_is_tuned_at_its_smallest_size_unless_given(tmp_path):
    path = tmp_path / "model.pbtxt"
    path.write_text(
        'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } '
        'attr { key: "shape" value { shape { dim { size: -1 } dim { size: 3 } } } } }\n'
        'node { name: "y" op: "Relu" input: "x" }\n'
    )
    result = polytf("tune", path, "--trials", "1", "--cache-dir", tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "size bucket N=1 (1 bucket" in result.stdout and "Relu" in result.stdout
    fixed = polytf("tune", path, "--trials", "1", "--input", "x:4,3", "--cache-dir", tmp_path / "cache")
    assert fixed.returncode == 0, fixed.stderr
    assert "Relu" in fixed.stdout and "size bucket" not in fixed.stdout


def test_ops_lists_supported_ops():
    result = polytf("ops")
    assert result.returncode == 0
    for op in ("MatMul", "Conv2D", "MaxPool", "Softmax", "BiasAdd", "Reshape"):
        assert op in result.stdout
