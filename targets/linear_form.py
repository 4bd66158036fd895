"""Linear forms over loop iterators, for address analysis in the code generator.

A :class:`LinearForm` is ``sum(coefficient * name) + constant`` where the names are isl
AST loop iterators (or placeholders for values the generator computed). The micro-kernel
emitter evaluates statement iterators and array offsets as linear forms so that it knows,
at generation time, which addresses are equal, contiguous, or invariant in a loop. Floor
division and modulo by ``c`` stay exact when every coefficient is a multiple of ``c``:
``floor((c*X + k)/c) = X + floor(k/c)`` and ``(c*X + k) mod c = k mod c``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import islpy as isl

from polytf.poly.expression import AffineExpr, FloorDiv, Modulo


@dataclass(frozen=True)
class LinearForm:
    """``sum(coefficient * name) + constant`` (integers).

    Attributes:
        terms: ``(name, coefficient)`` pairs with non-zero coefficients, sorted by name.
        constant: the constant term.
    """

    terms: tuple[tuple[str, int], ...] = ()
    constant: int = 0

    @staticmethod
    def of_name(name: str) -> LinearForm:
        return LinearForm(((name, 1),), 0)

    @staticmethod
    def of_constant(value: int) -> LinearForm:
        return LinearForm((), int(value))

    def scaled(self, factor: int) -> LinearForm:
        if factor == 0:
            return LinearForm()
        return LinearForm(tuple((n, c * factor) for n, c in self.terms), self.constant * factor)

    def __add__(self, other: LinearForm | int) -> LinearForm:
        if isinstance(other, int):
            return LinearForm(self.terms, self.constant + other)
        total = dict(self.terms)
        for name, c in other.terms:
            total[name] = total.get(name, 0) + c
        return LinearForm(tuple(sorted((n, c) for n, c in total.items() if c)), self.constant + other.constant)

    def __sub__(self, other: LinearForm | int) -> LinearForm:
        if isinstance(other, int):
            return self + (-other)
        return self + other.scaled(-1)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    def names(self) -> set[str]:
        return {n for n, _ in self.terms}

    def floor_divided(self, divisor: int) -> LinearForm | None:
        """``floor(self / divisor)`` when it is exactly linear, else ``None``."""
        if all(c % divisor == 0 for _, c in self.terms):
            return LinearForm(tuple((n, c // divisor) for n, c in self.terms), self.constant // divisor)
        return None

    def modulo(self, divisor: int) -> LinearForm | None:
        """``self mod divisor`` when it is a constant, else ``None``."""
        if all(c % divisor == 0 for _, c in self.terms):
            return LinearForm((), self.constant % divisor)
        return None


def linear_form_of_ast(expression: isl.AstExpr, forms: Mapping[str, LinearForm]) -> LinearForm | None:
    """The isl AST expression as a linear form, or ``None`` when it is not linear (min, max,
    divisions, conditions). Identifiers in ``forms`` are replaced by their forms; other
    identifiers stand for themselves."""
    kind = expression.get_type()
    if kind == isl.ast_expr_type.int:
        return LinearForm.of_constant(expression.int_get_val().to_python())
    if kind == isl.ast_expr_type.id:
        name = expression.id_get_id().get_name()
        return forms.get(name, LinearForm.of_name(name))
    if kind != isl.ast_expr_type.op:
        return None
    op = expression.op_get_type()
    T = isl.ast_expr_op_type
    arguments = [linear_form_of_ast(expression.op_get_arg(i), forms) for i in range(expression.op_get_n_arg())]
    if any(a is None for a in arguments):
        return None
    if op == T.add:
        return arguments[0] + arguments[1]
    if op == T.sub:
        return arguments[0] - arguments[1]
    if op == T.minus:
        return arguments[0].scaled(-1)
    if op == T.mul:
        lhs, rhs = arguments
        if lhs.is_constant:
            return rhs.scaled(lhs.constant)
        if rhs.is_constant:
            return lhs.scaled(rhs.constant)
    return None


def substitute(expression: AffineExpr, forms: Mapping[str, LinearForm]) -> LinearForm:
    """An affine expression over statement iterators, with each iterator replaced by its form."""
    result = LinearForm.of_constant(expression.constant)
    for name, coefficient in expression.terms:
        result = result + forms[name].scaled(coefficient)
    return result


def index_form(index: AffineExpr | FloorDiv | Modulo, forms: Mapping[str, LinearForm], range_of: Callable[[LinearForm], tuple[int, int] | None]) -> LinearForm | None:
    """One (quasi-affine) array index as a linear form, or None when it is not linear.

    ``floor(n / d)`` and ``n mod d`` are linear when every coefficient of ``n`` is a multiple
    of ``d``, or when ``n = d*X + R`` with ``R`` known by ``range_of`` (constant loop bounds)
    to stay inside one block of ``d``: then they are ``X + q`` and ``R - d*q``."""
    if isinstance(index, AffineExpr):
        return substitute(index, forms)
    numerator = substitute(index.numerator, forms)
    divisor = index.divisor
    floor = isinstance(index, FloorDiv)
    divisible = LinearForm(tuple((n, c) for n, c in numerator.terms if c % divisor == 0))
    remainder = numerator - divisible
    bounds = range_of(remainder)
    if bounds is None or bounds[0] // divisor != bounds[1] // divisor:
        return None
    q = bounds[0] // divisor
    return divisible.floor_divided(divisor) + q if floor else remainder - divisor * q
