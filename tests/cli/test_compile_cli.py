"""``polytf compile``: tuned records reach the object, the files and the entry point are named,
and bad input is one line naming what to do."""

from __future__ import annotations

import os
import subprocess
import sys

from graphdef_builders import write_matmul_graphdef

TOP_K_PBTXT = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 5 } } } } }
node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 2 } } } }
node { name: "top" op: "TopKV2" input: "x" input: "k" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "y" op: "Relu" input: "top" attr { key: "T" value { type: DT_FLOAT } } }
"""


def polytf(*args, cache_dir, timeout=600):
    env = dict(os.environ, POLYTF_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, "-m", "polytf.cli", *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


def test_compile_uses_tuned_records_and_names_its_files(tmp_path):
    model = tmp_path / "dense.pb"
    write_matmul_graphdef(model, 16, 48, 24)
    cache = tmp_path / "cache"
    tuned = polytf("tune", model, "--trials", "3", "--threads", "1", cache_dir=cache)
    assert tuned.returncode == 0, tuned.stderr
    result = polytf("compile", model, "-o", tmp_path / "out", "--threads", "1", cache_dir=cache)
    assert result.returncode == 0, result.stderr
    assert "dense: 1 kernels for x86_64" in result.stdout or "dense: 1 kernels for aarch64" in result.stdout
    assert "1 with tuned recipes (threads 1), 0 with default recipes" in result.stdout
    assert "int dense_run(const float *x, float *mm, int threads)" in result.stdout
    for suffix in (".o", ".h"):
        assert (tmp_path / "out" / f"dense{suffix}").is_file()
        assert f"dense{suffix}" in result.stdout
    # another thread count has no records: default recipes, said so
    untuned = polytf("compile", model, "-o", tmp_path / "out", "--threads", "2", "--name", "dense2", "--no-shared-library", cache_dir=cache)
    assert untuned.returncode == 0, untuned.stderr
    assert "0 with tuned recipes (threads 2), 1 with default recipes" in untuned.stdout
    assert not (tmp_path / "out" / "dense2.so").exists()


def test_compile_errors_are_one_line(tmp_path):
    model = tmp_path / "dense.pb"
    write_matmul_graphdef(model, 4, 4, 4)
    cache = tmp_path / "cache"
    wrong = polytf("compile", model, "-o", tmp_path / "out", "--target-triple", "sparc64-sun-solaris", cache_dir=cache)
    assert wrong.returncode == 1
    said = " ".join((wrong.stdout + wrong.stderr).split())  # the console wraps long lines
    assert "error: target triple 'sparc64-sun-solaris': polytf generates CPU code for x86_64, aarch64" in said
    assert "Traceback" not in wrong.stdout + wrong.stderr
    top_k = tmp_path / "top_k.pbtxt"
    top_k.write_text(TOP_K_PBTXT)
    host = polytf("compile", top_k, "-o", tmp_path / "out", cache_dir=cache)
    assert host.returncode == 1 and "Traceback" not in host.stdout + host.stderr
    said = " ".join((host.stdout + host.stderr).split())
    assert "'top' (TopKV2" in said and "run on the host in Python, which an exported model cannot do" in said
    assert "compile" in polytf("--help", cache_dir=cache).stdout
