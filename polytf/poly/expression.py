"""Array accesses and the scalar expressions of statement bodies.

A statement body is a small expression tree over array elements, in the style of a
tensor comprehension (Vasilache et al., "Tensor Comprehensions", 2018):
``C[i, j] = C[i, j] + A[i, k] * B[k, j]``. The indices of an :class:`Access` are affine
(or quasi-affine) in the statement's iterators (:mod:`polytf.poly.affine`), so isl can
reason about them exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from polytf.poly.affine import AffineExpr, AffineLike, DynamicIndex, FloorDiv, IndexExpr, Modulo


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
        """isl map text ``{ S[i, j] -> A[i, j + 1] }``; a dynamic index becomes an output
        variable ranging over its extent (``{ S[i] -> A[g0, i] : 0 <= g0 < 1000 }``)."""
        if not self.is_dynamic:
            return f"{{ {statement}[{', '.join(iterators)}] -> {self.array}[{', '.join(i.to_isl() for i in self.index)}] }}"
        names, bounds = [], []
        for position, index in enumerate(self.index):
            if isinstance(index, DynamicIndex):
                names.append(f"dynamic{position}")
                bounds.append(f"0 <= dynamic{position} < {index.extent}")
            else:
                names.append(index.to_isl())
        return f"{{ {statement}[{', '.join(iterators)}] -> {self.array}[{', '.join(names)}] : {' and '.join(bounds)} }}"

    @property
    def is_dynamic(self) -> bool:
        """Whether some index is known only at run time (read through a :class:`Gather`)."""
        return any(isinstance(i, DynamicIndex) for i in self.index)

    def __str__(self) -> str:
        return f"{self.array}[{', '.join(map(str, self.index))}]"


class Expr:
    """Base class of scalar body expressions (float32 unless stated)."""

    def loads(self) -> tuple[Access, ...]:
        """Every array element this expression reads, in evaluation order (its children's, in order)."""
        return tuple(access for child in self.children() for access in child.loads())

    def children(self) -> tuple[Expr, ...]:
        """The sub-expressions, in evaluation order."""
        return ()

    def map_children(self, function) -> Expr:
        """The same node over ``function(child)`` for each child (transforms rebuild trees with it)."""
        return self


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
    """A literal (``inf`` and ``-inf`` allowed) of ``dtype``: float32 by default; an
    int32/int64 literal keeps integers that float32 cannot hold (e.g. the start of an
    integer ``Min`` reduction, ``2**31 - 1``)."""

    value: float | int
    dtype: str = "float32"

    def __str__(self) -> str:
        return repr(float(self.value)) if self.dtype == "float32" else f"{self.dtype}({int(self.value)})"


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

def truncate_divide(x, y):
    """Integer division toward zero (TensorFlow's integer ``Div``, C's ``/``)."""
    quotient = np.abs(x) // np.abs(y)
    return np.where((np.asarray(x) < 0) != (np.asarray(y) < 0), -quotient, quotient)


#: Binary operators and their numpy meaning. ``fmod`` is C's ``fmod`` on float32 (the
#: exact remainder of the division truncated toward zero: ``frem``). ``truncdiv``,
#: ``floordiv`` and ``floormod`` take integer operands only (TensorFlow's integer ``Div``, ``FloorDiv``, ``FloorMod``;
#: lowerings emit them with a compile-time divisor without zeros).
#:
#: Float semantics are TensorFlow's CPU kernels' (checked against TensorFlow 2.21 on
#: NaN, ±inf and -0.0 by ``tests/e2e/test_float_semantics.py``): arithmetic is IEEE 754
#: (``inf - inf`` and ``0 * inf`` are NaN, ``x / 0`` is ±inf or NaN). There are two kinds
#: of max and min:
#:
#: * ``maximum``/``minimum`` return NaN when either operand is NaN (``np.maximum``,
#:   ``llvm.maximum``): TensorFlow's ``Maximum``, ``Minimum``, ``ClipByValue``, ``Relu``,
#:   ``Relu6`` and the ``Max``/``Min`` reductions (Eigen's ``scalar_max_op`` with
#:   ``PropagateNaN``). Which zero ``maximum(-0.0, +0.0)`` returns is not defined:
#:   TensorFlow's own scalar and vectorised paths disagree on it.
#: * ``max``/``min`` ignore a NaN operand (NaN only when both are; ``np.fmax``,
#:   ``llvm.maxnum``, which LLVM vectorises as a reduction): Softmax's row maximum, whose
#:   NaN reaches the row through ``exp`` anyway. (``MaxPool`` skips NaN too, as TensorFlow's
#:   kernel, with a selection: ``x > m ? x : m``.)
BINARY_OPS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.fmax,  # a NaN operand ignored (llvm.maxnum): Softmax's row maximum
    "min": np.fmin,
    "maximum": np.maximum,  # NaN when either is NaN, as TensorFlow's Maximum and Relu (llvm.maximum)
    "minimum": np.minimum,
    "fmod": np.fmod,
    "truncdiv": truncate_divide,
    "floordiv": np.floor_divide,
    "floormod": np.mod,
}

#: The :data:`BINARY_OPS` defined on integer operands only.
INTEGER_BINARY_OPS = frozenset({"truncdiv", "floordiv", "floormod"})


class _OneOperand(Expr):
    """An expression of one sub-expression, its dataclass field ``operand``."""

    operand: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def map_children(self, function) -> Expr:
        return replace(self, operand=function(self.operand))


@dataclass(frozen=True)
class Unary(_OneOperand):
    """``op(operand)`` with ``op`` in :data:`UNARY_OPS`."""

    op: str
    operand: Expr

    def __post_init__(self) -> None:
        if self.op not in UNARY_OPS:
            raise ValueError(f"unknown unary operator {self.op!r}")

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@dataclass(frozen=True)
class _BinaryOperation(Expr):
    """``op(lhs, rhs)`` with ``op`` a key of the subclass's :attr:`OPERATORS`."""

    #: the operators the subclass allows, and what an unknown one is called in the error
    OPERATORS: ClassVar[Mapping[str, object]] = {}
    KIND: ClassVar[str] = "operator"

    op: str
    lhs: Expr
    rhs: Expr

    def __post_init__(self) -> None:
        if self.op not in self.OPERATORS:
            raise ValueError(f"unknown {self.KIND} {self.op!r}")

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs, self.rhs)

    def map_children(self, function) -> Expr:
        return type(self)(self.op, function(self.lhs), function(self.rhs))

    def __str__(self) -> str:
        return f"{self.op}({self.lhs}, {self.rhs})"


@dataclass(frozen=True)
class Binary(_BinaryOperation):
    """``op(lhs, rhs)`` with ``op`` in :data:`BINARY_OPS`."""

    OPERATORS: ClassVar[Mapping[str, object]] = BINARY_OPS
    KIND: ClassVar[str] = "binary operator"


# --- typed expressions: comparisons, logic, selection, conversion, gathers ---------------

#: dtypes generated code computes with (bool is one byte in memory, as numpy's bool_).
DTYPES = ("float32", "int32", "int64", "bool")

#: Comparison operators and their numpy meaning (NaN compares unequal, as in C and TensorFlow).
COMPARE_OPS = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}

#: Logical operators on bool operands.
LOGICAL_OPS = {"and": np.logical_and, "or": np.logical_or, "not": np.logical_not}


@dataclass(frozen=True)
class Compare(_BinaryOperation):
    """``op(lhs, rhs)`` -> bool, ``op`` in :data:`COMPARE_OPS`; operands of one dtype."""

    OPERATORS: ClassVar[Mapping[str, object]] = COMPARE_OPS
    KIND: ClassVar[str] = "comparison"


@dataclass(frozen=True)
class Logical(Expr):
    """``and``/``or`` of two bool operands, ``not`` of one (``rhs`` None)."""

    op: str
    lhs: Expr
    rhs: Expr | None = None

    def __post_init__(self) -> None:
        if self.op not in LOGICAL_OPS or (self.op == "not") != (self.rhs is None):
            raise ValueError(f"bad logical operator {self.op!r} with {'one' if self.rhs is None else 'two'} operands")

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs,) if self.rhs is None else (self.lhs, self.rhs)

    def map_children(self, function) -> Expr:
        return Logical(self.op, function(self.lhs), None if self.rhs is None else function(self.rhs))

    def __str__(self) -> str:
        return f"{self.op}({', '.join(map(str, self.children()))})"


#: Float classifications and their numpy meaning (TensorFlow's ``IsNan``, ``IsInf``, ``IsFinite``).
FLOAT_TESTS = {"nan": np.isnan, "inf": np.isinf, "finite": np.isfinite}


@dataclass(frozen=True)
class FloatTest(_OneOperand):
    """``test(operand)`` -> bool for a float32 operand, ``test`` in :data:`FLOAT_TESTS`:
    ``nan`` (NaN), ``inf`` (+inf or -inf), ``finite`` (neither).

    The tests of a ``CheckNumerics`` node (:mod:`polytf.ops.float_checks`) carry the node
    and its message, for the runtime's error (not part of the computation, as
    :attr:`Gather.node`): they compute the status array the runtime reads after the kernel
    (:func:`polytf.poly.numerics_checks.run_time_numerics_checks`).
    """

    test: str
    operand: Expr
    #: the CheckNumerics node whose status this test computes ("" for IsNan, IsInf, IsFinite)
    node: str = field(default="", compare=False)
    #: that node's ``message`` attribute
    message: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.test not in FLOAT_TESTS:
            raise ValueError(f"unknown float test {self.test!r}; known: {', '.join(FLOAT_TESTS)}")

    def __str__(self) -> str:
        return f"is{self.test}({self.operand})"


@dataclass(frozen=True)
class Select(Expr):
    """``condition ? then : otherwise`` with a bool condition (TensorFlow ``SelectV2``)."""

    condition: Expr
    then: Expr
    otherwise: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.condition, self.then, self.otherwise)

    def map_children(self, function) -> Expr:
        return Select(function(self.condition), function(self.then), function(self.otherwise))

    def __str__(self) -> str:
        return f"select({self.condition}, {self.then}, {self.otherwise})"


@dataclass(frozen=True)
class Convert(_OneOperand):
    """``operand`` converted to ``dtype`` (TensorFlow ``Cast``: float -> int truncates toward
    zero, anything -> bool is ``!= 0``, bool -> number is 0 or 1)."""

    dtype: str
    operand: Expr

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"cannot convert to {self.dtype!r}; generated code has {', '.join(DTYPES)}")

    def __str__(self) -> str:
        return f"{self.dtype}({self.operand})"


@dataclass(frozen=True)
class Gather(Expr):
    """``table`` read at a run-time position: ``table.access`` has one :class:`DynamicIndex`,
    whose value is ``index`` (an int32/int64 expression). Generated code clamps the position
    into ``[0, extent)``, so that no value of ``index`` reads outside the table; the runtime
    checks the indices before the kernel runs and raises on one out of range, as
    TensorFlow's CPU kernel does (tensorflow/core/kernels/gather_functor.h)."""

    table: Load
    index: Expr
    #: the GatherV2 node, for the runtime's error message (not part of the computation)
    node: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if sum(isinstance(i, DynamicIndex) for i in self.table.access.index) != 1:
            raise ValueError(f"a Gather's table access needs exactly one dynamic index: {self.table}")

    @property
    def axis(self) -> int:
        return next(k for k, i in enumerate(self.table.access.index) if isinstance(i, DynamicIndex))

    @property
    def extent(self) -> int:
        return self.table.access.index[self.axis].extent

    def children(self) -> tuple[Expr, ...]:
        return (self.index, self.table)

    def map_children(self, function) -> Expr:
        return Gather(function(self.table), function(self.index), self.node)

    def concrete(self, position: int) -> Access:
        """The table access with the dynamic index replaced by ``position``."""
        index = list(self.table.access.index)
        index[self.axis] = AffineExpr.of(int(position))
        return Access(self.table.access.array, tuple(index))

    def __str__(self) -> str:
        return f"gather({self.table}, {self.index})"


def subexpressions(expr: Expr) -> Iterator[Expr]:
    """``expr`` and every expression inside it, in pre-order (parents before their children)."""
    yield expr
    for child in expr.children():
        yield from subexpressions(child)


def _same_kind(value, *operands):
    """float32 unless every operand is an integer of one dtype (integer arithmetic keeps it)."""
    kinds = {np.asarray(o).dtype for o in operands}
    if len(kinds) == 1 and next(iter(kinds)).kind in "iu":
        return np.asarray(value).astype(next(iter(kinds)))[()]
    return np.float32(value)


def evaluate(expr: Expr, load: callable):
    """Evaluate ``expr`` reading elements with ``load(access)``: float32 arithmetic, integer
    arithmetic on integer operands, bool for comparisons and logic.

    Used by the reference interpreter; generated code follows the same semantics.

    Raises:
        IndexError: a :class:`Gather` position outside its table (generated code clamps
            it; the runtime refuses it before the kernel runs).
    """
    if isinstance(expr, Load):
        return load(expr.access)[()]
    if isinstance(expr, Constant):
        return np.float32(expr.value) if expr.dtype == "float32" else np.asarray(int(expr.value), expr.dtype)[()]
    if isinstance(expr, Unary):
        operand = evaluate(expr.operand, load)
        with np.errstate(all="ignore"):
            return _same_kind(UNARY_OPS[expr.op](operand), operand)
    if isinstance(expr, Binary):
        lhs, rhs = evaluate(expr.lhs, load), evaluate(expr.rhs, load)
        with np.errstate(all="ignore"):
            return _same_kind(BINARY_OPS[expr.op](lhs, rhs), lhs, rhs)
    if isinstance(expr, Compare):
        return np.bool_(COMPARE_OPS[expr.op](evaluate(expr.lhs, load), evaluate(expr.rhs, load)))
    if isinstance(expr, Logical):
        operands = [np.bool_(evaluate(child, load)) for child in expr.children()]
        return np.bool_(LOGICAL_OPS[expr.op](*operands))
    if isinstance(expr, Select):
        return evaluate(expr.then, load) if evaluate(expr.condition, load) else evaluate(expr.otherwise, load)
    if isinstance(expr, FloatTest):
        return np.bool_(FLOAT_TESTS[expr.test](np.float32(evaluate(expr.operand, load))))
    if isinstance(expr, Convert):
        value = evaluate(expr.operand, load)
        if expr.dtype == "bool":
            return np.bool_(value != 0)
        with np.errstate(invalid="ignore"):
            return np.asarray(value).astype(expr.dtype)[()]
    if isinstance(expr, Gather):
        position = int(evaluate(expr.index, load))
        if not 0 <= position < expr.extent:
            raise IndexError(f"gather index {position} is not in [0, {expr.extent})")
        return load(expr.concrete(position))[()]
    raise TypeError(f"unknown expression {expr!r}")
