"""Affine and quasi-affine index expressions over loop iterators.

An index of an array access is affine in the statement's iterators
(``A[2*h + kh - 1]``), so that isl can reason about it exactly; a floor division or a
non-negative remainder by a positive constant keeps it quasi-affine (isl manual,
"Integer Division"). One type, :class:`AffineExpr`, is used wherever such a sum of
integer multiples of names plus a constant appears: the indices of a Scop's accesses
(names are statement iterators) and the addresses the code generators analyse (names are
isl AST loop iterators, or placeholders for values the generator computed). The code
generators read an address as an :class:`AffineExpr` to know, at generation time, which
addresses are equal, contiguous, or invariant in a loop (:func:`affine_of_ast`,
:func:`index_affine`). Floor division and modulo by ``c`` stay exact when every
coefficient is a multiple of ``c``: ``floor((c*X + k)/c) = X + floor(k/c)`` and
``(c*X + k) mod c = k mod c``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from polytf.islpy_on_demand import isl


@dataclass(frozen=True)
class AffineExpr:
    """``sum(coefficient * name) + constant`` over named integer variables.

    Attributes:
        terms: ``(name, coefficient)`` pairs with non-zero coefficients, sorted by name.
        constant: the constant term.
    """

    terms: tuple[tuple[str, int], ...] = ()
    constant: int = 0

    @staticmethod
    def of(value: AffineLike) -> AffineExpr:
        """Coerce a name, an int or an AffineExpr to an AffineExpr.

        Raises:
            TypeError: ``value`` is none of those.
        """
        if isinstance(value, AffineExpr):
            return value
        if isinstance(value, (int, np.integer)):
            return AffineExpr((), int(value))
        if isinstance(value, str):
            return AffineExpr(((value, 1),), 0)
        raise TypeError(f"not an affine expression: {value!r}")

    @staticmethod
    def combine(*parts: tuple[int, AffineLike], constant: int = 0) -> AffineExpr:
        """``sum(coefficient * part) + constant``, e.g. ``combine((2, "h"), (1, "kh"), constant=-1)``."""
        total: dict[str, int] = {}
        const = constant
        for coefficient, part in parts:
            expr = AffineExpr.of(part)
            for name, c in expr.terms:
                total[name] = total.get(name, 0) + coefficient * c
            const += coefficient * expr.constant
        return AffineExpr(tuple(sorted((n, c) for n, c in total.items() if c != 0)), const)

    def __add__(self, other: AffineLike) -> AffineExpr:
        """The sum, in the canonical form (terms sorted by name, no zero coefficient).

        Both operands are canonical (the invariant of ``terms``, which every operation here
        keeps), so when one of them has no terms the other's terms are already the sum's
        terms and the merge is skipped: ``sorted`` of sorted unique names with non-zero
        coefficients is the same tuple."""
        if isinstance(other, AffineExpr):
            if not other.terms:
                return AffineExpr(self.terms, self.constant + other.constant)
            if not self.terms:
                return AffineExpr(other.terms, self.constant + other.constant)
        elif isinstance(other, (int, np.integer)):
            return AffineExpr(self.terms, self.constant + int(other))
        else:
            other = AffineExpr.of(other)
        total = dict(self.terms)
        for name, c in other.terms:
            total[name] = total.get(name, 0) + c
        return AffineExpr(tuple(sorted((n, c) for n, c in total.items() if c)), self.constant + other.constant)

    def __radd__(self, other: AffineLike) -> AffineExpr:
        return self + other

    def __sub__(self, other: AffineLike) -> AffineExpr:
        """The difference. Of two expressions with the same terms (the lanes of a vector
        access, say) it is their constants' difference: every coefficient cancels, and the
        canonical form drops the zeros, as ``self + other * -1`` would."""
        if isinstance(other, AffineExpr):
            if other.terms == self.terms:
                return AffineExpr((), self.constant - other.constant)
            return self + other * -1
        if isinstance(other, (int, np.integer)):
            return self + (-int(other))
        return self + AffineExpr.of(other) * -1

    def __mul__(self, factor: int) -> AffineExpr:
        factor = int(factor)
        if factor == 0:
            return AffineExpr()
        return AffineExpr(tuple((n, c * factor) for n, c in self.terms), self.constant * factor)

    __rmul__ = __mul__

    @property
    def iterators(self) -> tuple[str, ...]:
        """The names with a non-zero coefficient, sorted."""
        return tuple(name for name, _ in self.terms)

    @property
    def is_constant(self) -> bool:
        """Whether no name has a non-zero coefficient."""
        return not self.terms

    def evaluate(self, point: Mapping[str, int]) -> int:
        return self.constant + sum(c * point[name] for name, c in self.terms)

    def coefficient(self, name: str) -> int:
        """The coefficient of ``name`` (0 when it does not appear)."""
        return next((c for n, c in self.terms if n == name), 0)

    def bounds(self, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int] | None:
        """The least and greatest value when each name lies in its inclusive range
        ``ranges[name] = (low, high)``, or None when a name has no range."""
        low = high = self.constant
        for name, coefficient in self.terms:
            limits = ranges.get(name)
            if limits is None:
                return None
            a, b = coefficient * limits[0], coefficient * limits[1]
            low, high = low + min(a, b), high + max(a, b)
        return low, high

    def floor_divided(self, divisor: int) -> AffineExpr | None:
        """``floor(self / divisor)`` when it is exactly affine (every coefficient a multiple
        of ``divisor``), else None."""
        if all(c % divisor == 0 for _, c in self.terms):
            return AffineExpr(tuple((n, c // divisor) for n, c in self.terms), self.constant // divisor)
        return None

    def to_isl(self) -> str:
        """isl text, e.g. ``"2*h + kh - 1"``."""
        parts = [name if c == 1 else f"{c}*{name}" for name, c in self.terms]
        if self.constant or not parts:
            parts.append(str(self.constant))
        return " + ".join(parts).replace("+ -", "- ")

    def __str__(self) -> str:
        return self.to_isl()


AffineLike = AffineExpr | str | int


@dataclass(frozen=True)
class _DivisionIndex:
    """``numerator`` divided by a positive constant ``divisor`` (quasi-affine index,
    isl manual, "Integer Division")."""

    numerator: AffineExpr
    divisor: int

    def __post_init__(self) -> None:
        if self.divisor <= 0:
            raise ValueError(f"{type(self).__name__} needs a positive divisor, not {self.divisor}")

    @property
    def iterators(self) -> tuple[str, ...]:
        return self.numerator.iterators


@dataclass(frozen=True)
class FloorDiv(_DivisionIndex):
    """``floor(numerator / divisor)``; used by packed-panel layouts."""

    def evaluate(self, point: Mapping[str, int]) -> int:
        return self.numerator.evaluate(point) // self.divisor

    def to_isl(self) -> str:
        return f"floor(({self.numerator.to_isl()})/{self.divisor})"

    def __str__(self) -> str:
        return f"({self.numerator}) // {self.divisor}"


@dataclass(frozen=True)
class Modulo(_DivisionIndex):
    """``numerator mod divisor`` (the non-negative remainder)."""

    def evaluate(self, point: Mapping[str, int]) -> int:
        return self.numerator.evaluate(point) % self.divisor

    def to_isl(self) -> str:
        return f"(({self.numerator.to_isl()}) mod {self.divisor})"

    def __str__(self) -> str:
        return f"({self.numerator}) % {self.divisor}"


@dataclass(frozen=True)
class DynamicIndex:
    """An index known only at run time (a gathered position), somewhere in ``[0, extent)``.

    Its access relation over-approximates it by the whole range (isl manual, "Access
    relations" may be over-approximations for dependence analysis, as in PPCG's handling of
    non-affine accesses); a :class:`~polytf.poly.expression.Gather` expression supplies the
    value when the code runs.
    """

    extent: int

    @property
    def iterators(self) -> tuple[str, ...]:
        return ()

    @property
    def terms(self) -> tuple[tuple[str, int], ...]:
        return ()

    def evaluate(self, point: Mapping[str, int]) -> int:
        raise TypeError("a dynamic index has no value without its Gather")

    def __str__(self) -> str:
        return f"?<{self.extent}"


#: One index of an access: affine, quasi-affine (floor division / modulo by a constant), or dynamic.
IndexExpr = AffineExpr | FloorDiv | Modulo | DynamicIndex


def affine_of_ast(expression: isl.AstExpr, substitutions: Mapping[str, AffineExpr]) -> AffineExpr | None:
    """An isl AST expression as an affine expression, or None when it is not affine (min,
    max, divisions, conditions). Identifiers in ``substitutions`` are replaced by their
    expressions; other identifiers stand for themselves.

    Source: isl manual, "AST expressions" (``isl_ast_expr_get_type``, ``isl_ast_expr_op_type``).
    """
    kind = expression.get_type()
    if kind == isl.ast_expr_type.int:
        return AffineExpr.of(expression.int_get_val().to_python())
    if kind == isl.ast_expr_type.id:
        name = expression.id_get_id().get_name()
        return substitutions.get(name, AffineExpr.of(name))
    if kind != isl.ast_expr_type.op:
        return None
    op = expression.op_get_type()
    T = isl.ast_expr_op_type
    arguments = [affine_of_ast(expression.op_get_arg(i), substitutions) for i in range(expression.op_get_n_arg())]
    if any(a is None for a in arguments):
        return None
    if op == T.add:
        return arguments[0] + arguments[1]
    if op == T.sub:
        return arguments[0] - arguments[1]
    if op == T.minus:
        return arguments[0] * -1
    if op == T.mul:
        lhs, rhs = arguments
        if lhs.is_constant:
            return rhs * lhs.constant
        if rhs.is_constant:
            return lhs * rhs.constant
    return None


def substitute(expression: AffineExpr, substitutions: Mapping[str, AffineExpr]) -> AffineExpr:
    """``expression`` with each of its names replaced by its expression in ``substitutions``
    (e.g. statement iterators by affine expressions of AST loop iterators).

    Raises:
        KeyError: a name of ``expression`` has no substitution.
    """
    total: dict[str, int] = {}
    constant = int(expression.constant)
    for name, coefficient in expression.terms:
        replacement = substitutions[name]
        coefficient = int(coefficient)
        constant += replacement.constant * coefficient
        for term, factor in replacement.terms:
            total[term] = total.get(term, 0) + factor * coefficient
    # the same canonical form as summing ``substitutions[name] * coefficient`` one by one
    return AffineExpr(tuple(sorted((name, c) for name, c in total.items() if c)), constant)


def index_affine(
    index: AffineExpr | FloorDiv | Modulo, substitutions: Mapping[str, AffineExpr], range_of: Callable[[AffineExpr], tuple[int, int] | None]
) -> AffineExpr | None:
    """One (quasi-affine) array index, with its names substituted, as an affine expression,
    or None when it is not affine.

    ``floor(n / d)`` and ``n mod d`` are affine when every coefficient of ``n`` is a multiple
    of ``d``, or when ``n = d*X + R`` with ``R`` known by ``range_of`` (constant loop bounds,
    inclusive) to stay inside one block of ``d``: then they are ``X + q`` and ``R - d*q``."""
    if isinstance(index, AffineExpr):
        return substitute(index, substitutions)
    return quotient_affine(substitute(index.numerator, substitutions), index.divisor, isinstance(index, FloorDiv), range_of)


def quotient_affine(
    numerator: AffineExpr, divisor: int, floor: bool, range_of: Callable[[AffineExpr], tuple[int, int] | None]
) -> AffineExpr | None:
    """``floor(numerator / divisor)`` (``floor``) or ``numerator mod divisor`` as an affine
    expression, or None when it is not affine (see :func:`index_affine`, whose second half
    this is: the numerator is already substituted).

    The numerator's terms split into the divisible ones ``d*X`` and the rest ``R``; both
    parts are subsequences of its canonical terms, hence canonical, so they are built
    directly rather than as ``numerator - divisible``."""
    divisible = tuple((name, c) for name, c in numerator.terms if c % divisor == 0)
    remainder = AffineExpr(tuple((name, c) for name, c in numerator.terms if c % divisor), numerator.constant)
    bounds = range_of(remainder)
    if bounds is None or bounds[0] // divisor != bounds[1] // divisor:
        return None
    q = bounds[0] // divisor
    if floor:
        return AffineExpr(tuple((name, c // divisor) for name, c in divisible), int(q))
    return AffineExpr(remainder.terms, remainder.constant - int(divisor * q))


__all__ = ["AffineExpr", "AffineLike", "FloorDiv", "Modulo", "DynamicIndex", "IndexExpr", "affine_of_ast", "substitute", "index_affine", "quotient_affine"]
