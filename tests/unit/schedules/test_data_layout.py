"""Data-layout transformations (packing, zero-padding, im2col) keep the computation:
the transformed Scop, run by the reference interpreter in program order, equals the op's
numpy reference; bad requests raise ScheduleError with the reason."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import graph_conv_bias_relu, graph_depthwise, graph_matmul_bias_relu, kernels_of

from polytf.errors import ScheduleError
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.interpreter import interpret
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, IteratorRole, Statement
from polytf.schedules.builder import build_ast, schedule_scop
from polytf.schedules.data_layout import SCRATCH, apply_data_layout, can_zero_pad
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.structure import anchor_statement, copy_statements
from polytf.schedules.validation import validate_recipe


def _check_against_reference(kernel, scop) -> None:
    rng = np.random.default_rng(0)
    inputs = {a.name: rng.standard_normal(a.shape).astype(np.float32) for a in kernel.input_arrays}
    expected = kernel.reference(inputs)
    state = interpret(scop, inputs)
    for name, value in expected.items():
        np.testing.assert_allclose(state[name], value, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def matmul():
    return kernels_of(graph_matmul_bias_relu(7, 5, 11))[0]


@pytest.fixture(scope="module")
def conv():
    return kernels_of(graph_conv_bias_relu(5, 4, 2, 3, stride=2))[0]


def test_packing_adds_a_copy_into_register_panels(matmul):
    recipe = CpuRecipe(tile_sizes=(4, 8), register_tile_sizes=(2, 8), pack=("A0", "A1"))
    scop = apply_data_layout(matmul.scop, recipe)
    copies = copy_statements(scop)
    assert len(copies) == 2
    packed = {a.name: a for a in scop.arrays if a.role == SCRATCH}
    # A0[d0, r0] with register tile 2 on d0 -> [ceil(7/2), 5, 2]; A1[r0, d1] with 8 on d1 -> [2, 5, 8]
    assert sorted(a.shape for a in packed.values()) == [(2, 5, 8), (4, 5, 2)]
    reads = {a.array for a in anchor_statement(scop).reads}
    assert "A0" not in reads and "A1" not in reads and set(packed) <= reads
    _check_against_reference(matmul, scop)


def test_zero_padding_removes_the_guards_of_a_convolution(conv):
    assert anchor_statement(conv.scop).constraints
    scop = apply_data_layout(conv.scop, CpuRecipe(pad=True))
    assert not anchor_statement(scop).constraints
    (padded,) = [a for a in scop.arrays if a.role == SCRATCH]
    assert padded.shape[1] > conv.scop.array("A0").shape[1]
    _check_against_reference(conv, scop)


def test_im2col_gathers_the_window_into_a_matrix(conv):
    scop = apply_data_layout(conv.scop, CpuRecipe(algorithm="im2col"))
    gathered = [a for a in scop.arrays if a.role == SCRATCH and "im2col" in a.tensor]
    assert len(gathered) == 1 and len(gathered[0].shape) == 6  # [n, oh, ow, kh, kw, c]
    _check_against_reference(conv, scop)


def test_schedule_places_copies_first_and_is_legal_in_parallel(matmul):
    recipe = CpuRecipe(tile_sizes=(4, 8), register_tile_sizes=(2, 8), pack=("A1",), parallel=True)
    scheduled = schedule_scop(matmul.scop, recipe)
    assert "microkernel 2x8" in str(scheduled.schedule)
    assert str(scheduled.schedule).index("C0") < str(scheduled.schedule).index("S1")


def test_full_panels_are_copied_apart_from_the_last_partial_one(matmul):
    # 11 columns in panels of 8: panel 0 is full, panel 1 holds 3 columns
    recipe = CpuRecipe(tile_sizes=(4, 8), register_tile_sizes=(2, 8), pack=("A1",))
    ast = build_ast(schedule_scop(matmul.scop, recipe).schedule).to_C_str()
    copy_code = ast[: ast.index("S")]  # the copy nests come first
    assert copy_code.count("C0(") == 2  # the isolated full panel, then the rest
    assert "c2 <= 7" in copy_code  # constant inner bound: the full panel vectorises


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        (CpuRecipe(tile_sizes=(4, 8), register_tile_sizes=(3, 8)), "multiple"),
        (CpuRecipe(tile_sizes=(0, 8), register_tile_sizes=(2, 8)), "multiple"),
        (CpuRecipe(tile_sizes=(4, 8), register_tile_sizes=(2, 8), pack=("A9",)), "A9"),
        (CpuRecipe(pack=("A1",)), "register tile"),
        (CpuRecipe(pad=True), "field pad = True is invalid; allowed: false"),
        (CpuRecipe(algorithm="winograd"), "field algorithm = 'winograd' is invalid; allowed: direct, im2col"),
        (CpuRecipe(register_tile_sizes=(2,)), "register_tile_sizes"),
    ],
)
def test_bad_data_layout_requests_raise_schedule_errors(matmul, recipe, message):
    with pytest.raises(ScheduleError, match=message):
        schedule_scop(matmul.scop, recipe)


def test_recipe_json_round_trip_keeps_the_new_fields():
    recipe = CpuRecipe(tile_sizes=(96, 256), register_tile_sizes=(6, 16), pack=("A1",), pad=True, algorithm="im2col")
    assert ScheduleRecipe.from_json(recipe.to_json()) == recipe
    assert "regtile 6x16" in recipe.describe() and "im2col" in recipe.describe()


def _prefix_sum_of_products() -> Scop:
    """``C[d0] += A[r0] * B[r0]`` for ``r0 <= d0``: its guard is no bound of a read."""
    write = Access.of("C", "d0")
    init = Statement("S0", ("d0",), (4,), write, Constant(0.0))
    product = Binary("mul", Load(Access.of("A", "r0")), Load(Access.of("B", "r0")))
    update = Statement("S1", ("d0", "r0"), (4, 4), write, Binary("add", Load(write), product), constraints=("r0 <= d0",))
    arrays = (ArrayInfo("A", (4,), "float32", "input"), ArrayInfo("B", (4,), "float32", "input"), ArrayInfo("C", (4,), "float32", "output"))
    return Scop("prefix", (init, update), arrays)


def test_padding_is_offered_and_accepted_only_where_it_applies(conv):
    """Guards that do more than keep affine reads in bounds (a prefix sum's ``r0 <= d0``)
    cannot be padded away: neither the search space nor the validator lets such a recipe
    reach code generation. A depthwise convolution with a channel multiplier reads its input
    at ``floor(c / 2)``, inside the channel axis: only its window axes are padded."""
    prefix = _prefix_sum_of_products()
    assert not can_zero_pad(prefix) and SearchSpace.for_scop(prefix, 2).choices("pad") == (False,)
    with pytest.raises(ScheduleError, match="recipe field pad = True is invalid"):
        validate_recipe(prefix, CpuRecipe(pad=True))
    assert can_zero_pad(conv.scop) and SearchSpace.for_scop(conv.scop, 2).choices("pad") == (False, True)
    depthwise = kernels_of(graph_depthwise((1, 5, 4, 3), multiplier=2, seed=5))[0]
    assert can_zero_pad(depthwise.scop) and SearchSpace.for_scop(depthwise.scop, 2).choices("pad") == (False, True)
    scop = apply_data_layout(depthwise.scop, CpuRecipe(pad=True))
    (padded,) = [a for a in scop.arrays if a.role == SCRATCH]
    assert padded.shape == (1, 7, 6, 3)  # height and width padded, channels not
    assert not anchor_statement(scop).constraints
    _check_against_reference(depthwise, scop)


def test_copies_are_data_layout_copies_whose_iterators_keep_the_anchor_roles(conv):
    """im2col gathers ``X_col[n, oh, ow, kh, kw, c]`` over the anchor's own iterators: they keep
    their roles there (a GPU launch of the copy maps its output iterators only); a padded
    copy's iterators index the padded array."""
    output, reduction = IteratorRole.OUTPUT, IteratorRole.REDUCTION
    scop = apply_data_layout(conv.scop, CpuRecipe(algorithm="im2col"))
    pad_zero, pad_copy, gather = copy_statements(scop)
    assert all(copy.copy_kind is CopyKind.DATA_LAYOUT and copy.op == "" for copy in (pad_zero, pad_copy, gather))
    assert pad_zero.roles == pad_copy.roles == (output,) * 4
    anchor = anchor_statement(conv.scop)  # [n, oh, ow, o] x [kh, kw, c]; the window does not read o
    assert gather.iterators == anchor.iterators[:3] + anchor.iterators[4:] and gather.roles == (output,) * 3 + (reduction,) * 3
    assert [s.name for s in scop.statements if s.copy_kind is None] == [s.name for s in conv.scop.statements]
