"""GPU schedules (schedules/gpu_mapping.py) run on the CPU: block and thread loops as
ordinary loops, barriers as nothing, shared memory as scratch arrays.

- Every recipe of the GPU search space is legal and computes the reference.
- Arbitrary GPU recipes are rejected with ScheduleError, or legal and correct.
- A mapped dimension that carries a dependence is rejected, naming it.
- The tree has the blocks, threads and barrier marks the code generator follows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import GRAPHS, graph_matmul_bias_relu, kernels_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip import ILLEGAL, INVALID, LEGAL, ScopKernel, outputs_of, roundtrip
from test_legality_brute_force import _running_sum

from polytf.errors import ScheduleError
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, IteratorRole, Statement
from polytf.schedules.builder import build_ast, schedule_scop
from polytf.schedules.gpu_grid import gpu_tiles
from polytf.schedules.gpu_memory import stageable_operands
from polytf.schedules.gpu_search_space import GpuSearchSpace
from polytf.schedules.marks import BarrierMark, GpuMark, decode_mark, mark_of
from polytf.schedules.recipe import GpuRecipe, ScheduleRecipe
from polytf.schedules.structure import anchor_statement, shared_band_depth
from polytf.schedules.target_limits import TargetLimits

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def matmul():
    return kernels_of(graph_matmul_bias_relu(m=37, k=45, n=70))[0]


def _marks(ast) -> list:
    found = []

    def visit(node):
        mark = mark_of(node)
        if mark is not None:
            found.append(mark)
        return True

    ast.foreach_descendant_top_down(visit)
    return found


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
@SETTINGS
@given(data=st.data())
def test_gpu_search_space_recipes_are_legal_and_correct_on_the_cpu(small_kernels, graph_name, data):
    for kernel in small_kernels(graph_name):
        space = GpuSearchSpace.for_scop(kernel.scop, TargetLimits(max_threads_per_block=256))
        params = {name: data.draw(st.sampled_from(choices), label=name) for name, choices in space.dimensions}
        recipe = space.recipe(params)
        result = roundtrip(kernel, recipe, threads=1)
        assert result.verdict == LEGAL and result.error is None, f"{recipe}: {result}"
        assert schedule_scop(kernel.scop, recipe, limits=space.limits).launch.threads_per_block <= 256


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
def test_default_gpu_recipe_is_legal_correct_and_mapped(small_kernels, graph_name):
    for kernel in small_kernels(graph_name):
        recipe = GpuSearchSpace.for_scop(kernel.scop).default_recipe()
        result = roundtrip(kernel, recipe, threads=1)
        assert result.verdict == LEGAL and result.error is None, f"{recipe}: {result}"
        launch = schedule_scop(kernel.scop, recipe).launch
        assert launch.threads_per_block <= 1024
        if shared_band_depth(kernel.scop):
            assert launch.threads_per_block > 1 or max(anchor_statement(kernel.scop).extents[: shared_band_depth(kernel.scop)]) == 1


@st.composite
def gpu_recipes(draw, scop):
    """Any GPU recipe: tiles, thread tiles, reduction tiles, loop orders and staging at random
    (many invalid ones: the validator must reject those)."""
    depth = shared_band_depth(scop)
    anchor = anchor_statement(scop)
    extents = anchor.extents
    stageable = list(stageable_operands(scop))
    return GpuRecipe(
        tile_sizes=tuple(draw(st.sampled_from([0, 1, 2, 3, 4, 8, extents[k] + 3])) for k in range(depth)),
        thread_tile_sizes=tuple(draw(st.sampled_from([0, 1, 2, 4])) for _ in range(depth)),
        reduction_tile_sizes=tuple(draw(st.sampled_from([0, 2, 5, 16])) for _ in anchor.reduction_iterators),
        point_order=tuple(draw(st.permutations(anchor.iterators))),
        unroll=draw(st.sampled_from([0, 1, 4])),
        shared_memory=tuple(draw(st.lists(st.sampled_from(stageable), unique=True))) if stageable else (),
    )


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
@SETTINGS
@given(data=st.data())
def test_arbitrary_gpu_recipes_are_rejected_or_correct(small_kernels, graph_name, data):
    for kernel in small_kernels(graph_name):
        recipe = data.draw(gpu_recipes(kernel.scop), label="recipe")
        result = roundtrip(kernel, recipe, threads=1)
        assert result.verdict in (INVALID, ILLEGAL, LEGAL)
        if result.verdict == LEGAL:
            assert result.error is None, f"{recipe}: {result.error}"
        elif result.verdict == INVALID:
            assert result.field, result.message


def test_staged_matmul_matches_the_identity_schedule_bit_for_bit_in_the_sum_order(matmul):
    recipe = GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), reduction_tile_sizes=(8,), shared_memory=("A0", "A1"))
    staged = outputs_of(matmul, recipe, threads=1)
    plain = outputs_of(matmul, GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4)), threads=1)
    for name in staged:
        np.testing.assert_allclose(staged[name], plain[name], rtol=1e-5, atol=1e-5)


def test_tree_has_blocks_threads_and_barriers_around_the_staging_copies(matmul):
    recipe = GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), reduction_tile_sizes=(8,), shared_memory=("A0", "A1"))
    scheduled = schedule_scop(matmul.scop, recipe)
    marks = _marks(build_ast(scheduled.schedule))
    blocks = [m for m in marks if isinstance(m, GpuMark) and m.kind == "blocks"]
    threads = [m for m in marks if isinstance(m, GpuMark) and m.kind == "threads"]
    assert blocks == [GpuMark("blocks", (0, 1), ("y", "x"))]
    assert len(threads) == 7  # init, accumulator load, two copies, update, accumulator store, epilogue
    assert sum(isinstance(m, BarrierMark) for m in marks) == 2  # after the copies, after the compute
    launch = scheduled.launch
    assert launch.grid == (3, 3, 1) and launch.block == (8, 8, 1)
    assert launch.shared_arrays == ("A0_shared", "A1_shared")
    assert launch.private_arrays == (("A3_private", (2, 4)),)  # each thread's 2x4 accumulators
    # A tile 16 x 8, B tile 8 x 32: consecutive threads (x: d1) read along B's rows, no padding
    assert scheduled.scop.array("A1_shared").shape == (8, 32)
    assert launch.shared_memory_bytes == 16 * 8 * 4 + 8 * 32 * 4


def test_staging_and_accumulator_copies_are_marked_by_their_kind(matmul):
    recipe = GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), reduction_tile_sizes=(8,), shared_memory=("A0", "A1"))
    statements = {s.name: s for s in schedule_scop(matmul.scop, recipe).scop.statements}
    kinds = {name: s.copy_kind for name, s in statements.items() if s.copy_kind is not None}
    shared, private = CopyKind.SHARED_MEMORY, CopyKind.PRIVATE
    assert kinds == {"Stage0": shared, "Stage1": shared, "PrivateLoad": private, "PrivateStore": private}
    assert all(statements[name].op == "" for name in kinds)
    # a staging copy's iterators keep the roles of the anchor iterators they stand for: A0[d0, r0], A1[r0, d1]
    output, reduction = IteratorRole.OUTPUT, IteratorRole.REDUCTION
    assert statements["Stage0"].roles == (output, reduction) and statements["Stage1"].roles == (reduction, output)
    assert statements["PrivateLoad"].roles == (output, output)


def test_a_tile_read_down_its_columns_by_consecutive_threads_is_padded():
    kernel = kernels_of(graph_matmul_bias_relu(m=37, k=45, n=70, transpose_b=True))[0]  # B[d1, r0]
    recipe = GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 1), reduction_tile_sizes=(32,), shared_memory=("A1",))
    scheduled = schedule_scop(kernel.scop, recipe)
    assert scheduled.scop.array("A1_shared").shape == (32, 33)  # 32 threads of a warp on 33 banks apart
    assert roundtrip(kernel, recipe, threads=1).error is None


def test_a_mapped_dimension_that_carries_a_dependence_is_rejected():
    kernel = _running_sum()
    depth = shared_band_depth(kernel.scop)
    space = GpuSearchSpace.for_scop(kernel.scop)
    assert not all(space.coincident)
    carried = space.coincident.index(False)
    threads = [0] * depth
    threads[carried] = 1
    tiles = [0] * depth
    tiles[carried] = 2  # two blocks along a dimension whose iterations depend on each other
    with pytest.raises(ScheduleError, match="parallel loop c.* carries"):
        schedule_scop(kernel.scop, GpuRecipe(tile_sizes=tuple(tiles), thread_tile_sizes=tuple(threads)))
    result = roundtrip(kernel, space.default_recipe(), threads=1)
    assert result.verdict == LEGAL and result.error is None


@pytest.mark.parametrize(
    ("recipe", "field"),
    [
        (GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(1, 1)), "thread_tile_sizes"),  # 512 threads > 256
        (GpuRecipe(tile_sizes=(16, 30), thread_tile_sizes=(2, 4)), "tile_sizes"),  # 30 not a multiple of 4
        (GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), shared_memory=("A2",)), "shared_memory"),
        (GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), shared_memory=("A0", "A0")), "shared_memory"),
        (GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), shared_memory=("A0", "A1")), "shared_memory"),  # 37x45 + 45x32 floats > 8 KiB
    ],
)
def test_invalid_gpu_recipes_name_the_field(matmul, recipe, field):
    limits = TargetLimits(max_threads_per_block=256, shared_memory_per_block=8 * 1024)
    with pytest.raises(ScheduleError, match=f"recipe field {field} "):
        schedule_scop(matmul.scop, recipe, limits=limits)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpu": True, "tile_sizes": [16, 32], "thread_tile_sizes": [2, 4], "parallel": True}, "parallel"),
        ({"gpu": True, "tile_sizes": [16, 32], "thread_tile_sizes": [2, 4], "register_tile_sizes": [2, 8]}, "register_tile_sizes"),
        ({"gpu": True, "tile_sizes": [16, 32], "thread_tile_sizes": [2, 4], "tile_order": [1, 0]}, "tile_order"),
        ({"gpu": False, "thread_tile_sizes": [2, 4]}, "thread_tile_sizes"),
        ({"shared_memory": ["A0"]}, "shared_memory"),
    ],
)
def test_a_flat_recipe_that_uses_the_other_kinds_fields_is_refused(fields, field):
    """A recipe of polytf 61c8331 (flat, with ``gpu``) that a GPU recipe would have refused
    for a CPU field (or the other way round) does not parse."""
    with pytest.raises(ScheduleError, match=f"recipe field {field} "):
        ScheduleRecipe.from_dict(fields)


def test_gpu_recipe_json_replay_gives_the_same_tree(matmul):
    recipe = GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), reduction_tile_sizes=(8,), shared_memory=("A1",), unroll=4)
    replayed = ScheduleRecipe.from_json(recipe.to_json())
    assert replayed == recipe
    first, second = schedule_scop(matmul.scop, recipe), schedule_scop(matmul.scop, replayed)
    assert first.schedule.get_root().to_str() == second.schedule.get_root().to_str()
    assert first.launch == second.launch


def test_block_tiles_cover_the_extent_rounded_to_the_thread_tile(matmul):
    tiles = gpu_tiles(matmul.scop, GpuRecipe(tile_sizes=(0, 0), thread_tile_sizes=(4, 8), point_order=("d0", "d1", "r0")))
    assert tiles.block_tiles == (40, 72) and tiles.threads == (10, 9) and tiles.hardware == ("y", "x")
    assert tiles.block_shape() == (9, 10, 1)


def test_gpu_marks_round_trip_through_their_names():
    for mark in (GpuMark("blocks", (0, 1, 2), ("z", "y", "x")), GpuMark("threads", (5,), ("x",)), BarrierMark()):
        assert decode_mark(mark.name()) == mark
    assert decode_mark("gpu_threads c1:x,c2:x") is None  # one hardware dimension twice
    assert decode_mark("gpu_blocks c1:w") is None


def _reversed_epilogue():
    """``T[d0] = 2 * A[d0]`` then ``B[d0] = T[d0 - 1]`` (``d0 >= 1``): the epilogue reads its
    producer's value at the point before, which one loop over ``d0`` has computed already (a
    legal shared band) but another thread computes (a race once the band is mapped to threads)."""
    produce = Statement("S0", ("d0",), (8,), Access.of("T", "d0"), Binary("mul", Constant(2.0), Load(Access.of("A", "d0"))))
    consume = Statement("S1", ("d0",), (8,), Access.of("B", "d0"), Load(Access("T", (AffineExpr.combine((1, "d0"), constant=-1),))), ("d0 >= 1",))
    arrays = (ArrayInfo("A", (8,), "float32", "input"), ArrayInfo("T", (8,), "float32", "temporary"), ArrayInfo("B", (8,), "float32", "output"))
    return ScopKernel(Scop("reversed", (produce, consume), arrays))


def test_a_dependence_between_statements_on_different_threads_is_rejected():
    kernel = _reversed_epilogue()
    with pytest.raises(ScheduleError, match=r"RAW dependence S0 -> S1 .* on different threads"):
        schedule_scop(kernel.scop, GpuRecipe(tile_sizes=(8,), thread_tile_sizes=(1,)))
    with pytest.raises(ScheduleError, match="RAW dependence S0 -> S1"):  # on different blocks: the blocks band reverses it
        schedule_scop(kernel.scop, GpuRecipe(tile_sizes=(4,), thread_tile_sizes=(4,)))
    one_thread = GpuRecipe(tile_sizes=(8,), thread_tile_sizes=(8,))
    result = roundtrip(kernel, one_thread, threads=1)
    assert result.verdict == LEGAL and result.error is None
