"""Iterator roles and copy kinds are typed fields of a statement, not iterator names or op strings."""

from __future__ import annotations

import pytest
from hand_built_graphs import graph_conv_bias_relu, graph_matmul_bias_relu, kernels_of

from polytf.errors import PolyhedralError
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, IteratorRole, Statement
from polytf.schedules.structure import anchor_statement, main_statements, shared_band_depth

OUTPUT, REDUCTION = IteratorRole.OUTPUT, IteratorRole.REDUCTION


def _matmul(i: str, j: str, k: str) -> tuple[Statement, Statement]:
    """``C[i, j] = 0`` and ``C[i, j] += A[i, k] * B[k, j]`` over iterators named ``i, j, k``."""
    write = Access.of("C", i, j)
    init = Statement("S0", (i, j), (4, 6), write, Constant(0.0), node="mm", op="MatMul")
    update = Binary("add", Load(write), Binary("mul", Load(Access.of("A", i, k)), Load(Access.of("B", k, j))))
    return init, Statement("S1", (i, j, k), (4, 6, 5), write, update, node="mm", op="MatMul")


def test_a_lowered_contraction_has_output_and_reduction_iterators():
    update = anchor_statement(kernels_of(graph_matmul_bias_relu(m=7, k=13, n=11))[0].scop)
    assert update.roles == (OUTPUT, OUTPUT, REDUCTION)
    assert update.output_iterators == update.iterators[:2] and update.reduction_iterators == update.iterators[2:]
    assert update.copy_kind is None and update.op == "MatMul"
    convolution = anchor_statement(kernels_of(graph_conv_bias_relu())[0].scop)  # [N, H, W, O] x [KH, KW, C]
    assert convolution.roles == (OUTPUT,) * 4 + (REDUCTION,) * 3


def test_roles_do_not_depend_on_iterator_names():
    for names in (("d0", "d1", "r0"), ("i", "j", "k"), ("r0", "r1", "d0")):
        init, update = _matmul(*names)
        assert init.roles == (OUTPUT, OUTPUT)
        assert update.roles == (OUTPUT, OUTPUT, REDUCTION)
        assert update.output_iterators == names[:2] and update.reduction_iterators == names[2:]
        arrays = (ArrayInfo("A", (4, 5), "float32", "input"), ArrayInfo("B", (5, 6), "float32", "input"), ArrayInfo("C", (4, 6), "float32", "output"))
        assert shared_band_depth(Scop("mm", (init, update), arrays)) == 2


def test_an_iterator_the_write_does_not_use_is_a_reduction():
    # a row sum Y[d0] = Y[d0] + X[d0, r0]; and a statement whose leading iterator is unused
    write = Access.of("Y", "d0")
    total = Statement("S", ("d0", "r0"), (3, 4), write, Binary("add", Load(write), Load(Access.of("X", "d0", "r0"))))
    assert total.roles == (OUTPUT, REDUCTION)
    broadcast = Statement("T", ("a", "b"), (3, 4), Access.of("Z", "b"), Load(Access.of("X", "a", "b")))
    assert broadcast.roles == (REDUCTION, REDUCTION) and broadcast.output_iterators == ()


def test_explicit_roles_are_kept_and_checked():
    write = Access.of("P", "r0", "d1")
    copy = Statement("C0", ("r0", "d1"), (5, 6), write, Load(Access.of("B", "r0", "d1")), roles=(REDUCTION, OUTPUT), copy_kind=CopyKind.DATA_LAYOUT)
    assert copy.roles == (REDUCTION, OUTPUT) and copy.output_iterators == ("d1",) and copy.reduction_iterators == ("r0",)
    with pytest.raises(PolyhedralError, match="2 iterators but 1 roles"):
        Statement("C1", ("r0", "d1"), (5, 6), write, Load(Access.of("B", "r0", "d1")), roles=(OUTPUT,))


def test_copy_statements_are_marked_by_kind_not_by_op():
    init, update = _matmul("d0", "d1", "r0")
    copy = Statement("C0", ("d0", "r0"), (4, 5), Access.of("P", "d0", "r0"), Load(Access.of("A", "d0", "r0")), copy_kind=CopyKind.DATA_LAYOUT)
    arrays = (
        ArrayInfo("A", (4, 5), "float32", "input"),
        ArrayInfo("B", (5, 6), "float32", "input"),
        ArrayInfo("C", (4, 6), "float32", "output"),
        ArrayInfo("P", (4, 5), "float32", "scratch"),
    )
    scop = Scop("mm", (copy, init, update), arrays)
    assert main_statements(scop) == (init, update) and anchor_statement(scop) == update
    assert copy.op == "" and copy != Statement(copy.name, copy.iterators, copy.extents, copy.write, copy.value)
