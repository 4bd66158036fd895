"""Fill, ZerosLike, OnesLike, BroadcastTo, Range, Slice and Tile: references against
TensorFlow, lowerings against the references, compiled kernels."""

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


def _node(op, count, **attrs):
    return Node("n", op, tuple(f"i{k}:0" for k in range(count)), attrs=attrs)


# --- Fill, ZerosLike, OnesLike, BroadcastTo ------------------------------------------


def test_fill_lowering_matches_reference():
    dims = np.asarray([2, 3, 4], np.int32)
    (expected,), (got,), _ = run_op_with_constants(_node("Fill", 2), [dims, np.float32(2.5)])
    assert expected.shape == (2, 3, 4) and np.all(expected == 2.5)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op,value", [("ZerosLike", 0.0), ("OnesLike", 1.0)])
def test_zeros_and_ones_like_lowering_and_static_value(rand, op, value):
    from polytf.graph import TensorType
    from polytf.ops.fill import static_like

    x = rand(3, 5)
    (expected,), (got,), _ = run_op_with_constants(_node(op, 1), [x])
    assert np.all(expected == value) and expected.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
    (static,) = static_like(_node(op, 1), [TensorType((3, 5), "float32")])
    np.testing.assert_array_equal(static, expected)


@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((4,), (3, 4)), ((2, 1, 3), (2, 5, 3))])
def test_broadcast_to_lowering_matches_reference(rand, shape, target):
    x = rand(*shape)
    (expected,), (got,), _ = run_op_with_constants(_node("BroadcastTo", 2), [x, np.asarray(target, np.int64)])
    np.testing.assert_array_equal(got, expected)


def test_broadcast_to_rejects_incompatible_shapes(rand):
    with pytest.raises(ShapeError, match="does not broadcast"):
        run_op_with_constants(_node("BroadcastTo", 2), [rand(3, 2), np.asarray([3, 4], np.int32)], lower=False)


def test_fill_like_and_broadcast_references_match_tensorflow(rand):
    tf = pytest.importorskip("tensorflow")
    dims = np.asarray([2, 3], np.int32)
    (fill,), _, _ = run_op_with_constants(_node("Fill", 2), [dims, np.float32(-1.5)], lower=False)
    np.testing.assert_array_equal(fill, tf.raw_ops.Fill(dims=dims, value=np.float32(-1.5)).numpy())
    x = rand(4, 1)
    for op in ("ZerosLike", "OnesLike"):
        (ours,), _, _ = run_op_with_constants(_node(op, 1), [x], lower=False)
        np.testing.assert_array_equal(ours, getattr(tf.raw_ops, op)(x=x).numpy())
    (ours,), _, _ = run_op_with_constants(_node("BroadcastTo", 2), [x, np.asarray([2, 4, 3], np.int32)], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.BroadcastTo(input=x, shape=np.asarray([2, 4, 3], np.int32)).numpy())


# --- Range ---------------------------------------------------------------------------


@pytest.mark.parametrize("start,limit,delta", [(0, 7, 1), (3, 20, 4), (10, 1, -3), (5, 5, 1), (0.5, 3.0, 0.75), (2.0, -1.0, -0.5)])
def test_range_reference_matches_tensorflow(start, limit, delta):
    tf = pytest.importorskip("tensorflow")
    dtype = np.int32 if isinstance(start, int) else np.float32
    inputs = [dtype(start), dtype(limit), dtype(delta)]
    (ours,), _, _ = run_op_with_constants(Node("n", "Range", ("a:0", "b:0", "c:0")), inputs, lower=False)
    theirs = tf.raw_ops.Range(start=inputs[0], limit=inputs[1], delta=inputs[2]).numpy()
    assert ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_range_folds_at_compile_time_and_rejects_zero_delta():
    graph = build_graph(
        [const("a", np.int32(0)), const("b", np.int32(6)), const("c", np.int32(2)), Node("r", "Range", ("a:0", "b:0", "c:0")),
         placeholder("x", (3,)), Node("cast", "Cast", ("r:0",), attrs={"SrcT": "int32", "DstT": "float32"}), Node("add", "AddV2", ("x:0", "cast:0"))],
        ["add:0"],
    )
    np.testing.assert_array_equal(graph.constants["r:0"], [0, 2, 4])
    with pytest.raises(ShapeError, match="delta must not be 0"):
        run_op_with_constants(Node("n", "Range", ("a:0", "b:0", "c:0")), [np.int32(0), np.int32(3), np.int32(0)], lower=False)


# --- Slice ---------------------------------------------------------------------------


@st.composite
def _slice_case(draw):
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(rank)]
    begin = [draw(st.integers(0, s - 1)) for s in shape]
    size = [draw(st.sampled_from([-1, *range(0, s - b + 1)])) for s, b in zip(shape, begin)]
    return shape, begin, size


@settings(max_examples=25, deadline=None)
@given(_slice_case())
def test_slice_lowering_matches_reference(case):
    shape, begin, size = case
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (expected,), (got,), _ = run_op_with_constants(_node("Slice", 3), [x, np.asarray(begin, np.int32), np.asarray(size, np.int64)])
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=15, deadline=None)
@given(_slice_case())
def test_slice_reference_matches_tensorflow(case):
    tf = pytest.importorskip("tensorflow")
    shape, begin, size = case
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (ours,), _, _ = run_op_with_constants(_node("Slice", 3), [x, np.asarray(begin, np.int32), np.asarray(size, np.int32)], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.Slice(input=x, begin=np.asarray(begin, np.int32), size=np.asarray(size, np.int32)).numpy())


def test_slice_rejects_a_box_outside_the_input(rand):
    with pytest.raises(ShapeError, match="leave the input"):
        run_op_with_constants(_node("Slice", 3), [rand(4, 4), np.asarray([2, 0], np.int32), np.asarray([3, 4], np.int32)], lower=False)


# --- Tile ----------------------------------------------------------------------------


@st.composite
def _tile_case(draw):
    rank = draw(st.integers(1, 4))
    return [draw(st.integers(1, 4)) for _ in range(rank)], [draw(st.integers(0, 3)) for _ in range(rank)]


@settings(max_examples=25, deadline=None)
@given(_tile_case())
def test_tile_lowering_matches_reference(case):
    shape, multiples = case
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    (expected,), (got,), _ = run_op_with_constants(_node("Tile", 2), [x, np.asarray(multiples, np.int32)])
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=15, deadline=None)
@given(_tile_case())
def test_tile_reference_matches_tensorflow(case):
    tf = pytest.importorskip("tensorflow")
    shape, multiples = case
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    (ours,), _, _ = run_op_with_constants(_node("Tile", 2), [x, np.asarray(multiples, np.int32)], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.Tile(input=x, multiples=np.asarray(multiples, np.int32)).numpy())


# --- compiled ------------------------------------------------------------------------


def test_slice_tile_broadcast_fill_compile_correctly(monkeypatch):
    graph = build_graph(
        [
            placeholder("x", (2, 6, 5)),
            const("begin", np.asarray([0, 1, 2], np.int32)),
            const("size", np.asarray([2, 4, -1], np.int32)),
            Node("slice", "Slice", ("x:0", "begin:0", "size:0")),
            Node("relu", "Relu", ("slice:0",)),
            const("multiples", np.asarray([1, 2, 3], np.int32)),
            Node("tile", "Tile", ("relu:0", "multiples:0")),
            const("target", np.asarray([3, 2, 8, 9], np.int32)),
            Node("broadcast", "BroadcastTo", ("tile:0", "target:0")),
            placeholder("v", ()),
            const("dims", np.asarray([3, 2, 8, 9], np.int32)),
            Node("fill", "Fill", ("dims:0", "v:0")),
            Node("add", "AddV2", ("broadcast:0", "fill:0")),
        ],
        ["add:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert {op for k in kernels for _, op in k.scop.ops} >= {"Slice", "Tile", "BroadcastTo", "Fill"}
    assert failures == []


def test_slice_tile_and_mirror_pad_move_int32_tensors_at_run_time(monkeypatch):
    graph = build_graph(
        [
            Node("x", "Placeholder", attrs={"dtype": "int32", "shape": (3, 5)}),
            const("begin", np.asarray([1, 1], np.int32)),
            const("size", np.asarray([2, 3], np.int32)),
            Node("slice", "Slice", ("x:0", "begin:0", "size:0")),
            const("multiples", np.asarray([2, 2], np.int32)),
            Node("tile", "Tile", ("slice:0", "multiples:0")),
            const("p", np.asarray([[1, 1], [2, 0]], np.int32)),
            Node("mirror", "MirrorPad", ("tile:0", "p:0"), attrs={"mode": "SYMMETRIC"}),
            Node("cast", "Cast", ("mirror:0",), attrs={"SrcT": "int32", "DstT": "float32"}),
        ],
        ["cast:0"],
    )
    assert graph.types["tile:0"].dtype == "int32" and graph.types["mirror:0"].shape == (6, 8)
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert {op for k in kernels for _, op in k.scop.ops} >= {"Slice", "Tile", "MirrorPad"}
    moving = {k.scop.name for k in kernels if not any(op == "Cast" for _, op in k.scop.ops)}
    assert len(moving) >= 2
    # only the kernels that move int32 data are checked here (the Cast kernel is tested with Cast)
    assert [f for f in failures if f[0] in moving] == []
