"""``polytf tune`` processes sharing one cache, injected faults and Ctrl-C: no traceback,
never more trials than asked per kernel study, nothing left running."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import pytest


def start_tune(model, cache, *extra, faults=""):
    env = dict(os.environ)
    env["POLYTF_TUNING_FAULTS"] = faults
    command = [sys.executable, "-m", "polytf.cli", "tune", str(model), "--cache-dir", str(cache), *map(str, extra)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def trial_states(cache) -> dict[str, Counter]:
    """study name -> Counter of trial states, read from the cache's study database."""
    with sqlite3.connect(cache / "studies.db") as connection:
        rows = connection.execute("select s.study_name, t.state from trials t join studies s on s.study_id = t.study_id").fetchall()
    result: dict[str, Counter] = {}
    for study, state in rows:
        result.setdefault(study, Counter())[state] += 1
    return result


def test_two_tuners_on_one_cache_share_the_trials(frozen_model, tmp_path):
    model = frozen_model("mlp")
    cache = tmp_path / "cache"
    tuners = [start_tune(model, cache, "--trials", 3) for _ in range(2)]
    outputs = [tuner.communicate(timeout=600) for tuner in tuners]
    for tuner, (out, err) in zip(tuners, outputs):
        assert tuner.returncode == 0, err
        assert "Traceback" not in err and "Traceback" not in out
    studies = trial_states(cache)
    assert len(studies) == 4  # the MLP's four kernels
    for states in studies.values():
        assert sum(states.values()) == 3 and set(states) <= {"COMPLETE", "FAIL"}
    assert len(list((cache / "records").glob("*.json"))) == 4


def test_injected_crash_and_hang_are_reported_with_their_causes(frozen_model, tmp_path):
    model = frozen_model("conv_bias_relu")
    tuner = start_tune(model, tmp_path / "cache", "--trials", 5, "--candidate-timeout", 5, faults="crash:1,hang:3")
    out, err = tuner.communicate(timeout=600)
    assert tuner.returncode == 0, err
    assert "5 (2 failed)" in out
    assert "trial 1: signal 11 (SIGSEGV); trial 3: timed out after 5 s" in out.replace("\n", " ")


def test_ctrl_c_keeps_finished_trials_and_leaves_none_running(frozen_model, tmp_path):
    model = frozen_model("conv_bias_relu")
    cache = tmp_path / "cache"
    tuner = start_tune(model, cache, "--trials", 6, "--candidate-timeout", 120, faults="hang:2")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # wait until the hanging trial 2 is running
        time.sleep(0.5)
        if (cache / "studies.db").exists():
            try:
                states = trial_states(cache)
            except sqlite3.OperationalError:
                continue
            if any(s["COMPLETE"] + s["FAIL"] >= 2 and s["RUNNING"] for s in states.values()):
                break
    else:
        tuner.kill()
        pytest.fail("the tuner never reached trial 2")
    tuner.send_signal(signal.SIGINT)
    out, err = tuner.communicate(timeout=120)
    assert tuner.returncode == 130, err
    assert "Traceback" not in err
    (states,) = trial_states(cache).values()
    assert states["RUNNING"] == 0 and states["COMPLETE"] >= 2 and states["FAIL"] == 1
    assert "interrupted" in (out + err)


def test_failed_trials_are_listed_grouped_by_cause():
    from polytf.cli.tune import summarize_failures

    failures = ["trial 3: signal 11 (SIGSEGV)", "trial 5: timed out after 10 s", "trial 7: signal 11 (SIGSEGV)", "trial 8: LLVM abort: LLVM ERROR: x"]
    assert summarize_failures(failures) == "trials 3, 7: signal 11 (SIGSEGV); trial 5: timed out after 10 s; trial 8: LLVM abort: LLVM ERROR: x"
    many = [f"trial {n}: cause {n}" for n in range(9)]
    assert summarize_failures(many, limit=2) == "trial 0: cause 0; trial 1: cause 1; and 7 other causes"
