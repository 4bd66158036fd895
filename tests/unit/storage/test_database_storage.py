"""The PostgreSQL tuning storage against a real server: records round trip and validation,
URL errors in one line without the password, advisory locks, and tuners in several
processes sharing one study without exceeding its trials."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import warnings
from pathlib import Path

import optuna
import pytest
from graphdef_builders import write_matmul_graphdef
from optuna.trial import TrialState
from postgresql_server import free_port
from system_tools import require_module

import polytf
from polytf.compiler.preparation import prepare_model
from polytf.compiler.recorded_recipes import cache_key
from polytf.config import CodegenConfig
from polytf.errors import CacheError, CacheWarning, DependencyMissingError
from polytf.storage.cache import KernelCache, TuningRecord
from polytf.storage.cache_key import CacheKey
from polytf.storage.database_storage import RECORDS_TABLE, DatabaseStorage, hide_password
from polytf.storage.tuning_storage import open_tuning_storage
from polytf.targets.cpu import CpuTarget

PASSWORD = "s3cret-pass"


def record(trials: int = 3) -> TuningRecord:
    return TuningRecord({}, "k0", ("MatMul",), {"tile_sizes": [3, 32], "vector_width": 8}, 2e-6, 1e-6, trials, 0)


def key(cpu: str = "znver4") -> CacheKey:
    return CacheKey("scop", {"cpu": cpu}, 1, {})


@pytest.fixture
def storage(postgresql_url):
    opened = DatabaseStorage(postgresql_url)
    yield opened
    opened.close()


def test_records_round_trip_and_the_last_writer_wins(storage, postgresql_url):
    assert storage.load(key()) is None
    storage.save(record(trials=3), key())
    assert storage.load(key()).trials == 3
    storage.save(record(trials=5), key())  # an upsert: one row, the newer record
    assert storage.load(key()).trials == 5
    assert storage.load(key("znver5")) is None, "another CPU's key finds nothing"
    other = DatabaseStorage(postgresql_url)  # another process, or machine, sees it
    try:
        assert other.load(key()) == storage.load(key())
        with other.engine.connect() as connection:
            assert connection.exec_driver_sql(f"SELECT count(*) FROM {RECORDS_TABLE}").scalar() == 1
    finally:
        other.close()


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{not json", "it is not valid JSON"),
        ('{"kernel": "k0"}', "missing"),
        ("foreign", "target.cpu is 'znver5' in the record, 'znver4' here"),
    ],
)
def test_an_unusable_row_gives_one_warning_naming_the_database_and_the_key(storage, text, reason):
    storage.save(record(), key())
    if text == "foreign":  # another machine's record under this key's digest (an edited row)
        with storage.engine.begin() as connection:
            foreign = connection.exec_driver_sql(f"SELECT record FROM {RECORDS_TABLE}").scalar()
        text = foreign.replace('"znver4"', '"znver5"')
    with storage.engine.begin() as connection:
        connection.exec_driver_sql(f"UPDATE {RECORDS_TABLE} SET record = %(text)s", {"text": text})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert storage.load(key()) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1
    assert key().digest() in messages[0] and storage.location in messages[0] and reason in messages[0]
    assert messages[0].endswith("the kernel uses its default recipe")


def test_urls_that_cannot_work_give_one_line_without_the_password(tmp_path):
    require_module("psycopg", "the PostgreSQL driver of the tuning storage")
    cache = KernelCache(tmp_path / "cache")
    cases = [
        (f"postgresql://user:{PASSWORD}@127.0.0.1:{free_port()}/polytf", CacheError, "cannot connect to the tuning storage postgresql://user:***@127.0.0.1:"),
        (f"mysql://user:{PASSWORD}@db.example/polytf", CacheError, "unsupported storage URL mysql://user:***@db.example/polytf"),
        (f"postgresql://user:{PASSWORD}@db.example:port/polytf", CacheError, "its port is not a number"),
        (f"postgresql://user:{PASSWORD}@db.example", CacheError, "names no database"),
        ("not a url", CacheError, "invalid storage URL not a url"),
    ]
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        cases.append((f"postgresql+psycopg2://user:{PASSWORD}@db.example/polytf", DependencyMissingError, "pip install psycopg2-binary"))
    for url, error_type, expected in cases:
        with pytest.raises(error_type) as raised:
            open_tuning_storage(url, cache)
        message = str(raised.value)
        assert expected in message and PASSWORD not in message and "\n" not in message, message
    assert not cache.directory.exists(), "a failed storage writes nothing to the cache directory"


def test_the_environment_variable_chooses_the_storage_and_an_empty_url_the_cache(postgresql_url, tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    monkeypatch.delenv("POLYTF_STORAGE", raising=False)
    assert open_tuning_storage(None, cache) is cache
    monkeypatch.setenv("POLYTF_STORAGE", postgresql_url)
    chosen = open_tuning_storage(None, cache)
    assert isinstance(chosen, DatabaseStorage) and chosen.location == hide_password(postgresql_url)
    chosen.close()
    assert open_tuning_storage("", cache) is cache, "--storage '' keeps the cache directory whatever the environment says"


def test_advisory_locks_nest_in_a_process_and_exclude_other_sessions(storage, postgresql_url):
    other = DatabaseStorage(postgresql_url)
    try:
        with storage.study_lock("k"), storage.study_lock("k"):  # nests, as a file lock does
            assert storage.study_lock("k").held
            waiting = other.study_lock("k")
            waiting.timeout_s = 0.3
            with pytest.raises(CacheError, match="timed out after 0 s waiting for the lock 'study-k' in postgresql://"):
                waiting.acquire()
            with other.study_lock("another kernel"):  # other names are other locks
                pass
        with other.study_lock("k"):  # released by the outermost exit
            pass
    finally:
        other.close()


CONCURRENT_TUNER = """
import sys, time
from hand_built_graphs import graph_matmul_bias_relu, kernels_of
from polytf.runtime.cpu.kernel_bench import Measurement
from polytf.autotune.tuner import tune_kernel
from polytf.storage.database_storage import DatabaseStorage
from polytf.targets.cpu import CpuTarget

storage = DatabaseStorage(sys.argv[1])
kernel = kernels_of(graph_matmul_bias_relu(16, 24, 32))[0]
measured = []
def evaluator(recipe):
    time.sleep(0.05)
    measured.append(recipe)
    return Measurement((1e-3 * (1 + len(str(recipe)) % 7),))
result = tune_kernel(kernel, CpuTarget(), trials=12, threads=1, storage=storage.study_storage(), study_name="k",
                     lock=storage.study_lock("k"), evaluator=evaluator)
storage.close()
print(result.trials_here, result.trials)
"""


def test_tuners_in_several_processes_share_a_study_without_exceeding_its_trials(postgresql_url):
    tests = Path(__file__).parents[2]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tests / "unit"), os.environ.get("PYTHONPATH", "")]))
    tuners = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT_TUNER, postgresql_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
        for _ in range(3)
    ]
    outputs = [tuner.communicate(timeout=300) for tuner in tuners]
    assert [tuner.returncode for tuner in tuners] == [0, 0, 0], [err for _, err in outputs]
    counts = [tuple(map(int, out.split())) for out, _ in outputs]
    assert sum(here for here, _ in counts) == 12, counts
    assert all(total == 12 for _, total in counts), "every tuner reports the whole study"
    storage = DatabaseStorage(postgresql_url)
    try:
        trials = optuna.load_study(study_name="k", storage=storage.study_storage()).trials
    finally:
        storage.close()
    assert sorted(t.number for t in trials) == list(range(12))
    assert {t.state for t in trials} == {TrialState.COMPLETE}
    assert len({t.user_attrs["owner"] for t in trials}) >= 2, "the trials were split between the tuners"


def _open_at_once(url, barrier, failures) -> None:
    try:
        barrier.wait(timeout=60)
        storage = DatabaseStorage(url)
        study = optuna.create_study(storage=storage.study_storage(), study_name="shared", load_if_exists=True)
        with storage.study_lock("shared"):
            study.tell(study.ask(), 1.0)
        storage.close()
    except Exception as error:  # reported to the test
        failures.put(f"{type(error).__name__}: {error}")


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_processes_creating_the_tables_at_once_do_not_race(postgresql_server):
    context = multiprocessing.get_context("fork")
    for attempt in range(2):
        url = postgresql_server.create_database(f"race_{os.getpid()}_{attempt}")
        barrier, failures = context.Barrier(3), context.Queue()
        processes = [context.Process(target=_open_at_once, args=(url, barrier, failures)) for _ in range(3)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        assert [process.exitcode for process in processes] == [0, 0, 0]
        assert failures.empty(), failures.get()
        storage = DatabaseStorage(url)
        try:
            assert len(optuna.load_study(study_name="shared", storage=storage.study_storage()).trials) == 3
        finally:
            storage.close()


def test_polytf_load_reads_the_database_not_the_cache_directory(postgresql_url, tmp_path):
    path = tmp_path / "matmul.pb"
    write_matmul_graphdef(path, 6, 32, 96)
    kernel = prepare_model(path).kernels[0]
    matmul_key = cache_key(kernel, CpuTarget(), 1, CodegenConfig())
    storage = DatabaseStorage(postgresql_url)
    try:
        storage.save(record(), matmul_key)
        fresh = tmp_path / "fresh cache"
        model = polytf.load(path, cache_dir=fresh, threads=1, storage=postgresql_url)
        assert model.tuned_kernels == (kernel.scop.name,)
        written = sorted(path.relative_to(fresh).parts[0] for path in fresh.rglob("*") if path.is_file())
        assert set(written) <= {"objects", "models", "locks"} and "objects" in written, "the database holds recipes; compiled code stays on this machine"
        assert not (fresh / "records").exists() or not any((fresh / "records").iterdir()), "no record is written to the cache directory"
        assert polytf.load(path, cache_dir=fresh, threads=1).tuned_kernels == (), "the cache directory has no record"
        with storage.engine.begin() as connection:
            connection.exec_driver_sql(f"UPDATE {RECORDS_TABLE} SET record = 'garbage'")
        with pytest.warns(CacheWarning, match=f"ignoring tuning record {matmul_key.digest()} in postgresql://"):
            assert polytf.load(path, cache_dir=fresh, threads=1, storage=postgresql_url).tuned_kernels == ()
    finally:
        storage.close()


def test_a_failing_database_is_one_cache_error_naming_it(storage):
    with storage.engine.begin() as connection:
        connection.exec_driver_sql(f"DROP TABLE {RECORDS_TABLE}")
    with pytest.raises(CacheError, match=f'cannot read a tuning record from the tuning storage postgresql://.*: relation "{RECORDS_TABLE}" does not exist; check the server'):
        storage.load(key())
    with pytest.raises(CacheError, match="cannot write a tuning record to the tuning storage postgresql://"):
        storage.save(record(), key())
