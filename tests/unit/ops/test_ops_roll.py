"""Roll: the reference against TensorFlow, the lowering against the reference (any shifts,
negative, repeated and larger than the axis), the compiled kernel under every heuristic
recipe, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import lookup

CASES = [((5, 3), [2], [0]), ((2, 6, 6, 3), [-3, -3], [1, 2]), ((2, 3, 4), [7, -1, 2], [1, 2, 1]), ((4, 5), [0], [1]), ((3, 4), 5, -1)]


def _node():
    return Node("r", "Roll", ("x:0", "shift:0", "axis:0"), attrs={"T": "float32", "Tshift": "int32", "Taxis": "int32"})


@st.composite
def rolls(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    count = draw(st.integers(1, 3))
    axes = [draw(st.integers(-len(shape), len(shape) - 1)) for _ in range(count)]
    shifts = [draw(st.integers(-12, 12)) for _ in range(count)]
    return shape, shifts, axes


@settings(max_examples=30, deadline=None)
@given(case=rolls())
def test_roll_lowering_matches_the_reference_and_numpy(case):
    shape, shifts, axes = case
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    (expected,), (got,), statements = run_op_with_constants(_node(), [x, np.array(shifts, np.int32), np.array(axes, np.int32)])
    rolled = {a % len(shape) for a in axes}
    assert len(statements) <= 2 ** len(rolled)
    np.testing.assert_array_equal(expected, np.roll(x, shifts, axis=axes))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shape,shifts,axes", CASES)
def test_roll_reference_matches_tensorflow(rand, shape, shifts, axes):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    shift, axis = np.array(shifts, np.int32), np.array(axes, np.int32)
    (ours,), _, _ = run_op_with_constants(_node(), [x, shift, axis], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.Roll(input=x, shift=shift, axis=axis).numpy())


@pytest.mark.parametrize(
    "shifts,axes,words", [([1], [2], "out of range"), ([1, 2], [0], "same length"), ([[1]], [[0]], "1-D"), (np.array([1.0], np.float32), [0], "int32")]
)
def test_roll_refuses_bad_shifts_and_axes(rand, shifts, axes, words):
    shift = np.asarray(shifts, dtype=getattr(shifts, "dtype", np.int32))
    with pytest.raises(ShapeError, match=words):
        run_op_with_constants(_node(), [rand(2, 3), shift, np.asarray(axes, np.int32)], lower=False)


def test_roll_by_a_shift_known_only_at_run_time_says_so():
    types = [TensorType((2, 3), "float32"), TensorType((1,), "int32"), TensorType((1,), "int32")]
    with pytest.raises(ShapeError, match="Roll node 'r': its shift input \\('shift:0'\\) must be a compile-time constant.*host"):
        lookup("Roll").infer(_node(), types, [None, None, np.array([0], np.int32)])


def test_roll_compiles_correctly(monkeypatch):
    """A Swin-style shift of a feature map by half a window along height and width, then a
    ReLU fused into the same loop nest."""
    graph = build_graph(
        [placeholder("x", (1, 8, 8, 16)), const("shift", np.array([-2, -2], np.int32)), const("axis", np.array([1, 2], np.int32)), _node(),
         Node("relu", "Relu", ("r:0",))],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    (kernel,) = kernels
    assert [op for _, op in kernel.scop.ops] == ["Roll", "Relu"]
    assert sum(statement.op == "Roll" for statement in kernel.scop.statements) == 4  # one per piece of the two axes
    assert failures == []
