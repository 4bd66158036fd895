"""``polytf cache verify`` (each record recompiled in a worker and checked against numpy),
``polytf cache list`` of invalid records, and warnings printed as ``warning:`` lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from graphdef_builders import write_matmul_graphdef
from tensorboard.compat.proto import graph_pb2

from polytf.autotune import record_verification
from polytf.cli import main
from polytf.compiler.preparation import prepare_model
from polytf.compiler.recorded_recipes import cache_key
from polytf.config import CodegenConfig
from polytf.errors import TuningError
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.cache import CacheKey, KernelCache, TuningRecord
from polytf.targets.cpu import CpuTarget

THREADS = 2
GOOD = {"tile_sizes": [3, 32], "vector_width": 8}
#: legal, but the fake evaluator says it computes wrong values
WRONG = {"tile_sizes": [2, 16]}


def write_matmul_model(path: Path, m: int = 6, k: int = 32, n: int = 96) -> Path:
    """A GraphDef ``mm = MatMul(x: [m, k], w: Const [k, n])``."""
    write_matmul_graphdef(path, m, k, n)
    return path


def save_record(cache: KernelCache, model: Path, recipe: dict, key: CacheKey | None = None, kernel_name: str = "k0_mm") -> Path:
    if key is None:
        kernel = prepare_model(model).kernels[0]
        key = cache_key(kernel, CpuTarget(), THREADS, CodegenConfig())
    record = TuningRecord({}, kernel_name, ("MatMul",), recipe, 2e-5, 1e-5, 4, 0, model=str(model.absolute()), input_shapes={"x": [6, 32]})
    return cache.save(record, key)


class FakeEvaluator:
    """CandidateEvaluator's contract: a context manager whose verify(recipe) returns (cause or None, max_abs_error)."""

    calls: list = []

    def __init__(self, kernel, threads, *, measurement, seed, time_limit_s):
        self.kernel, self.threads = kernel, threads

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def verify(self, recipe: ScheduleRecipe):
        FakeEvaluator.calls.append((self.kernel.scop.name, self.threads, recipe))
        if recipe == ScheduleRecipe.from_dict(WRONG):
            return "verification failed: max abs error 0.5 exceeds 1e-4", 0.5
        return None, 1e-6


@pytest.fixture
def fake_evaluator(monkeypatch):
    FakeEvaluator.calls = []
    monkeypatch.setattr(record_verification, "default_evaluator_factory", lambda: FakeEvaluator)
    return FakeEvaluator


def test_verify_gives_one_verdict_per_record(tmp_path, fake_evaluator):
    model = write_matmul_model(tmp_path / "matmul.pb")
    other = write_matmul_model(tmp_path / "other.pb", n=64)
    gone = write_matmul_model(tmp_path / "gone.pb", n=48)
    cache = KernelCache(tmp_path / "cache")
    ok = save_record(cache, model, GOOD)
    wrong = save_record(cache, other, WRONG)
    missing = save_record(cache, gone, GOOD)
    gone.unlink()
    kernel = prepare_model(model).kernels[0]
    here = cache_key(kernel, CpuTarget(), THREADS, CodegenConfig())
    foreign = save_record(cache, model, GOOD, CacheKey(here.scop_fingerprint, {**here.target, "cpu": "not-this-cpu"}, THREADS, here.knobs))
    left = save_record(cache, model, GOOD, CacheKey("a kernel the model no longer has", here.target, THREADS, here.knobs))
    invalid = cache.records_dir / f"{'f' * 32}.json"
    invalid.write_text('{"kernel": "k0"')
    old = save_record(cache, model, GOOD, CacheKey(here.scop_fingerprint, here.target, 1, here.knobs))
    data = json.loads(old.read_text())
    del data["model"], data["input_shapes"], data["outputs"]
    old.write_text(json.dumps(data))

    checks = {check.path: check for check in record_verification.verify_records(cache)}
    assert {path: check.status for path, check in checks.items()} == {
        ok: "ok",
        wrong: "failed",
        missing: "skipped",
        foreign: "skipped",
        left: "skipped",
        invalid: "failed",
        old: "skipped",
    }
    assert "max abs error" in checks[ok].detail
    assert "max abs error 0.5" in checks[wrong].detail
    assert f"model file {gone.absolute()} missing" in checks[missing].detail
    assert "foreign" in checks[foreign].detail and "target.cpu is 'not-this-cpu' in the record" in checks[foreign].detail
    assert "kernel no longer in the model" in checks[left].detail
    assert "invalid record" in checks[invalid].detail and "not valid JSON" in checks[invalid].detail
    assert "no model recorded" in checks[old].detail
    assert sorted((name, threads) for name, threads, _ in fake_evaluator.calls) == [("k0_mm", THREADS), ("k0_mm", THREADS)]

    only_model = record_verification.verify_records(cache, [model])
    assert {check.path for check in only_model} == {ok, foreign, left}


def test_the_command_prints_a_line_per_record_and_fails_if_one_fails(tmp_path, fake_evaluator, capsys):
    model = write_matmul_model(tmp_path / "matmul.pb")
    cache = KernelCache(tmp_path / "cache")
    ok = save_record(cache, model, GOOD)
    assert main(["cache", "verify", "--cache-dir", str(cache.directory)]) == 0
    out = capsys.readouterr().out
    assert f"ok      {ok.name} (k0_mm of {model.absolute()}): max abs error" in out
    assert "1 records in" in out and "1 ok, 0 failed, 0 skipped" in out

    other = write_matmul_model(tmp_path / "other.pb", n=64)
    wrong = save_record(cache, other, WRONG)
    assert main(["cache", "verify", str(model), "--cache-dir", str(cache.directory)]) == 0, "only the records of matmul.pb"
    capsys.readouterr()
    assert main(["cache", "--cache-dir", str(cache.directory), "verify"]) == 1
    out = capsys.readouterr().out
    assert f"FAILED  {wrong.name} (k0_mm of {other.absolute()}): verification failed" in out
    assert "2 records in" in out and "1 ok, 1 failed, 0 skipped" in out


def test_a_worker_error_is_a_failure_and_ctrl_c_exits_130(tmp_path, monkeypatch, capsys):
    model = write_matmul_model(tmp_path / "matmul.pb")
    cache = KernelCache(tmp_path / "cache")
    save_record(cache, model, GOOD)

    class Broken(FakeEvaluator):
        def verify(self, recipe):
            raise TuningError("the worker process died (signal 11)")

    monkeypatch.setattr(record_verification, "default_evaluator_factory", lambda: Broken)
    assert main(["cache", "verify", "--cache-dir", str(cache.directory)]) == 1
    assert "FAILED" in capsys.readouterr().out

    class Interrupted(FakeEvaluator):
        def verify(self, recipe):
            raise KeyboardInterrupt

    monkeypatch.setattr(record_verification, "default_evaluator_factory", lambda: Interrupted)
    assert main(["cache", "verify", "--cache-dir", str(cache.directory)]) == 130


def test_verify_with_the_worker_process(tmp_path):
    """The real CandidateEvaluator: the record's recipe compiled and checked in a worker."""
    pytest.importorskip("polytf.autotune.isolation")
    model = write_matmul_model(tmp_path / "matmul.pb")
    cache = KernelCache(tmp_path / "cache")
    save_record(cache, model, GOOD)
    checks = record_verification.verify_records(cache, time_limit_s=60)
    assert [check.status for check in checks] == ["ok"], checks


def test_run_and_list_with_an_edited_record(tmp_path):
    """End to end in a fresh process: one ``warning:`` line, correct outputs, the record listed as invalid."""
    model = write_matmul_model(tmp_path / "matmul.pb")
    cache = KernelCache(tmp_path / "cache")
    path = save_record(cache, model, GOOD)
    path.write_text(path.read_text().replace('"complete": true', '"complete": "false"'))
    x = np.random.default_rng(1).standard_normal((6, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    environment = {**os.environ, "POLYTF_THREADS": str(THREADS)}
    command = [sys.executable, "-m", "polytf.cli"]
    ran = subprocess.run([*command, "run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "out.npz", "--cache-dir", cache.directory], capture_output=True, text=True, env=environment, timeout=300)
    assert ran.returncode == 0, ran.stderr
    warning_lines = [line for line in ran.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning_lines) == 1 and str(path) in warning_lines[0] and "field 'complete' must be a JSON boolean" in warning_lines[0], ran.stderr
    assert "Traceback" not in ran.stderr and "0/1 kernels tuned" in ran.stdout
    weights = np.frombuffer(graph_pb2.GraphDef.FromString(model.read_bytes()).node[1].attr["value"].tensor.tensor_content, np.float32).reshape(32, 96)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["mm"], x @ weights, rtol=1e-4, atol=1e-4)

    listing = subprocess.run([*command, "cache", "list", "--cache-dir", cache.directory], capture_output=True, text=True, env=environment, timeout=300)
    assert listing.returncode == 0, listing.stderr
    assert "1 tuning records" in listing.stdout and "1 invalid" in listing.stdout and "invalid: field 'complete'" in listing.stdout
