"""``polytf.tune`` and ``polytf.load`` in Python: progress shown, or not when told not to."""

from __future__ import annotations

import pytest

from polytf.runtime import machine_load
from polytf.runtime.machine_load import MachineLoad

#: a: [6, 5] @ w -> Relu
MATMUL_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 5 } dim { size: 4 } } float_val: 0.5 } } } }
node { name: "mm" op: "MatMul" input: "a" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""


@pytest.mark.parametrize("progress", [True, False])
def test_tune_in_python_shows_its_progress_unless_told_not_to(progress, tmp_path, capsys, monkeypatch):
    import polytf

    monkeypatch.setattr(machine_load, "busy_cores", lambda interval_s=machine_load.INTERVAL_S: MachineLoad(0.0, 2, interval_s))
    model = tmp_path / "m.pbtxt"
    model.write_text(MATMUL_PBTXT)
    report = polytf.tune(model, trials=2, threads=2, cache_dir=tmp_path / "cache", progress=progress)
    said = capsys.readouterr().err
    assert report.new_trials == 2
    if progress:  # stderr is no terminal here: a line per kernel
        assert "1 kernels (1 distinct) to tune" in said and "k0_mm: 2 trials, best" in said
    else:
        assert said == ""


def test_load_without_progress_says_nothing(tmp_path, capsys):
    import polytf

    model = tmp_path / "m.pbtxt"
    model.write_text(MATMUL_PBTXT)
    polytf.load(model, cache_dir=tmp_path / "cache", progress=False)
    assert capsys.readouterr().err == ""
