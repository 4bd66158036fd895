"""The command line with size symbols: a model whose placeholder declares a ``-1`` batch runs at
the arrays' sizes with no --input, tunes per --buckets size, and each bad size (0, out of
range, two inputs disagreeing, an unknown symbol, a malformed bucket or range) is one
``error:`` line naming the input or the symbol, status 1, never a traceback."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from polytf.cli import main

#: a: [-1, 5] + b: [-1, 5] -> Relu
PAIR_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: -1 } dim { size: 5 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: -1 } dim { size: 5 } } } } }
node { name: "sum" op: "AddV2" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "sum" attr { key: "T" value { type: DT_FLOAT } } }
"""


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.pbtxt").write_text(PAIR_PBTXT)
    for name, batch in (("a3", 3), ("b3", 3), ("b2", 2), ("a0", 0), ("b0", 0)):
        np.save(tmp_path / f"{name}.npy", np.linspace(-1, 1, batch * 5, dtype=np.float32).reshape(batch, 5))
    return tmp_path


def _main(arguments: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(arguments)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (print(exit_.code, file=err) or 1)
    return status, out.getvalue(), err.getvalue()


CACHE = ["--cache-dir", "cache"]
#: case -> (arguments, words the error line must hold)
CASES = {
    "run, a batch of 0": (["run", "m.pbtxt", "--input", "a=a0.npy", "--input", "b=b0.npy", "--output", "o.npz", *CACHE], ["'a'", "size 0", "N"]),
    "run, two inputs that disagree": (["run", "m.pbtxt", "--input", "a=a3.npy", "--input", "b=b2.npy", "--output", "o.npz", *CACHE], ["'a' and 'b'", "disagree on N"]),
    "tune, a bucket out of the range": (["tune", "m.pbtxt", "--input", "a:N=1..4,5", "--buckets", "N=9", "--trials", "1", *CACHE], ["N = 9", "1..4"]),
    "tune, a bucket of 0": (["tune", "m.pbtxt", "--buckets", "N=0", "--trials", "1", *CACHE], ["--buckets", "'0'"]),
    "tune, a bucket of an unknown symbol": (["tune", "m.pbtxt", "--buckets", "M=2", "--trials", "1", *CACHE], ["no size symbol M", "N"]),
    "tune, an empty range": (["tune", "m.pbtxt", "--input", "a:N=5..4,5", "--trials", "1", *CACHE], ["'a:N=5..4,5'", "empty"]),
    "tune, a range from 0": (["tune", "m.pbtxt", "--input", "a:N=0..4,5", "--trials", "1", *CACHE], ["N", "start at 1"]),
    "show, a bucket out of the range": (["show", "m.pbtxt", "--input", "a:N=..2,5", "--buckets", "N=3", *CACHE], ["N = 3", "1..2"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_size_is_one_error_line(workdir, case):
    arguments, words = CASES[case]
    status, _, err = _main(arguments)
    assert status == 1, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    text = " ".join(line.strip() for line in lines)
    for word in words:
        assert word in text, (word, err)
    assert not (workdir / "o.npz").exists()


def test_run_takes_the_batch_from_the_arrays(workdir):
    status, out, err = _main(["run", "m.pbtxt", "--input", "a=a3.npy", "--input", "b=b3.npy", "--output", "o.npz", *CACHE])
    assert status == 0, err
    a = np.load(workdir / "a3.npy")
    np.testing.assert_allclose(np.load(workdir / "o.npz")["out"], np.maximum(a + a, 0), rtol=1e-6)
    assert "out: float32[3, 5]" in out


def test_tune_tunes_each_bucket(workdir):
    status, out, err = _main(["tune", "m.pbtxt", "--buckets", "N=1,2", "--trials", "1", *CACHE])
    assert status == 0, err
    assert "size bucket N=1 (2 buckets" in out and "size bucket N=2 (2 buckets" in out
    assert out.count("polytf tune m.pbtxt") == 2  # one table per bucket


def test_show_lists_the_kernels_at_each_bucket(workdir):
    status, out, err = _main(["show", "m.pbtxt", "--buckets", "N=1,4", *CACHE])
    assert status == 0, err
    assert "at size bucket N=1" in out and "at size bucket N=4" in out


def test_show_marks_the_kernels_tuned_at_each_bucket(workdir):
    status, _, err = _main(["tune", "m.pbtxt", "--buckets", "N=2", "--trials", "1", *CACHE])
    assert status == 0, err
    status, out, err = _main(["show", "m.pbtxt", "--buckets", "N=1,2", *CACHE])
    assert status == 0, err
    at_one, at_two = out.split("at size bucket N=2")
    assert "none tuned" in at_one and "[tuned]" not in at_one
    assert "1 tuned" in at_two and "[tuned]" in at_two


def test_show_marks_the_kernels_a_batch_runs_as_the_smallest_batchs(workdir, monkeypatch):
    from polytf.compiler import sliced_kernels

    monkeypatch.setattr(sliced_kernels, "MIN_SLICE_POINTS", 0)  # this model's slices are 5 points
    status, out, err = _main(["show", "m.pbtxt", "--buckets", "N=1,4", *CACHE])
    assert status == 0, err
    at_one, at_four = out.split("at size bucket N=4")
    assert "smaller batch" not in at_one and "slices of" not in at_one
    assert "1 run as a smaller batch's kernels (no compile)" in at_four and "[4 slices of N=1's]" in at_four
    monkeypatch.setattr(sliced_kernels, "MIN_SLICE_POINTS", 10**9)
    status, out, err = _main(["show", "m.pbtxt", "--buckets", "N=4", *CACHE])
    assert status == 0, err
    assert "slices of" not in out and "none tuned" in out  # too small to slice: compiled at 4
