"""Affine index expressions and the scalar expressions of statement bodies.

A statement body is a small expression tree over array elements, in the style of a
tensor comprehension (Vasilache et al., "Tensor Comprehensions", 2018):
``C[i, j] = C[i, j] + A[i, k] * B[k, j]``. Index expressions are affine in the
statement's iterators, so isl can reason about them exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AffineExpr:
    """``sum(coefficient * iterator) + constant`` over named iterators (integers).

    Attributes:
        terms: ``(iterator, coefficient)`` pairs with non-zero coefficients, sorted by name.
        constant: the constant term.
    """

    terms: tuple[tuple[str, int], ...] = ()
    constant: int = 0

    @staticmethod
    def of(value: AffineLike) -> AffineExpr:
        """Coerce an iterator name, an int or an AffineExpr to an AffineExpr."""
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
        return AffineExpr.combine((1, self), (1, other))

    def __radd__(self, other: AffineLike) -> AffineExpr:
        return self + other

    def __sub__(self, other: AffineLike) -> AffineExpr:
        return AffineExpr.combine((1, self), (-1, other))

    def __mul__(self, factor: int) -> AffineExpr:
        return AffineExpr.combine((int(factor), self))

    __rmul__ = __mul__

    @property
    def iterators(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.terms)

    def evaluate(self, point: Mapping[str, int]) -> int:
        return self.constant + sum(c * point[name] for name, c in self.terms)

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


#: One index of an access: affine, or quasi-affine (floor division / modulo by a constant).
IndexExpr = AffineExpr | FloorDiv | Modulo


@dataclass(frozen=True)
class Access:
    """One element of an array: ``array[index...]`` with affine (or quasi-affine) indices
    (row-major layout)."""

    array: str
    index: tuple[IndexExpr, ...]

    @staticmethod
    def of(array: str, *index: AffineLike | FloorDiv | Modulo) -> Access:
        return Access(array, tuple(i if isinstance(i, (FloorDiv, Modulo)) else AffineExpr.of(i) for i in index))

    def to_isl(self, statement: str, iterators: tuple[str, ...]) -> str:
        """isl map text ``{ S[i, j] -> A[i, j + 1] }``."""
        return f"{{ {statement}[{', '.join(iterators)}] -> {self.array}[{', '.join(i.to_isl() for i in self.index)}] }}"

    def __str__(self) -> str:
        return f"{self.array}[{', '.join(map(str, self.index))}]"


class Expr:
    """Base class of scalar body expressions (float32 unless stated)."""

    def loads(self) -> tuple[Access, ...]:
        """Every array element this expression reads, in evaluation order."""
        raise NotImplementedError


@dataclass(frozen=True)
class Load(Expr):
    """Read one array element."""

    access: Access

    def loads(self) -> tuple[Access, ...]:
        return (self.access,)

    def __str__(self) -> str:
        return str(self.access)


@dataclass(frozen=True)
class Constant(Expr):
    """A literal (``inf`` and ``-inf`` allowed)."""

    value: float

    def loads(self) -> tuple[Access, ...]:
        return ()

    def __str__(self) -> str:
        return repr(float(self.value))


def _erf(x):
    """Error function, computed in float64 (``math.erf``; numpy has none)."""
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _erfc(x):
    """Complementary error function ``1 - erf(x)``, accurate in the tails (``math.erfc``)."""
    return np.vectorize(math.erfc, otypes=[np.float64])(x)


def _sigmoid(x):
    """Logistic function ``1 / (1 + exp(-x))`` in float64, without overflow for large ``|x|``."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _rsqrt(x):
    """Reciprocal square root ``1 / sqrt(x)`` (TensorFlow ``Rsqrt``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(np.asarray(x, dtype=np.float64))


def _log1p(x):
    """``log(1 + x)``, accurate for small ``|x|`` (``numpy.log1p``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log1p(x)


def _log(x):
    """Natural logarithm (``-inf`` at 0, NaN below)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x)


#: Unary operators and their numpy meaning (used by the reference interpreter).
UNARY_OPS = {
    "neg": np.negative,
    "exp": np.exp,
    "log": _log,
    "log1p": _log1p,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,  # half to even, as TensorFlow's Round
    "sign": lambda x: np.sign(x) + 0.0,  # +0 for both zeros, as TensorFlow's Sign
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "abs": np.abs,
    "square": np.square,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "erfc": _erfc,
}

#: Binary operators and their numpy meaning.
BINARY_OPS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.fmax,  # NaN only when both are NaN (llvm.maxnum), as Relu's max(x, 0)
    "min": np.fmin,
    "maximum": np.maximum,  # NaN when either is NaN, as TensorFlow's Maximum (llvm.maximum)
    "minimum": np.minimum,
}


@dataclass(frozen=True)
class Unary(Expr):
    """``op(operand)`` with ``op`` in :data:`UNARY_OPS`."""

    op: str
    operand: Expr

    def __post_init__(self) -> None:
        if self.op not in UNARY_OPS:
            raise ValueError(f"unknown unary operator {self.op!r}")

    def loads(self) -> tuple[Access, ...]:
        return self.operand.loads()

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@dataclass(frozen=True)
class Binary(Expr):
    """``op(lhs, rhs)`` with ``op`` in :data:`BINARY_OPS`."""

    op: str
    lhs: Expr
    rhs: Expr

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise ValueError(f"unknown binary operator {self.op!r}")

    def loads(self) -> tuple[Access, ...]:
        return self.lhs.loads() + self.rhs.loads()

    def __str__(self) -> str:
        return f"{self.op}({self.lhs}, {self.rhs})"


def evaluate(expr: Expr, load: callable) -> np.float32:
    """Evaluate ``expr`` in float32, reading elements with ``load(access)``.

    Used by the reference interpreter; generated code follows the same semantics.
    """
    if isinstance(expr, Load):
        return np.float32(load(expr.access))
    if isinstance(expr, Constant):
        return np.float32(expr.value)
    if isinstance(expr, Unary):
        return np.float32(UNARY_OPS[expr.op](evaluate(expr.operand, load)))
    if isinstance(expr, Binary):
        return np.float32(BINARY_OPS[expr.op](evaluate(expr.lhs, load), evaluate(expr.rhs, load)))
    raise TypeError(f"unknown expression {expr!r}")
