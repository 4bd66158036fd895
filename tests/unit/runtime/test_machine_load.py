"""Other processes' load on the cores (``/proc/stat``), faked and real, and the one warning
that says the machine is too busy to time kernels."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from polytf.errors import BusyMachineWarning
from polytf.runtime import machine_load
from polytf.runtime.machine_load import MachineLoad, busy_cores, check_machine_load


def stat_line(busy: int, idle: int) -> str:
    """A /proc/stat whose first line has ``busy`` user ticks and ``idle`` idle ticks."""
    return f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n"


def self_stat(ticks: int) -> str:
    """A /proc/self/stat of a process (named with a space and a parenthesis) that ran ``ticks``."""
    fields = ["S"] + ["0"] * 10 + [str(ticks), "0"] + ["0"] * 30
    return "123 (py thon) " + " ".join(fields)


@pytest.fixture
def fake_proc(tmp_path, monkeypatch):
    """/proc/stat and /proc/self/stat as files this test writes; sleeping swaps in the second
    reading (the clock is faked: nothing waits)."""
    proc_stat, own_stat = tmp_path / "stat", tmp_path / "self_stat"
    monkeypatch.setattr(machine_load, "_PROC_STAT", proc_stat)
    monkeypatch.setattr(machine_load, "_SELF_STAT", own_stat)
    monkeypatch.setattr(machine_load.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(machine_load.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)

    def readings(first, second):
        proc_stat.write_text(first[0])
        own_stat.write_text(first[1])
        monkeypatch.setattr(machine_load.time, "sleep", lambda seconds: (proc_stat.write_text(second[0]), own_stat.write_text(second[1])))

    return readings


def test_others_busy_cores_exclude_this_process_own_time(fake_proc):
    # 50 ticks of 2 CPUs passed: 45 busy, 5 of them this process's own (its OpenMP workers spinning)
    fake_proc((stat_line(1000, 1000), self_stat(100)), (stat_line(1045, 1005), self_stat(105)))
    load = busy_cores()
    assert load == MachineLoad(pytest.approx(1.6), 2, machine_load.INTERVAL_S)
    assert load.is_busy(threads=2) and load.is_busy(threads=1)


def test_a_quiet_machine_is_not_busy(fake_proc):
    fake_proc((stat_line(1000, 1000), self_stat(100)), (stat_line(1002, 1048), self_stat(101)))
    load = busy_cores()
    assert load.busy_cores == pytest.approx(0.04) and not load.is_busy(threads=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_machine_load(2, "tuning", load) is load  # no warning


def test_one_core_taken_leaves_room_for_one_thread_only():
    load = MachineLoad(1.0, 2, 0.25)
    assert load.is_busy(threads=2) and not load.is_busy(threads=1)
    assert not MachineLoad(0.3, 1, 0.25).is_busy(threads=1)  # below BUSY_CORES


def test_a_busy_machine_is_one_warning_that_says_what_to_do():
    with pytest.warns(BusyMachineWarning) as caught:
        check_machine_load(2, "tuning", MachineLoad(1.9, 2, 0.25))
    (warning,) = caught
    message = str(warning.message)
    assert "kept 1.9 of its 2 cores busy" in message and "tuning on 2 threads" in message and "--threads" in message


def test_no_proc_means_no_answer(tmp_path, monkeypatch):
    monkeypatch.setattr(machine_load, "_PROC_STAT", tmp_path / "missing")
    assert busy_cores() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_machine_load(2, "tuning") is None


@pytest.mark.skipif(not machine_load._PROC_STAT.exists(), reason="no /proc/stat on this system")
def test_a_real_burner_is_seen():
    burner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"])
    try:
        load = busy_cores(0.5)
        assert load is not None and load.busy_cores >= 0.5
    finally:
        burner.kill()
        burner.wait(timeout=60)


#: a: [6, 5] @ w -> Relu
MATMUL_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 5 } dim { size: 4 } } float_val: 0.5 } } } }
node { name: "mm" op: "MatMul" input: "a" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""


def test_polytf_tune_on_a_busy_machine_warns_once_and_says_so_at_the_end(tmp_path, monkeypatch, capsys):
    from polytf.cli import main

    measured = []

    def busy(interval_s=machine_load.INTERVAL_S):  # injected contention: two other processes on both cores
        measured.append(interval_s)
        return MachineLoad(2.0, 2, interval_s)

    monkeypatch.setattr(machine_load, "busy_cores", busy)
    model = tmp_path / "m.pbtxt"
    model.write_text(MATMUL_PBTXT)
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["tune", str(model), "--trials", "2", "--threads", "2", "--cache-dir", str(tmp_path / "cache")]) == 0
    captured = capsys.readouterr()
    printed = " ".join(captured.err.split())
    assert printed.count("warning: the machine is busy") == 1 and "kept 2.0 of its 2 cores busy" in printed
    assert len(measured) == 1  # once warned, the final timing inside the model does not measure again
    assert "the machine was busy while tuning" in " ".join(captured.out.split())


def test_the_api_report_says_the_machine_was_busy(tmp_path, monkeypatch):
    import polytf

    monkeypatch.setattr(machine_load, "busy_cores", lambda interval_s=machine_load.INTERVAL_S: MachineLoad(1.5, 2, interval_s))
    model = tmp_path / "m.pbtxt"
    model.write_text(MATMUL_PBTXT)
    with pytest.warns(BusyMachineWarning):
        report = polytf.tune(model, trials=1, threads=2, cache_dir=tmp_path / "cache")
    assert "kept 1.5 of its 2 cores busy" in report.busy_machine
    monkeypatch.setattr(machine_load, "busy_cores", lambda interval_s=machine_load.INTERVAL_S: MachineLoad(0.1, 2, interval_s))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BusyMachineWarning)
        quiet = polytf.tune(model, trials=1, threads=2, cache_dir=tmp_path / "quiet_cache")
    assert quiet.busy_machine == ""

