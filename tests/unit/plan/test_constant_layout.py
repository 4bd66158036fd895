"""Weights packed once, when a model is built: the kernel leaves the packing of constant
operands to the runtime, which evaluates the copy with numpy and binds the packed panels
read-only; the results equal those of a kernel that packs on every call."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, graph_conv_bias_relu, graph_matmul_bias_relu, kernels_of, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st

from polytf.compiler.kernel_compilation import compile_steps, constant_arrays
from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.config import MeasurementConfig
from polytf.graph import Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.plan.binding_plan import plan_model
from polytf.plan.constant_layout import ModelConstants, _copy_by_indexing, evaluate_copy, strided_pieces
from polytf.poly.affine import AffineExpr, FloorDiv, Modulo
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.builder import schedule_scop
from polytf.schedules.recipe import CpuRecipe
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)
PACKED_MATMUL = CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), pack=("A1",), parallel=True)


def test_constant_copies_leave_the_kernel_and_others_stay():
    kernel = kernels_of(graph_matmul_bias_relu(13, 9, 21))[0]
    constants = constant_arrays(kernel)
    assert constants  # the MatMul's weights
    scheduled = schedule_scop(kernel.scop, PACKED_MATMUL, limits=TARGET.limits, constant_arrays=constants)
    assert [c.value.access.array for c in scheduled.constant_copies] == ["A1"]
    assert all(s.name not in {c.name for c in scheduled.constant_copies} for s in scheduled.scop.statements)
    kept = schedule_scop(kernel.scop, PACKED_MATMUL, limits=TARGET.limits)
    assert not kept.constant_copies and len(kept.scop.statements) == len(scheduled.scop.statements) + 1


def test_packed_panels_equal_the_per_call_copy():
    # 21 columns in panels of 16: the second panel is partly padding, which must be zero
    kernel = kernels_of(graph_matmul_bias_relu(13, 9, 21))[0]
    scheduled = schedule_scop(kernel.scop, PACKED_MATMUL, limits=TARGET.limits, constant_arrays=constant_arrays(kernel))
    (copy,) = scheduled.constant_copies
    info = scheduled.scop.array(copy.write.array)
    weights = kernel.constant_values["A1"]
    packed = evaluate_copy(copy, weights, info.shape, info.dtype)
    assert packed.shape == (2, 9, 16) and not packed.flags.writeable
    np.testing.assert_array_equal(packed[0], weights[:, :16])
    np.testing.assert_array_equal(packed[1, :, :5], weights[:, 16:])
    assert not packed[1, :, 5:].any()


@pytest.mark.parametrize(
    "graph, recipe",
    [
        (graph_matmul_bias_relu(13, 9, 21), PACKED_MATMUL),
        (graph_conv_bias_relu(8, 8, 3, 16, stride=1), CpuRecipe(tile_sizes=(1, 2, 8, 16), register_tile_sizes=(0, 0, 4, 16), pad=True, pack=("A1",), parallel=True)),
    ],
    ids=["matmul", "conv"],
)
def test_kernels_with_prepacked_weights_compute_the_reference(graph, recipe):
    kernel = kernels_of(graph)[0]
    compiled = TARGET.compile(kernel.scop, recipe, constant_arrays(kernel))
    assert compiled.constant_copies
    error, _ = KernelBench(kernel, seed=3).verify(compiled, 2, CHECK)
    assert error is None
    groups = partition(graph)
    prepared = PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ())
    model = build_model(prepared, {kernel.scop.name: recipe}, TARGET, threads=2)
    model.pack_constants()
    assert any("packed" in key for key in model._constants)  # noqa: SLF001 - bound once, shared
    rng = np.random.default_rng(5)
    inputs = {name: rng.standard_normal(t.shape).astype(np.float32) for name, t in model.input_types.items()}
    feeds = {a.name: inputs[a.tensor.split(":")[0]] for a in kernel.input_arrays if a.name not in kernel.constant_values}
    (expected,) = kernel.reference({**feeds, **kernel.constant_values}).values()
    (out,) = model(**inputs).values()
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


CONV_PACKED = CpuRecipe(tile_sizes=(1, 2, 8, 16), register_tile_sizes=(0, 0, 4, 16), pad=True, pack=("A1",), parallel=True)


def _conv_prepared(graph) -> PreparedModel:
    groups = partition(graph)
    return PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ())


def test_deferred_packing_gives_the_eager_arrays_and_lets_each_weight_go():
    graph = graph_conv_bias_relu(8, 8, 3, 16, stride=1)
    prepared = _conv_prepared(graph)
    steps, _ = compile_steps(prepared, {prepared.kernels[0].scop.name: CONV_PACKED}, TARGET, 2)
    eager = ModelConstants(graph, "conv.pb")
    eager_keys = plan_model(graph, steps, "conv.pb", eager.packed).kernel_plans[0].bindings
    deferred = ModelConstants(graph, "conv.pb", defer_packing=True)
    deferred_keys = plan_model(graph, steps, "conv.pb", deferred.packed).kernel_plans[0].bindings
    assert eager_keys == deferred_keys
    packed_keys = [key for key in eager.values if " packed " in key]
    assert packed_keys and not any(key in deferred.values for key in packed_keys)  # nothing packed yet
    packing = deferred.deferred_packing()
    assert set(packing.originals) == {"f:0"} and packing.originals["f:0"] is graph.constants["f:0"]
    result = packing.run()
    assert set(result) == set(packed_keys) and not packing.originals and not packing.packings
    for key in packed_keys:
        np.testing.assert_array_equal(result[key], eager.values[key])
        assert result[key].ctypes.data % 64 == 0 and not result[key].flags.writeable
    assert not deferred.deferred_packing().packings  # defers no more


def _built_model_and_weight():
    """A model built from a graph that only the caller's frame held, and a weak reference to
    the weight its kernel reads packed only."""
    graph = graph_conv_bias_relu(8, 8, 3, 16, stride=1)
    weight = weakref.ref(graph.constants["f:0"])
    prepared = _conv_prepared(graph)
    model = build_model(prepared, {prepared.kernels[0].scop.name: CONV_PACKED}, TARGET, threads=2)
    return model, weight


def test_a_built_model_holds_a_weight_until_packed_and_only_packed_afterwards():
    model, weight = _built_model_and_weight()
    gc.collect()
    assert weight() is not None  # the pending packing holds it, not the graph
    assert not hasattr(model, "graph")
    model.pack_constants()
    gc.collect()
    assert weight() is None
    assert any(" packed " in key for key in model._constants)  # noqa: SLF001 - the packed copy, bound by every context
    rng = np.random.default_rng(2)
    graph = graph_conv_bias_relu(8, 8, 3, 16, stride=1)  # the same values (seeded), for the reference
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    (kernel,) = kernels_of(graph)
    (expected,) = kernel.reference({"A0": x, **kernel.constant_values}).values()
    (out,) = model(x=x).values()
    np.testing.assert_allclose(out, expected.reshape(out.shape), rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def _twice_through_one_weight():
    """``relu(relu(x @ W) @ W)``: two kernels that read the same weight."""
    rng = np.random.default_rng(7)
    nodes = [placeholder("x", (24, 32)), const("w", rng.standard_normal((32, 32)).astype(np.float32)),
             Node("m1", "MatMul", ("x:0", "w:0")), Node("r1", "Relu", ("m1:0",)), Node("m2", "MatMul", ("r1:0", "w:0")), Node("r2", "Relu", ("m2:0",))]
    graph = build_graph(nodes, ["r2:0"])
    return graph, _conv_prepared(graph)


@pytest.mark.parametrize("second", [PACKED_MATMUL, CpuRecipe(tile_sizes=(12, 16), register_tile_sizes=(4, 8), pack=("A1",))])
def test_kernels_that_pack_one_weight_the_same_way_share_the_packed_copy(second):
    """An unrolled loop's steps read one weight: packed into the same layout, it is packed
    once and bound to every step; another layout is another copy. The model computes the
    reference either way."""
    graph, prepared = _twice_through_one_weight()
    first, other = (kernel.scop.name for kernel in prepared.kernels)
    model = build_model(prepared, {first: PACKED_MATMUL, other: second}, TARGET, threads=2)
    model.pack_constants()
    packed = [key for key in model._constants if " packed " in key]  # noqa: SLF001 - the arrays the contexts bind
    assert len(packed) == (1 if second == PACKED_MATMUL else 2) and all(key.startswith("w:0 packed ") for key in packed)
    x = np.random.default_rng(8).standard_normal((24, 32)).astype(np.float32)
    w = graph.constants["w:0"]
    expected = np.maximum(np.maximum(x @ w, 0) @ w, 0)
    np.testing.assert_allclose(model(x=x)["r2"], expected, rtol=1e-4, atol=1e-4)


def test_the_first_call_packs_when_nothing_asked_before():
    model, weight = _built_model_and_weight()
    x = np.ones((1, 8, 8, 3), np.float32)
    first = model(x=x)["relu"]
    gc.collect()
    assert weight() is None and model.context_count == 1
    model.pack_constants()  # done already: no second packing, the same context
    np.testing.assert_array_equal(model(x=x)["relu"], first)
    assert model.context_count == 1


# -- the strided copy against numpy's integer-array indexing -------------------------------
STRIDED = settings(max_examples=60, deadline=None)


def _by_indexing(copy, source, shape, dtype):
    """What the copy writes, through the indexing path (the reference of the strided one)."""
    result = np.zeros(shape, dtype)
    _copy_by_indexing(copy, np.asarray(source, dtype=dtype), result)
    return result


def _check_equal(copy, source, shape, dtype="float32"):
    try:
        expected = _by_indexing(copy, source, shape, dtype)
    except (IndexError, ValueError) as error:  # outside the source, or shapes numpy cannot broadcast
        with pytest.raises(type(error)):
            evaluate_copy(copy, source, shape, dtype)
        return
    packed = evaluate_copy(copy, source, shape, dtype)
    assert packed.dtype == np.dtype(dtype) and packed.shape == tuple(shape)
    assert not packed.flags.writeable and packed.ctypes.data % 64 == 0
    np.testing.assert_array_equal(packed, expected)


def _panel_copy(data, dtype):
    """A packing copy as the schedules make one: a permutation of the source's dimensions,
    some of them cut into panels of odd sizes (floor division and remainder), the last
    panel partial."""
    rank = data.draw(st.integers(1, 4))
    source_shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    iterators = tuple(f"d{k}" for k in range(rank))
    order = data.draw(st.permutations(range(rank)))  # the iterator that runs over each source dimension
    extents = [0] * rank
    for dimension, k in enumerate(order):
        extents[k] = source_shape[dimension]
    read = Access.of("A1", *(iterators[k] for k in order))
    registers = {it: data.draw(st.integers(1, 5)) for it in iterators if data.draw(st.booleans())}
    tiled = [it for it in iterators if it in registers]
    rest = data.draw(st.permutations([it for it in iterators if it not in registers]))
    index = [FloorDiv(AffineExpr.of(it), registers[it]) for it in tiled] + [AffineExpr.of(it) for it in rest] + [Modulo(AffineExpr.of(it), registers[it]) for it in tiled]
    extent = dict(zip(iterators, extents))
    shape = tuple(-(-extent[it] // registers[it]) for it in tiled) + tuple(extent[it] for it in rest) + tuple(registers[it] for it in tiled)
    copy = Statement("C0", iterators, tuple(extents), Access("P0", tuple(index)), Load(read))
    source = np.arange(1, np.prod(source_shape) + 1).reshape(source_shape).astype(dtype)
    return copy, source, shape


@STRIDED
@given(data=st.data(), dtype=st.sampled_from(["float32", "int32", "int64"]))
def test_panel_copies_are_strided_and_equal_the_indexed_copy(data, dtype):
    copy, source, shape = _panel_copy(data, dtype)
    assert strided_pieces(copy, source.shape, shape) is not None
    _check_equal(copy, source, shape, dtype)


@STRIDED
@given(data=st.data())
def test_panel_copy_of_a_strided_source_converted_to_the_target_dtype(data):
    copy, source, shape = _panel_copy(data, "int64")
    # a non-contiguous, reversed view of another dtype: converted, then read through its strides
    wide = np.repeat(source[..., None], 2, axis=-1)[..., ::-1][..., 0]
    _check_equal(copy, wide, shape, "float32")


@STRIDED
@given(data=st.data())
def test_affine_copies_equal_the_indexed_copy(data):
    # any affine indices: strided where they stay inside both arrays and write each
    # element at most once, else the indexed copy (which wraps negative indices, or raises)
    rank = data.draw(st.integers(0, 3))
    iterators = tuple(f"d{k}" for k in range(rank))
    extents = tuple(data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    inside = data.draw(st.booleans())  # shift the indices into the arrays, and size these to fit

    def indices(count):
        """``count`` affine indices, each iterator in one of them (or, sometimes, none)."""
        terms = [[] for _ in range(count)]
        for it in iterators:
            if data.draw(st.integers(0, 5)):
                terms[data.draw(st.integers(0, count - 1))].append((data.draw(st.sampled_from([-2, -1, 1, 2, 3])), it))
        result, shape = [], []
        for parts in terms:
            expr = AffineExpr.combine(*parts)
            low = sum(min(0, c * (extents[iterators.index(it)] - 1)) for c, it in parts)
            high = sum(max(0, c * (extents[iterators.index(it)] - 1)) for c, it in parts)
            shift = -low + data.draw(st.integers(0, 2)) if inside else data.draw(st.integers(-2, 4))
            result.append(expr + shift)
            shape.append(high + shift + 1 + data.draw(st.integers(0, 2)) if inside else data.draw(st.integers(1, 12)))
        return tuple(result), tuple(shape)

    read, source_shape = indices(data.draw(st.integers(1, 3)))
    write, shape = indices(data.draw(st.integers(1, 3)))
    copy = Statement("C0", iterators, extents, Access("P0", write), Load(Access("A1", read)))
    source = np.arange(1, np.prod(source_shape) + 1, dtype=np.float32).reshape(source_shape)
    _check_equal(copy, source, shape)


def test_permuted_and_offset_writes_leave_zeros_elsewhere():
    # P[2*i + 1, j] = A[j, i]: a transpose into every other row, the rest zero
    source = np.arange(12, dtype=np.float32).reshape(3, 4)
    write = Access.of("P0", AffineExpr.combine((2, "i"), constant=1), "j")
    copy = Statement("C0", ("i", "j"), (4, 3), write, Load(Access.of("A1", "j", "i")))
    pieces = strided_pieces(copy, source.shape, (9, 3))
    assert pieces is not None and len(pieces) == 1
    packed = evaluate_copy(copy, source, (9, 3), "float32")
    np.testing.assert_array_equal(packed[1::2], source.T)
    assert not packed[0::2].any()


@pytest.mark.parametrize(
    "write, read, extents, source_shape, shape",
    [
        # floor((i + 1) / 2): the remainder i mod 2 + 1 crosses a panel
        ((FloorDiv(AffineExpr.combine((1, "i"), constant=1), 2), Modulo(AffineExpr.of("i"), 2)), ("i",), (7,), (7,), (4, 2)),
        # (i + j) mod 3: two iterators in one remainder
        ((Modulo(AffineExpr.combine((1, "i"), (1, "j")), 3), "j"), ("i", "j"), (4, 5), (4, 5), (3, 5)),
        # P[i // 2] = A[i]: two points write each element (the last one wins)
        ((FloorDiv(AffineExpr.of("i"), 2),), ("i",), (6,), (6,), (3,)),
        # P[i, i] = A[i]: a diagonal is strided, but P[i - 1] reads A[-1] (indexing wraps)
        (("i",), (AffineExpr.combine((1, "i"), constant=-1),), (3,), (3,), (3,)),
    ],
    ids=["floor-crosses-panel", "two-iterator-remainder", "not-injective", "wrapping-index"],
)
def test_copies_that_are_not_strided_fall_back_to_indexing(write, read, extents, source_shape, shape):
    iterators = ("i", "j")[: len(extents)]
    copy = Statement("C0", iterators, extents, Access.of("P0", *write), Load(Access.of("A1", *read)))
    source = np.arange(1, np.prod(source_shape) + 1, dtype=np.float32).reshape(source_shape)
    assert strided_pieces(copy, source_shape, shape) is None
    _check_equal(copy, source, shape)
