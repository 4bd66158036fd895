"""Every command against bad paths, bad numbers, bad files and unwritable outputs: each is one
``error:`` line and a non-zero exit status, never a traceback, and nothing is written to the
tuning cache (issue 29's matrix). In this process, through ``polytf.cli.main``: an exception
other than SystemExit escaping ``main`` is the traceback a user would see."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from polytf.cli import main

#: a: [6, 5] @ w (constant) -> Relu
MATMUL_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 5 } dim { size: 4 } } float_val: 0.5 } } } }
node { name: "mm" op: "MatMul" input: "a" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""

CACHE = ["--cache-dir", "cache"]
#: case -> (arguments, a word the error must contain)
CASES = {
    # bad paths and files
    "tune, no such model": (["tune", "missing.pb", *CACHE], "missing.pb"),
    "tune, a model that is not a GraphDef": (["tune", "garbage.pb", *CACHE], "garbage.pb"),
    "tune, a folder that is no SavedModel": (["tune", "folder", *CACHE], "folder"),
    "tune, a cache directory that is a file": (["tune", "m.pbtxt", "--trials", "1", "--cache-dir", "a_file"], "a_file"),
    "tune, an unknown output node": (["tune", "m.pbtxt", "--output", "nonode", *CACHE], "nonode"),
    "tune, an unknown placeholder": (["tune", "m.pbtxt", "--input", "zz:1,2", *CACHE], "zz"),
    "tune, a malformed shape": (["tune", "m.pbtxt", "--input", "a=1,2", *CACHE], "NAME:SHAPE"),
    "run, no such input file": (["run", "m.pbtxt", "--input", "a=none.npy", "--output", "o.npz", *CACHE], "none.npy"),
    "run, an archive of other arrays": (["run", "m.pbtxt", "--input", "a=two.npz", "--output", "o.npz", *CACHE], "two.npz"),
    "run, an input that is no array": (["run", "m.pbtxt", "--input", "a=garbage.pb", "--output", "o.npz", *CACHE], "garbage.pb"),
    "run, an input without a file": (["run", "m.pbtxt", "--input", "a", "--output", "o.npz", *CACHE], "NAME=PATH"),
    "run, an output in no folder": (["run", "m.pbtxt", "--input", "a=a.npy", "--output", "nofolder/o.npz", *CACHE], "nofolder"),
    "run, an output that is a folder": (["run", "m.pbtxt", "--input", "a=a.npy", "--output", "folder", *CACHE], "folder"),
    "run, an output under a file": (["run", "m.pbtxt", "--input", "a=a.npy", "--output", "a_file/o.npz", *CACHE], "a_file"),
    "run, an unknown input name": (["run", "m.pbtxt", "--input", "b=a.npy", "--output", "o.npz", *CACHE], "'b'"),
    "run, an input of a fixed shape": (["run", "m.pbtxt", "--input", "a=a_7x5.npy", "--output", "o.npz", *CACHE], "(7, 5)"),
    "run, an unknown fetch": (["run", "m.pbtxt", "--input", "a=a.npy", "--output", "o.npz", "--fetch", "zz", *CACHE], "zz"),
    "compile, an output folder that is a file": (["compile", "m.pbtxt", "-o", "a_file", *CACHE], "a_file"),
    "compile, an output folder under a file": (["compile", "m.pbtxt", "-o", "a_file/sub", *CACHE], "a_file"),
    "compile, a name that is no C identifier": (["compile", "m.pbtxt", "-o", "out", "--name", "1bad", *CACHE], "1bad"),
    "compile, an unknown triple": (["compile", "m.pbtxt", "-o", "out", "--target-triple", "sparc", *CACHE], "sparc"),
    "show, no such model": (["show", "missing.pb", *CACHE], "missing.pb"),
    "show, an unknown kernel": (["show", "m.pbtxt", "--kernel", "nokernel", *CACHE], "nokernel"),
    "show, a recipe that is not JSON": (["show", "m.pbtxt", "--kernel", "k0_mm", "--recipe", "bad.json", *CACHE], "JSON"),
    "show, no such recipe file": (["show", "m.pbtxt", "--kernel", "k0_mm", "--recipe", "none.json", *CACHE], "none.json"),
    "show, --llvm without --kernel": (["show", "m.pbtxt", "--llvm", *CACHE], "--kernel"),
    "cache list, a file as the cache": (["cache", "--cache-dir", "a_file", "list"], "a_file"),
    "cache clear, a file as the cache": (["cache", "--cache-dir", "a_file", "clear"], "a_file"),
    "cache verify, a file as the cache": (["cache", "--cache-dir", "a_file", "verify"], "a_file"),
    "bench, a report under a file": (["bench", "m.pbtxt", "--no-tensorflow", "--out", "a_file/report"], "a_file"),
    "bench, an unknown entry": (["bench", "nosuchentry"], "nosuchentry"),
    "ops, no such model": (["ops", "--model", "missing.pb"], "missing.pb"),
    "ops, a model that is not a GraphDef": (["ops", "--model", "garbage.pb"], "garbage.pb"),
    # bad numbers
    "tune, 0 trials": (["tune", "m.pbtxt", "--trials", "0", *CACHE], "--trials"),
    "tune, -1 trials": (["tune", "m.pbtxt", "--trials", "-1", *CACHE], "--trials"),
    "tune, 0 threads": (["tune", "m.pbtxt", "--threads", "0", *CACHE], "--threads"),
    "tune, -3 threads": (["tune", "m.pbtxt", "--threads", "-3", *CACHE], "--threads"),
    "tune, a budget of 0": (["tune", "m.pbtxt", "--time-budget", "0", *CACHE], "--time-budget"),
    "tune, a budget that is no duration": (["tune", "m.pbtxt", "--time-budget", "soon", *CACHE], "--time-budget"),
    "tune, trials and a budget": (["tune", "m.pbtxt", "--trials", "2", "--time-budget", "5s", *CACHE], "--time-budget"),
    "tune, a candidate timeout of 0": (["tune", "m.pbtxt", "--candidate-timeout", "0", *CACHE], "--candidate-timeout"),
    "run, -1 threads": (["run", "m.pbtxt", "--input", "a=a.npy", "--output", "o.npz", "--threads", "-1", *CACHE], "--threads"),
    "compile, a negative weights limit": (["compile", "m.pbtxt", "-o", "out", "--embed-weights-limit-mb", "-1", *CACHE], "--embed-weights-limit-mb"),
    "show, 0 repeats": (["show", "m.pbtxt", "--profile", "--repeats", "0", *CACHE], "--repeats"),
    "cache verify, a time limit of 0": (["cache", "verify", "--time-limit", "0", *CACHE], "--time-limit"),
    "bench, 0 rounds": (["bench", "m.pbtxt", "--rounds", "0"], "--rounds"),
    "bench, 0 repeats": (["bench", "m.pbtxt", "--repeats", "0"], "--repeats"),
    "bench, -1 warm-up calls": (["bench", "m.pbtxt", "--warmup", "-1"], "--warmup"),
    "bench, a budget that is no duration": (["bench", "m.pbtxt", "--time-budget", "soon"], "soon"),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder with the model, good and bad input files, a file, a folder and bad JSON."""
    path = tmp_path_factory.mktemp("cli_errors")
    (path / "m.pbtxt").write_text(MATMUL_PBTXT)
    (path / "garbage.pb").write_bytes(b"\x00\x01 not a GraphDef")
    (path / "a_file").write_text("a file, not a folder")
    (path / "folder").mkdir()
    (path / "bad.json").write_text("{not json")
    np.save(path / "a.npy", np.ones((6, 5), "float32"))
    np.save(path / "a_7x5.npy", np.ones((7, 5), "float32"))
    np.savez(path / "two.npz", p=np.ones((6, 5), "float32"), q=np.ones((6, 5), "float32"))
    return path


def run_cli(arguments: list[str]) -> tuple[int, str]:
    """``polytf ARGUMENTS``: (exit status, everything printed and the exit message); an
    exception other than SystemExit propagates (a traceback: the test fails)."""
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed), contextlib.redirect_stdout(printed):
        try:
            status = main(arguments)
        except SystemExit as exited:  # argparse (status 2) or a command's SystemExit("error: ...")
            status = exited.code if isinstance(exited.code, int) else 1
            if isinstance(exited.code, str):
                printed.write(exited.code)
    return status, " ".join(printed.getvalue().split())  # rich wraps long lines


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_argument_is_one_error_line(case, folder, monkeypatch):
    monkeypatch.chdir(folder)
    monkeypatch.setenv("COLUMNS", "400")
    arguments, word = CASES[case]
    status, text = run_cli(arguments)
    assert status not in (0, None), text
    assert "error:" in text and word in text, text
    assert "Traceback" not in text
    records = folder / "cache" / "records"
    assert not records.exists() or not list(records.iterdir()), f"{case} wrote a record"
    assert not (folder / "o.npz").exists() and not (folder / "out").exists()
