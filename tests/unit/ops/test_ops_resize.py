"""ResizeNearestNeighbor and ResizeBilinear: references against TensorFlow, lowerings
against the references (piecewise-affine source indices), compiled kernels."""

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
from polytf.ops import resize

OPS = ["ResizeNearestNeighbor", "ResizeBilinear"]
MODES = [(False, False), (True, False), (False, True)]


def _node(op, align, half):
    return Node("r", op, ("x:0", "size:0"), attrs={"align_corners": align, "half_pixel_centers": half})


@st.composite
def _case(draw):
    op = draw(st.sampled_from(OPS))
    align, half = draw(st.sampled_from(MODES))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 3)))
    size = (draw(st.integers(1, 13)), draw(st.integers(1, 13)))
    return op, align, half, shape, size


@settings(max_examples=40, deadline=None)
@given(_case())
def test_resize_reference_matches_tensorflow(case):
    tf = pytest.importorskip("tensorflow")
    op, align, half, shape, size = case
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (ours,), _, _ = run_op_with_constants(_node(op, align, half), [x, np.asarray(size, np.int32)], lower=False)
    theirs = getattr(tf.raw_ops, op)(images=x, size=np.asarray(size, np.int32), align_corners=align, half_pixel_centers=half).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(_case())
def test_resize_lowering_matches_reference(case):
    op, align, half, shape, size = case
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (expected,), (got,), statements = run_op_with_constants(_node(op, align, half), [x, np.asarray(size, np.int32)])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert len(statements) <= resize.MAX_STATEMENTS


@pytest.mark.parametrize("op", OPS)
def test_integer_factors_need_few_statements(rand, op):
    x = rand(1, 8, 8, 2)
    _, _, statements = run_op_with_constants(_node(op, False, True), [x, np.asarray([16, 16], np.int32)])
    assert len(statements) <= 16  # 2 residues per axis plus clamped borders


def test_ratios_with_a_long_period_say_so(rand):
    x = rand(1, 37, 37, 1)
    with pytest.raises(ShapeError, match="run this node on the host"):
        run_op_with_constants(_node("ResizeBilinear", False, True), [x, np.asarray([64, 64], np.int32)])
    with pytest.raises(ShapeError, match="cannot both be true"):
        run_op_with_constants(_node("ResizeBilinear", True, True), [x, np.asarray([4, 4], np.int32)], lower=False)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("align,half", MODES)
def test_resize_compiles_correctly(monkeypatch, op, align, half):
    graph = build_graph(
        [placeholder("x", (1, 5, 6, 8)), const("size", np.asarray([10, 12], np.int32)), _node(op, align, half), Node("relu", "Relu", ("r:0",))],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert kernels[0].scop.ops[0] == ("r", op)
    assert failures == []
