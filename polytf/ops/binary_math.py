"""Binary math ops with numpy/TensorFlow broadcasting: ``Maximum``, ``Minimum``, ``RealDiv``,
``Div``, ``FloorDiv``, ``FloorMod``, ``Pow``; and ``ClipByValue``.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``Maximum``,
``Minimum``, ``RealDiv``, ``Div``, ``FloorDiv``, ``FloorMod``, ``Pow``, ``ClipByValue``) and
their Eigen functors (tensorflow/core/kernels/cwise_ops.h). Shapes:
``x: [A...], y: [B...] -> broadcast([A...], [B...])``; ``ClipByValue(t, lo, hi)``: ``lo`` and
``hi`` broadcast to ``t``'s shape, the output has ``t``'s shape.

Semantics (float32):

* ``Maximum``/``Minimum``: NaN if either operand is NaN (as TensorFlow; ``llvm.maximum``).
* ``RealDiv``, ``Div``: ``x / y`` (IEEE: ``inf`` or NaN for ``y = 0``).
* ``FloorDiv(x, y) = floor(x / y)``; ``FloorMod(x, y)``, the remainder with the sign of
  ``y``, from C's exact ``fmod`` as TensorFlow (tensorflow/core/kernels/cwise_ops.h,
  ``google_floor_fmod``): ``r = fmod(x, y)``; ``r + y`` when ``r != 0`` and the signs of
  ``r`` and ``y`` differ, else ``r`` (``FloorMod(-7, inf) = inf``, NaN for ``y = 0``).
* ``Pow(x, y)``: C's ``pow`` (TensorFlow's ``scalar_pow_op``), every special case
  included: ``x ** 0 = 1`` and ``1 ** y = 1`` even for NaN, ``(-1) ** ±inf = 1``, a negative
  finite base with a non-integer exponent is NaN and with an odd integer one is
  ``-|x| ** y`` (``-0.0`` and ``-inf`` bases too). Computed as ``exp(y log|x|)`` with those
  cases selected around it (a relative error of a few ``|y log|x||`` ulp). When ``y`` is a
  compile-time constant with one value for every element, an integer ``|y| <= 16``
  becomes a multiplication chain by repeated squaring (``x ** 3 = x * x * x``; a negative
  ``y`` takes the reciprocal), ``0.5`` a ``sqrt`` and ``-0.5`` an ``rsqrt``, as Grappler's
  arithmetic optimizer rewrites them (``ConvertPowStage``: so ``Pow(-inf, 0.5)`` is NaN
  there, where ``pow`` gives ``inf``).
* ``ClipByValue(t, lo, hi) = max(min(t, hi), lo)`` with ``std::min``/``std::max``
  (tensorflow/core/kernels/cwise_op_clip.cc, Eigen's ``cwiseMin``/``cwiseMax``):
  ``r = hi < t ? hi : t``, then ``r < lo ? lo : r``; NaN where ``t`` is NaN, a NaN bound
  ignored.

Integer compile-time constants (shape arithmetic) fold through the references with
TensorFlow's integer semantics: ``Div`` truncates toward zero, ``FloorDiv`` floors,
``FloorMod`` takes the sign of the divisor.

Lowering: one point-wise statement over the output shape (category ELEMENTWISE, so each
fuses with its producer), inputs indexed by
:func:`~polytf.ops.elementwise.broadcast_access`.
"""

from __future__ import annotations

import math

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_access, broadcast_shapes, infer_binary, pointwise
from polytf.poly.expression import Binary, Compare, Constant, Expr, FloatTest, Load, Logical, Select, Unary, truncate_divide

#: The largest integer exponent written as a multiplication chain.
MAX_CHAIN_EXPONENT = 16


#: op -> (float64 meaning, integer meaning or None when the op takes floats only)
_NUMPY = {
    "Maximum": (np.maximum, np.maximum),
    "Minimum": (np.minimum, np.minimum),
    "RealDiv": (np.divide, None),
    "Div": (np.divide, truncate_divide),
    "FloorDiv": (lambda x, y: np.floor(x / y), np.floor_divide),
    "FloorMod": (np.mod, np.mod),
    "Pow": (np.power, np.power),
}


def reference(node, inputs):
    """float32 results computed in float64; int32/int64 inputs keep their dtype.

    Raises:
        ShapeError: an integer ``RealDiv``, or an integer division by zero.
    """
    x, y = (np.asarray(v) for v in inputs)
    floating, integral = _NUMPY[node.op]
    if np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer):
        if integral is None:
            raise ShapeError(f"{node.op} node '{node.name}' takes floating-point inputs, not {x.dtype}")
        if node.op in ("Div", "FloorDiv", "FloorMod") and np.any(y == 0):
            raise ShapeError(f"{node.op} node '{node.name}': integer division by zero")
        return (np.asarray(integral(x, y), dtype=x.dtype),)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        result = floating(x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64))
    return (np.asarray(result, dtype=np.float32),)


def _chain(x: Expr, exponent: int) -> Expr:
    """``x ** exponent`` for ``exponent >= 1`` by repeated squaring."""
    result: Expr | None = None
    power = x
    while exponent:
        if exponent & 1:
            result = power if result is None else Binary("mul", result, power)
        exponent >>= 1
        if exponent:
            power = Binary("mul", power, power)
    return result


def power(x: Expr, y: Expr, constant_exponent: float | None) -> Expr:
    """The body of ``Pow(x, y)`` (see the module docstring)."""
    if constant_exponent is not None:
        e = float(constant_exponent)
        if e == int(e) and abs(e) <= MAX_CHAIN_EXPONENT:
            if e == 0:
                return Constant(1.0)
            chain = _chain(x, abs(int(e)))
            return chain if e > 0 else Binary("div", Constant(1.0), chain)
        if e == 0.5:
            return Unary("sqrt", x)
        if e == -0.5:
            return Unary("rsqrt", x)
        y = Constant(e)
    return general_power(x, y)


def general_power(x: Expr, y: Expr) -> Expr:
    """C's ``pow(x, y)`` on float32 (ISO C 7.12.7.4 and Annex F.9.4.4; TensorFlow's
    ``Pow``): ``exp(y log|x|)``, negated for a negative base (``-0.0`` and ``-inf``
    included: ``1 / -0.0 < 0``) and an odd integer ``y``, NaN for a finite base below 0
    and a non-integer ``y``, 1 for ``y = 0``, ``x = 1`` and ``x = -1, y = ±inf`` (``±inf``
    count as even integers). The tests on ``y`` are decided here for a constant ``y``."""
    zero, one = Constant(0.0), Constant(1.0)
    magnitude = Unary("exp", Binary("mul", y, Unary("log", Unary("abs", x))))
    sign_negative = Logical("or", Compare("less", x, zero), Compare("less", Binary("div", one, x), zero))
    below_zero = Logical("and", Compare("less", x, zero), FloatTest("finite", x))
    if isinstance(y, Constant):
        e = float(y.value)
        if e == 0:
            return one
        integral = e == math.floor(e) if math.isfinite(e) else math.isinf(e)
        if integral and math.isfinite(e) and e % 2 == 1:
            value = Select(sign_negative, Unary("neg", magnitude), magnitude)
        elif not integral:
            value = Select(below_zero, Constant(float("nan")), magnitude)
        else:
            value = magnitude
        unit = Compare("equal", Unary("abs", x) if math.isinf(e) else x, one)
        return Select(unit, one, value)
    integral = Compare("equal", Unary("floor", y), y)
    odd = Logical("and", integral, Compare("not_equal", Binary("mul", Unary("floor", Binary("mul", y, Constant(0.5))), Constant(2.0)), y))
    value = Select(Logical("and", odd, sign_negative), Unary("neg", magnitude), magnitude)
    value = Select(Logical("and", below_zero, Logical("not", integral)), Constant(float("nan")), value)
    unit = Logical("or", Compare("equal", y, zero), Compare("equal", x, one))
    unit = Logical("or", unit, Logical("and", Compare("equal", Unary("abs", x), one), FloatTest("inf", y)))
    return Select(unit, one, value)


def floor_modulo(x: Expr, y: Expr) -> Expr:
    """TensorFlow's float ``FloorMod``: ``r = fmod(x, y)``, moved by ``y`` when it is not 0
    and its sign differs from ``y``'s (module docstring)."""
    zero = Constant(0.0)
    remainder = Binary("fmod", x, y)
    moves = Logical("and", Compare("not_equal", remainder, zero), Compare("not_equal", Compare("less", y, zero), Compare("less", remainder, zero)))
    return Select(moves, Binary("add", remainder, y), remainder)


def _uniform_constant(node, context, index: int) -> float | None:
    """The one value of input ``index`` when it is a compile-time constant with a single value."""
    value = getattr(context, "constants", {}).get(node.inputs[index])
    if value is None:
        return None
    value = np.asarray(value)
    if value.size == 0 or not np.all(value == value.reshape(-1)[0]):
        return None
    return float(value.reshape(-1)[0])


def lower(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: Z[d...] = f(X[bcast(d)], Y[bcast(d)])``."""
    a, b = inputs
    (c,) = outputs
    x = Load(broadcast_access(a.name, a.shape, c.shape))
    y = Load(broadcast_access(b.name, b.shape, c.shape))
    if c.type.dtype in ("int32", "int64"):
        value = _integer_body(node, x, y, context)
    elif node.op == "Maximum":
        value = Binary("maximum", x, y)
    elif node.op == "Minimum":
        value = Binary("minimum", x, y)
    elif node.op in ("RealDiv", "Div"):
        value = Binary("div", x, y)
    elif node.op == "FloorDiv":
        value = Unary("floor", Binary("div", x, y))
    elif node.op == "FloorMod":
        value = floor_modulo(x, y)
    else:
        value = power(x, y, _uniform_constant(node, context, 1))
    return pointwise(node, c, value, context)


def _integer_body(node, x: Expr, y: Expr, context) -> Expr:
    """The body over int32/int64 operands: integer ``Maximum``/``Minimum``, and ``Div``,
    ``FloorDiv``, ``FloorMod`` and ``Pow`` only where generated code cannot fail or differ
    from TensorFlow: a compile-time divisor without zeros (TensorFlow raises on a zero
    divisor at run time), an exponent that is one compile-time integer in ``[0, 16]``.

    Raises:
        ShapeError: any other integer case; the node then runs on the host, where its
            reference raises TensorFlow's error on a zero divisor.
    """
    if node.op in ("Maximum", "Minimum"):
        return Binary(node.op.lower(), x, y)
    if node.op in ("Div", "FloorDiv", "FloorMod"):
        divisor = getattr(context, "constants", {}).get(node.inputs[1])
        if divisor is None or np.any(np.asarray(divisor) == 0):
            why = "is computed at run time" if divisor is None else "has a zero"
            raise ShapeError(f"{node.op} node '{node.name}': an integer division is compiled only by a compile-time divisor without zeros; its divisor '{node.inputs[1]}' {why}")
        return Binary({"Div": "truncdiv", "FloorDiv": "floordiv", "FloorMod": "floormod"}[node.op], x, y)
    exponent = _uniform_constant(node, context, 1) if node.op == "Pow" else None
    if exponent is None or exponent != int(exponent) or not 0 <= exponent <= MAX_CHAIN_EXPONENT:
        raise ShapeError(f"{node.op} node '{node.name}': an integer {node.op} is compiled only with one compile-time exponent in [0, {MAX_CHAIN_EXPONENT}]")
    return power(x, y, exponent)


# --- ClipByValue -----------------------------------------------------------------------


def infer_clip(node, input_types, input_constants):
    """``t: [D...], lo, hi`` (each broadcasting to ``[D...]``) -> ``[D...]``.

    Raises:
        ShapeError: not three inputs, different dtypes, or bounds that do not broadcast to ``t``.
    """
    if len(input_types) != 3:
        raise ShapeError(f"ClipByValue takes 3 inputs (t, clip_value_min, clip_value_max), got {len(input_types)}")
    t, low, high = input_types
    if not (t.dtype == low.dtype == high.dtype):
        raise ShapeError(f"ClipByValue node '{node.name}': inputs have different dtypes: {t}, {low}, {high}")
    for bound in (low, high):
        if broadcast_shapes(t.shape, bound.shape) != tuple(t.shape):
            raise ShapeError(f"ClipByValue node '{node.name}': bound {bound} does not broadcast to {t}")
    return (TensorType(t.shape, t.dtype),)


def reference_clip(node, inputs):
    """``r = hi < t ? hi : t``; ``r < lo ? lo : r`` (module docstring)."""
    t, low, high = (np.asarray(v) for v in inputs)
    with np.errstate(invalid="ignore"):
        upper = np.where(high < t, high, t)
        return (np.asarray(np.where(upper < low, low, upper), dtype=t.dtype),)


def lower_clip(node, inputs, outputs, context):
    """``S[d...]: Y[d...] = select(R < LO[bcast(d)], LO[bcast(d)], R)`` with
    ``R = select(HI[bcast(d)] < T[d...], HI[bcast(d)], T[d...])``."""
    t, low, high = inputs
    (y,) = outputs
    t, low, high = (Load(broadcast_access(a.name, a.shape, y.shape)) for a in (t, low, high))
    upper = Select(Compare("less", high, t), high, t)
    return pointwise(node, y, Select(Compare("less", upper, low), low, upper), context)


#: ``Maximum`` and ``Minimum`` do not depend on the order of their inputs.
_COMMUTATIVE = ("Maximum", "Minimum")

DEFINITIONS = {
    op: OpDefinition(
        op, ELEMENTWISE, infer_binary, reference, lower, source=f"tensorflow/core/ops/math_ops.cc: {op}",
        dtypes=("float32",) if op == "RealDiv" else ("float32", "int32", "int64"), foldable=True, arity=Arity(2, 2), commutative=op in _COMMUTATIVE,
    )
    for op in _NUMPY
}
CLIP_BY_VALUE = OpDefinition(
    "ClipByValue", ELEMENTWISE, infer_clip, reference_clip, lower_clip, source="tensorflow/core/ops/math_ops.cc: ClipByValue",
    dtypes=("float32", "int32", "int64"), foldable=True, arity=Arity(3, 3),
)
