"""Vectorisable float32 math functions emitted as straight-line LLVM IR.

``llvm.exp.*`` and libm's ``tanhf`` are calls that LLVM's loop vectoriser does not turn
into vector code on x86 (there is no vector library configured), so a softmax or a GELU
would run one lane at a time. Each function here is range reduction + polynomial +
``select``s, without branches, so it works unchanged on ``float`` and on ``<W x float>``:
the generic emitter's loops vectorise it, and the micro-kernel calls it on its vectors.

Every function is defined once per module and value type, as an ``internal
alwaysinline`` function named ``polytf.<name>.f32`` / ``polytf.<name>.v<W>f32``
(:func:`math_function`); LLVM inlines it before vectorising. The arithmetic carries only
the ``contract`` fast-math flag (fused multiply-add, which never lowers accuracy here):
no reassociation, which would undo the Cody-Waite range reduction, and no ``nnan``/
``ninf``, so NaN inputs give NaN.

Sources and accuracy (float32, measured against float64 ``math`` in
``tests/unit/targets/test_math_functions.py``):

* ``exp``: Cephes ``expf`` (S. L. Moshier, Cephes Math Library 2.2, ``expf.c``):
  ``n = round(x log2(e))``, ``r = x - n ln 2`` in two parts (Cody & Waite),
  degree-7 polynomial on ``[-ln2/2, ln2/2]``; ``2^n`` is applied as two factors
  ``2^(n>>1) 2^(n-(n>>1))`` so that results in the subnormal range underflow gradually and
  large ``x`` overflow to ``inf``. A few ulp of relative error. ``n`` is rounded by adding
  ``1.5 * 2^23`` (one fused multiply-add; the integer is then read from the low bits of
  the sum, as in oneDNN's and SLEEF's vector ``exp``), not by ``floor`` and ``fptosi``:
  two instructions fewer, and a NaN stays a NaN through the arithmetic (``fptosi`` of a
  NaN is poison in LLVM IR and needed a ``select`` to discard it).
* ``tanh``: Cephes ``tanhf``: ``x + x^3 P(x^2)`` for ``|x| < 0.625``, else
  ``sign(x) (1 - 2 / (exp(2|x|) + 1))``.
* ``sigmoid``: ``1 / (1 + exp(-x))`` (``exp`` overflowing to ``inf`` gives 0). Its ``exp``
  and tanh's skip gradual underflow (:func:`_exp_without_subnormals`: one factor ``2^(n-1)``
  and a doubling, argument clamped to ``[ln(2^-126), 89]``): an ``exp`` below ``2^-126``
  only ever meets ``1 + exp``, where it vanishes. EfficientNet's swish ``x sigmoid(x)``
  runs on every activation, so this is the function the CNNs spend most in.
* ``log``: Cephes ``logf``: exponent and mantissa from the bits (subnormals scaled by
  2^23 first), ``log(1 + f) = f - f^2/2 + f^3 P(f)`` on ``[sqrt(1/2) - 1, sqrt(2) - 1]``,
  ``k ln 2`` added in the two Cody-Waite parts; ``-inf`` at 0, NaN below 0.
* ``log1p``: ``log(1 + x)`` with Goldberg's correction ``log(u) x / (u - 1)``, ``u = 1 + x``.
* ``sign``: ``select``s (``+0`` for zeros, NaN passes through).
* ``expm1``: ``exp(x) - 1`` with Kahan's correction ``(u - 1) x / log(u)``, ``u = exp(x)``.
* ``erf``/``erfc``: Cephes ``ndtrf.c`` (``erff``, ``erfcf``): ``erf(x) = x T(x^2)`` for
  ``|x| < 1``; ``erfc(x) = exp(-x^2) (1/x) P(1/x^2)`` (``P`` for ``1 <= x < 2``, ``R`` for
  ``x >= 2``), ``erfc(-x) = 2 - erfc(x)``, ``erf = 1 - erfc`` for ``|x| >= 1``.
  ``exp(-x^2)`` is corrected for the rounding of ``x^2`` (the exact residual of the
  product, by Dekker's split, "A floating-point technique for extending the available
  precision", Numer. Math. 18, 1971), which keeps erfc's relative error below ~1e-6 up
  to its underflow near ``x = 9.2`` (plain Cephes: 3.9e-6).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import llvmlite.ir as ir

F32 = ir.FloatType()
I32 = ir.IntType(32)

#: Fast-math flags of the arithmetic inside the functions (see the module docstring).
FLAGS = ("contract",)

# Cephes expf.c
_LOG2E = 1.44269504088896341
_EXP_C1 = 0.693359375
_EXP_C2 = -2.12194440e-4
_EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
#: exp(x) for x below this is 0 in float32 (below half the smallest subnormal); above the
#: upper bound it is inf. Clamping to them keeps the exponent arithmetic in range.
_EXP_LOWEST = -104.0
_EXP_HIGHEST = 89.0
#: ln(2^-126): below it exp(x) is subnormal (:func:`_exp_without_subnormals` stops there).
_EXP_NORMAL_LOWEST = -87.33654475
#: 1.5 * 2^23: ``v + this`` rounds ``v`` (|v| < 2^22) to an integer held in the sum's low
#: mantissa bits; the sum's bits minus these bits are that integer.
_ROUNDING_MAGIC = 12582912.0
_ROUNDING_MAGIC_BITS = 0x4B400000

# Cephes logf.c
_LOG_POLYNOMIAL = (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
)
_SQRT_HALF = 0.707106781186547524
_SMALLEST_NORMAL = 1.1754943508222875e-38

# Cephes tanhf.c
_TANH_POLYNOMIAL = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
_TANH_SMALL = 0.625

# Cephes ndtrf.c
_ERFC_P = (
    2.326819970068386e-2, -1.387039388740657e-1, 3.687424674597105e-1, -5.824733027278666e-1, 6.210004621745983e-1,
    -4.944515323274145e-1, 3.404879937665872e-1, -2.741127028184656e-1, 5.638259427386472e-1,
)
_ERFC_R = (
    -1.047766399936249e1, 1.297719955372516e1, -7.495518717768503e0, 2.921019019210786e0, -1.015265279202700e0,
    4.218463358204948e-1, -2.820767439740514e-1, 5.641895067754075e-1,
)
_ERF_T = (
    7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3, -2.685381193529856e-2, 1.128358514861418e-1,
    -3.761262582423300e-1, 1.128379165726710e0,
)
#: erfc(x) is 0 in float32 beyond ~10.05; clamping there keeps exp(-x^2) and 1/x finite.
_ERFC_HIGHEST = 10.5


class _Emitter:
    """Helpers over one builder and one value type (``float`` or ``<W x float>``)."""

    def __init__(self, builder: ir.IRBuilder, value_type: ir.Type) -> None:
        self.b = builder
        self.type = value_type
        self.width = value_type.count if isinstance(value_type, ir.VectorType) else 0
        self.int_type = ir.VectorType(I32, self.width) if self.width else I32

    def constant(self, value: float) -> ir.Constant:
        return ir.Constant(self.type, [float(value)] * self.width) if self.width else ir.Constant(F32, float(value))

    def integer(self, value: int) -> ir.Constant:
        return ir.Constant(self.int_type, [int(value)] * self.width) if self.width else ir.Constant(I32, int(value))

    def intrinsic(self, name: str, arity: int = 1) -> ir.Function:
        suffix = f"v{self.width}f32" if self.width else "f32"
        module = self.b.module
        full = f"llvm.{name}.{suffix}"
        existing = module.globals.get(full)
        if existing is not None:
            return existing
        return ir.Function(module, ir.FunctionType(self.type, [self.type] * arity), name=full)

    def call(self, name: str, *arguments: ir.Value) -> ir.Value:
        return self.b.call(self.intrinsic(name, len(arguments)), list(arguments))

    def add(self, a, b):
        return self.b.fadd(a, b, flags=FLAGS)

    def sub(self, a, b):
        return self.b.fsub(a, b, flags=FLAGS)

    def mul(self, a, b):
        return self.b.fmul(a, b, flags=FLAGS)

    def div(self, a, b):
        return self.b.fdiv(a, b, flags=FLAGS)

    def less(self, a, b):
        return self.b.fcmp_ordered("<", a, b)

    def greater(self, a, b):
        return self.b.fcmp_ordered(">", a, b)

    def select(self, condition, a, b):
        return self.b.select(condition, a, b)

    def polynomial(self, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
        """Horner's rule, highest degree first."""
        result = self.constant(coefficients[0])
        for coefficient in coefficients[1:]:
            result = self.add(self.mul(result, x), self.constant(coefficient))
        return result

    def power_of_two(self, n: ir.Value) -> ir.Value:
        """``2^n`` for an integer ``n`` in [-126, 127], built in the exponent field."""
        biased = self.b.add(n, self.integer(127))
        return self.b.bitcast(self.b.shl(biased, self.integer(23)), self.type)

    def with_nan(self, x: ir.Value, result: ir.Value) -> ir.Value:
        """``x`` where it is NaN, else ``result`` (which may be poison there)."""
        return self.select(self.b.fcmp_unordered("uno", x, x), x, result)


def _reduce(e: _Emitter, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """``(r, n)`` with ``x = n ln 2 + r``, ``n = round(x log2(e))`` as an integer vector and
    ``|r| <= ln2/2`` (Cody-Waite, two parts). ``x`` must be clamped to ``|x| < 2^21``."""
    shifted = e.add(e.mul(x, e.constant(_LOG2E)), e.constant(_ROUNDING_MAGIC))  # rounds to an integer
    n = e.sub(shifted, e.constant(_ROUNDING_MAGIC))
    r = e.sub(e.sub(x, e.mul(n, e.constant(_EXP_C1))), e.mul(n, e.constant(_EXP_C2)))
    integer = e.b.sub(e.b.bitcast(shifted, e.int_type), e.integer(_ROUNDING_MAGIC_BITS))
    return r, integer


def _exp_polynomial(e: _Emitter, r: ir.Value) -> ir.Value:
    """``exp(r)`` for ``|r| <= ln2/2``: ``1 + r + r^2 P(r)``."""
    return e.add(e.add(e.mul(e.polynomial(r, _EXP_POLYNOMIAL), e.mul(r, r)), r), e.constant(1.0))


def _clamp(e: _Emitter, x: ir.Value, lowest: float, highest: float) -> ir.Value:
    """``x`` clamped to ``[lowest, highest]``; a NaN stays a NaN (ordered compares are false)."""
    clamped = e.select(e.less(x, e.constant(lowest)), e.constant(lowest), x)
    return e.select(e.greater(clamped, e.constant(highest)), e.constant(highest), clamped)


def _exp(e: _Emitter, x: ir.Value) -> ir.Value:
    r, exponent = _reduce(e, _clamp(e, x, _EXP_LOWEST, _EXP_HIGHEST))
    y = _exp_polynomial(e, r)
    half = e.b.ashr(exponent, e.integer(1))
    return e.mul(e.mul(y, e.power_of_two(half)), e.power_of_two(e.b.sub(exponent, half)))


def _exp_without_subnormals(e: _Emitter, x: ir.Value) -> ir.Value:
    """``exp(x)``, except that results below ``2^-126`` (``x < -87.34``) are 0 or the
    smallest normal, not subnormals: for ``1 + exp(x)`` only. One scaling ``2^(n-1)``
    then a doubling (``n`` reaches 128 near the upper clamp, where ``2^128`` has no exponent
    field but the doubling overflows to ``inf`` as it should)."""
    r, exponent = _reduce(e, _clamp(e, x, _EXP_NORMAL_LOWEST, _EXP_HIGHEST))
    y = _exp_polynomial(e, r)
    return e.mul(e.mul(y, e.power_of_two(e.b.sub(exponent, e.integer(1)))), e.constant(2.0))


def _tanh(e: _Emitter, x: ir.Value) -> ir.Value:
    magnitude = e.call("fabs", x)
    square = e.mul(x, x)
    small = e.add(e.mul(e.mul(e.polynomial(square, _TANH_POLYNOMIAL), square), x), x)
    exponential = _exp_without_subnormals(e, e.mul(magnitude, e.constant(2.0)))
    large = e.sub(e.constant(1.0), e.div(e.constant(2.0), e.add(exponential, e.constant(1.0))))
    # copysign on both: x + x^3 P(x^2) turns -0 into +0, and tanh is odd
    return e.call("copysign", e.select(e.less(magnitude, e.constant(_TANH_SMALL)), small, large), x)


def _sigmoid(e: _Emitter, x: ir.Value) -> ir.Value:
    return e.div(e.constant(1.0), e.add(e.constant(1.0), _exp_without_subnormals(e, e.b.fneg(x))))


def _exp_of_negative_square(e: _Emitter, a: ir.Value) -> ir.Value:
    """``exp(-a^2)`` with the rounding error of ``a^2`` corrected to first order."""
    square = e.mul(a, a)
    mask = e.integer(-4096)  # 0xfffff000: the upper 12 significant bits, so head^2 is exact
    head = e.b.bitcast(e.b.and_(e.b.bitcast(a, e.int_type), mask), e.type)
    tail = e.sub(a, head)
    residual = e.add(e.add(e.sub(e.mul(head, head), square), e.mul(e.mul(e.constant(2.0), head), tail)), e.mul(tail, tail))
    return e.mul(_exp(e, e.b.fneg(square)), e.sub(e.constant(1.0), residual))


def _erfc_of_magnitude(e: _Emitter, a: ir.Value) -> ir.Value:
    """``erfc(a)`` for ``a >= 1`` (any value for smaller ``a``, which callers discard)."""
    a = e.select(e.greater(a, e.constant(_ERFC_HIGHEST)), e.constant(_ERFC_HIGHEST), a)
    reciprocal = e.div(e.constant(1.0), a)
    y = e.mul(reciprocal, reciprocal)
    near = e.polynomial(y, _ERFC_P)
    far = e.polynomial(y, _ERFC_R)
    p = e.select(e.less(a, e.constant(2.0)), near, far)
    return e.mul(e.mul(_exp_of_negative_square(e, a), reciprocal), p)


def _erf_small(e: _Emitter, x: ir.Value) -> ir.Value:
    """``erf(x)`` for ``|x| < 1``."""
    return e.mul(x, e.polynomial(e.mul(x, x), _ERF_T))


def _erf(e: _Emitter, x: ir.Value) -> ir.Value:
    magnitude = e.call("fabs", x)
    large = e.call("copysign", e.sub(e.constant(1.0), _erfc_of_magnitude(e, magnitude)), x)
    return e.select(e.less(magnitude, e.constant(1.0)), _erf_small(e, x), large)


def _erfc(e: _Emitter, x: ir.Value) -> ir.Value:
    magnitude = e.call("fabs", x)
    tail = _erfc_of_magnitude(e, magnitude)
    large = e.select(e.less(x, e.constant(0.0)), e.sub(e.constant(2.0), tail), tail)
    return e.select(e.less(magnitude, e.constant(1.0)), e.sub(e.constant(1.0), _erf_small(e, x)), large)


def _log(e: _Emitter, x: ir.Value) -> ir.Value:
    """Cephes ``logf``: ``x = m 2^k`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` read from the bits,
    ``log(m) = f - f^2/2 + f^3 P(f)`` with ``f = m - 1``, plus ``k ln 2`` in two parts."""
    subnormal = e.less(x, e.constant(_SMALLEST_NORMAL))
    scaled = e.select(subnormal, e.mul(x, e.constant(2.0**23)), x)
    bits = e.b.bitcast(scaled, e.int_type)
    exponent = e.b.sub(e.b.and_(e.b.lshr(bits, e.integer(23)), e.integer(0xFF)), e.integer(126))
    exponent = e.select(subnormal, e.b.sub(exponent, e.integer(23)), exponent)
    mantissa = e.b.bitcast(e.b.or_(e.b.and_(bits, e.integer(0x007FFFFF)), e.integer(0x3F000000)), e.type)  # [0.5, 1)
    low = e.less(mantissa, e.constant(_SQRT_HALF))
    k = e.b.sitofp(e.select(low, e.b.sub(exponent, e.integer(1)), exponent), e.type)
    f = e.sub(e.select(low, e.add(mantissa, mantissa), mantissa), e.constant(1.0))
    z = e.mul(f, f)
    y = e.mul(e.mul(f, z), e.polynomial(f, _LOG_POLYNOMIAL))
    y = e.add(y, e.mul(k, e.constant(_EXP_C2)))
    y = e.sub(y, e.mul(z, e.constant(0.5)))
    result = e.add(e.add(f, y), e.mul(k, e.constant(_EXP_C1)))
    result = e.select(e.b.fcmp_ordered("==", x, e.constant(0.0)), e.constant(-math.inf), result)
    result = e.select(e.b.fcmp_ordered("==", x, e.constant(math.inf)), x, result)
    result = e.select(e.less(x, e.constant(0.0)), e.constant(math.nan), result)
    return e.with_nan(x, result)


def _log1p(e: _Emitter, x: ir.Value) -> ir.Value:
    """``log(1 + x)`` by Goldberg's correction (D. Goldberg, "What every computer scientist
    should know about floating-point arithmetic", ACM Computing Surveys 23(1), 1991, thm. 4):
    ``u = 1 + x``; ``x`` where ``u == 1``, else ``log(u) (x / (u - 1))``."""
    u = e.add(x, e.constant(1.0))
    corrected = e.mul(_log(e, u), e.div(x, e.sub(u, e.constant(1.0))))
    corrected = e.select(e.b.fcmp_ordered("==", u, e.constant(math.inf)), u, corrected)
    corrected = e.select(e.b.fcmp_ordered("==", u, e.constant(0.0)), e.constant(-math.inf), corrected)
    return e.with_nan(x, e.select(e.b.fcmp_ordered("==", u, e.constant(1.0)), x, corrected))


def _sign(e: _Emitter, x: ir.Value) -> ir.Value:
    """``1`` for ``x > 0``, ``-1`` for ``x < 0``, ``+0`` for both zeros, NaN for NaN (TensorFlow's ``Sign``)."""
    zero_or_nan = e.select(e.b.fcmp_ordered("==", x, e.constant(0.0)), e.constant(0.0), x)
    negative = e.select(e.less(x, e.constant(0.0)), e.constant(-1.0), zero_or_nan)
    return e.select(e.greater(x, e.constant(0.0)), e.constant(1.0), negative)


def _expm1(e: _Emitter, x: ir.Value) -> ir.Value:
    """``exp(x) - 1``, accurate near 0, by Kahan's correction (W. Kahan, as in Goldberg 1991,
    and N. Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 1.14.1):
    ``u = exp(x)``; ``x`` where ``u == 1``, ``-1`` where ``u - 1 == -1``, else
    ``(u - 1) (x / log(u))``."""
    u = _exp(e, x)
    shifted = e.sub(u, e.constant(1.0))
    corrected = e.mul(shifted, e.div(x, _log(e, u)))
    corrected = e.select(e.b.fcmp_ordered("==", u, e.constant(math.inf)), u, corrected)
    corrected = e.select(e.b.fcmp_ordered("==", shifted, e.constant(-1.0)), shifted, corrected)
    return e.with_nan(x, e.select(e.b.fcmp_ordered("==", u, e.constant(1.0)), x, corrected))


_FUNCTIONS: dict[str, Callable[[_Emitter, ir.Value], ir.Value]] = {
    "log": _log,
    "log1p": _log1p,
    "sign": _sign,
    "expm1": _expm1,
    "exp": _exp,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "erfc": _erfc,
}

#: Names of the functions this module emits (``Unary`` ops of the same names).
MATH_FUNCTIONS = tuple(sorted(_FUNCTIONS))


def emit_math(builder: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """Emit ``name(x)`` inline at ``builder``; ``x`` is ``float`` or ``<W x float>``.

    Raises:
        KeyError: ``name`` is not in :data:`MATH_FUNCTIONS`.
    """
    return _FUNCTIONS[name](_Emitter(builder, x.type), x)


def math_function(module: ir.Module, name: str, value_type: ir.Type) -> ir.Function:
    """The ``internal alwaysinline`` function ``polytf.<name>.<type>`` of ``module``,
    defined on first use: ``value_type -> value_type``.

    Args:
        module: the module that calls it.
        name: one of :data:`MATH_FUNCTIONS`.
        value_type: ``float`` or ``<W x float>``.

    Raises:
        KeyError: ``name`` is not in :data:`MATH_FUNCTIONS`.
    """
    if name not in _FUNCTIONS:
        raise KeyError(f"no vector math function {name!r}; known: {', '.join(MATH_FUNCTIONS)}")
    suffix = f"v{value_type.count}f32" if isinstance(value_type, ir.VectorType) else "f32"
    full = f"polytf.{name}.{suffix}"
    existing = module.globals.get(full)
    if existing is not None:
        return existing
    function = ir.Function(module, ir.FunctionType(value_type, [value_type]), name=full)
    function.linkage = "internal"
    function.attributes.add("alwaysinline")
    function.attributes.add("nounwind")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.ret(emit_math(builder, name, function.args[0]))
    return function
