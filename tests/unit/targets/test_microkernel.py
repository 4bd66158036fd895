"""The micro-kernel emitter: explicit vectors, accumulators in registers, partial tiles.

Every compiled kernel is verified against the numpy reference (NaN-filled outputs first),
and the LLVM IR is inspected for what the emitter promises."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hand_built_graphs import (
    build_graph,
    const,
    graph_conv_bias_relu,
    graph_matmul_bias_relu,
    graph_maxpool,
    graph_softmax,
    kernels_of,
    placeholder,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip import LEGAL, roundtrip

from polytf.config import MeasurementConfig
from polytf.errors import ScheduleError
from polytf.graph import Node
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.builder import register_tile_run
from polytf.schedules.recipe import CpuRecipe
from polytf.schedules.structure import shared_band_depth
from polytf.schedules.target_limits import TargetLimits
from polytf.targets.cpu import CpuTarget
from polytf.targets.microkernel import _Microkernel

TARGET = CpuTarget()
CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)


def _verify(kernel, recipe, threads=2):
    """The verification error of ``recipe``'s kernel (None when it matches the reference);
    ScheduleError when the recipe is invalid or illegal."""
    result = roundtrip(kernel, recipe, threads)
    if result.verdict != LEGAL:
        raise ScheduleError(result.message)
    return result.error


def test_full_tiles_use_vector_fma_and_no_fallback_check():
    kernel = kernels_of(graph_matmul_bias_relu(12, 9, 32))[0]
    recipe = CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, pack=("A1",))
    text = TARGET.emit_llvm_ir(kernel.scop, recipe)
    assert "<8 x float>" in text
    assert "accumulator" in text  # register slots, promoted by SROA
    optimised = str(TARGET.optimise(text, kernel.scop.name))
    assert "fmul contract <8 x float>" in optimised or "llvm.fma.v8f32" in optimised or "fmuladd.v8f32" in optimised
    assert "vfmadd" in TARGET.assembly(kernel.scop, recipe)  # contract: fused multiply-add, without the other fast-math flags
    assert _verify(kernel, recipe) is None


def _unroll_counts(text: str) -> list[int]:
    """The ``llvm.loop.unroll.count`` of every loop of ``text`` (LLVM IR) that names one."""
    return [int(count) for count in re.findall(r'"llvm\.loop\.unroll\.count", i32 (\d+)', text)]


def test_micro_kernel_reduction_loop_is_unrolled_unless_the_recipe_says():
    from polytf.targets.microkernel import MICROKERNEL_UNROLL

    kernel = kernels_of(graph_matmul_bias_relu(12, 40, 32))[0]
    base = dict(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, pack=("A1",))
    default = TARGET.emit_llvm_ir(kernel.scop, CpuRecipe(**base))
    assert MICROKERNEL_UNROLL > 1 and _unroll_counts(default) == [MICROKERNEL_UNROLL]  # the reduction loop only
    assert _unroll_counts(TARGET.emit_llvm_ir(kernel.scop, CpuRecipe(**base, unroll=2)))[0] == 2  # the recipe's count wins
    assert "llvm.loop.unroll.disable" in TARGET.emit_llvm_ir(kernel.scop, CpuRecipe(**base, unroll=1))
    assert not _unroll_counts(TARGET.emit_llvm_ir(kernel.scop, CpuRecipe(tile_sizes=(12, 32))))  # no micro-kernel: no count
    for reduction in (40, 7):  # a multiple of the unroll count and not
        kernel = kernels_of(graph_matmul_bias_relu(12, reduction, 32))[0]
        assert _verify(kernel, CpuRecipe(**base)) is None


def test_partial_register_tiles_take_the_generic_path_and_stay_correct():
    # 13 rows = 2 tiles of 6 + 1 row; 21 columns = 16 + 5
    kernel = kernels_of(graph_matmul_bias_relu(13, 7, 21))[0]
    for recipe in [
        CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), pack=("A1",), parallel=True),
        CpuRecipe(tile_sizes=(6, 16), register_tile_sizes=(6, 16), pack=("A0", "A1"), reduction_tile_sizes=(4,)),
        CpuRecipe(tile_sizes=(4, 8), register_tile_sizes=(0, 8), vector_width=4),
    ]:
        assert _verify(kernel, recipe) is None, recipe


@pytest.mark.parametrize("columns", [17, 21, 24, 29])
def test_tiles_cut_short_in_the_vector_dimension_run_masked(columns):
    # 16 + 1, 16 + 5, 16 + 8, 16 + 13 columns: one or two masked vectors of 8 lanes
    kernel = kernels_of(graph_matmul_bias_relu(12, 9, columns))[0]
    for pack in [("A1",), ()]:
        recipe = CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, pack=pack, parallel=True)
        text = TARGET.emit_llvm_ir(kernel.scop, recipe)
        assert "llvm.masked.load.v8f32" in text and "llvm.masked.store.v8f32" in text
        assert _verify(kernel, recipe) is None, recipe


@pytest.mark.parametrize("rows, columns", [(13, 32), (14, 32), (9, 21)])
def test_tiles_cut_short_in_rows_get_unrolled_row_variants(rows, columns):
    # 13 = 6 + 6 + 1, 14 = 6 + 6 + 2, 9 = 6 + 3 rows (and 21 = 16 + 5 masked columns): the last
    # tile runs a micro-kernel with that many rows, not the generic loops
    kernel = kernels_of(graph_matmul_bias_relu(rows, 9, columns))[0]
    recipe = CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, pack=("A1",), parallel=True)
    text = TARGET.emit_llvm_ir(kernel.scop, recipe)
    # the full tile (6 rows of 2 vectors) and one with the rows - 6 * (rows // 6) rows left
    assert text.count("= alloca <8 x float>") >= 2 * (6 + rows % 6)
    assert _verify(kernel, recipe) is None, recipe


def test_convolution_micro_kernel_with_padding_and_im2col():
    kernel = kernels_of(graph_conv_bias_relu(8, 8, 3, 16, stride=1))[0]
    base = dict(tile_sizes=(1, 2, 8, 16), tile_order=(1, 0, 2, 3), register_tile_sizes=(0, 0, 4, 16), parallel=True)
    for extra in [{"pad": True, "pack": ("A1",)}, {"algorithm": "im2col", "pack": ("A1",)}, {}]:
        assert _verify(kernel, CpuRecipe(**base, **extra)) is None, extra


def test_max_reduction_micro_kernel():
    kernel = kernels_of(graph_maxpool(9, 8, 16, padding="VALID"))[0]
    depth = shared_band_depth(kernel.scop)
    tiles = (0,) * (depth - 2) + (4, 16)
    registers = (0,) * (depth - 2) + (2, 8)
    assert _verify(kernel, CpuRecipe(tile_sizes=tiles, register_tile_sizes=registers)) is None


def test_max_pooling_keeps_its_maximum_in_registers_with_the_reference_nan_rule():
    """A max pooling's update ``select(greater(x, acc), x, acc)`` is a vector compare and
    select on the accumulators, not a masked store per tap; NaN taps are skipped (the
    ordered comparison is false), infinities and signed zeros as the reference."""
    kernel = kernels_of(graph_maxpool(9, 8, 16, padding="VALID"))[0]
    depth = shared_band_depth(kernel.scop)
    recipe = CpuRecipe(tile_sizes=(0,) * (depth - 2) + (4, 16), register_tile_sizes=(0,) * (depth - 2) + (2, 16), vector_width=8)
    optimised = str(TARGET.optimise(TARGET.emit_llvm_ir(kernel.scop, recipe), kernel.scop.name))
    assert "fcmp ogt <8 x float>" in optimised and "select <8 x i1>" in optimised
    assert "llvm.masked.store" not in optimised
    bench = KernelBench(kernel, seed=3)
    (name,) = [info.name for info in kernel.input_arrays]
    values = bench.inputs[name]
    flat = values.reshape(-1)
    flat[::7] = np.nan
    flat[1::11] = np.inf
    flat[2::13] = -np.inf
    flat[3::5] = -0.0
    bench.arrays[bench.index[name]][...] = values
    bench.expected = kernel.reference(bench.inputs)
    compiled = TARGET.compile(kernel.scop, recipe)
    error, _ = bench.verify(compiled, 2, CHECK)
    assert error is None
    (output,) = [info.name for info in kernel.output_arrays]
    produced = bench.arrays[bench.index[output]]
    assert np.array_equal(produced, bench.expected[output])  # exactly: a maximum does not round
    assert np.array_equal(np.signbit(produced), np.signbit(bench.expected[output]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 14),
    n=st.integers(1, 20),
    k=st.integers(1, 9),
    register=st.tuples(st.sampled_from([0, 2, 3, 4]), st.sampled_from([4, 8, 16])),
    multiple=st.tuples(st.integers(1, 3), st.integers(1, 2)),
    pack=st.sampled_from([(), ("A0",), ("A1",), ("A0", "A1")]),
    reduction_tile=st.sampled_from([0, 2, 4]),
    width=st.sampled_from([0, 1, 4, 8]),
    parallel=st.booleans(),
)
def test_random_register_tiles_are_rejected_or_correct(m, n, k, register, multiple, pack, reduction_tile, width, parallel):
    kernel = kernels_of(graph_matmul_bias_relu(m, k, n))[0]
    tiles = (max(register[0], 1) * multiple[0], register[1] * multiple[1])
    recipe = CpuRecipe(
        tile_sizes=tiles, register_tile_sizes=register, pack=pack, reduction_tile_sizes=(reduction_tile,), vector_width=width, parallel=parallel
    )
    try:
        error = _verify(kernel, recipe)
    except ScheduleError as problem:
        assert "recipe field" in str(problem) or "register tile" in str(problem) or "pack" in str(problem)
        return
    assert error is None, recipe


@pytest.mark.parametrize("features, lanes, registers", [("+avx512f,+avx2,+avx", 16, 32), ("+avx2,+avx,-avx512f", 8, 16), ("+sse4.2", 4, 16)])
def test_vector_lanes_and_registers_follow_the_features(features, lanes, registers):
    target = CpuTarget(features=features, cpu_name="x86-64")
    assert (target.vector_lanes, target.vector_registers) == (lanes, registers)
    assert target.limits == TargetLimits(lanes, registers)


def test_a_register_loop_that_isl_drops_is_not_mistaken_for_another():
    # one row: isl emits no loop for the d0 register tile, so the loops under the mark are
    # r0 and d1; the emitter must not take r0 for the d0 register loop
    kernel = kernels_of(graph_matmul_bias_relu(1, 2, 4))[0]
    assert _verify(kernel, CpuRecipe(tile_sizes=(1, 4), register_tile_sizes=(1, 4))) is None


def test_row_bound_that_depends_on_a_reduction_iterator_takes_the_generic_path():
    # SAME padding with stride 2 on an even width pads one column after the input only; that
    # tap is cut from the iteration domain, so the output-column loop inside the micro-kernel
    # is bounded by min(6*c + 5, (15 - r1)/2), a function of the filter-column iterator r1
    # (MobileNetV2's first layer, 224 -> 112, had "AST uses unknown identifier").
    kernel = kernels_of(graph_conv_bias_relu(16, 16, 3, 32, stride=2))[0]
    recipe = CpuRecipe(tile_sizes=(0, 0, 12, 32), register_tile_sizes=(0, 0, 6, 16), pack=("A1",), parallel=True)
    assert _verify(kernel, recipe) is None


#: kernels and recipes whose micro-kernels read packed panels (floor division and modulo
#: indices), zero-padded and im2col copies, and run tiles cut short (masked vectors, row
#: variants, one column at a time)
_ADDRESS_CASES = [
    (lambda: graph_matmul_bias_relu(12, 9, 32), CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, pack=("A1",))),
    (lambda: graph_matmul_bias_relu(13, 7, 21), CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, pack=("A0", "A1"), parallel=True)),
    (lambda: graph_matmul_bias_relu(14, 9, 29), CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, parallel=True)),
    (lambda: graph_matmul_bias_relu(9, 5, 21), CpuRecipe(tile_sizes=(6, 16), register_tile_sizes=(3, 16), vector_width=4, pack=("A1",))),
    (
        lambda: graph_conv_bias_relu(8, 8, 3, 16, stride=1),
        CpuRecipe(tile_sizes=(1, 2, 8, 16), tile_order=(1, 0, 2, 3), register_tile_sizes=(0, 0, 4, 16), pad=True, pack=("A1",)),
    ),
    (
        lambda: graph_conv_bias_relu(8, 8, 3, 16, stride=1),
        CpuRecipe(tile_sizes=(1, 2, 8, 16), tile_order=(1, 0, 2, 3), register_tile_sizes=(0, 0, 4, 16), algorithm="im2col", pack=("A1",)),
    ),
    (lambda: graph_conv_bias_relu(16, 16, 3, 32, stride=2), CpuRecipe(tile_sizes=(0, 0, 12, 32), register_tile_sizes=(0, 0, 6, 16), pack=("A1",))),
]


def _point_by_point(tile: _Microkernel, access, point):
    """The lane forms as the emitter read them before address plans: every lane's offsets
    substituted into the call's arguments, then into every index."""
    return [tile._offset_form(access, tile._iterator_forms(point[:-1] + (point[-1] + lane,))) for lane in range(tile.width)]


def test_address_plans_give_the_lane_forms_of_the_point_by_point_reading(monkeypatch):
    compute = _Microkernel._compute_lane_forms
    seen = {"plans": 0, "quotients": 0}

    def checked(tile, access, point):
        forms = compute(tile, access, point)
        plan = tile._address_plan(access)
        assert plan is not None
        seen["plans"] += 1
        seen["quotients"] += bool(plan.quotients)
        # the same expressions, term for term (AffineExpr equality compares the terms)
        assert forms == _point_by_point(tile, access, point), (access, point)
        return forms

    monkeypatch.setattr(_Microkernel, "_compute_lane_forms", checked)
    for graph, recipe in _ADDRESS_CASES:
        kernel = kernels_of(graph())[0]
        TARGET.emit_llvm_ir(kernel.scop, recipe)
    assert seen["plans"] and seen["quotients"], seen


@pytest.mark.parametrize("case", range(len(_ADDRESS_CASES)))
def test_reading_addresses_point_by_point_emits_the_same_ir(monkeypatch, case):
    graph, recipe = _ADDRESS_CASES[case]
    kernel = kernels_of(graph())[0]
    planned = TARGET.emit_llvm_ir(kernel.scop, recipe)
    # no symbolic reading: every access takes the point-by-point fallback
    monkeypatch.setattr(_Microkernel, "_symbolic_iterator_forms", property(lambda tile: None))
    assert TARGET.emit_llvm_ir(kernel.scop, recipe) == planned


def _residual_block(rows, columns, depth):
    """MatMul + BiasAdd + Relu + AddV2 (residual) + Sigmoid: an epilogue of four statements."""
    rng = np.random.default_rng(5)
    return build_graph(
        [
            placeholder("x", (rows, depth)),
            placeholder("skip", (rows, columns)),
            const("w", rng.standard_normal((depth, columns)).astype(np.float32)),
            const("b", rng.standard_normal(columns).astype(np.float32)),
            Node("mm", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
            Node("bias", "BiasAdd", ("mm:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu", "Relu", ("bias:0",)),
            Node("add", "AddV2", ("relu:0", "skip:0")),
            Node("sigmoid", "Sigmoid", ("add:0",)),
        ],
        ["sigmoid:0"],
    )


@pytest.mark.parametrize("rows, columns", [(12, 32), (13, 21), (9, 40), (7, 20)])
def test_epilogues_run_on_the_accumulators_of_whole_and_partial_tiles(monkeypatch, rows, columns):
    """With the zero fill and the epilogue in the register tile (register_tile_run), a whole
    tile's accumulators start from a splatted 0.0 (no load of the output) and the epilogue is
    computed on them before the one store; tiles cut short in rows or columns run the fill and
    the epilogue as loops around the cut-short micro-kernel. Every case matches the reference,
    and the sums are bit-identical to the unfused kernel's (same order)."""
    kernel = kernels_of(_residual_block(rows, columns, 9))[0]
    recipe = CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8, pack=("A1",), parallel=True)
    assert len(register_tile_run(kernel.scop, recipe)) >= 3
    text = TARGET.emit_llvm_ir(kernel.scop, recipe)
    assert re.search(r"insertelement <8 x float> .*float\s+0x0, i32 0", text)  # the accumulators' splatted start
    assert _verify(kernel, recipe) is None
    bench = KernelBench(kernel, seed=2)
    fused = TARGET.compile(kernel.scop, recipe)
    assert bench.verify(fused, 2, CHECK)[0] is None
    (output,) = [info.name for info in kernel.output_arrays]
    fused_values = bench.arrays[bench.index[output]].copy()
    monkeypatch.setattr("polytf.schedules.builder.register_tile_run", lambda scop, recipe: ())
    unfused = TARGET.compile(kernel.scop, recipe)
    assert bench.verify(unfused, 2, CHECK)[0] is None
    assert np.array_equal(bench.arrays[bench.index[output]], fused_values)


def test_a_masked_tile_keeps_its_zero_fill_and_epilogue_in_registers():
    """A register tile of two vectors cut short in its vector dimension (20 of 32 columns on
    16 lanes, 10 of 16 on 8), with a bias and a residual add after it: emitted as the
    micro-kernel with masked vectors, the epilogue applied to the accumulators before one
    masked store each (no zero-fill loop, no second sweep of the output), and the result right."""
    lanes = TARGET.vector_lanes
    columns = lanes + lanes // 4  # one whole vector and a quarter of one
    graph = build_graph(
        [
            placeholder("x", (40, 20)),
            const("w", np.random.default_rng(0).standard_normal((20, columns)).astype(np.float32)),
            Node("mm", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
            const("b", np.arange(columns, dtype=np.float32)),
            Node("bias", "BiasAdd", ("mm:0", "b:0"), attrs={"data_format": "NHWC"}),
            placeholder("r", (40, columns)),
            Node("add", "AddV2", ("bias:0", "r:0")),
        ],
        ("add:0",),
    )
    (kernel,) = kernels_of(graph)
    register_columns = 2 * lanes
    recipe = CpuRecipe(
        tile_sizes=(40, register_columns),
        tile_order=(0, 1),
        reduction_tile_sizes=(0,),
        point_order=("d0", "d1", "r0"),
        register_tile_sizes=(4, register_columns),
    )
    text = TARGET.compile(kernel.scop, recipe, {}).llvm_ir  # optimised: a zero-fill loop is a memset there
    assert "llvm.masked.store" in text and "memset" not in text
    assert _verify(kernel, recipe) is None, recipe


def test_a_tile_cut_short_to_a_constant_that_cannot_be_masked_takes_the_generic_loops():
    """Softmax of 5 x 9 with a register tile of one vector over its 5 rows: every tile is cut
    short to the constant 5, and the row maximum reads its input with a stride of 9 (a gather:
    no masked form), so the generic loops run it (no micro-kernel accumulators), and the result
    is right. Run column by column instead, the max reduction was vectorised by LLVM 22 into a
    loop whose only exit was finding a NaN: the kernel never returned."""
    kernel = kernels_of(graph_softmax())[0]
    lanes = TARGET.vector_lanes
    recipe = CpuRecipe(tile_sizes=(lanes,), reduction_tile_sizes=(9,), point_order=("d0", "r0"), unroll=2, register_tile_sizes=(lanes,))
    assert "accumulator" not in TARGET.emit_llvm_ir(kernel.scop, recipe)
    assert _verify(kernel, recipe) is None
