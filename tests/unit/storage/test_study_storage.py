"""The study database of a cache: URLs of odd directories, WAL, concurrent creation, clear."""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
import subprocess
import sys

import optuna
import pytest
from sqlalchemy.engine import make_url

from polytf.storage import study_storage
from polytf.storage.cache import KernelCache, TuningRecord
from polytf.storage.cache_key import CacheKey

optuna.logging.set_verbosity(logging.WARNING)

ODD_NAMES = ["q?x=1", "100%", "a#b", "with space", "é 漢字", "{SCHEMA_VERSION}", "a;b@c:d", "%3F"]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_an_odd_directory_keeps_everything_inside_it(tmp_path, name):
    directory = tmp_path / name
    cache = KernelCache(directory)
    assert make_url(cache.study_storage_url).database == str(directory.absolute() / "studies.db")
    storage = cache.study_storage()
    optuna.create_study(storage=storage, study_name="s").optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    key = CacheKey("scop", {"cpu": "x"}, 1, {})
    cache.save(TuningRecord({}, "k0", ("Relu",), {}, 1.0, 1.0, 1, 0), key)
    assert cache.load(key) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "nothing may be written outside the cache directory"
    assert (directory / "studies.db").is_file() and (directory / "records" / f"{key.digest()}.json").is_file()
    with sqlite3.connect(directory / "studies.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [s.study_name for s in KernelCache(directory).study_storage().get_all_studies()] == ["s"]


def _create_and_tune(directory, barrier, failures) -> None:
    try:
        cache = KernelCache(directory)
        barrier.wait(timeout=60)
        study = optuna.create_study(storage=cache.study_storage(), study_name="shared", load_if_exists=True)
        study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    except Exception as error:  # reported to the test
        failures.put(f"{type(error).__name__}: {error}")


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_processes_creating_the_storage_at_once_do_not_race(tmp_path):
    """Without the lock, Optuna's table creation and alembic stamping race ("table studies
    already exists", "UNIQUE constraint failed: alembic_version") in most attempts."""
    context = multiprocessing.get_context("fork")
    for attempt in range(3):
        directory = tmp_path / f"attempt{attempt}"
        barrier, failures = context.Barrier(3), context.Queue()
        processes = [context.Process(target=_create_and_tune, args=(directory, barrier, failures)) for _ in range(3)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        assert [process.exitcode for process in processes] == [0, 0, 0]
        assert failures.empty(), failures.get()
        assert [s.study_name for s in KernelCache(directory).study_storage().get_all_studies()] == ["shared"]


def _three_studies(cache):
    storage = cache.study_storage()
    optuna.create_study(storage=storage, study_name="idle").optimize(lambda trial: 1.0, n_trials=2)
    optuna.create_study(storage=storage, study_name="running").ask()  # a tuner in the middle of a trial
    optuna.create_study(storage=storage, study_name="recent").optimize(lambda trial: 1.0, n_trials=1)
    return storage


def test_clear_while_a_tuner_runs_deletes_only_idle_studies(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    storage = _three_studies(cache)
    with cache.tuning():  # a tuner of this cache is running (the lock is held in this process)
        old = cache.clear()
        assert (old.studies_removed, old.studies_kept, old.tuner_running) == (0, 3, True), "every study has a recent or running trial"
        monkeypatch.setattr(study_storage, "STUDY_IN_USE_S", 0.0)
        report = cache.clear()
    assert (report.studies_removed, report.studies_kept) == (2, 1)
    assert [s.study_name for s in storage.get_all_studies()] == ["running"]


def test_clear_with_no_tuner_running_deletes_every_study(tmp_path):
    cache = KernelCache(tmp_path)
    storage = _three_studies(cache)  # "running": a trial left running by a tuner that was killed
    report = cache.clear()
    assert (report.studies_removed, report.studies_kept, report.tuner_running) == (3, 0, False)
    assert storage.get_all_studies() == []


def test_a_killed_tuner_holds_nothing(tmp_path):
    cache = KernelCache(tmp_path)
    _three_studies(cache)
    holder = (
        "import sys, time; from polytf.storage.cache import KernelCache\n"
        "with KernelCache(sys.argv[1]).tuning():\n    print('held', flush=True); time.sleep(600)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        assert cache.clear().tuner_running  # a live tuner in another process: its studies kept
    finally:
        process.kill()
        process.wait(timeout=60)
    report = cache.clear()  # the kernel released the killed process's lock
    assert not report.tuner_running and report.studies_kept == 0


def test_clear_removes_a_study_file_that_is_not_a_database(tmp_path):
    cache = KernelCache(tmp_path)
    cache.records_dir.mkdir(parents=True)
    cache.study_database.write_bytes(b"this is not SQLite" * 100)
    assert cache.clear().records == 0
    assert not cache.study_database.exists()
    assert cache.study_storage().get_all_studies() == []
