"""validate_recipe: the one check of a recipe against its kernel and target, before any
code generation; the typed marks; and the parallel mark that makes legality check the
loop the code generator distributes. Caps are tested with explicit AVX2 and AVX-512
limits, whatever the host."""

from __future__ import annotations

import numpy as np
import pytest
from brute_force import violations
from hand_built_graphs import GRAPHS, build_graph, graph_matmul_bias_relu, kernels_of, placeholder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip import AVX2_LIMITS, AVX512_LIMITS, LEGAL, TARGET, avx2_target, host_has_avx2, outputs_of, roundtrip

from polytf.errors import ScheduleError
from polytf.graph import Node
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.schedules import builder
from polytf.schedules.builder import build_ast, schedule_scop
from polytf.schedules.marks import MicrokernelMark, ParallelMark, decode_mark
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.target_limits import TargetLimits
from polytf.schedules.validation import MAX_UNROLL, validate_recipe
from polytf.targets.compile_driver import emit_kernel
from polytf.targets.llvm_codegen import parallel_pieces

LIMITS = [AVX2_LIMITS, AVX512_LIMITS]
LIMIT_IDS = ["avx2", "avx512"]


@pytest.fixture(scope="module")
def fused_matmul():
    """MatMul + BiasAdd + Relu of [7, 13] x [13, 11]: A0 x, A1 w, A2 b (inputs), A3 the output."""
    return kernels_of(graph_matmul_bias_relu())[0]


def odd_matmul():
    """The zoo's odd_matmul, a plain MatMul [37, 53] x [53, 29]: A0 x, A1 w, A2 the output."""
    rng = np.random.default_rng(0)
    graph = build_graph(
        [
            placeholder("x", (37, 53)),
            Node("w", "Const", attrs={"dtype": "float32", "value": rng.standard_normal((53, 29)).astype(np.float32)}),
            Node("mm", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
        ],
        ["mm:0"],
    )
    return kernels_of(graph)[0]


def max_middle_axis():
    """Max over axis 1 of [4, 9, 10], keep_dims: output [4, 1, 10]."""
    graph = build_graph(
        [
            placeholder("x", (4, 9, 10)),
            Node("axes", "Const", attrs={"dtype": "int32", "value": np.array([1], np.int32)}),
            Node("max", "Max", ("x:0", "axes:0"), attrs={"keep_dims": True}),
        ],
        ["max:0"],
    )
    return kernels_of(graph)[0]


@pytest.fixture()
def no_code_generation(monkeypatch):
    """Makes any step after recipe validation fail the test: the recipe's data-layout copies
    (the builder's first step once a recipe is valid) and the target's code emission."""

    def forbidden(*arguments, **keywords):
        raise AssertionError("code generation started for a recipe that validation should have refused")

    monkeypatch.setattr(builder, "apply_data_layout", forbidden)
    monkeypatch.setattr(type(TARGET), "emit", forbidden)


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        (CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(7, 16), pack=("A3",)), r"pack = \['A3'\] is invalid; allowed: distinct arrays among \['A0', 'A1'\]"),
        (CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(0, 16), pack=("A0",)), r"pack = \['A0'\] is invalid; allowed: distinct arrays among \['A1'\]"),
        (CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(0, 16), pack=("A1", "A1")), "pack"),
        (CpuRecipe(pack=("A1",)), r"allowed: distinct arrays among \[\]"),  # no register tile
        (CpuRecipe(unroll=4294967296), f"unroll = 4294967296 is invalid; allowed: 0 to {MAX_UNROLL}"),
        (CpuRecipe(unroll=-1), "unroll = -1 is invalid"),
        (CpuRecipe(vector_width=3), "vector_width = 3 is invalid; allowed: 0, 1, 2, 4, 8, 16"),
        (CpuRecipe(tile_sizes=(256, 256), register_tile_sizes=(256, 256)), r"register_tile_sizes = \[256, 256\] is invalid; allowed: 0 to 7 for d0"),
        (CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(7, 32)), r"allowed: 0 to 16 for d1 \(extent 11; the vectorised"),
        (CpuRecipe(tile_sizes=(True, 0)), "recipe field tile_sizes must be a list of integers, not"),
        (CpuRecipe(tile_sizes=(2.0, 0)), "recipe field tile_sizes must be a list of integers"),
        (CpuRecipe(tile_sizes=(np.int64(2), 0)), "recipe field tile_sizes must be a list of integers"),
        (CpuRecipe(unroll="4"), "recipe field unroll must be an integer, not '4'"),
        (CpuRecipe(parallel=1), "recipe field parallel must be a boolean, not 1"),
        (CpuRecipe(pack="A0"), "recipe field pack must be a list of strings"),
        (CpuRecipe(point_order=("d0", "d1", "k")), r"point_order = \['d0', 'd1', 'k'\] is invalid; allowed: a permutation of statement S1's iterators"),
        (CpuRecipe(point_order=("d0", "d0", "r0")), "point_order"),
        (CpuRecipe(tile_order=(1, 1)), r"tile_order = \[1, 1\] is invalid; allowed: a permutation of \[0, 1\]"),
        (CpuRecipe(reduction_tile_sizes=(14,)), r"reduction_tile_sizes = \[14\] is invalid; allowed: 0 to 13 for r0"),
        (CpuRecipe(tile_sizes=(8, 0)), r"tile_sizes = \[8, 0\] is invalid; allowed: 0 to 7 for d0"),
        (CpuRecipe(tile_sizes=(4, 12), register_tile_sizes=(0, 8)), r"tile_sizes = \[4, 12\] is invalid; allowed: a multiple of d1's register tile 8 from 8 to 16"),
        (CpuRecipe(pad=True), "pad = True is invalid; allowed: false"),
        (CpuRecipe(algorithm="im2col"), "algorithm = 'im2col' is invalid; allowed: direct"),
        (CpuRecipe(algorithm="winograd"), "algorithm = 'winograd' is invalid; allowed: direct, im2col"),
    ],
)
def test_invalid_recipes_name_the_field_and_the_allowed_values(fused_matmul, recipe, message, no_code_generation):
    with pytest.raises(ScheduleError, match=message) as raised:
        schedule_scop(fused_matmul.scop, recipe, limits=AVX512_LIMITS)
    assert str(raised.value).startswith(f"kernel {fused_matmul.scop.name}: recipe field ")


def test_the_issue_records_are_refused_before_code_generation(no_code_generation):
    """Issue 9's cache record ``{"tile_sizes":[3,96],"register_tile_sizes":[3,32],"pack":["A2"]}``
    on the odd MatMul (A2 is its output): refused, on every path to code generation."""
    kernel = odd_matmul()
    record = ScheduleRecipe.from_dict({"tile_sizes": [3, 96], "register_tile_sizes": [3, 32], "pack": ["A2"]})
    for limits in LIMITS:
        with pytest.raises(ScheduleError, match=r"pack = \['A2'\] is invalid; allowed: distinct arrays among \['A0', 'A1'\]"):
            validate_recipe(kernel.scop, record, limits)
    with pytest.raises(ScheduleError, match="recipe field pack"):
        TARGET.compile(kernel.scop, record)
    oversized_tile = ScheduleRecipe.from_dict({"tile_sizes": [3, 96], "register_tile_sizes": [3, 32], "pack": ["A1"]})
    with pytest.raises(ScheduleError, match=r"tile_sizes = \[3, 96\] is invalid; allowed: a multiple of d1's register tile 32 from 32 to 32"):
        TARGET.compile(kernel.scop, oversized_tile)
    for bad in ({"unroll": 4294967296}, {"tile_sizes": [37, 256], "register_tile_sizes": [37, 256]}, {"tile_sizes": [256, 256], "register_tile_sizes": [256, 256]}):
        with pytest.raises(ScheduleError, match="recipe field (unroll|register_tile_sizes)"):
            TARGET.compile(kernel.scop, ScheduleRecipe.from_dict(bad))
    with pytest.raises(ScheduleError, match="a recipe must be a JSON object"):
        ScheduleRecipe.from_dict(None)


@pytest.mark.parametrize(
    ("registers", "avx2", "avx512"),
    [
        ((6, 16), True, True),  # 12 ymm / 6 zmm accumulators
        ((8, 16), True, True),  # 16 / 8
        ((8, 32), False, True),  # 32 / 16
        ((16, 32), False, True),  # 64 / 32
        ((17, 32), False, False),  # 68 / 34
        ((0, 96), True, True),  # 12 / 6
        ((3, 48), False, True),  # 18 / 9
    ],
)
def test_register_tiles_must_fit_the_target_registers(registers, avx2, avx512):
    wide = kernels_of(graph_matmul_bias_relu(m=20, k=5, n=96))[0]
    recipe = CpuRecipe(tile_sizes=tuple(r or 0 for r in registers), register_tile_sizes=registers)
    for limits, fits in zip(LIMITS, (avx2, avx512)):
        if fits:
            validate_recipe(wide.scop, recipe, limits)
        else:
            with pytest.raises(ScheduleError, match=f"fit {limits.vector_registers} vector registers of {limits.vector_lanes} float32 lanes"):
                validate_recipe(wide.scop, recipe, limits)


def test_the_largest_register_tile_emits_a_bounded_micro_kernel():
    """The cap bounds the unrolled micro-kernel: the host's largest tile (one accumulator
    register per row), even without vectors (vector_width 1, every point a scalar), emits at
    most 16 lines of LLVM IR per point of the tile (before the cap, a 256x256 tile took 32 s
    to compile) and computes the reference."""
    rows, columns = TARGET.vector_registers, TARGET.vector_lanes
    kernel = kernels_of(graph_matmul_bias_relu(m=rows, k=4, n=columns))[0]
    for width in (0, 1):
        recipe = CpuRecipe(tile_sizes=(rows, columns), register_tile_sizes=(rows, columns), vector_width=width)
        assert len(emit_kernel(kernel.scop, recipe, TARGET).code.splitlines()) <= 16 * rows * columns
        result = roundtrip(kernel, recipe, threads=1)
        assert result.verdict == LEGAL and result.error is None


def test_list_fields_are_normalised_to_tuples(fused_matmul):
    validated = validate_recipe(fused_matmul.scop, CpuRecipe(tile_sizes=[4, 8], point_order=["d0", "r0", "d1"]))
    assert validated.tile_sizes == (4, 8) and validated.point_order == ("d0", "r0", "d1")
    assert validated.tile_order == (0, 1) and validated.reduction_tile_sizes == (0,) and validated.register_tile_sizes == (0, 0)
    hash(validated)


def _space_recipes(data, kernel, limits, threads=2):
    space = SearchSpace.for_scop(kernel.scop, threads, limits.vector_lanes, limits.vector_registers)
    params = {name: data.draw(st.sampled_from(values), label=name) for name, values in space.dimensions}
    return space, space.recipe(params)


@pytest.mark.parametrize("limits", LIMITS, ids=LIMIT_IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_search_space_recipe_is_valid_for_its_target(small_kernels, limits, data):
    """Any combination of the space's choices (what TPE may propose), the default and the
    heuristic recipes pass validation for the target the space was made for."""
    name = data.draw(st.sampled_from(sorted(GRAPHS)), label="graph")
    for kernel in small_kernels(name):
        space, recipe = _space_recipes(data, kernel, limits)
        for candidate in (recipe, space.default_recipe(), *space.heuristic_recipes()):
            validate_recipe(kernel.scop, candidate, limits)


@pytest.mark.parametrize("limits", LIMITS, ids=LIMIT_IDS)
def test_heuristic_recipes_of_big_kernels_are_valid(limits):
    for m, k, n in [(384, 257, 1000), (37, 53, 29), (1, 64, 10), (512, 512, 512)]:
        kernel = kernels_of(graph_matmul_bias_relu(m, k, n))[0]
        space = SearchSpace.for_scop(kernel.scop, 2, limits.vector_lanes, limits.vector_registers)
        for recipe in (space.default_recipe(), *space.heuristic_recipes()):
            validate_recipe(kernel.scop, recipe, limits)


@pytest.mark.skipif(not host_has_avx2(), reason="the host cannot run AVX2 code")
def test_search_space_recipes_compile_and_run_for_an_avx2_target(small_kernels):
    """On an AVX-512 host, code for an AVX2 machine (8 lanes, 16 registers) still runs: the
    AVX2 space's recipes validate against the AVX2 limits and compute the reference."""
    target = avx2_target()
    assert (target.vector_lanes, target.vector_registers) == (8, 16) and target.limits == AVX2_LIMITS
    for name in ("matmul_bias_relu", "conv_same_stride2"):
        kernel = small_kernels(name)[0]
        space = SearchSpace.for_scop(kernel.scop, 2, target.vector_lanes, target.vector_registers)
        for recipe in space.heuristic_recipes()[:3]:
            result = roundtrip(kernel, recipe, threads=2, target=target)
            assert result.verdict == LEGAL and result.error is None, (recipe, result)


def test_from_dict_refuses_what_is_not_a_recipe():
    for data, message in [
        (None, "must be a JSON object"),
        ([], "must be a JSON object"),
        ({"unroll": "4"}, "unroll must be an integer"),
        ({"unroll": True}, "unroll must be an integer"),
        ({"unroll": 4.0}, "unroll must be an integer"),
        ({"parallel": "false"}, "parallel must be a boolean"),
        ({"parallel": 0}, "parallel must be a boolean"),
        ({"tile_sizes": None}, "tile_sizes must be a list of integers"),
        ({"tile_sizes": "12"}, "tile_sizes must be a list of integers"),
        ({"pack": [1]}, "pack must be a list of strings"),
        ({"algorithm": None}, "algorithm must be a string"),
        ({"tiles": [1]}, "unknown recipe fields"),
    ]:
        with pytest.raises(ScheduleError, match=message):
            ScheduleRecipe.from_dict(data)
    for text in ("null", "[1]", "{", ""):
        with pytest.raises(ScheduleError):
            ScheduleRecipe.from_json(text)
    assert ScheduleRecipe.from_dict({"tile_sizes": [4, 8], "parallel": True}) == CpuRecipe(tile_sizes=(4, 8), parallel=True)


def test_marks_are_encoded_and_decoded_in_one_place():
    mark = MicrokernelMark((6, 16), ("d0", "d1"))
    assert mark.name() == "microkernel 6x16 d0,d1" and MicrokernelMark.from_id(mark.to_id()) == mark
    parallel = ParallelMark((2,))
    assert parallel.name() == "parallel c2" and ParallelMark.from_id(parallel.to_id()) == parallel and parallel.iterators == ("c2",)
    assert decode_mark("parallel c0,c1,c2") == ParallelMark((0, 1, 2))
    assert MicrokernelMark.from_id(parallel.to_id()) is None and ParallelMark.from_id(mark.to_id()) is None
    for foreign in ("microkernel 6x d0", "microkernel 6x16 d0", "parallel x1", "parallel c", "parallel", "other", ""):
        assert decode_mark(foreign) is None, foreign


def test_parallel_reduction_with_one_iteration_tile_loops_is_correct():
    """Issue 9's case: every outer tile loop has one iteration, so isl drops them; the first
    loop left is the reduction's tile loop, which must not be distributed over the threads."""
    kernel = max_middle_axis()
    recipe = CpuRecipe(tile_sizes=(4, 0, 10), reduction_tile_sizes=(8,), parallel=True)
    result = roundtrip(kernel, recipe, threads=2, brute_force=True)
    assert result.verdict == LEGAL and result.brute_force == () and result.error is None
    scheduled = schedule_scop(kernel.scop, recipe)
    assert "parallel" not in str(scheduled.schedule)  # no loop is left to distribute
    module = TARGET.emit_llvm_ir(kernel.scop, recipe)
    entry = module.partition(f'define void @"{kernel.scop.name}"(')[2].partition("\n}\n")[0]
    assert entry and "GOMP_parallel" not in entry  # (its slices entry may spread runs over threads)
    np.testing.assert_array_equal(outputs_of(kernel, recipe, 2)["A1"], outputs_of(kernel, CpuRecipe(), 1)["A1"])


def test_parallel_mark_moves_to_the_first_real_loop_and_is_checked():
    kernel = max_middle_axis()
    # d0 has one tile; d1 has extent 1; d2 untiled: the parallel loop is d2's (c2)
    recipe = CpuRecipe(tile_sizes=(4, 0, 0), parallel=True)
    scheduled = schedule_scop(kernel.scop, recipe)
    assert "parallel c2" in str(scheduled.schedule)
    assert "// parallel c2\nfor (int c2 = 0; c2 <= 9; c2 += 1)" in build_ast(scheduled.schedule).to_C_str()
    result = roundtrip(kernel, recipe, brute_force=True)
    assert result.verdict == LEGAL and result.brute_force == () and result.error is None
    np.testing.assert_array_equal(outputs_of(kernel, recipe, 2)["A1"], outputs_of(kernel, CpuRecipe(), 1)["A1"])


def _doubling() -> Scop:
    """``B[d0, d1 + 1] = 2 * B[d0, d1]``: the d1 loop carries a dependence, d0 does not."""
    shifted = Access("B", (AffineExpr.of("d0"), AffineExpr.combine((1, "d1"), constant=1)))
    step = Statement("S0", ("d0", "d1"), (3, 4), shifted, Binary("mul", Constant(2.0), Load(Access.of("B", "d0", "d1"))))
    return Scop("doubling", (step,), (ArrayInfo("B", (3, 5), "float32", "output"),))


def test_a_parallel_loop_that_carries_a_dependence_is_illegal():
    """Parallel over d1 (tile_order 1,0) is refused, naming one instance pair, and brute
    force, running the AST the way the generated code does, finds the same race."""
    scop = _doubling()
    with pytest.raises(ScheduleError, match=r"parallel loop c0 carries the RAW dependence S0 -> S0 .*, e\.g\. \{ \[S0\[.*\] -> S0\[.*\]\] \}"):
        schedule_scop(scop, CpuRecipe(tile_order=(1, 0), parallel=True))
    illegal = schedule_scop(scop, CpuRecipe(tile_order=(1, 0), parallel=True), check=False)
    assert any("parallel loop" in v for v in violations(scop, build_ast(illegal.schedule)))
    legal = schedule_scop(scop, CpuRecipe(parallel=True))  # d0 carries nothing
    assert violations(scop, build_ast(legal.schedule)) == []
    # d0 in one tile (no loop): the first loop is d1's, which carries the dependence
    with pytest.raises(ScheduleError, match="parallel loop c1 carries"):
        schedule_scop(scop, CpuRecipe(tile_sizes=(3, 0), parallel=True))


def test_copy_nests_distribute_each_part_they_are_cut_into(fused_matmul):
    """A packing copy whose last panel is partial is two loops under one parallel mark
    (isl's isolate option): both are distributed, and each is checked."""
    kernel = kernels_of(graph_matmul_bias_relu(37, 53, 29))[0]
    recipe = CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), pack=("A0", "A1"), parallel=True)
    scheduled = schedule_scop(kernel.scop, recipe)
    pieces = parallel_pieces(build_ast(scheduled.schedule))
    distributed = [piece.node.for_get_iterator().get_id().get_name() for piece in pieces if piece.distributed]
    # A0's full panels (c0) and last panel (c1); A1's two panels (c1 each); the main nest (c0)
    assert distributed == ["c0", "c1", "c1", "c1", "c0"]
    result = roundtrip(kernel, recipe, threads=2)
    assert result.verdict == LEGAL and result.error is None


def test_default_limits_are_the_conservative_ones(fused_matmul):
    assert TargetLimits() == AVX2_LIMITS
    recipe = CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(7, 16))  # 14 ymm, 7 zmm
    validate_recipe(fused_matmul.scop, recipe)
    with pytest.raises(ScheduleError, match="register_tile_sizes"):
        validate_recipe(fused_matmul.scop, CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(7, 16)), TargetLimits(4, 16))
