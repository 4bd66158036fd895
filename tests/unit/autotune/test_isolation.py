"""Tuning candidates run in a worker process: a crash, an LLVM abort or a hang costs one
failed trial with its cause; abandoned trials of dead tuners are failed and counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from hand_built_graphs import graph_matmul_bias_relu, kernels_of
from optuna.trial import TrialState

from polytf.autotune.isolation import CandidateEvaluator, describe_exit, tuning_faults
from polytf.autotune.shared_study import (
    INTERRUPTED,
    claim_trial,
    deferred_interrupt,
    fail_abandoned_trials,
    fail_interrupted_trial,
    tell_trial,
)
from polytf.autotune.tuner import tune_kernel
from polytf.autotune.worker import internal_error
from polytf.config import MeasurementConfig
from polytf.errors import TuningError
from polytf.runtime.cpu.kernel_bench import KernelBench, Measurement
from polytf.schedules.recipe import CpuRecipe
from polytf.storage.cache import KernelCache
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()


@pytest.fixture(scope="module")
def kernel():
    return kernels_of(graph_matmul_bias_relu(16, 24, 32))[0]


def test_faults_in_the_worker_are_failures_with_their_causes(kernel):
    with CandidateEvaluator(kernel, 2, time_limit_s=3) as evaluator:
        assert isinstance(evaluator.evaluate(CpuRecipe(parallel=True)), Measurement)
        assert evaluator.evaluate(CpuRecipe(), fault="crash") == "signal 11 (SIGSEGV)"
        assert evaluator.evaluate(CpuRecipe(), fault="hang") == "timed out after 3 s"
        assert evaluator.evaluate(CpuRecipe(), fault="abort").startswith("LLVM abort: LLVM ERROR: injected fault")
        good = evaluator.evaluate(CpuRecipe(tile_sizes=(8, 16), register_tile_sizes=(8, 16), pack=("A1",)))
        assert isinstance(good, Measurement) and good.ok  # a fresh worker after each fault
        assert evaluator.workers_started == 4
        assert evaluator.evaluate(CpuRecipe(unroll=64)).startswith("ScheduleError")
        assert evaluator.verify(CpuRecipe(vector_width=8)) == (None, pytest.approx(0.0, abs=1e-3))


def test_the_parent_never_runs_the_candidate(kernel, monkeypatch):
    """A candidate's code runs in the worker: the parent's own target is never asked to compile."""
    monkeypatch.setattr(CpuTarget, "compile", lambda *a, **k: pytest.fail("compiled in the tuner's process"))
    with CandidateEvaluator(kernel, 1) as evaluator:
        assert isinstance(evaluator.evaluate(CpuRecipe()), Measurement)


def test_exit_causes_and_fault_specifications():
    assert describe_exit(-6, "something\nLLVM ERROR: out of registers\n") == "LLVM abort: LLVM ERROR: out of registers"
    assert describe_exit(-9, "") == "signal 9 (SIGKILL)"
    assert describe_exit(3, "") == "worker exited with status 3"
    assert tuning_faults("crash:3, hang:5") == {3: "crash", 5: "hang"}
    assert tuning_faults("") == {}
    with pytest.raises(TuningError, match="FAULT:TRIAL"):
        tuning_faults("explode:1")


def test_tuning_survives_a_crashing_and_a_hanging_candidate(kernel):
    result = tune_kernel(kernel, TARGET, trials=6, threads=2, seed=1, candidate_time_limit_s=4, faults={2: "crash", 3: "hang"})
    assert result.trials == 6 and result.trials_here == 6
    assert result.failures == ["trial 2: signal 11 (SIGSEGV)", "trial 3: timed out after 4 s"]
    bench = KernelBench(kernel, seed=0)
    error, _ = bench.verify(TARGET.compile(kernel.scop, result.best_recipe), 2, MeasurementConfig())
    assert error is None


def test_abandoned_trials_of_dead_tuners_are_failed_and_counted(kernel, tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'studies.db'}")
    study = optuna.create_study(study_name="k", storage=storage)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = study.ask()
    orphan.set_user_attr("owner", f"{__import__('socket').gethostname()}:{dead.pid}")
    study.ask()  # no owner: its tuner died between claiming and naming itself
    assert fail_abandoned_trials(study) == 2
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert [t.user_attrs["failure"] for t in failed][0] == f"abandoned: tuner process {orphan.user_attrs['owner']} exited"

    calls = []
    result = tune_kernel(kernel, TARGET, trials=4, threads=1, storage=storage, study_name="k", evaluator=lambda r: calls.append(r) or Measurement((1e-3,)))
    assert result.trials == 4 and len(calls) >= 1
    states = [t.state for t in optuna.load_study(study_name="k", storage=storage).trials]
    assert states.count(TrialState.FAIL) == 2 and states.count(TrialState.COMPLETE) == 2
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states


def test_an_exception_that_ends_the_worker_is_its_cause():
    traceback = "Traceback (most recent call last):\n  File ...\nValueError: bad shape\n"
    assert describe_exit(1, traceback) == "worker exited with status 1: ValueError: bad shape"


def test_an_interrupted_candidate_kills_its_worker_at_once(kernel):
    """Ctrl-C while a candidate runs: the worker is killed, not asked to finish."""

    def interrupt(number, frame):
        raise KeyboardInterrupt

    evaluator = CandidateEvaluator(kernel, 1, time_limit_s=60)
    assert isinstance(evaluator.evaluate(CpuRecipe()), Measurement)  # the worker is up
    worker = evaluator._process
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            evaluator.evaluate(CpuRecipe(), fault="hang")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    wait = worker.wait
    waits: list[float | None] = []

    def recorded_wait(timeout=None):
        waits.append(timeout)
        return wait(timeout)

    worker.wait = recorded_wait
    evaluator.close()
    assert worker.poll() == -signal.SIGKILL
    assert waits == [None]  # killed, then reaped: never given time to finish the candidate


def test_ctrl_c_fails_the_running_trial_and_keeps_the_finished_ones(kernel, tmp_path):
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    calls = []

    def evaluator(recipe):
        calls.append(recipe)
        if len(calls) == 4:  # the baseline (reused by trial 0), trials 1 and 2, then Ctrl-C in trial 3
            raise KeyboardInterrupt
        return Measurement((1e-3 / len(calls),))

    result = tune_kernel(kernel, TARGET, trials=8, threads=1, storage=storage, study_name="k", evaluator=evaluator)
    assert result.interrupted and result.trials == 4 and result.failures == ["trial 3: interrupted (Ctrl-C)"]
    trials = optuna.load_study(study_name="k", storage=storage).trials
    assert [t.state for t in trials[:4]] == [TrialState.COMPLETE] * 3 + [TrialState.FAIL]
    assert all(t.state == TrialState.WAITING for t in trials[4:])  # enqueued starting points, for the next run


def test_a_claim_is_never_cut_in_half_by_ctrl_c():
    ran = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            ran.append("the rest of the block")
    assert ran == ["the rest of the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class InterruptedOnRelease:
    """A study lock whose release meets a Ctrl-C (the SIGINT lands inside the claim's held-back block)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)


def test_a_ctrl_c_held_back_during_a_claim_fails_the_trial_it_claimed(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'studies.db'}", study_name="k")
    with pytest.raises(KeyboardInterrupt):
        claim_trial(study, InterruptedOnRelease(), trials=4)
    (trial,) = study.trials
    assert trial.state == TrialState.FAIL and trial.user_attrs["failure"] == INTERRUPTED


def test_an_interrupted_trial_is_failed_unless_it_was_told_already():
    study = optuna.create_study()
    told, running = study.ask(), study.ask()
    tell_trial(study, told, 1e-3, None)  # a Ctrl-C held back while this was told arrives after it
    fail_interrupted_trial(study, told)
    fail_interrupted_trial(study, running)
    states = [(t.state, t.user_attrs.get("failure")) for t in study.trials]
    assert states == [(TrialState.COMPLETE, None), (TrialState.FAIL, INTERRUPTED)]


CONCURRENT_TUNER = """
import sys, time
from hand_built_graphs import graph_matmul_bias_relu, kernels_of
from polytf.runtime.cpu.kernel_bench import Measurement
from polytf.autotune.tuner import tune_kernel
from polytf.storage.cache import KernelCache
from polytf.targets.cpu import CpuTarget

cache = KernelCache(sys.argv[1])
kernel = kernels_of(graph_matmul_bias_relu(16, 24, 32))[0]
def evaluator(recipe):
    time.sleep(0.05)
    return Measurement((1e-3 * (1 + hash(recipe) % 7),))
result = tune_kernel(kernel, CpuTarget(), trials=12, threads=1, storage=cache.study_storage(), study_name="k",
                     lock=cache.lock("study-k"), evaluator=evaluator)
print(result.trials_here)
"""


def test_concurrent_tuners_share_one_study_without_running_too_many_trials(tmp_path):
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    tuners = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT_TUNER, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
        for _ in range(3)
    ]
    outputs = [tuner.communicate(timeout=300) for tuner in tuners]
    assert [tuner.returncode for tuner in tuners] == [0, 0, 0], [err for _, err in outputs]
    assert sum(int(out) for out, _ in outputs) == 12
    storage = KernelCache(tmp_path).study_storage()
    states = [t.state for t in optuna.load_study(study_name="k", storage=storage).trials]
    assert len(states) == 12 and set(states) == {TrialState.COMPLETE}


def test_a_bug_met_by_a_candidate_is_its_cause_with_the_line_that_raised():
    try:
        {}["missing"]
    except KeyError as error:
        cause = internal_error(error)
    assert cause.startswith("internal error: KeyError: 'missing' (at autotune/test_isolation.py:")


def test_a_healthy_worker_is_kept_idle_and_serves_the_next_kernel(kernel, monkeypatch):
    from polytf.autotune import isolation

    isolation._IDLE.stop_all()
    other = kernels_of(graph_matmul_bias_relu(8, 12, 20))[0]
    with CandidateEvaluator(kernel, 1) as first:
        assert isinstance(first.evaluate(CpuRecipe()), Measurement)
        process = first._process
    assert process.poll() is None, "kept idle, not stopped"
    with CandidateEvaluator(other, 1) as second:
        measured = second.evaluate(CpuRecipe())
        assert isinstance(measured, Measurement) and measured.ok, "the reused worker measures its new kernel"
        assert second._process is process
    monkeypatch.setenv("POLYTF_SOME_SETTING", "1")
    with CandidateEvaluator(kernel, 1) as third:
        assert isinstance(third.evaluate(CpuRecipe()), Measurement)
        assert third._process is not process, "a worker of another environment is not reused"
    with CandidateEvaluator(kernel, 1, time_limit_s=3) as crashing:
        assert crashing.evaluate(CpuRecipe(), fault="crash") == "signal 11 (SIGSEGV)"
        assert crashing._process is None
    isolation._IDLE.stop_all()
    assert process.poll() is not None


def test_an_idle_worker_that_dies_when_given_its_kernel_is_replaced_by_a_new_one(kernel, monkeypatch):
    import socket
    import tempfile
    from multiprocessing.connection import Connection

    from polytf.autotune import isolation

    isolation._IDLE.stop_all()
    # an "idle worker" that aborts, after a glibc-like message, on the first message it receives
    ours, theirs = socket.socketpair()
    stderr_fd, stderr_path = tempfile.mkstemp()
    os.unlink(stderr_path)
    broken = subprocess.Popen(
        [sys.executable, "-c", f"import os, socket; s = socket.socket(fileno={theirs.fileno()}); s.recv(1); os.write(2, b'free(): invalid pointer\\n'); os.abort()"],
        pass_fds=(theirs.fileno(),),
        stderr=stderr_fd,
    )
    theirs.close()
    idle = isolation._Worker(broken, Connection(ours.detach()), stderr_fd, isolation._environment())
    monkeypatch.setattr(isolation._IDLE, "take", lambda: idle)
    with CandidateEvaluator(kernel, 1) as evaluator:
        measured = evaluator.evaluate(CpuRecipe())
        assert isinstance(measured, Measurement) and measured.ok, "the new worker measures the kernel"
        assert evaluator.workers_started == 2 and evaluator._process is not broken
        assert evaluator.idle_worker_failure == "signal 6 (SIGABRT): free(): invalid pointer"
    assert broken.wait(timeout=10) == -signal.SIGABRT
    isolation._IDLE.stop_all()


def test_a_new_worker_that_cannot_start_is_the_kernels_error(kernel, monkeypatch):
    from polytf.autotune import isolation

    isolation._IDLE.stop_all()
    monkeypatch.setattr(isolation._IDLE, "take", lambda: None)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the worker exits at once
    with pytest.raises(TuningError, match="the tuning worker process did not start: worker exited with status 1"):
        with CandidateEvaluator(kernel, 1, start_timeout_s=20) as evaluator:
            evaluator.evaluate(CpuRecipe())


def test_an_abort_says_the_line_written_before_it():
    assert describe_exit(-6, "free(): invalid pointer\n") == "signal 6 (SIGABRT): free(): invalid pointer"
    assert describe_exit(-11, "an older line\n") == "signal 11 (SIGSEGV)"
