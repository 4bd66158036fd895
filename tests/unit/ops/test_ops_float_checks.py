"""IsNan, IsInf, IsFinite and CheckNumerics without TensorFlow: lowering against reference
through the interpreter, the CheckNumerics status and its run-time error in a compiled model
(``tests/e2e/test_float_semantics.py`` compares both with TensorFlow itself)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import polytf
from polytf.errors import InvalidArgumentError, ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import lookup
from polytf.ops.float_checks import failure
from polytf.poly.expression import FloatTest, Load
from polytf.poly.numerics_checks import STATUS_INFINITY, STATUS_NAN, run_time_numerics_checks
from polytf.poly.scop import Scop

SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, 1.5, -3.0, np.finfo(np.float32).max])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=hnp.arrays(np.float32, (3, 5), elements=st.one_of(SPECIAL, st.floats(width=32))))
@pytest.mark.parametrize("op", ["IsNan", "IsInf", "IsFinite"])
def test_classification_lowering_matches_numpy(run_op, op, x):
    (expected,), (got,), (statement,) = run_op(Node("c", op, ("x:0",)), [x])
    np.testing.assert_array_equal(expected, {"IsNan": np.isnan, "IsInf": np.isinf, "IsFinite": np.isfinite}[op](x))
    np.testing.assert_array_equal(got, expected)
    assert isinstance(statement.value, FloatTest) and not statement.value.node  # no check: nothing for the runtime


def test_classification_takes_float32_only():
    with pytest.raises(ShapeError, match="IsNan node 'c' takes a float32 tensor"):
        lookup("IsNan").infer(Node("c", "IsNan", ("x:0",)), [TensorType((2,), "int32")], [None])


@pytest.mark.parametrize(
    ("values", "status"), [([1.0, 2.0], (False, False)), ([np.nan, 1.0], (True, False)), ([-np.inf, 0.0], (False, True))]
)
def test_check_numerics_lowers_to_a_copy_and_a_status(run_op, values, status):
    x = np.array([[values[0], 3.0], [values[1], -0.0]], np.float32)
    node = Node("check", "CheckNumerics", ("x:0",), attrs={"message": "m"})
    if any(status):
        with pytest.raises(InvalidArgumentError, match="m : Tensor had (NaN|Inf) values .*node 'check'"):
            run_op(node, [x])
        return
    (expected,), (got,), statements = run_op(node, [x])
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(expected, x)
    scop = Scop("k", tuple(statements), ())
    ((array, checked, message),) = run_time_numerics_checks(scop)
    assert (checked, message) == ("check", "m")
    assert [s.write.array for s in statements[:3]] == [array] * 3


def test_check_numerics_status_follows_the_interpreter():
    from polytf.ops import ArrayRef, LoweringContext
    from polytf.poly.interpreter import interpret
    from polytf.poly.scop import ArrayInfo

    node = Node("check", "CheckNumerics", ("x:0",), attrs={"message": "m"})
    context = LoweringContext()
    x, y = ArrayRef("X", TensorType((2, 3))), ArrayRef("Y", TensorType((2, 3)))
    statements = lookup("CheckNumerics").lower(node, [x], [y], context)
    (status,) = context.temporaries
    arrays = (
        ArrayInfo("X", (2, 3), "float32", "input"),
        ArrayInfo("Y", (2, 3), "float32", "output"),
        ArrayInfo(status.name, (2,), "bool", "temporary"),
    )
    scop = Scop("k", tuple(statements), arrays)
    value = np.array([[1, np.inf, 2], [np.nan, 0, 1]], np.float32)
    state = interpret(scop, {"X": value})
    assert state[status.name][STATUS_NAN] and state[status.name][STATUS_INFINITY]
    np.testing.assert_array_equal(state["Y"], value)
    assert all(isinstance(s.value, Load) or s.node == "check" for s in statements)


def test_failure_text_is_tensorflows():
    assert failure(False, False, "n", "m") is None
    assert failure(True, False, "n", "m").startswith("m : Tensor had NaN values")
    assert failure(False, True, "n", "m").startswith("m : Tensor had Inf values")
    assert failure(True, True, "n", "m") == "m : Tensor had Inf and NaN values (CheckNumerics node 'n')"


def _check_graph(path):
    from tensorboard.compat.proto import graph_pb2, types_pb2

    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for size in (4, 9):
        x.attr["shape"].shape.dim.add(size=size)
    scaled = graph.node.add(name="scaled", op="Mul", input=["x", "x"])
    scaled.attr["T"].type = types_pb2.DT_FLOAT
    check = graph.node.add(name="check", op="CheckNumerics", input=["scaled"])
    check.attr["T"].type = types_pb2.DT_FLOAT
    check.attr["message"].s = b"squares"
    relu = graph.node.add(name="relu", op="Relu", input=["check"])
    relu.attr["T"].type = types_pb2.DT_FLOAT
    path.write_bytes(graph.SerializeToString())
    return path


def test_check_numerics_raises_from_the_compiled_model(tmp_path):
    model = polytf.load(_check_graph(tmp_path / "check.pb"), cache_dir=tmp_path / "cache", fallback=False)
    assert not model.host_nodes
    x = np.random.default_rng(0).standard_normal((4, 9)).astype(np.float32)
    np.testing.assert_array_equal(model(x=x)["relu"], np.maximum(x * x, 0))
    x[1, 2] = np.float32(2e19)  # its square overflows to inf
    with pytest.raises(InvalidArgumentError, match="squares : Tensor had Inf values .*'check'"):
        model(x=x)
    x[3, 3] = np.nan
    with pytest.raises(InvalidArgumentError, match="Inf and NaN"):
        model(x=x)
    x[...] = 1.0
    np.testing.assert_array_equal(model(x=x)["relu"], x)  # a failed call leaves the model usable


def test_export_refuses_a_check_it_cannot_report(tmp_path):
    from polytf.errors import CompileError

    with pytest.raises(CompileError, match="CheckNumerics node.*'check'"):
        polytf.compile(_check_graph(tmp_path / "check.pb"), tmp_path / "out", cache_dir=tmp_path / "cache", shared_library=False)
