"""How each op of a model runs, computed by the library (``polytf ops --model`` prints it)."""

from __future__ import annotations

from polytf.compiler.model_source import ModelSource
from polytf.compiler.op_coverage import COMPILED, FOLDED_OR_REMOVED, REWRITTEN, UNSUPPORTED, model_op_coverage, rewritten_ops


def graph_text(*nodes: tuple[str, str, tuple[str, ...]]) -> str:
    """A text GraphDef: placeholder ``x`` (float32 [4]), then ``(name, op, inputs)`` per node."""
    lines = ['node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 4 } } } } }']
    for name, op, inputs in nodes:
        reads = " ".join(f'input: "{tensor}"' for tensor in inputs)
        lines.append(f'node {{ name: "{name}" op: "{op}" {reads} }}')
    return "\n".join(lines)


AXIS = 'node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 0 } } } }'
#: Maximum (compiled), IdentityN (a view: removed), then ``last`` of the given op
BASE = (("largest", "Maximum", ("x", "x")), ("same", "IdentityN", ("largest",)))


def coverage_of(tmp_path, text):
    path = tmp_path / "model.pbtxt"
    path.write_text(text)
    coverage = model_op_coverage(ModelSource(path))
    return coverage, {row.op: row for row in coverage.ops}


def test_compiled_and_removed_ops(tmp_path):
    coverage, rows = coverage_of(tmp_path, graph_text(*BASE, ("last", "Relu", ("same",))))
    assert coverage.unsupported_ops == ()
    assert list(rows) == sorted(rows) and rows["Maximum"].nodes_in_file == 1
    assert dict(rows["Maximum"].after_passes) == {COMPILED: 1}
    assert rows["IdentityN"].after_passes == {} and rows["IdentityN"].fate == FOLDED_OR_REMOVED


def test_an_unsupported_op_is_named_and_nothing_is_prepared(tmp_path):
    coverage, rows = coverage_of(tmp_path, graph_text(*BASE, ("last", "Erfinv", ("same",))))
    assert coverage.unsupported_ops == ("Erfinv",)
    assert rows["Erfinv"].after_passes == {UNSUPPORTED: 1} and rows["Erfinv"].note == "polytf does not support this op"
    assert rows["Maximum"].after_passes == {}  # not prepared: no counts after the passes


def test_a_rewritten_op_names_its_pass(tmp_path):
    _, rows = coverage_of(tmp_path, graph_text(*BASE, ("last", "ArgMax", ("same", "axis"))) + "\n" + AXIS)
    assert rows["ArgMax"].fate == REWRITTEN and "(expansion pass)" in rows["ArgMax"].note
    assert set(rewritten_ops()) >= {"ArgMax", "ArgMin", "OneHot", "Split", "SplitV", "Unpack"}
