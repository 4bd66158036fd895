"""Size symbols and the symbolic signature: parsing, binding a call's sizes, and every way a
call's sizes can be refused (a size of 0, out of range, two inputs disagreeing, a fixed
dimension or a rank that differs), each a SizeError naming the input and the symbol."""

from __future__ import annotations

import pytest

from polytf.errors import ShapeError, SizeError
from polytf.graph.size_symbols import SizeSymbol, SymbolicSignature, default_symbol_name, parse_dimension

SIGNATURE = SymbolicSignature(
    {"ids": ("N", "S"), "mask": ("N", "S"), "image": ("N", 8, 3)},
    {"N": SizeSymbol("N", 1, 32), "S": SizeSymbol("S")},
)


@pytest.mark.parametrize(
    ("text", "symbol"),
    [("N", SizeSymbol("N")), ("N=1..64", SizeSymbol("N", 1, 64)), ("batch=..8", SizeSymbol("batch", 1, 8)), ("S = 8..", SizeSymbol("S", 8, None))],
)
def test_a_symbol_is_parsed_from_its_text(text, symbol):
    assert SizeSymbol.parse(text) == symbol
    assert SizeSymbol.parse(str(symbol)) == symbol  # str() gives text that parses back


@pytest.mark.parametrize(("text", "words"), [("N=0..4", "start at 1"), ("N=5..4", "empty"), ("3N", "not a size"), ("N=a..b", "not a size")])
def test_a_bad_symbol_text_is_a_shape_error(text, words):
    with pytest.raises(ShapeError, match=words):
        SizeSymbol.parse(text)


def test_a_dimension_is_a_size_or_a_symbol():
    assert parse_dimension(7, "x") == 7
    assert parse_dimension("N=1..4", "x") == SizeSymbol("N", 1, 4)
    with pytest.raises(ShapeError, match="x: dimension -1 is negative"):
        parse_dimension(-1, "x")


def test_unnamed_dimensions_are_named_by_axis():
    assert [default_symbol_name(axis) for axis in range(4)] == ["N", "S", "D2", "D3"]


def test_binding_reads_each_symbol_once_from_the_arrays():
    sizes = SIGNATURE.bind({"ids": (3, 17), "mask": (3, 17), "image": (3, 8, 3)})
    assert sizes == {"N": 3, "S": 17}
    assert SIGNATURE.concrete_shapes(sizes) == {"ids": (3, 17), "mask": (3, 17), "image": (3, 8, 3)}


@pytest.mark.parametrize(
    ("shapes", "input_name", "symbol", "words"),
    [
        ({"ids": (0, 5), "mask": (0, 5)}, "ids", "N", "size 0 on axis 0"),
        ({"ids": (33, 5), "mask": (33, 5)}, "ids", "N", r"N = 33 on axis 0, outside its range 1\.\.32"),
        ({"ids": (2, 5), "mask": (3, 5)}, "mask", "N", "inputs 'ids' and 'mask' disagree on N: 2 and 3"),
        ({"ids": (2, 5), "mask": (2, 6)}, "mask", "S", "disagree on S: 5 and 6"),
        ({"image": (2, 9, 3)}, "image", None, "axis 1 must be 8"),
        ({"image": (2, 8)}, "image", None, "of rank 2"),
    ],
)
def test_a_call_that_does_not_fit_is_refused_naming_input_and_symbol(shapes, input_name, symbol, words):
    with pytest.raises(SizeError, match=words) as raised:
        SIGNATURE.bind(shapes)
    assert (raised.value.input_name, raised.value.symbol) == (input_name, symbol)
    assert input_name in str(raised.value)


def test_sizes_given_by_name_are_checked():
    with pytest.raises(SizeError, match="no size for symbol S"):
        SIGNATURE.concrete_shapes({"N": 1})
    with pytest.raises(SizeError, match="has no size symbol M"):
        SIGNATURE.check_sizes({"N": 1, "S": 1, "M": 2})
    with pytest.raises(SizeError, match=r"N = 40 is outside its range 1\.\.32"):
        SIGNATURE.check_sizes({"N": 40, "S": 1})


def test_the_size_grid_is_every_combination_of_the_buckets():
    assert SIGNATURE.size_grid({"N": (1, 8), "S": (64, 128)}) == [{"N": 1, "S": 64}, {"N": 1, "S": 128}, {"N": 8, "S": 64}, {"N": 8, "S": 128}]
    assert SIGNATURE.size_grid({"N": (4,)}) == [{"N": 4, "S": 1}]  # S left out: its smallest size
    with pytest.raises(SizeError, match="outside its range"):
        SIGNATURE.size_grid({"N": (64,)})
    with pytest.raises(SizeError, match="no size symbol Q"):
        SIGNATURE.size_grid({"Q": (1,)})


def test_a_signature_names_exactly_its_symbols():
    with pytest.raises(ShapeError, match="name symbols"):
        SymbolicSignature({"x": ("N", 3)}, {})
    assert SymbolicSignature({"x": (2, 3)}).is_static
