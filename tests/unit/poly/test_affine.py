"""Affine expressions: one type for access indices and for the code generators' address analysis."""

from __future__ import annotations

import islpy as isl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polytf.poly.affine import AffineExpr, FloorDiv, Modulo, affine_of_ast, index_affine, quotient_affine, substitute


def _ast_expression(text: str) -> isl.AstExpr:
    """The isl AST expression of ``text`` over the parameters it names (``[c0, c1] -> { [2*c0 + c1] }``)."""
    build = isl.AstBuild.from_context(isl.Set("[c0, c1] -> { : }"))
    return build.expr_from_pw_aff(isl.PwAff(f"[c0, c1] -> {{ [{text}] }}"))


def test_arithmetic_keeps_terms_sorted_and_drops_zero_coefficients():
    h = AffineExpr.of("h")
    kh = AffineExpr.of("kh")
    total = kh + h * 2 - 1
    assert total == AffineExpr.combine((2, "h"), (1, "kh"), constant=-1)
    assert total.terms == (("h", 2), ("kh", 1)) and total.to_isl() == "2*h + kh - 1"
    assert (total - total) == AffineExpr() and (total - total).is_constant
    assert total * 0 == AffineExpr() and 3 * h == AffineExpr((("h", 3),), 0)
    assert total.evaluate({"h": 5, "kh": 2}) == 11


def test_floor_division_is_exact_only_when_every_coefficient_divides():
    form = AffineExpr((("c0", 16),), 5)
    assert form.floor_divided(16) == AffineExpr((("c0", 1),), 0)
    assert AffineExpr((("c0", 3),), 0).floor_divided(16) is None


def test_ast_expressions_read_as_affine_expressions():
    assert affine_of_ast(_ast_expression("2*c0 + c1 - 3"), {}) == AffineExpr.combine((2, "c0"), (1, "c1"), constant=-3)
    # a substituted identifier stands for its expression
    assert affine_of_ast(_ast_expression("c0 + 1"), {"c0": AffineExpr.of("t") * 4}) == AffineExpr.combine((4, "t"), constant=1)
    # min, max and division are not affine
    assert affine_of_ast(_ast_expression("floor(c0/4)"), {}) is None


def test_quasi_affine_indices_become_affine_inside_one_block():
    substitutions = {"d1": AffineExpr.combine((16, "c0"), (1, "c1"))}  # d1 = 16*c0 + c1
    inside = lambda form: (0, 15) if form == AffineExpr.of("c1") else None  # noqa: E731 - c1 in [0, 15]
    assert index_affine(FloorDiv(AffineExpr.of("d1"), 16), substitutions, inside) == AffineExpr.of("c0")
    assert index_affine(Modulo(AffineExpr.of("d1"), 16), substitutions, inside) == AffineExpr.of("c1")
    # c1 may cross a block of 16: no affine form
    assert index_affine(Modulo(AffineExpr.of("d1"), 16), substitutions, lambda form: (0, 31)) is None
    assert index_affine(AffineExpr.of("d1") + 2, substitutions, inside) == substitutions["d1"] + 2


def test_substitution_needs_every_name():
    assert substitute(AffineExpr.combine((2, "i"), constant=1), {"i": AffineExpr.of("c0")}) == AffineExpr.combine((2, "c0"), constant=1)
    with pytest.raises(KeyError):
        substitute(AffineExpr.of("j"), {})


def _merged(*parts: tuple[int, AffineExpr]) -> AffineExpr:
    """``sum(factor * part)`` by the general merge (a dictionary of coefficients, sorted,
    zeros dropped): the reference for the arithmetic's shortcuts."""
    total: dict[str, int] = {}
    constant = 0
    for factor, part in parts:
        for name, coefficient in part.terms:
            total[name] = total.get(name, 0) + factor * coefficient
        constant += factor * part.constant
    return AffineExpr(tuple(sorted((n, c) for n, c in total.items() if c)), constant)


_NAMES = ("c0", "c1", "c2", "%opaque1")
_EXPRESSIONS = st.builds(
    lambda coefficients, constant: AffineExpr.combine(*zip(coefficients, _NAMES), constant=constant),
    st.lists(st.integers(-3, 3), min_size=len(_NAMES), max_size=len(_NAMES)),
    st.integers(-20, 20),
)


@given(_EXPRESSIONS, _EXPRESSIONS)
def test_sums_and_differences_are_the_general_merge(lhs, rhs):
    # the shortcuts (an operand without terms, operands with the same terms) build the same
    # canonical expressions, term for term, as the merge
    for left, right in [(lhs, rhs), (lhs, AffineExpr.of(rhs.constant)), (AffineExpr.of(lhs.constant), rhs), (lhs, AffineExpr(lhs.terms, rhs.constant))]:
        assert left + right == _merged((1, left), (1, right))
        assert left - right == _merged((1, left), (-1, right))
        assert (left - right).terms == _merged((1, left), (-1, right)).terms


@given(_EXPRESSIONS, _EXPRESSIONS, _EXPRESSIONS, st.integers(-3, 3), st.integers(-3, 3))
def test_substitution_is_the_sum_of_scaled_replacements(first, second, third, a, b):
    expression = AffineExpr.combine((a, "i"), (b, "j"), (1, "k"), constant=7)
    substitutions = {"i": first, "j": second, "k": third}
    reference = _merged((1, AffineExpr.of(7)), *((c, substitutions[n]) for n, c in expression.terms))
    assert substitute(expression, substitutions) == reference


@given(_EXPRESSIONS, st.sampled_from([2, 4, 16]), st.integers(0, 40), st.integers(0, 40))
def test_quotients_are_the_divisible_part_and_the_bounded_remainder(numerator, divisor, low, span):
    def range_of(form):
        return None if span == 40 else (low + form.constant, low + span + form.constant)

    divisible = AffineExpr(tuple((n, c) for n, c in numerator.terms if c % divisor == 0))
    remainder = _merged((1, numerator), (-1, divisible))
    bounds = range_of(remainder)
    floor, modulo = quotient_affine(numerator, divisor, True, range_of), quotient_affine(numerator, divisor, False, range_of)
    if bounds is None or bounds[0] // divisor != bounds[1] // divisor:
        assert floor is None and modulo is None
        return
    q = bounds[0] // divisor
    assert floor == _merged((1, divisible.floor_divided(divisor)), (1, AffineExpr.of(q)))
    assert modulo == _merged((1, remainder), (-divisor, AffineExpr.of(q)))
    assert index_affine(FloorDiv(numerator, divisor), {n: AffineExpr.of(n) for n in _NAMES}, range_of) == floor
