"""Cumsum and MatrixBandPart: references against TensorFlow, lowerings against the
references, compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, placeholder
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node

FLAGS = [(False, False), (True, False), (False, True), (True, True)]
CUMSUM_CASES = [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 4, 3), 1)]
BANDS = [(-1, 0), (0, -1), (1, 2), (0, 0), (-1, -1), (3, 1)]


def _cumsum(exclusive, reverse):
    return Node("c", "Cumsum", ("x:0", "axis:0"), attrs={"exclusive": exclusive, "reverse": reverse})


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
@pytest.mark.parametrize("shape,axis", CUMSUM_CASES)
def test_cumsum_lowering_matches_reference(rand, exclusive, reverse, shape, axis):
    (expected,), (got,), _ = run_op_with_constants(_cumsum(exclusive, reverse), [rand(*shape), np.int32(axis)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("exclusive,reverse", FLAGS)
@pytest.mark.parametrize("shape,axis", CUMSUM_CASES)
def test_cumsum_reference_matches_tensorflow(rand, exclusive, reverse, shape, axis):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    (ours,), _, _ = run_op_with_constants(_cumsum(exclusive, reverse), [x, np.int32(axis)], lower=False)
    theirs = tf.raw_ops.Cumsum(x=x, axis=np.int32(axis), exclusive=exclusive, reverse=reverse).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    integers = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    (ours,), _, _ = run_op_with_constants(_cumsum(exclusive, reverse), [integers, np.int32(axis)], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.Cumsum(x=integers, axis=np.int32(axis), exclusive=exclusive, reverse=reverse).numpy())


def test_cumsum_rejects_a_bad_axis(rand):
    with pytest.raises(ShapeError, match="out of range"):
        run_op_with_constants(_cumsum(False, False), [rand(3, 4), np.int32(2)], lower=False)


def _band():
    return Node("b", "MatrixBandPart", ("x:0", "lo:0", "up:0"))


@pytest.mark.parametrize("lower,upper", BANDS)
@pytest.mark.parametrize("shape", [(5, 5), (2, 4, 6), (6, 3)])
def test_band_part_lowering_matches_reference(rand, lower, upper, shape):
    (expected,), (got,), _ = run_op_with_constants(_band(), [rand(*shape), np.int64(lower), np.int64(upper)])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("lower,upper", BANDS)
@pytest.mark.parametrize("shape", [(5, 5), (2, 4, 6), (6, 3)])
def test_band_part_reference_matches_tensorflow(rand, lower, upper, shape):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    (ours,), _, _ = run_op_with_constants(_band(), [x, np.int64(lower), np.int64(upper)], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.MatrixBandPart(input=x, num_lower=np.int64(lower), num_upper=np.int64(upper)).numpy())


def test_causal_mask_folds_to_a_constant():
    graph = build_graph(
        [const("ones", np.ones((4, 4), np.float32)), const("lo", np.int32(-1)), const("up", np.int32(0)),
         Node("mask", "MatrixBandPart", ("ones:0", "lo:0", "up:0")), placeholder("x", (4, 4)), Node("mul", "Mul", ("x:0", "mask:0"))],
        ["mul:0"],
    )
    np.testing.assert_array_equal(graph.constants["mask:0"], np.tril(np.ones((4, 4), np.float32)))


def test_cumsum_and_band_part_compile_correctly(monkeypatch):
    graph = build_graph(
        [
            placeholder("x", (3, 9, 9)),
            const("axis", np.int32(2)),
            Node("c", "Cumsum", ("x:0", "axis:0"), attrs={"exclusive": True, "reverse": False}),
            const("lo", np.int32(2)),
            const("up", np.int32(1)),
            Node("b", "MatrixBandPart", ("c:0", "lo:0", "up:0")),
            Node("relu", "Relu", ("b:0",)),
        ],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [op for k in kernels for _, op in k.scop.ops][:2] == ["Cumsum", "MatrixBandPart"]
    assert failures == []
