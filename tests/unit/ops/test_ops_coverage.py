"""The supported-op table: README.md carries the op table, and ``polytf ops`` lists
each op of a model with how it runs."""

from __future__ import annotations

from pathlib import Path

from polytf.cli import main
from polytf.ops.coverage import BEGIN_MARKER, END_MARKER, markdown_table, op_rows

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_table_is_the_op_tables():
    text = README.read_text()
    committed = text.split(BEGIN_MARKER, 1)[1].split(END_MARKER, 1)[0].strip()
    assert committed == markdown_table(), "README's supported-op table is stale: run `python -m polytf.ops.coverage README.md`"


def test_table_covers_the_coverage_ops():
    rows = {row.op: row for row in op_rows()}
    for op in ("IdentityN", "Maximum", "RealDiv", "Pow", "SelectV2", "LogicalAnd", "Equal", "GatherV2", "Cast", "Log1p", "Elu"):
        assert op in rows, op
    assert {"int32", "bool"} <= set(rows["SelectV2"].dtypes)
    assert rows["Maximum"].compiled and rows["IdentityN"].category == "view"


PBTXT = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 4 } } } } }
node { name: "m" op: "Maximum" input: "x" input: "x" }
node { name: "i" op: "IdentityN" input: "m" }
node { name: "r" op: "Relu" input: "i" }
"""


def test_ops_of_a_model(tmp_path, capsys):
    path = tmp_path / "model.pbtxt"
    path.write_text(PBTXT)
    assert main(["ops", "--model", str(path)]) == 0
    out = capsys.readouterr().out
    assert "IdentityN" in out and "no code" in out
    assert "Maximum" in out and "compiled" in out
    path.write_text(PBTXT.replace('op: "Relu"', 'op: "Erfinv"'))
    assert main(["ops", "--model", str(path)]) == 1
    assert "does not support" in capsys.readouterr().out


def test_ops_of_a_model_says_which_ops_the_passes_rewrite(tmp_path, capsys):
    path = tmp_path / "argmax.pbtxt"
    path.write_text(PBTXT.replace('node { name: "r" op: "Relu" input: "i" }', """
node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
  attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 0 } } } }
node { name: "r" op: "ArgMax" input: "i" input: "axis" }
"""))
    assert main(["ops", "--model", str(path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "ArgMax" in line]
    assert "rewritten" in line and "comparisons, selections and reductions (expansion pass)" in line
