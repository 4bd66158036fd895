"""DepthToSpace and SpaceToDepth: references against TensorFlow, lowerings against the
references, compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, placeholder
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node

CASES = [("DepthToSpace", (2, 3, 4, 8), 2), ("DepthToSpace", (1, 2, 3, 18), 3), ("SpaceToDepth", (2, 4, 6, 3), 2), ("SpaceToDepth", (1, 6, 3, 2), 3)]


def _node(op, block):
    return Node("s", op, ("x:0",), attrs={"block_size": block, "data_format": "NHWC"})


@pytest.mark.parametrize("op,shape,block", CASES)
def test_space_depth_lowering_matches_reference(rand, op, shape, block):
    (expected,), (got,), statements = run_op_with_constants(_node(op, block), [rand(*shape)])
    assert len(statements) == block * block
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op,shape,block", CASES)
def test_space_depth_reference_matches_tensorflow(rand, op, shape, block):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    (ours,), _, _ = run_op_with_constants(_node(op, block), [x], lower=False)
    np.testing.assert_array_equal(ours, getattr(tf.raw_ops, op)(input=x, block_size=block, data_format="NHWC").numpy())


def test_space_depth_round_trip_and_errors(rand):
    x = rand(1, 4, 4, 3)
    (packed,), _, _ = run_op_with_constants(_node("SpaceToDepth", 2), [x], lower=False)
    (unpacked,), _, _ = run_op_with_constants(_node("DepthToSpace", 2), [packed], lower=False)
    np.testing.assert_array_equal(unpacked, x)
    with pytest.raises(ShapeError, match="divisible"):
        run_op_with_constants(_node("DepthToSpace", 2), [rand(1, 2, 2, 6)], lower=False)
    with pytest.raises(ShapeError, match="NHWC"):
        run_op_with_constants(Node("s", "SpaceToDepth", ("x:0",), attrs={"block_size": 2, "data_format": "NCHW"}), [x], lower=False)


@pytest.mark.parametrize("op,shape,block", [("DepthToSpace", (1, 3, 5, 16), 2), ("SpaceToDepth", (2, 6, 4, 8), 2)])
def test_space_depth_compiles_correctly(monkeypatch, op, shape, block):
    graph = build_graph([placeholder("x", shape), _node(op, block), Node("relu", "Relu", ("s:0",))], ["relu:0"])
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [op for k in kernels for _, op in k.scop.ops][0] == op
    assert failures == []
