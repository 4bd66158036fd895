"""Schedule trees from recipes: golden loop ASTs, JSON replay, malformed and illegal recipes."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import graph_centred_column_mean

from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.errors import ScheduleError
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.schedules.builder import build_ast, build_schedule, register_tile_run
from polytf.schedules.legality import check_legality
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.schedules.shared_nests import copy_groups, elementwise_units, group_depth
from polytf.schedules.structure import anchor_statement, shared_band_depth


def matmul_scop(m=3, n=4, k=5) -> Scop:
    out = Access.of("C", "d0", "d1")
    init = Statement("S0", ("d0", "d1"), (m, n), out, Constant(0.0))
    update = Statement("S1", ("d0", "d1", "r0"), (m, n, k), out, Binary("add", Load(out), Binary("mul", Load(Access.of("A", "d0", "r0")), Load(Access.of("B", "r0", "d1")))))
    arrays = (ArrayInfo("A", (m, k), "float32", "input"), ArrayInfo("B", (k, n), "float32", "input"), ArrayInfo("C", (m, n), "float32", "output"))
    return Scop("matmul", (init, update), arrays)


GOLDEN_DEFAULT = """for (int c0 = 0; c0 <= 2; c0 += 1)
  for (int c1 = 0; c1 <= 3; c1 += 1) {
    S0(c0, c1);
    for (int c2 = 0; c2 <= 4; c2 += 1)
      S1(c0, c1, c2);
  }
"""

GOLDEN_TILED = """for (int c0 = 0; c0 <= 2; c0 += 1)
  for (int c1 = 0; c1 <= 1; c1 += 1) {
    for (int c2 = 2 * c1; c2 <= 2 * c1 + 1; c2 += 1)
      S0(c0, c2);
    for (int c2 = 0; c2 <= 4; c2 += 1)
      for (int c3 = 2 * c1; c3 <= 2 * c1 + 1; c3 += 1)
        S1(c0, c3, c2);
  }
"""


def test_structure_of_matmul():
    scop = matmul_scop()
    assert shared_band_depth(scop) == 2
    assert anchor_statement(scop).name == "S1"


def test_default_recipe_is_program_order():
    assert build_ast(build_schedule(matmul_scop(), CpuRecipe())).to_C_str() == GOLDEN_DEFAULT


def test_tiled_recipe_moves_point_loops_inside_the_sequence():
    recipe = CpuRecipe(tile_sizes=(0, 2), point_order=("d0", "r0", "d1"))
    assert build_ast(build_schedule(matmul_scop(), recipe)).to_C_str() == GOLDEN_TILED


def test_recipe_json_replay_gives_the_same_tree():
    recipe = CpuRecipe(tile_sizes=(2, 4), tile_order=(1, 0), reduction_tile_sizes=(2,), point_order=("r0", "d0", "d1"), vector_width=8, unroll=2, parallel=True)
    replayed = ScheduleRecipe.from_json(recipe.to_json())
    assert replayed == recipe
    assert str(build_schedule(matmul_scop(), replayed)) == str(build_schedule(matmul_scop(), recipe))


@pytest.mark.parametrize(
    "recipe, message",
    [
        (CpuRecipe(tile_sizes=(2,)), r"tile_sizes = \[2\] is invalid; allowed: 2 entries"),
        (CpuRecipe(tile_order=(0, 0)), r"tile_order = \[0, 0\] is invalid; allowed: a permutation"),
        (CpuRecipe(point_order=("d0", "d1")), "point_order .* allowed: a permutation"),
        (CpuRecipe(reduction_tile_sizes=(2, 2)), "reduction_tile_sizes"),
        (CpuRecipe(tile_sizes=(-1, 0)), r"tile_sizes = \[-1, 0\] is invalid; allowed: 0 to 3"),
    ],
)
def test_malformed_recipes_raise_schedule_error(recipe, message):
    with pytest.raises(ScheduleError, match=message):
        build_schedule(matmul_scop(), recipe)


def test_malformed_json_raises_schedule_error():
    with pytest.raises(ScheduleError, match="unknown recipe fields"):
        ScheduleRecipe.from_json('{"tile_size": [1]}')
    with pytest.raises(ScheduleError, match="not valid JSON"):
        ScheduleRecipe.from_json("{")


def two_reduction_scop() -> Scop:
    out = Access.of("C", "d0")
    init = Statement("S0", ("d0",), (3,), out, Constant(0.0))
    update = Statement("S1", ("d0", "r0", "r1"), (3, 4, 5), out, Binary("add", Load(out), Load(Access.of("A", "d0", "r0", "r1"))))
    arrays = (ArrayInfo("A", (3, 4, 5), "float32", "input"), ArrayInfo("C", (3,), "float32", "output"))
    return Scop("sum", (init, update), arrays)


def test_reordering_a_reduction_is_rejected_and_names_the_dependence():
    with pytest.raises(ScheduleError, match=r"reverses the (RAW|WAR|WAW) dependence S1 -> S1"):
        build_schedule(two_reduction_scop(), CpuRecipe(point_order=("d0", "r1", "r0")))


def test_tiling_an_inner_reduction_is_rejected():
    with pytest.raises(ScheduleError, match="dependence S1 -> S1"):
        build_schedule(two_reduction_scop(), CpuRecipe(reduction_tile_sizes=(0, 2)))


def test_init_after_update_is_rejected():
    scop = matmul_scop()
    reversed_scop = Scop(scop.name, scop.statements[::-1], scop.arrays)
    # program order is now "update then init": moving the init first must be illegal;
    # the builder keeps program order, so the legal schedule is built and verified
    build_schedule(reversed_scop, CpuRecipe())
    with pytest.raises(ScheduleError, match="dependence"):
        check_legality(reversed_scop, build_schedule(scop, CpuRecipe(), check=False))


GOLDEN_REGISTER_TILE_RUN = """for (int c2 = 0; c2 <= 1; c2 += 1)
  for (int c3 = 0; c3 <= 1; c3 += 1) {
    for (int c4 = 3 * c2; c4 <= 3 * c2 + 2; c4 += 1)
      for (int c5 = 8 * c3; c5 <= 8 * c3 + 7; c5 += 1)
        S0(c4, c5);
    // microkernel 3x8 d0,d1
    for (int c4 = 0; c4 <= 4; c4 += 1)
      for (int c5 = 3 * c2; c5 <= 3 * c2 + 2; c5 += 1)
        for (int c6 = 8 * c3; c6 <= 8 * c3 + 7; c6 += 1)
          S1(c5, c6, c4);
    for (int c4 = 3 * c2; c4 <= 3 * c2 + 2; c4 += 1)
      for (int c5 = 8 * c3; c5 <= 8 * c3 + 7; c5 += 1)
        S2(c4, c5);
  }
"""


def _matmul_relu(reads_neighbour: bool = False) -> Scop:
    base = matmul_scop(6, 16, 5)
    read = Access.of("C", "d0", "d1") if not reads_neighbour else Access.of("C", "d0", "15 - d1")
    relu = Statement("S2", ("d0", "d1"), (6, 16), Access.of("D", "d0", "d1"), Binary("max", Load(read), Constant(0.0)))
    arrays = base.arrays[:2] + (ArrayInfo("C", (6, 16), "float32", "temporary"), ArrayInfo("D", (6, 16), "float32", "output"))
    return Scop("matmul_relu", base.statements + (relu,), arrays)


def test_zero_fill_and_epilogue_run_once_per_register_tile():
    """The zero fill and the epilogue share the anchor's register-tile band (each register
    tile's output block is filled, accumulated and finished while it is in L1), unless a
    reduction is tiled (the epilogue would run on a partial sum) or the epilogue reads another
    tile's element (then no band is shared over that dimension)."""
    scop = _matmul_relu()
    recipe = CpuRecipe(tile_sizes=(6, 16), register_tile_sizes=(3, 8))
    assert [s.name for s in register_tile_run(scop, recipe)] == ["S0", "S1", "S2"]
    assert build_ast(build_schedule(scop, recipe)).to_C_str() == GOLDEN_REGISTER_TILE_RUN
    assert register_tile_run(scop, CpuRecipe(tile_sizes=(6, 16), register_tile_sizes=(3, 8), reduction_tile_sizes=(2,))) == ()
    assert register_tile_run(scop, CpuRecipe(tile_sizes=(6, 16))) == ()
    mirrored = _matmul_relu(reads_neighbour=True)
    assert shared_band_depth(mirrored) == 1  # the epilogue reads a later column: no band over d1
    by_rows = CpuRecipe(tile_sizes=(3,))
    assert register_tile_run(mirrored, by_rows) == ()
    check_legality(mirrored, build_schedule(mirrored, by_rows, check=False))  # each statement sweeps its rows


def _matmul_bias_relu(second_reads: Access | None = None, second_writes: Access | None = None) -> Scop:
    """C = A·B (6x16, K = 5), then D = C + 1 and E = max(D, 0) (or what the arguments say)."""
    base = matmul_scop(6, 16, 5)
    bias = Statement("S2", ("d0", "d1"), (6, 16), Access.of("D", "d0", "d1"), Binary("add", Load(Access.of("C", "d0", "d1")), Constant(1.0)))
    read = second_reads or Access.of("D", "d0", "d1")
    relu = Statement("S3", ("d0", "d1"), (6, 16), second_writes or Access.of("E", "d0", "d1"), Binary("max", Load(read), Constant(0.0)))
    arrays = base.arrays[:2] + tuple(ArrayInfo(name, (6, 16), "float32", role) for name, role in (("C", "temporary"), ("D", "temporary"), ("E", "output")))
    return Scop("matmul_bias_relu", base.statements + (bias, relu), arrays)


GOLDEN_EPILOGUE_NEST = """for (int c0 = 0; c0 <= 5; c0 += 1)
  for (int c1 = 0; c1 <= 3; c1 += 1) {
    for (int c2 = 4 * c1; c2 <= 4 * c1 + 3; c2 += 1)
      S0(c0, c2);
    for (int c2 = 0; c2 <= 2; c2 += 1)
      for (int c3 = 4 * c1; c3 <= 4 * c1 + 3; c3 += 1)
        for (int c4 = 2 * c2; c4 <= min(4, 2 * c2 + 1); c4 += 1)
          S1(c0, c3, c4);
    for (int c2 = 4 * c1; c2 <= 4 * c1 + 3; c2 += 1) {
      S2(c0, c2);
      S3(c0, c2);
    }
  }
"""


def test_an_epilogue_after_a_tiled_reduction_runs_in_one_nest():
    """With the reduction tiled (no register-tile run), the epilogue's statements share one
    loop nest when each reads the others' elements only at the point that writes them, and
    keep a nest each otherwise (a read of a neighbour, two writes meeting in one array)."""
    recipe = CpuRecipe(tile_sizes=(0, 4), reduction_tile_sizes=(2,))
    scop = _matmul_bias_relu()
    assert [[s.name for s in unit] for unit in elementwise_units(scop)] == [["S0"], ["S1"], ["S2", "S3"]]
    assert build_ast(build_schedule(scop, recipe)).to_C_str() == GOLDEN_EPILOGUE_NEST
    neighbour = _matmul_bias_relu(second_reads=Access.of("D", "d0", "15 - d1"))
    assert [len(unit) for unit in elementwise_units(neighbour)] == [1, 1, 1, 1]
    overlapping = _matmul_bias_relu(second_writes=Access.of("D", "d0", "15 - d1"))
    assert [len(unit) for unit in elementwise_units(overlapping)] == [1, 1, 1, 1]
    disjoint = _matmul_bias_relu(second_writes=Access.of("C", "d0", "d1"))  # in place, at the point's own element
    assert [len(unit) for unit in elementwise_units(disjoint)] == [1, 1, 2]


def _copies(scop_arrays_shape=(2, 3, 8)) -> tuple[Statement, ...]:
    """P[a, b, 0, c] = X[a, b, c] + 1 and P[a, b, 1, c] = 2 * X[a, b, c], then Q[a, b, c] =
    P[a, b, 0, c] - P[a, b, 1, c], each over (a, b, c): three copies of one group."""
    extents = scop_arrays_shape
    first = Statement("C0", ("d0", "d1", "d2"), extents, Access.of("P", "d0", "d1", 0, "d2"), Binary("add", Load(Access.of("X", "d0", "d1", "d2")), Constant(1.0)))
    second = Statement("C1", ("d0", "d1", "d2"), extents, Access.of("P", "d0", "d1", 1, "d2"), Binary("mul", Constant(2.0), Load(Access.of("X", "d0", "d1", "d2"))))
    third = Statement(
        "C2", ("d0", "d1", "d2"), extents, Access.of("Q", "d0", "d1", "d2"),
        Binary("sub", Load(Access.of("P", "d0", "d1", 0, "d2")), Load(Access.of("P", "d0", "d1", 1, "d2"))),
    )
    return first, second, third


def test_copies_over_the_same_points_share_one_nest():
    """A run of copies over the same iterators whose writes begin with the same iterators is
    one group (its own nest over them, then each copy over the rest); a copy reading another
    row than the one written, or over other extents, starts a group of its own."""
    first, second, third = _copies()
    assert copy_groups((first, second, third)) == [(first, second, third)]
    shifted = Statement(third.name, third.iterators, third.extents, third.write, Load(Access.of("P", "d0", "2 - d1", 0, "d2")))
    assert copy_groups((first, second, shifted)) == [(first, second), (shifted,)]
    other = Statement("C3", ("d0", "d1", "d2"), (2, 3, 4), Access.of("R", "d0", "d1", "d2"), Constant(0.0))
    assert copy_groups((first, other)) == [(first,), (other,)]


def test_copies_that_read_none_of_each_other_are_one_loop_body():
    """A group whose copies read nothing the group writes shares every loop (one body); one
    that reads what an earlier copy wrote shares its write prefix, a loop left to each copy."""
    first, second, third = _copies()
    assert group_depth((first, second)) == 3
    assert group_depth((first, second, third)) == 2
    assert group_depth((first,)) == 2


def test_a_band_stops_where_equal_names_mean_different_dimensions():
    graph = graph_centred_column_mean()
    (group,) = partition(graph)
    kernel = lower_group(graph, group)
    assert [op for _, op in kernel.scop.ops] == ["Mean", "Sub", "Mean"]  # one kernel
    assert shared_band_depth(kernel.scop) == 1  # d0 only: d1 is a row above, a column below
    square = build_model(PreparedModel(graph, (group,), (kernel,), ()), threads=2)
    x = np.random.default_rng(4).standard_normal((1, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(square(x=x)["out"], (x - x.mean(2, keepdims=True)).mean(1), rtol=1e-5, atol=1e-6)
