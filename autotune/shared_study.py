"""Trials of a study that several tuner processes share: claimed atomically, told once.

Two ``polytf tune`` runs on one cache (or on one database: ``--storage postgresql://...``)
tune the same kernel in the same Optuna study (its name is the kernel's cache-key
digest). What keeps the study within ``trials``:

- a trial is claimed (:func:`claim_trial`) under the study's lock (a file lock of the
  cache directory, or a PostgreSQL advisory lock shared by every machine), after
  counting every trial that is running or finished: no tuner can claim the last free
  trial while another counts it, so the study never gets more trials than asked;
- each claimed trial carries its owner (``host:pid``); a running trial whose owner on
  this host has exited (a tuner killed mid-trial) is failed as abandoned, under the same
  lock (:func:`fail_abandoned_trials`), so it counts but never blocks the others;
- Ctrl-C is held back while a trial is claimed or told (:func:`deferred_interrupt`), so
  a trial is claimed and named, or told, entirely or not at all; a Ctrl-C held back during
  a claim fails the trial just claimed (cause :data:`INTERRUPTED`) before it is delivered,
  so an interrupted tuner leaves no trial running;
- a tuner that has run out of trials waits for the others' running trials
  (:func:`wait_for_running_trials`) before it reads the result, so that every tuner of a
  study reports the same best recipe.

``tests/unit/autotune/test_isolation.py`` exercises each of these with real processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager

import optuna
from optuna.trial import TrialState

#: Cause stored on the trial that was running (or being claimed) when the tuner was interrupted.
INTERRUPTED = "interrupted (Ctrl-C)"

#: Trial states that count towards a study's ``trials`` (everything but enqueued, unclaimed ones).
COUNTED_STATES = (TrialState.RUNNING, TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


def owner_name() -> str:
    """``host:pid`` of this tuner process (stored on each trial it claims)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) until the block has finished, then deliver it (normally a
    KeyboardInterrupt). Outside the main thread, where Python delivers no signals, this
    does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        if callable(previous):
            previous(signal.SIGINT, None)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt


def claim_trial(study: optuna.Study, lock: AbstractContextManager, trials: int) -> optuna.Trial | None:
    """Claim the study's next trial for this process, or None when ``trials`` trials are
    running or finished. An enqueued (waiting) trial is claimed first.

    Raises:
        CacheError: the lock cannot be acquired in time (a file or advisory lock's timeout).
    """
    trial = None
    try:
        with deferred_interrupt(), lock:
            fail_abandoned_trials(study)
            if len(study.get_trials(deepcopy=False, states=COUNTED_STATES)) >= trials:
                return None
            trial = study.ask()
            trial.set_user_attr("owner", owner_name())
    except KeyboardInterrupt:  # held back during the claim, delivered as the block ended
        if trial is not None:
            fail_interrupted_trial(study, trial)
        raise
    return trial


def tell_trial(study: optuna.Study, trial: optuna.Trial, latency_s: float | None, failure: str | None) -> None:
    """Finish ``trial``: COMPLETE with ``latency_s``, or FAIL with ``failure`` (its cause,
    stored as the trial's ``failure`` user attribute)."""
    with deferred_interrupt():
        if failure is not None:
            trial.set_user_attr("failure", failure)
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, latency_s)


def fail_interrupted_trial(study: optuna.Study, trial: optuna.Trial) -> None:
    """Fail ``trial`` with cause :data:`INTERRUPTED`, unless it has finished already (a
    Ctrl-C held back while it was told is delivered after the trial was told)."""
    running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if trial.number in running:
        tell_trial(study, trial, None, INTERRUPTED)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def fail_abandoned_trials(study: optuna.Study) -> int:
    """Fail the running trials whose tuner process on this host has exited (a tuner
    killed mid-trial), with cause ``abandoned: tuner process HOST:PID exited``; call under
    the study's lock. Returns how many were failed."""
    host = socket.gethostname()
    count = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = trial.user_attrs.get("owner")
        if owner is not None:
            owner_host, _, pid = owner.rpartition(":")
            if owner_host != host or not pid.isdigit() or _process_exists(int(pid)):
                continue
        # no owner: its tuner died between claiming it and naming itself (both under the lock we hold)
        cause = f"abandoned: tuner process {owner} exited" if owner else "abandoned: its tuner exited while claiming it"
        optuna.trial.Trial(study, trial._trial_id).set_user_attr("failure", cause)
        study.tell(trial.number, state=TrialState.FAIL)
        count += 1
    return count


def wait_for_running_trials(study: optuna.Study, lock: AbstractContextManager, limit_s: float, poll_s: float = 0.2) -> bool:
    """Wait until no trial of ``study`` is running (other tuners' trials finish, or their
    tuners exit and the trials are failed as abandoned), at most ``limit_s`` seconds.

    Returns:
        Whether the study has no running trial now.
    """
    deadline = time.monotonic() + limit_s
    while True:
        with deferred_interrupt(), lock:
            fail_abandoned_trials(study)
            if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


class UnlimitedWait(AbstractContextManager):
    """A :class:`filelock.FileLock` (e.g. ``KernelCache.lock("measurement")``) acquired
    with no time limit, polling often: a tuner waits for as long as other tuners' candidates
    take (each has its own time limit), and Ctrl-C still interrupts the wait."""

    def __init__(self, lock, poll_s: float = 0.005) -> None:
        self.lock = lock
        self.poll_s = poll_s

    def __enter__(self):
        self.lock.acquire(timeout=-1, poll_interval=self.poll_s)
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()


__all__ = [
    "COUNTED_STATES",
    "INTERRUPTED",
    "UnlimitedWait",
    "claim_trial",
    "deferred_interrupt",
    "fail_abandoned_trials",
    "fail_interrupted_trial",
    "owner_name",
    "tell_trial",
    "wait_for_running_trials",
]
