"""Split, SplitV, Unpack (and their expansion into Slices) and MirrorPad: references against
TensorFlow, lowerings against the references, compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, interpret_kernels, kernels_of, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node
from polytf.ops import lookup
from polytf.passes.expansion import expand_ops
from polytf.passes.pipeline import optimize


@st.composite
def _split_case(draw):
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    axis = draw(st.integers(-rank, rank - 1))
    parts = draw(st.integers(1, 3))
    shape[axis] *= parts
    sizes = [draw(st.integers(0, shape[axis])) for _ in range(draw(st.integers(1, 3)))]
    if sum(sizes) > shape[axis]:
        sizes = [shape[axis]]
    sizes.append(-1)
    return shape, axis, parts, sizes


@settings(max_examples=20, deadline=None)
@given(_split_case())
def test_split_references_match_tensorflow(case):
    tf = pytest.importorskip("tensorflow")
    shape, axis, parts, sizes = case
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    node = Node("s", "Split", ("a:0", "x:0"), attrs={"num_split": parts})
    ours, _, _ = run_op_with_constants(node, [np.int32(axis), x], lower=False)
    theirs = tf.raw_ops.Split(axis=np.int32(axis), value=x, num_split=parts)
    assert len(ours) == parts and all(np.array_equal(a, b.numpy()) for a, b in zip(ours, theirs))
    node = Node("s", "SplitV", ("x:0", "z:0", "a:0"), attrs={"num_split": len(sizes)})
    ours, _, _ = run_op_with_constants(node, [x, np.asarray(sizes, np.int64), np.int32(axis)], lower=False)
    theirs = tf.raw_ops.SplitV(value=x, size_splits=np.asarray(sizes, np.int64), axis=np.int32(axis), num_split=len(sizes))
    assert len(ours) == len(sizes) and all(np.array_equal(a, b.numpy()) for a, b in zip(ours, theirs))
    node = Node("s", "Unpack", ("x:0",), attrs={"num": shape[axis], "axis": axis})
    ours, _, _ = run_op_with_constants(node, [x], lower=False)
    theirs = tf.raw_ops.Unpack(value=x, num=shape[axis], axis=axis)
    assert len(ours) == shape[axis] and all(np.array_equal(a, b.numpy()) for a, b in zip(ours, theirs))


def test_split_rejects_unequal_parts_and_bad_sizes(rand):
    with pytest.raises(ShapeError, match="equal parts"):
        run_op_with_constants(Node("s", "Split", ("a:0", "x:0"), attrs={"num_split": 3}), [np.int32(1), rand(2, 4)], lower=False)
    with pytest.raises(ShapeError, match="do not add up"):
        run_op_with_constants(Node("s", "SplitV", ("x:0", "z:0", "a:0"), attrs={"num_split": 2}), [rand(2, 4), np.asarray([1, 2], np.int32), np.int32(1)], lower=False)


def _split_graph(op, shape, axis, parts, used):
    x = placeholder("x", shape)
    if op == "Split":
        split = [const("axis", np.int32(axis)), Node("s", "Split", ("axis:0", "x:0"), attrs={"num_split": parts})]
    elif op == "SplitV":
        sizes = [shape[axis] // parts] * (parts - 1) + [-1]
        split = [const("sizes", np.asarray(sizes, np.int32)), const("axis", np.int32(axis)),
                 Node("s", "SplitV", ("x:0", "sizes:0", "axis:0"), attrs={"num_split": parts})]
    else:
        split = [Node("s", "Unpack", ("x:0",), attrs={"num": shape[axis], "axis": axis})]
    consumers = [Node(f"exp{k}", "Exp", (f"s:{k}",)) for k in used]
    return build_graph([x, *split, *consumers], [f"exp{k}:0" for k in used])


def _run_graph(graph, x):
    """Every kernel of ``graph`` through the interpreter, in order."""
    return interpret_kernels(graph, {"x:0": x})


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["Split", "SplitV", "Unpack"]), st.integers(0, 2), st.integers(1, 3), st.data())
def test_split_rewriting_matches_the_reference(op, axis, parts, data):
    shape = [2, 3, 4]
    shape[axis] = parts * (2 if op != "Unpack" else 1)
    count = parts if op != "Unpack" else shape[axis]
    used = sorted(data.draw(st.sets(st.integers(0, count - 1), min_size=1)))
    graph = _split_graph(op, shape, axis, parts, used)
    rewritten, report = expand_ops(graph)
    assert report.rewrites == 1
    assert not any(n.op == op for n in rewritten.nodes.values())
    assert sum(n.op == "Slice" for n in rewritten.nodes.values()) == len(used)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    values = _run_graph(rewritten, x)
    definition = lookup(op)
    node = graph.nodes["s"]
    inputs = [x if t == "x:0" else graph.constants[t] for t in node.inputs]
    parts_expected = definition.reference(node, inputs)
    for k in used:
        np.testing.assert_allclose(values[f"exp{k}:0"], np.exp(parts_expected[k]), rtol=1e-6)


def test_split_without_the_pass_says_what_to_do():
    graph = _split_graph("Split", [2, 4], 1, 2, [1])
    with pytest.raises(ShapeError, match="expand_ops"):
        kernels_of(graph)


def test_optimizer_rewrites_splits_and_kernels_compile(monkeypatch):
    graph, _ = optimize(_split_graph("SplitV", [2, 9, 4], 1, 3, [0, 2]))
    assert not any(n.op == "SplitV" for n in graph.nodes.values())
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert sum(op == "Slice" for k in kernels for _, op in k.scop.ops) == 2
    assert failures == []


# --- MirrorPad -----------------------------------------------------------------------


@st.composite
def _mirror_case(draw):
    rank = draw(st.integers(1, 3))
    mode = draw(st.sampled_from(["REFLECT", "SYMMETRIC"]))
    shape = [draw(st.integers(2, 4)) for _ in range(rank)]
    limit = 1 if mode == "REFLECT" else 0
    paddings = [[draw(st.integers(0, s - limit)), draw(st.integers(0, s - limit))] for s in shape]
    return shape, mode, paddings


@settings(max_examples=25, deadline=None)
@given(_mirror_case())
def test_mirror_pad_lowering_matches_reference(case):
    shape, mode, paddings = case
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    node = Node("p", "MirrorPad", ("x:0", "p:0"), attrs={"mode": mode})
    (expected,), (got,), _ = run_op_with_constants(node, [x, np.asarray(paddings, np.int32)])
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=15, deadline=None)
@given(_mirror_case())
def test_mirror_pad_reference_matches_tensorflow(case):
    tf = pytest.importorskip("tensorflow")
    shape, mode, paddings = case
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    node = Node("p", "MirrorPad", ("x:0", "p:0"), attrs={"mode": mode})
    (ours,), _, _ = run_op_with_constants(node, [x, np.asarray(paddings, np.int64)], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.MirrorPad(input=x, paddings=np.asarray(paddings, np.int64), mode=mode).numpy())


def test_mirror_pad_rejects_too_wide_reflect_paddings(rand):
    with pytest.raises(ShapeError, match="REFLECT allows"):
        run_op_with_constants(Node("p", "MirrorPad", ("x:0", "p:0"), attrs={"mode": "REFLECT"}), [rand(3), np.asarray([[3, 0]], np.int32)], lower=False)


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
def test_mirror_pad_compiles_correctly(monkeypatch, mode):
    graph = build_graph(
        [placeholder("x", (1, 6, 5, 3)), const("p", np.asarray([[0, 0], [2, 1], [1, 2], [0, 0]], np.int32)),
         Node("pad", "MirrorPad", ("x:0", "p:0"), attrs={"mode": mode}), Node("relu", "Relu", ("pad:0",))],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [k.scop.ops for k in kernels] == [(("pad", "MirrorPad"), ("relu", "Relu"))]
    assert failures == []


def test_split_rewriting_keeps_graph_output_names():
    x = placeholder("x", (2, 6))
    nodes = [x, const("axis", np.int32(1)), Node("s", "Split", ("axis:0", "x:0"), attrs={"num_split": 3}), Node("exp", "Exp", ("s:2",))]
    # output 0 as a graph output: the node becomes an Identity of its Slice under the same name
    rewritten, report = expand_ops(build_graph(nodes, ["s:0", "exp:0"]))
    assert report.rewrites == 1 and rewritten.nodes["s"].op == "Identity"
    assert rewritten.nodes[rewritten.nodes["s"].inputs[0].split(":")[0]].op == "Slice"
    assert rewritten.types["s:0"].shape == (2, 2)
    # output 1 as a graph output keeps the node as it is (lowering then names the problem)
    rewritten, report = expand_ops(build_graph(nodes, ["s:1", "exp:0"]))
    assert report.rewrites == 0 and rewritten.nodes["s"].op == "Split"
    assert not report.changed
