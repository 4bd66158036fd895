"""ReverseV2: the reference against TensorFlow, the lowering against the reference, the
compiled kernel under every heuristic recipe, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node

CASES = [((5, 3), [0]), ((2, 3, 4), [1]), ((2, 3, 4), [-1, 0]), ((4, 1, 3), []), ((1, 20, 8), [1])]


def _node():
    return Node("r", "ReverseV2", ("x:0", "axis:0"), attrs={"T": "float32", "Tidx": "int32"})


@st.composite
def shapes_and_axes(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape), max_size=len(shape)))
    return shape, axes


@settings(max_examples=25, deadline=None)
@given(case=shapes_and_axes())
def test_reverse_lowering_matches_the_reference_and_numpy(case):
    shape, axes = case
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    (expected,), (got,), statements = run_op_with_constants(_node(), [x, np.array(axes, dtype=np.int32)])
    assert len(statements) == 1
    np.testing.assert_array_equal(expected, np.flip(x, axis=tuple(axes)) if axes else x)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("shape,axes", CASES)
def test_reverse_reference_matches_tensorflow(rand, shape, axes):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    axis = np.array(axes, dtype=np.int32)
    (ours,), _, _ = run_op_with_constants(_node(), [x, axis], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.ReverseV2(tensor=x, axis=axis).numpy())


@pytest.mark.parametrize(
    "axes,words", [([2], "out of range"), ([0, -2], "twice"), ([[0]], "1-D"), (np.array([0.0], dtype=np.float32), "int32")]
)
def test_reverse_refuses_bad_axes(rand, axes, words):
    with pytest.raises(ShapeError, match=words):
        run_op_with_constants(_node(), [rand(2, 3), np.asarray(axes, dtype=getattr(axes, "dtype", np.int32))], lower=False)


def test_reverse_compiles_correctly(monkeypatch):
    graph = build_graph(
        [placeholder("x", (2, 7, 5)), const("axis", np.array([1], dtype=np.int32)), _node(), Node("relu", "Relu", ("r:0",))],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert "ReverseV2" in [op for k in kernels for _, op in k.scop.ops]
    assert failures == []
