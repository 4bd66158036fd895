"""``polytf tune --storage postgresql://...``: tuners with separate cache directories (as on
separate machines) share one database and split each kernel's trials, never more than
asked; a third process with an empty cache directory loads the tuned model from it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import sqlalchemy
from postgresql_server import free_port
from system_tools import require_module

import polytf
from polytf.compiler.preparation import prepare_model
from polytf.storage.database_storage import RECORDS_TABLE

TRIALS = 3


def polytf_command(*arguments, storage_in_environment: str | None = None) -> subprocess.Popen:
    environment = dict(os.environ, POLYTF_TUNING_FAULTS="", COLUMNS="1000")  # an error message as one line: no wrapping by rich
    environment.pop("POLYTF_STORAGE", None)
    if storage_in_environment:
        environment["POLYTF_STORAGE"] = storage_in_environment
    command = [sys.executable, "-m", "polytf.cli", *map(str, arguments)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)


def trial_states(url: str) -> dict[str, Counter]:
    """study name -> Counter of its trials' states, read from Optuna's tables."""
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT s.study_name, t.state FROM trials t JOIN studies s ON s.study_id = t.study_id").all()
            records = connection.exec_driver_sql(f"SELECT count(*) FROM {RECORDS_TABLE}").scalar()
    finally:
        engine.dispose()
    result: dict[str, Counter] = {"records": Counter(rows=records)}
    for study, state in rows:
        result.setdefault(study, Counter())[state] += 1
    return result


def test_two_tuners_share_a_database_and_a_third_process_loads_the_model(frozen_model, postgresql_url, tmp_path):
    model = frozen_model("mlp")
    caches = [tmp_path / "machine a", tmp_path / "machine b"]
    tuners = [
        polytf_command("tune", model, "--storage", postgresql_url, "--cache-dir", caches[0], "--threads", 1, "--trials", TRIALS),
        polytf_command("tune", model, "--cache-dir", caches[1], "--threads", 1, "--trials", TRIALS, storage_in_environment=postgresql_url),
    ]
    outputs = [tuner.communicate(timeout=600) for tuner in tuners]
    for tuner, (out, err) in zip(tuners, outputs):
        assert tuner.returncode == 0, err
        assert "Traceback" not in err + out
        assert "records in postgresql://postgres@127.0.0.1:" in out.replace("\n", "")
    studies = trial_states(postgresql_url)
    assert studies.pop("records")["rows"] == 4, "one record per kernel of the MLP"
    assert len(studies) == 4
    for states in studies.values():
        assert sum(states.values()) == TRIALS and set(states) <= {"COMPLETE", "FAIL"}, states
    new_trials = [int(re.search(r"new trials: (\d+)", out).group(1)) for out, _ in outputs]
    assert sum(new_trials) == 4 * TRIALS, f"each trial ran in exactly one tuner: {new_trials}"
    for cache in caches:  # a machine's cache directory keeps only its measurement lock
        assert not (cache / "studies.db").exists() and not list(cache.glob("records/*.json"))

    fresh = tmp_path / "machine c"  # a third machine: nothing tuned, nothing cached
    loaded = polytf.load(model, cache_dir=fresh, threads=1, storage=postgresql_url)
    kernels = tuple(sorted(kernel.scop.name for kernel in prepare_model(model).kernels))
    assert loaded.tuned_kernels == kernels and len(kernels) == 4
    written = {path.relative_to(fresh).parts[0] for path in fresh.rglob("*") if path.is_file()}
    assert written <= {"objects", "models", "locks"}, "loading tunes nothing; it keeps only this machine's compiled code and model entries"
    x = np.random.default_rng(0).standard_normal(loaded.input_types["input"].shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    runner = polytf_command(
        "run", model, "--storage", postgresql_url, "--cache-dir", fresh, "--threads", 1, "--input", f"input={tmp_path / 'x.npy'}", "--output", tmp_path / "out.npz"
    )
    out, err = runner.communicate(timeout=300)
    assert runner.returncode == 0, err
    assert "(4/4 kernels tuned)" in out
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["Identity"], loaded(input=x)["Identity"], rtol=1e-5, atol=1e-6)


def test_an_unreachable_database_is_one_error_line_without_the_password(tmp_path):
    require_module("psycopg", "the PostgreSQL driver of the tuning storage")
    graph = tmp_path / "matmul.pb"
    from graphdef_builders import write_matmul_graphdef

    write_matmul_graphdef(graph, 4, 8, 8)
    url = f"postgresql://tuner:hunter2@127.0.0.1:{free_port()}/polytf"
    for command in (["tune", graph, "--trials", 1], ["show", graph, "--kernel", prepare_model(graph).kernels[0].scop.name]):
        process = polytf_command(*command, "--storage", url, "--cache-dir", tmp_path / "cache")
        out, err = process.communicate(timeout=120)
        assert process.returncode == 1, err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: cannot connect to the tuning storage postgresql://tuner:***@127.0.0.1:"), err
        assert "hunter2" not in out + err and "Traceback" not in err


@pytest.mark.parametrize("argument", ["tune", "run", "show"])
def test_storage_is_an_option_of_the_commands_that_read_records(argument):
    from polytf.cli import build_parser

    parser = build_parser()
    extra = ["--input", "x=x.npy", "--output", "o.npz"] if argument == "run" else []
    assert parser.parse_args([argument, "model.pb", "--storage", "postgresql://u@h/d", *extra]).storage == "postgresql://u@h/d"
