"""Shape, StridedSlice, Pack, GatherV2 and the views ExpandDims/StopGradient/Snapshot:
references vs TensorFlow, lowerings vs references, compile-time folding in shape
inference, and kernels compiled through CpuTarget."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, kernels_of, placeholder
from op_constants import run_op_with_constants

from polytf.config import MeasurementConfig
from polytf.errors import ShapeError
from polytf.graph import Graph, Node, TensorType
from polytf.lowering.shape_inference import infer_types
from polytf.ops import VIEW, ArrayRef, LoweringContext, lookup
from polytf.ops.constant_inputs import FOLD_MAX_ELEMENTS
from polytf.ops.gather import arithmetic_runs
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.search_space import SearchSpace
from polytf.targets.cpu import CpuTarget

CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)
MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _slice_node(**masks):
    return Node("slice", "StridedSlice", ("x:0", "begin:0", "end:0", "strides:0"), attrs={k: int(masks.get(k, 0)) for k in MASKS})


def _slice_inputs(x, begin, end, strides):
    return [x, np.array(begin, np.int32), np.array(end, np.int32), np.array(strides, np.int32)]


# --- StridedSlice ------------------------------------------------------------------------

SLICES = [
    # (input shape, begin, end, strides, masks): x[...] in Python terms in the comment
    ((5,), [1], [4], [1], {}),  # x[1:4]
    ((5,), [0], [1], [1], {"shrink_axis_mask": 1}),  # x[0] (the Shape -> StridedSlice pattern)
    ((5,), [-1], [0], [1], {"shrink_axis_mask": 1}),  # x[-1]
    ((6, 7), [1, 0], [5, 7], [2, 3], {}),  # x[1:5:2, 0:7:3]
    ((6, 7), [0, 2], [0, 0], [1, 1], {"begin_mask": 1, "end_mask": 3}),  # x[:, 2:]
    ((6, 7), [-3, 1], [100, -1], [1, 1], {}),  # clamping and negative ends
    ((4, 5, 6), [1], [3], [1], {}),  # x[1:3] (implicit ellipsis at the end)
    ((4, 5, 6), [0, 1], [0, 4], [1, 1], {"ellipsis_mask": 1}),  # x[..., 1:4]
    ((4, 5, 6), [0, 0, 2], [0, 0, 3], [1, 1, 1], {"ellipsis_mask": 2, "shrink_axis_mask": 4}),  # x[0:0, ..., 2] (empty)
    ((4, 5, 6), [1, 0, 0], [2, 0, 0], [1, 1, 1], {"new_axis_mask": 2, "shrink_axis_mask": 1, "ellipsis_mask": 4}),  # x[1, None, ...]
    ((4, 5), [0, 0, 0], [0, 0, 0], [1, 1, 1], {"new_axis_mask": 5, "ellipsis_mask": 2}),  # x[None, ..., None]
    ((3, 4), [0, 1], [3, 3], [1, 1], {"new_axis_mask": 1}),  # x[None, 1:3]
    ((6,), [4], [0], [-1], {}),  # x[4:0:-1]
    ((6,), [0], [0], [-2], {"begin_mask": 1, "end_mask": 1}),  # x[::-2]
    ((5, 6), [3, -1], [0, 0], [-1, -2], {"end_mask": 3}),  # x[3::-1, -1::-2]
    ((5,), [3], [1], [1], {}),  # empty: x[3:1]
    ((2, 3, 4), [1, 2], [2, 3], [1, 1], {"shrink_axis_mask": 3}),  # x[1, 2]
]


@pytest.mark.parametrize("shape,begin,end,strides,masks", SLICES)
def test_strided_slice_reference_matches_tensorflow_and_lowering(rand, shape, begin, end, strides, masks):
    x = rand(*shape)
    node = _slice_node(**masks)
    (expected,), (got,), statements = run_op_with_constants(node, _slice_inputs(x, begin, end, strides))
    np.testing.assert_array_equal(got, expected)
    assert len(statements) == 1
    tf = pytest.importorskip("tensorflow")
    actual = tf.raw_ops.StridedSlice(input=x, begin=begin, end=end, strides=strides, **{k: masks.get(k, 0) for k in MASKS}).numpy()
    assert expected.shape == actual.shape
    np.testing.assert_array_equal(expected, actual)


def test_strided_slice_random_specs_match_tensorflow():
    """Random begin/end/strides and masks: same values as TensorFlow, or both reject."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(11)
    definition = lookup("StridedSlice")
    compared = 0
    for _ in range(200):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=rng.integers(1, 4)))
        length = int(rng.integers(1, 4))
        begin, end = (rng.integers(-6, 7, size=length).tolist() for _ in range(2))
        strides = rng.choice([-2, -1, 1, 2, 3], size=length).tolist()
        masks = {k: int(rng.integers(0, 1 << length)) if rng.random() < 0.4 else 0 for k in MASKS}
        if masks["ellipsis_mask"]:
            masks["ellipsis_mask"] = 1 << int(rng.integers(0, length))
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        try:
            actual = tf.raw_ops.StridedSlice(input=x, begin=begin, end=end, strides=strides, **masks).numpy()
        except (tf.errors.InvalidArgumentError, ValueError):
            actual = None
        node = _slice_node(**masks)
        inputs = _slice_inputs(x, begin, end, strides)
        if actual is None:
            with pytest.raises(ShapeError):
                definition.reference(node, inputs)
            continue
        (expected,) = definition.reference(node, inputs)
        assert expected.shape == actual.shape, (shape, begin, end, strides, masks)
        np.testing.assert_array_equal(expected, actual)
        compared += 1
    assert compared > 100


@pytest.mark.parametrize(
    "begin,end,strides,masks,message",
    [
        ([0], [1], [0], {}, "strides\\[0\\] is 0"),
        ([5], [6], [1], {"shrink_axis_mask": 1}, "out of bounds"),
        ([0, 0], [1, 1], [1, 1], {"ellipsis_mask": 3}, "more than one bit"),
        ([0, 0, 0], [1, 1, 1], [1, 1, 1], {}, "more indices"),
        ([0, 0], [1], [1], {}, "different lengths"),
    ],
)
def test_strided_slice_rejects_bad_specs(begin, end, strides, masks, message):
    inputs = [TensorType((4, 3))] + [TensorType((len(v),), "int32") for v in (begin, end, strides)]
    constants = [None, np.array(begin, np.int32), np.array(end, np.int32), np.array(strides, np.int32)]
    with pytest.raises(ShapeError, match=message):
        lookup("StridedSlice").infer(_slice_node(**masks), inputs, constants)


def test_strided_slice_needs_constant_bounds():
    inputs = [TensorType((4,))] + [TensorType((1,), "int32")] * 3
    with pytest.raises(ShapeError, match="compile-time constant"):
        lookup("StridedSlice").infer(_slice_node(), inputs, [None, None, np.array([1]), np.array([1])])


def test_strided_slice_lowering_without_constants_says_so():
    node = _slice_node()
    x = ArrayRef("X", TensorType((4,)))
    with pytest.raises(ShapeError, match="compile-time value of its begin input 'begin:0'"):
        lookup("StridedSlice").lower(node, [x], [ArrayRef("Y", TensorType((2,)))], LoweringContext())


# --- Pack --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,count,axis", [((3,), 2, 0), ((3,), 3, 1), ((2, 3), 2, -1), ((2, 3), 4, 1), ((), 3, 0), ((2, 3), 1, -3)])
def test_pack_lowering_and_tensorflow(rand, shape, count, axis):
    values = [rand(*shape) for _ in range(count)]
    node = Node("pack", "Pack", tuple(f"v{k}:0" for k in range(count)), attrs={"N": count, "axis": axis})
    (expected,), (got,), statements = run_op_with_constants(node, values)
    np.testing.assert_array_equal(got, expected)
    assert len(statements) == count
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(expected, tf.raw_ops.Pack(values=values, axis=axis).numpy())


def test_pack_rejects_mismatched_inputs_and_axis():
    pack = lookup("Pack")
    node = Node("pack", "Pack", ("a:0", "b:0"), attrs={"N": 2, "axis": 0})
    with pytest.raises(ShapeError, match="one shape"):
        pack.infer(node, [TensorType((2,)), TensorType((3,))], [None, None])
    with pytest.raises(ShapeError, match="out of range"):
        pack.infer(Node("pack", "Pack", ("a:0", "b:0"), attrs={"N": 2, "axis": 3}), [TensorType((2,))] * 2, [None, None])


# --- GatherV2 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,indices,axis,statement_count",
    [
        ((5, 3), [4, 0, 2], 0, 2),  # runs [4, 0] (step -4) and [2]
        ((5, 3), [0, 1, 2, 3], 0, 1),  # a range: one statement
        ((4, 6), [5, 3, 1], 1, 1),  # step -2
        ((4, 6), [[1, 1], [2, 0]], -1, 2),  # 2-D indices: runs [1, 1] and [2, 0]
        ((2, 3, 4), 2, 1, 1),  # scalar index drops the axis
        ((7,), [3, 3, 3, 1, 6, 0, 1, 2], 0, 3),
    ],
)
def test_gather_lowering_and_tensorflow(rand, shape, indices, axis, statement_count):
    params = rand(*shape)
    indices = np.array(indices, np.int32)
    node = Node("gather", "GatherV2", ("params:0", "indices:0", "axis:0"), attrs={"batch_dims": 0})
    (expected,), (got,), statements = run_op_with_constants(node, [params, indices, np.int32(axis)], known=(1,))
    np.testing.assert_array_equal(got, expected)
    assert len(statements) == statement_count
    # the same indices at run time: one gather statement, the same values
    (_,), (at_run_time,), statements = run_op_with_constants(node, [params, indices, np.int32(axis)])
    np.testing.assert_array_equal(at_run_time, expected)
    assert len(statements) == 1 and "gather(" in str(statements[0].value)
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(expected, tf.raw_ops.GatherV2(params=params, indices=indices, axis=axis).numpy())


def test_arithmetic_runs():
    assert arithmetic_runs(np.array([3, 3, 3, 1, 6, 0, 1, 2])) == [(0, 3, 3, 0), (3, 5, 1, 5), (5, 8, 0, 1)]
    assert arithmetic_runs(np.array([7])) == [(0, 1, 7, 0)]


def test_gather_rejects_out_of_range_and_batch_dims():
    gather = lookup("GatherV2")
    node = Node("gather", "GatherV2", ("p:0", "i:0", "a:0"))
    types = [TensorType((4, 2)), TensorType((1,), "int32"), TensorType((), "int32")]
    with pytest.raises(ShapeError, match="in \\[0, 4\\)"):
        gather.infer(node, types, [None, np.array([4], np.int32), np.int32(0)])
    with pytest.raises(ShapeError, match="batch_dims=1"):
        gather.infer(Node("gather", "GatherV2", ("p:0", "i:0", "a:0"), attrs={"batch_dims": 1}), types, [None, np.array([0]), np.int32(0)])


# --- Shape and views ---------------------------------------------------------------------


@pytest.mark.parametrize("out_type", ["int32", "int64"])
def test_shape_reference_and_static_value(rand, out_type):
    x = rand(2, 3, 4)
    node = Node("shape", "Shape", ("x:0",), attrs={"out_type": out_type})
    definition = lookup("Shape")
    (value,) = definition.reference(node, [x])
    (static,) = definition.static_value(node, [TensorType((2, 3, 4))])
    assert value.dtype.name == static.dtype.name == out_type
    np.testing.assert_array_equal(value, static)
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(value, tf.raw_ops.Shape(input=x, out_type=getattr(tf, out_type)).numpy())


@pytest.mark.parametrize("shape,axis", [((3, 4), 0), ((3, 4), 2), ((3, 4), -1), ((3, 4), -3), ((), 0)])
def test_expand_dims(rand, run_op, shape, axis):
    x = rand(*shape)
    node = Node("e", "ExpandDims", ("x:0", "axis:0"))
    (expected,), _, _ = run_op(node, [x, np.int32(axis)], lower=False)
    assert lookup("ExpandDims").category == VIEW
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(expected, tf.raw_ops.ExpandDims(input=x, axis=axis).numpy())


def test_expand_dims_rejects_out_of_range_axis():
    with pytest.raises(ShapeError, match="out of range"):
        lookup("ExpandDims").infer(Node("e", "ExpandDims", ("x:0", "a:0")), [TensorType((3,)), TensorType((), "int32")], [None, np.int32(2)])


@pytest.mark.parametrize("op", ["StopGradient", "Snapshot"])
def test_identity_views(rand, run_op, op):
    x = rand(2, 3)
    (expected,), _, _ = run_op(Node("v", op, ("x:0",)), [x], lower=False)
    np.testing.assert_array_equal(expected, x)
    assert lookup(op).category == VIEW


# --- compile-time folding in shape inference ----------------------------------------------


def _shape_chain_graph(out_type="int32"):
    """``Reshape(x, Pack([StridedSlice(Shape(x))[0], -1]))`` as frozen graphs compute it."""
    index = np.int32 if out_type == "int32" else np.int64
    return Graph(
        nodes={
            n.name: n
            for n in [
                placeholder("x", (2, 3, 4)),
                Node("shape", "Shape", ("x:0",), attrs={"out_type": out_type}),
                const("begin", np.array([0], index)),
                const("end", np.array([1], index)),
                const("strides", np.array([1], index)),
                Node("batch", "StridedSlice", ("shape:0", "begin:0", "end:0", "strides:0"), attrs={"shrink_axis_mask": 1}),
                const("minus_one", index(-1)),
                Node("target", "Pack", ("batch:0", "minus_one:0"), attrs={"N": 2, "axis": 0}),
                Node("reshape", "Reshape", ("x:0", "target:0")),
                const("axis", np.int32(1)),
                Node("expanded", "ExpandDims", ("reshape:0", "axis:0")),
                Node("stopped", "StopGradient", ("expanded:0",)),
            ]
        },
        outputs=("stopped:0",),
    )


@pytest.mark.parametrize("out_type", ["int32", "int64"])
def test_shape_inference_folds_shape_strided_slice_pack(out_type):
    typed = infer_types(_shape_chain_graph(out_type))
    assert typed.types["reshape:0"] == TensorType((2, 12))
    assert typed.types["stopped:0"] == TensorType((2, 1, 12))
    np.testing.assert_array_equal(typed.constants["shape:0"], [2, 3, 4])
    assert typed.constants["shape:0"].dtype.name == out_type
    np.testing.assert_array_equal(typed.constants["batch:0"], 2)
    np.testing.assert_array_equal(typed.constants["target:0"], [2, -1])
    assert "reshape:0" not in typed.constants


def test_shape_inference_does_not_fold_large_tensors():
    big = np.zeros((FOLD_MAX_ELEMENTS + 1,), np.float32)
    graph = Graph(
        nodes={
            n.name: n
            for n in [
                const("a", big),
                const("b", big),
                Node("pack", "Pack", ("a:0", "b:0"), attrs={"N": 2, "axis": 0}),
                const("c", np.ones(3, np.int32)),
                Node("small", "Pack", ("c:0", "c:0"), attrs={"N": 2, "axis": 1}),
            ]
        },
        outputs=("pack:0",),
    )
    typed = infer_types(graph)
    assert "pack:0" not in typed.constants
    np.testing.assert_array_equal(typed.constants["small:0"], np.ones((3, 2), np.int32))


def test_run_time_int32_strided_slice_is_typed_int32():
    graph = Graph(
        nodes={
            n.name: n
            for n in [
                Node("x", "Placeholder", attrs={"dtype": "int32", "shape": (4,)}),
                const("begin", np.array([0], np.int32)),
                const("end", np.array([2], np.int32)),
                const("strides", np.array([1], np.int32)),
                Node("slice", "StridedSlice", ("x:0", "begin:0", "end:0", "strides:0")),
            ]
        },
        outputs=("slice:0",),
    )
    typed = infer_types(graph)  # data movement takes every run-time dtype
    assert typed.types["slice:0"] == TensorType((2,), "int32")


# --- compiled through CpuTarget ------------------------------------------------------------


def _index(values):
    return np.array(values, np.int32)


def _slice_graph():
    return build_graph(
        [
            placeholder("x", (4, 9, 16)),
            const("begin", _index([1, 0, 2])),
            const("end", _index([3, 0, 14])),
            const("strides", _index([1, 1, 1])),
            Node("slice", "StridedSlice", ("x:0", "begin:0", "end:0", "strides:0"), attrs={"end_mask": 2, "new_axis_mask": 0}),
            Node("relu", "Relu", ("slice:0",)),
        ],
        ["relu:0"],
    )


def _strided_slice_graph():
    return build_graph(
        [
            placeholder("x", (6, 20)),
            const("begin", _index([0, 1])),
            const("end", _index([0, 20])),
            const("strides", _index([1, 2])),
            Node("slice", "StridedSlice", ("x:0", "begin:0", "end:0", "strides:0"), attrs={"ellipsis_mask": 1}),
        ],
        ["slice:0"],
    )


def _reversed_slice_graph():
    return build_graph(
        [
            placeholder("x", (6, 20)),
            const("begin", _index([4, -1])),
            const("end", _index([0, 0])),
            const("strides", _index([-2, -3])),
            Node("slice", "StridedSlice", ("x:0", "begin:0", "end:0", "strides:0"), attrs={"end_mask": 2, "new_axis_mask": 0}),
        ],
        ["slice:0"],
    )


def _pack_graph():
    return build_graph(
        [
            placeholder("a", (8, 16)),
            placeholder("b", (8, 16)),
            Node("pack", "Pack", ("a:0", "b:0", "a:0"), attrs={"N": 3, "axis": 1}),
        ],
        ["pack:0"],
    )


def _gather_graph():
    return build_graph(
        [
            placeholder("x", (10, 16)),
            const("indices", _index([7, 0, 1, 2, 3, 9])),
            const("axis", np.int32(0)),
            Node("gather", "GatherV2", ("x:0", "indices:0", "axis:0"), attrs={"batch_dims": 0}),
        ],
        ["gather:0"],
    )


GRAPHS = {
    "slice": _slice_graph,
    "strided_slice": _strided_slice_graph,
    "reversed_slice": _reversed_slice_graph,
    "pack": _pack_graph,
    "gather": _gather_graph,
}


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
def test_compiled_default_and_heuristic_recipes(monkeypatch, graph_name):
    graph = GRAPHS[graph_name]()
    target = CpuTarget()
    kernels = kernels_of(graph)
    assert kernels
    for kernel in kernels:
        space = SearchSpace.for_scop(kernel.scop, 2)
        for recipe in [space.default_recipe(), *space.heuristic_recipes()]:
            compiled = target.compile(kernel.scop, recipe)
            error, _ = KernelBench(kernel, seed=1).verify(compiled, 2, CHECK)
            assert error is None, f"{kernel.scop.name}: {recipe}: {error}"
