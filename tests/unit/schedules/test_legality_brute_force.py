"""Recipes drawn directly (not through the pre-filtered search space): every transform at
random, degenerate tiles equal to the extents, register tiles, packing of any array (the
written one included), zero-padding, im2col and parallel loops, on tiny kernels.

Invalid recipes are refused by the validator; legality's verdict on the rest is compared
with a brute-force check that runs the loop AST instance by instance the way the
generated code does (:mod:`brute_force`); legal recipes must also compute the numpy
reference's result on 2 threads. ``hypothesis.event`` labels each branch (run pytest with
``--hypothesis-show-statistics``), and the test asserts that both the legal and the
illegal branch occurred."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from brute_force import execute
from hand_built_graphs import build_graph, graph_conv_bias_relu, graph_matmul_bias_relu, graph_softmax, kernels_of, placeholder
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from roundtrip import ILLEGAL, INVALID, LEGAL, ScopKernel, roundtrip

from polytf.graph import Node
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.schedules.builder import build_ast, schedule_scop
from polytf.schedules.recipe import CpuRecipe
from polytf.schedules.structure import anchor_statement, shared_band_depth


def _reduction(op, shape, axes, keep):
    graph = build_graph(
        [
            placeholder("x", shape),
            Node("axes", "Const", attrs={"dtype": "int32", "value": np.array(axes, np.int32)}),
            Node("reduce", op, ("x:0", "axes:0"), attrs={"keep_dims": keep}),
        ],
        ["reduce:0"],
    )
    return kernels_of(graph)[0]


def _running_sum():
    """Fused ``B[d0, :] = 2 * A[d0, :]`` and, for ``d0 >= 1``, ``B[d0, :] += B[d0 - 1, :]``
    (a running sum over rows): the d0 loop carries a dependence, the d1 loop does not, so
    a parallel d0 loop is illegal where a parallel d1 loop is legal."""
    row = Access.of("B", "d0", "d1")
    previous = Access("B", (AffineExpr.combine((1, "d0"), constant=-1), AffineExpr.of("d1")))
    scale = Statement("S0", ("d0", "d1"), (3, 4), row, Binary("mul", Constant(2.0), Load(Access.of("A", "d0", "d1"))))
    accumulate = Statement("S1", ("d0", "d1"), (3, 4), row, Binary("add", Load(row), Load(previous)), constraints=("d0 >= 1",))
    arrays = (ArrayInfo("A", (3, 4), "float32", "input"), ArrayInfo("B", (3, 4), "float32", "output"))
    return ScopKernel(Scop("running_sum", (scale, accumulate), arrays))


KERNELS = {
    "running_sum": _running_sum,
    "matmul": lambda: kernels_of(graph_matmul_bias_relu(3, 5, 4))[0],
    "conv_same": lambda: kernels_of(graph_conv_bias_relu(h=4, w=3, c=2, o=3, stride=1))[0],
    "max_middle_axis": lambda: _reduction("Max", (4, 9, 10), [1], True),
    "sum_two_axes": lambda: _reduction("Sum", (2, 3, 4), [1, 2], False),
    "softmax": lambda: kernels_of(graph_softmax(2, 5))[0],
}
_CACHE: dict = {}


def kernel_named(name):
    if name not in _CACHE:
        _CACHE[name] = KERNELS[name]()
    return _CACHE[name]


@st.composite
def direct_recipes(draw, kernel):
    """Any recipe of the right shape: most of them valid, many of them illegal, some
    invalid (one field corrupted: a tile one past the extent, a register tile too large, an
    unroll or vector width out of range; or packing a written array, padding or im2col
    where they do not apply)."""
    scop = kernel.scop
    depth = shared_band_depth(scop)
    anchor = anchor_statement(scop)
    extents = dict(zip(anchor.iterators, anchor.extents))
    registered = draw(st.booleans())
    registers = [draw(st.integers(0, min(4, extent))) if registered else 0 for extent in anchor.extents[:depth]]
    tiles = [
        r * draw(st.integers(1, -(-extent // r))) if r else draw(st.one_of(st.just(extent), st.integers(0, extent)))
        for r, extent in zip(registers, anchor.extents)
    ]
    corrupt = draw(st.sampled_from([None] * 8 + ["tile_sizes", "register_tile_sizes", "unroll", "vector_width"]))
    if corrupt in ("tile_sizes", "register_tile_sizes") and depth:
        k = draw(st.integers(0, depth - 1))
        if corrupt == "tile_sizes":
            tiles[k] = -(-anchor.extents[k] // registers[k] + 1) * registers[k] if registers[k] else anchor.extents[k] + 1
        else:
            registers[k] = tiles[k] = 64  # more than any extent here, even rounded up to the lanes
    arrays = sorted({a.array for a in anchor.reads} | {anchor.write.array} | {a.name for a in scop.arrays})
    return CpuRecipe(
        tile_sizes=tuple(tiles),
        tile_order=tuple(draw(st.permutations(range(depth)))),
        reduction_tile_sizes=tuple(draw(st.one_of(st.just(extents[r]), st.integers(0, extents[r]))) for r in anchor.reduction_iterators),
        point_order=tuple(draw(st.permutations(anchor.iterators))),
        vector_width=3 if corrupt == "vector_width" else draw(st.sampled_from([0, 1, 4, 8])),
        unroll=33 if corrupt == "unroll" else draw(st.sampled_from([0, 2])),
        parallel=draw(st.sampled_from([False, True, True])) and depth > 0,
        register_tile_sizes=tuple(registers) if any(registers) else (),
        pack=tuple(draw(st.permutations(arrays))[: draw(st.integers(1, 2))]) if draw(st.integers(0, 2)) == 0 else (),
        pad=draw(st.integers(0, 3 if anchor.constraints else 15)) == 0,
        algorithm=draw(st.sampled_from(["direct"] * (3 if anchor.constraints else 15) + ["im2col"])),
    )


def _distributes_a_loop(kernel, recipe) -> bool:
    scheduled = schedule_scop(kernel.scop, recipe, check=False)
    execution = execute(build_ast(scheduled.schedule))
    return any(value is not None for value in execution.parallel_iteration.values())


def _check(kernel, recipe) -> str:
    """Round-trip one recipe; return its verdict after asserting it is consistent."""
    result = roundtrip(kernel, recipe, threads=2, brute_force=True)
    if result.verdict == INVALID:
        event(f"invalid: {result.field}")
        return INVALID
    if result.verdict == LEGAL:
        event("legal, parallel" if recipe.parallel else "legal, serial")
        assert result.brute_force == (), f"legality accepted {recipe.to_json()}, brute force finds: {result.brute_force[:3]}"
        assert result.error is None, f"legal {recipe.to_json()} computed a wrong result: {result.error}"
        return LEGAL
    assert result.verdict == ILLEGAL
    if result.brute_force:
        event("illegal, parallel loop (brute force agrees)" if "parallel loop" in result.message else "illegal, reversed (brute force agrees)")
        return ILLEGAL
    # Legality is conservative where isl did not generate the marked loop (the code then
    # runs that part on one thread, so no race shows up): the same recipe run serially
    # must then be legal.
    event("illegal, marked loop not generated (conservative)")
    assert recipe.parallel and not _distributes_a_loop(kernel, recipe), f"legality refused {recipe.to_json()}: {result.message}"
    serial = roundtrip(kernel, CpuRecipe(**{**recipe.__dict__, "parallel": False}), brute_force=True)
    assert serial.verdict == LEGAL and serial.brute_force == ()
    return ILLEGAL


@pytest.fixture(scope="module")
def verdicts():
    """Counts the verdicts of the property test; once it is done, asserts that both the legal
    and the illegal branch (and the validator's) were exercised."""
    seen: Counter = Counter()
    yield seen
    assert seen[LEGAL] and seen[ILLEGAL] and seen[INVALID], f"every branch must occur: {dict(seen)}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_legality_agrees_with_brute_force(verdicts, data):
    # the running sum, the one kernel with a loop-carried dependence, twice as often
    name = data.draw(st.sampled_from([*sorted(KERNELS), "running_sum"]), label="kernel")
    kernel = kernel_named(name)
    recipe = data.draw(direct_recipes(kernel), label="recipe")
    verdicts[_check(kernel, recipe)] += 1
