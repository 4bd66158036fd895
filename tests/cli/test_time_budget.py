"""``polytf tune --time-budget``: durations, the budget column, records reused by the next run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from polytf.durations import format_duration, parse_duration
from polytf.errors import PolytfError

#: relu(relu(a @ b) @ c): two MatMul+Relu kernels of different shapes (warm starts), no TensorFlow needed.
TWO_MATMULS_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 5 } dim { size: 24 } } } } }
node { name: "c" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 24 } dim { size: 9 } } } } }
node { name: "mm1" op: "MatMul" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "r1" op: "Relu" input: "mm1" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "mm2" op: "MatMul" input: "r1" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm2" attr { key: "T" value { type: DT_FLOAT } } }
"""


def polytf(*args, timeout=120):
    command = [sys.executable, "-m", "polytf.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=dict(os.environ), timeout=timeout)


@pytest.mark.parametrize(
    "text, seconds",
    [("600", 600), ("600s", 600), ("10m", 600), ("1h", 3600), ("1.5h", 5400), ("1h30m", 5400), (" 90S ", 90), ("2 min", 120), (45, 45)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "10 minutes", "-5", "0", "0s", "1d", "m", "10m1h", "1m30", "inf", "1e3"])
def test_bad_durations_are_refused(text):
    with pytest.raises(PolytfError, match="duration"):
        parse_duration(text)


def test_durations_are_printed_short():
    assert [format_duration(s) for s in (-1, 0.4, 1.5, 6, 42.3, 59.7, 432, 3720)] == ["0s", "0.4s", "1.5s", "6s", "42s", "1m00s", "7m12s", "1h02m"]


def test_bad_budgets_get_a_clear_error(tmp_path):
    model = tmp_path / "m.pbtxt"
    model.write_text(TWO_MATMULS_PBTXT)
    bad = polytf("tune", model, "--time-budget", "10x", "--cache-dir", tmp_path / "cache")
    assert bad.returncode == 2 and "--time-budget" in bad.stderr and "'10x' is not a duration" in bad.stderr
    both = polytf("tune", model, "--time-budget", "5s", "--trials", "3", "--cache-dir", tmp_path / "cache")
    assert both.returncode == 1 and "not both" in both.stderr
    assert not (tmp_path / "cache").exists()


def test_tune_within_a_time_budget_then_reuse(tmp_path):
    """The budget leaves room for both kernels' baselines on a busy machine (a worker process
    starts, compiles, verifies and times each; a 6 s budget failed once beside another 2-thread
    job): the test checks what is done within the budget, not how fast it is done."""
    model = tmp_path / "two_matmuls.pbtxt"
    model.write_text(TWO_MATMULS_PBTXT)
    cache = tmp_path / "cache"
    budget_s = 20
    first = polytf("tune", model, "--time-budget", f"{budget_s}s", "--cache-dir", cache)
    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stderr
    assert "budget spent" in first.stdout and first.stdout.count("MatMul+Relu") == 2
    spent = re.search(rf"time budget {budget_s}s: ([\d.]+) s spent tuning kernels", first.stdout)
    assert spent and float(spent.group(1)) <= budget_s
    # the budget is the wall time of the whole call: on a quiet machine within 10%, here with room
    # for a busy one (the final timing's rounds shrink to fit, the models' compilation does not)
    elapsed = float(re.search(r"elapsed ([\d.]+) s", first.stdout).group(1))
    assert elapsed <= 1.5 * budget_s
    assert re.search(r"\d+ trials?, [\d.]+ s", first.stdout)
    assert "time budget:" in first.stderr  # the progress row with the budget left
    records = sorted((cache / "records").glob("*.json"))
    assert len(records) == 2
    assert all(json.loads(r.read_text())["complete"] for r in records)
    new_trials = int(re.search(r"new trials: (\d+)", first.stdout).group(1))
    assert new_trials >= 2  # at least both baselines

    again = polytf("tune", model, "--time-budget", f"{budget_s}s", "--cache-dir", cache)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("cached") == 2 and "new trials: 0" in again.stdout


def test_the_api_refuses_a_budget_of_nothing(tmp_path):
    import polytf
    from polytf.errors import ArgumentError

    model = tmp_path / "m.pbtxt"
    model.write_text(TWO_MATMULS_PBTXT)
    for budget in (0, -3.0, float("nan")):
        with pytest.raises(ValueError, match="time budget") as raised:
            polytf.tune(model, time_budget_s=budget, cache_dir=tmp_path / "cache")
        assert isinstance(raised.value, ArgumentError)
    assert not (tmp_path / "cache").exists()  # refused before anything was written
