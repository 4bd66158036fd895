"""SpaceToBatchND and BatchToSpaceND: references against TensorFlow, lowerings against the
references (random block shapes, paddings, crops, batches, one and two spatial dimensions),
shape errors, compiled kernels."""

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
from polytf.ops import lookup, supported_ops

SPACE_TO_BATCH = Node("s", "SpaceToBatchND", ("x:0", "block:0", "paddings:0"))
BATCH_TO_SPACE = Node("s", "BatchToSpaceND", ("x:0", "block:0", "crops:0"))


@st.composite
def _space_to_batch_case(draw):
    """``(x shape, block_shape, paddings)`` with padded sizes the block divides (sizes not
    divisible by the block included: the padding makes them so)."""
    spatial = draw(st.integers(1, 2))
    block = [draw(st.integers(1, 4)) for _ in range(spatial)]
    sizes = [draw(st.integers(1, 9)) for _ in range(spatial)]
    paddings = []
    for size, b in zip(sizes, block):
        before = draw(st.integers(0, 5))
        extra = (-(size + before)) % b
        paddings.append([before, extra + b * draw(st.integers(0, 1))])
    remaining = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    shape = [draw(st.integers(1, 3)), *sizes, *remaining]
    dtype = draw(st.sampled_from(["int64", "int32"]))
    return shape, np.asarray(block, dtype), np.asarray(paddings, dtype)


@st.composite
def _batch_to_space_case(draw):
    """``(x shape, block_shape, crops)`` with a batch the blocks divide."""
    spatial = draw(st.integers(1, 2))
    block = [draw(st.integers(1, 4)) for _ in range(spatial)]
    sizes = [draw(st.integers(1, 5)) for _ in range(spatial)]
    crops = []
    for size, b in zip(sizes, block):
        before = draw(st.integers(0, size * b))
        crops.append([before, draw(st.integers(0, size * b - before))])
    remaining = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    shape = [draw(st.integers(1, 3)) * int(np.prod(block)), *sizes, *remaining]
    return shape, np.asarray(block, np.int32), np.asarray(crops, np.int32)


def _values(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(_space_to_batch_case())
def test_space_to_batch_lowering_matches_reference(case):
    shape, block, paddings = case
    (expected,), (got,), statements = run_op_with_constants(SPACE_TO_BATCH, [_values(shape), block, paddings])
    assert int(np.prod(block)) <= len(statements) <= 2 * int(np.prod(block))
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(_batch_to_space_case())
def test_batch_to_space_lowering_matches_reference(case):
    shape, block, crops = case
    (expected,), (got,), statements = run_op_with_constants(BATCH_TO_SPACE, [_values(shape), block, crops])
    assert len(statements) <= int(np.prod(block))
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=25, deadline=None)
@given(_space_to_batch_case(), _batch_to_space_case())
def test_references_match_tensorflow(to_batch, to_space):
    tf = pytest.importorskip("tensorflow")
    shape, block, paddings = to_batch
    x = _values(shape)
    (ours,), _, _ = run_op_with_constants(SPACE_TO_BATCH, [x, block, paddings], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.SpaceToBatchND(input=x, block_shape=block, paddings=paddings).numpy())
    shape, block, crops = to_space
    x = _values(shape)
    (ours,), _, _ = run_op_with_constants(BATCH_TO_SPACE, [x, block, crops], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.BatchToSpaceND(input=x, block_shape=block, crops=crops).numpy())


@settings(max_examples=20, deadline=None)
@given(_space_to_batch_case())
def test_batch_to_space_undoes_space_to_batch(case):
    shape, block, paddings = case
    x = _values(shape)
    (moved,), _, _ = run_op_with_constants(SPACE_TO_BATCH, [x, block, paddings], lower=False)
    (back,), (lowered,), _ = run_op_with_constants(BATCH_TO_SPACE, [moved, block, paddings])
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(lowered, x)


def test_integer_tensors_move_exactly():
    x = np.arange(2 * 5 * 3, dtype=np.int32).reshape(2, 5, 3)
    block, paddings = np.asarray([2], np.int32), np.asarray([[1, 0]], np.int32)
    (expected,), (got,), _ = run_op_with_constants(SPACE_TO_BATCH, [x, block, paddings])
    assert expected.dtype == np.int32 and expected.shape == (4, 3, 3)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(expected[2:, 0], [[0, 1, 2], [15, 16, 17]])  # offset 1, n = 0 and 1: rows 0 of x[0], x[1]
    np.testing.assert_array_equal(expected[:2, 0], 0)  # offset 0, position 0: the padding


@pytest.mark.parametrize(
    "node,shape,block,amounts,message",
    [
        (SPACE_TO_BATCH, (1, 5, 3), [2], [[0, 0]], "not divisible by block_shape"),
        (SPACE_TO_BATCH, (1, 5, 3), [2], [[-1, 0]], "non-negative"),
        (SPACE_TO_BATCH, (1, 4, 3), [0], [[0, 0]], "each >= 1"),
        (SPACE_TO_BATCH, (1, 4, 3), [2], [0, 0], r"shape \[1, 2\]"),
        (SPACE_TO_BATCH, (4,), [2], [[0, 0]], "rank >= 2"),
        (BATCH_TO_SPACE, (3, 4, 3), [2], [[0, 0]], "batch 3 is not divisible"),
        (BATCH_TO_SPACE, (2, 4, 3), [2], [[5, 4]], "exceed spatial dimension 1 of size 8"),
    ],
)
def test_malformed_inputs_are_shape_errors(node, shape, block, amounts, message):
    with pytest.raises(ShapeError, match=message) as error:
        run_op_with_constants(node, [_values(shape), np.asarray(block, np.int32), np.asarray(amounts, np.int32)], lower=False)
    assert node.op in str(error.value) and "'s'" in str(error.value)


def test_block_shape_and_paddings_must_be_compile_time_constants():
    graph_nodes = [
        placeholder("x", (1, 4, 3)),
        placeholder("block", (1,)),
        const("paddings", np.zeros((1, 2), np.int32)),
        Node("s", "SpaceToBatchND", ("x:0", "block:0", "paddings:0")),
    ]
    with pytest.raises(ShapeError, match="block_shape input must be a compile-time constant"):
        build_graph(graph_nodes, ["s:0"])


@pytest.mark.parametrize(
    "shape,block,paddings",
    [((2, 11, 8), [4], [[4, 5]]), ((1, 7, 6, 8), [2, 3], [[1, 2], [2, 1]])],
)
def test_space_to_batch_and_back_compile_correctly(monkeypatch, shape, block, paddings):
    """Both ops as compiled kernels, each verified against its reference under the default
    and every heuristic recipe (a Relu between them keeps them in separate kernels)."""
    block, paddings = np.asarray(block, np.int32), np.asarray(paddings, np.int32)
    graph = build_graph(
        [
            placeholder("x", shape),
            const("block", block),
            const("paddings", paddings),
            Node("to_batch", "SpaceToBatchND", ("x:0", "block:0", "paddings:0")),
            Node("relu", "Relu", ("to_batch:0",)),
            Node("to_space", "BatchToSpaceND", ("relu:0", "block:0", "paddings:0")),
        ],
        ["to_space:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    ops = {op for kernel in kernels for _, op in kernel.scop.ops}
    assert {"SpaceToBatchND", "BatchToSpaceND"} <= ops
    assert failures == []


def test_traits_name_the_moves_and_the_dilatable_convolutions():
    """What :mod:`polytf.passes.dilation_folding` reads: the direction and the constant inputs
    of the two ops, and which convolutions take a ``dilations`` attr."""
    for op, to_batch in (("SpaceToBatchND", True), ("BatchToSpaceND", False)):
        definition = lookup(op)
        assert definition.space_batch.to_batch is to_batch
        assert definition.data_input_indices(3) == (0,)
        assert {definition.space_batch.block_shape_input, definition.space_batch.amounts_input} == {1, 2}
    assert lookup("Conv2D").weight_layout.dilatable and lookup("DepthwiseConv2dNative").weight_layout.dilatable
    assert not lookup("MatMul").weight_layout.dilatable
    assert [op for op in supported_ops() if lookup(op).space_batch is not None] == ["BatchToSpaceND", "SpaceToBatchND"]
