"""Sample slicing: a Scop at batch N is its base at batch b over N / b slices exactly when
each slice of its iterations touches only its slice of the sliced arrays
(:mod:`polytf.poly.sample_slicing`). Hand-built Scops, one condition each."""

from __future__ import annotations

from polytf.poly.expression import Access, Binary, Load
from polytf.poly.sample_slicing import SampleSlicing, sample_slicing
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement


def _relu_scop(rows: int, weight_index=(0, "d1"), weight_rows: int = 1, constraints: tuple[str, ...] = (), output_rows: int | None = None) -> Scop:
    """``Y[d0, d1] = X[d0, d1] + W[weight_index]`` over ``rows`` x 4."""
    statement = Statement(
        "S0",
        ("d0", "d1"),
        (rows, 4),
        Access.of("Y", "d0", "d1"),
        Binary("add", Load(Access.of("X", "d0", "d1")), Load(Access.of("W", *weight_index))),
        constraints=constraints,
    )
    arrays = (
        ArrayInfo("X", (rows, 4), "float32", "input"),
        ArrayInfo("W", (weight_rows, 4), "float32", "input"),
        ArrayInfo("Y", (output_rows or rows, 4), "float32", "output"),
    )
    return Scop("k0_add", (statement,), arrays, (("add", "AddV2"),))


def test_an_elementwise_kernel_runs_on_slices_and_the_weight_is_read_whole():
    assert sample_slicing(_relu_scop(6), _relu_scop(2)) == SampleSlicing(3, (2 * 4 * 4, 0, 2 * 4 * 4))


def test_a_base_of_one_row_may_index_a_broadcast_weight_by_the_batch_iterator():
    # lowering at batch 1 indexes a [1, 4] operand by d0 where it indexes it by 0 at batch N
    assert sample_slicing(_relu_scop(5), _relu_scop(1, weight_index=("d0", "d1"))) == SampleSlicing(5, (16, 0, 16))


def test_the_same_size_or_a_size_that_is_not_a_multiple_is_no_slicing():
    assert sample_slicing(_relu_scop(2), _relu_scop(2)) is None
    assert sample_slicing(_relu_scop(5), _relu_scop(2)) is None


def test_an_array_of_every_size_read_by_the_batch_iterator_mixes_samples():
    # W has 8 rows at both sizes: row d0 of W belongs to no slice
    assert sample_slicing(_relu_scop(4, weight_index=("d0", "d1"), weight_rows=8), _relu_scop(2, weight_index=("d0", "d1"), weight_rows=8)) is None


def test_a_constraint_on_the_batch_iterator_is_refused():
    assert sample_slicing(_relu_scop(4, constraints=("d0 <= 2",)), _relu_scop(1, constraints=("d0 <= 2",))) is None


def test_a_statement_over_fewer_rows_than_its_arrays_slice_is_refused():
    # arrays of 2 rows per slice, iterations of 1: slice k of the rows is not slice k of the iterations
    assert sample_slicing(_relu_scop(4, output_rows=8), _relu_scop(2, output_rows=4)) is None


def _scop(statement: Statement, arrays: tuple[ArrayInfo, ...]) -> Scop:
    return Scop("k1", (statement,), arrays, (("n", "Op"),))


def test_a_reduction_over_the_batch_is_refused():
    def sum_over_batch(rows: int) -> Scop:
        update = Binary("add", Load(Access.of("Y", "d0")), Load(Access.of("X", "r0", "d0")))
        statement = Statement("S0", ("d0", "r0"), (4, rows), Access.of("Y", "d0"), update)
        return _scop(statement, (ArrayInfo("X", (rows, 4), "float32", "input"), ArrayInfo("Y", (4,), "float32", "output")))

    assert sample_slicing(sum_over_batch(6), sum_over_batch(2)) is None


def test_a_transpose_that_moves_the_batch_is_refused():
    def transpose(rows: int) -> Scop:
        statement = Statement("S0", ("d0", "d1"), (rows, 4), Access.of("Y", "d1", "d0"), Load(Access.of("X", "d0", "d1")))
        return _scop(statement, (ArrayInfo("X", (rows, 4), "float32", "input"), ArrayInfo("Y", (4, rows), "float32", "output")))

    assert sample_slicing(transpose(6), transpose(2)) is None


def test_rows_that_merge_the_batch_with_a_sequence_are_sliced_by_whole_sequences():
    # [N * S, D] rows, S = 3: slice k is rows 3k .. 3k + 2
    def rows(batch: int) -> Scop:
        statement = Statement("S0", ("d0", "d1"), (3 * batch, 2), Access.of("Y", "d0", "d1"), Load(Access.of("X", "d0", "d1")))
        return _scop(statement, (ArrayInfo("X", (3 * batch, 2), "float32", "input"), ArrayInfo("Y", (3 * batch, 2), "float32", "output")))

    assert sample_slicing(rows(4), rows(1)) == SampleSlicing(4, (24, 24))
