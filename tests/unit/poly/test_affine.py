"""Affine expressions: one type for access indices and for the code generators' address analysis."""

from __future__ import annotations

import islpy as isl
import pytest

from polytf.poly.affine import AffineExpr, FloorDiv, Modulo, affine_of_ast, index_affine, substitute


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
