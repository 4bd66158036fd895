"""Element-wise unary math ops: ``Relu6``, ``Neg``, ``Square``, ``Sqrt``, ``Rsqrt``,
``Exp``, ``Tanh``, ``Sigmoid``, ``Erf``, ``Erfc``, ``Log``, ``Log1p``, ``Abs``, ``Sign``,
``Floor``, ``Ceil``, ``Round``, ``Reciprocal``/``Inv``, and the activations ``LeakyRelu``,
``Elu``, ``Selu``, ``Softplus``, ``Softsign``.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``Neg``, ``Square``,
``Sqrt``, ``Rsqrt``, ``Exp``, ``Tanh``, ``Sigmoid``, ``Erf``, ``Erfc``, ``Log``, ``Log1p``,
``Abs``, ``Sign``, ``Floor``, ``Ceil``, ``Round``, ``Reciprocal``, ``Inv``;
tensorflow/core/ops/nn_ops.cc: ``Relu6``, ``LeakyRelu``, ``Elu``, ``Selu``, ``Softplus``,
``Softsign``) and their Eigen functors (tensorflow/core/kernels/relu_op_functor.h,
softplus_op.h). Each maps ``x: [D0, ..., Dn-1] -> y`` of the same shape and dtype:

* ``Relu6(x) = min(max(x, 0), 6)`` (``maximum``/``minimum``: NaN stays NaN);
  ``LeakyRelu(x) = x > 0 ? x : alpha x`` (attr ``alpha``, default 0.2), a selection as in
  TensorFlow's functor, which also holds for ``alpha`` above 1 or below 0
* ``Neg(x) = -x``, ``Square(x) = x * x``, ``Abs``, ``Sign`` (+0 for zeros, NaN for NaN)
* ``Sqrt(x)``, ``Rsqrt(x) = 1 / sqrt(x)`` (NaN for ``x < 0``, ``±inf`` at ``±0``)
* ``Exp``, ``Tanh``, ``Sigmoid(x) = 1 / (1 + exp(-x))``, ``Erf``, ``Erfc(x) = 1 - erf(x)``
* ``Log`` (``-inf`` at 0, NaN below), ``Log1p(x) = log(1 + x)``
* ``Floor``, ``Ceil``, ``Round`` (half to even, as TensorFlow), ``Reciprocal(x) = Inv(x) = 1 / x``
* ``Elu(x) = x < 0 ? expm1(x) : x``; ``Selu(x) = x < 0 ? scale alpha expm1(x) : scale x``
  with TensorFlow's constants (selections, as its functors: ``-0.0`` and NaN pass through)
* ``Softplus(x) = log(1 + exp(x))``, in the stable form ``max(x, 0) + log1p(exp(-|x|))``
* ``Softsign(x) = x / (1 + |x|)`` (NaN at ``±inf``, as TensorFlow)

NaN and ±inf follow TensorFlow's CPU kernels (tensorflow/core/kernels/relu_op_functor.h:
``Relu6``'s ``cwiseMax``/``cwiseMin`` propagate NaN; ``Elu``, ``Selu`` and ``LeakyRelu`` are
``select``s), as ``tests/e2e/test_float_semantics.py`` checks against TensorFlow itself.

The numpy references compute in float64 and round to float32 (the correctly rounded
result, which TensorFlow's Eigen kernels match to a few ulp). ``Neg``, ``Square``, ``Abs``
and ``Sign`` also fold int32/int64 compile-time constants (shape arithmetic), keeping the
dtype.

Lowering: one statement over the output shape, ``S[d...]: Y[d...] = f(X[d...])``, with
``f`` built from :class:`~polytf.poly.expression.Unary` and ``Binary`` operators.
Category ELEMENTWISE, so each fuses into the group of its producer; the code generator
emits exp, expm1, log, log1p, tanh, sigmoid, erf, erfc and sign as vectorisable
straight-line code (:mod:`polytf.targets.math_functions`) and floor, ceil, round and abs
as LLVM intrinsics that are single vector instructions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polytf.errors import ShapeError
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_access, pointwise
from polytf.ops.traits import Algebra, Operation
from polytf.poly.expression import (
    BINARY_OPS,
    COMPARE_OPS,
    UNARY_OPS,
    Access,
    Binary,
    Compare,
    Constant,
    Expr,
    Load,
    Select,
    Unary,
)


def _relu6(x: Expr, node) -> Expr:
    return Binary("minimum", Binary("maximum", x, Constant(0.0)), Constant(6.0))


def _leaky_relu(x: Expr, node) -> Expr:
    """``x > 0 ? x : alpha x`` (tensorflow/core/kernels/relu_op_functor.h, ``LeakyRelu``)."""
    alpha = float(node.attr("alpha", 0.2))
    return Select(Compare("greater", x, Constant(0.0)), x, Binary("mul", Constant(alpha), x))


def _elu(x: Expr, node) -> Expr:
    """``x < 0 ? expm1(x) : x`` (relu_op_functor.h, ``Elu``: ``exp(x) - 1``)."""
    return Select(Compare("less", x, Constant(0.0)), Unary("expm1", x), x)


#: Selu's constants (tensorflow/core/kernels/relu_op_functor.h; Klambauer et al., NeurIPS 2017).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _selu(x: Expr, node) -> Expr:
    """``x < 0 ? scale alpha expm1(x) : scale x`` (relu_op_functor.h, ``Selu``)."""
    negative = Binary("mul", Constant(SELU_SCALE * SELU_ALPHA), Unary("expm1", x))
    return Select(Compare("less", x, Constant(0.0)), negative, Binary("mul", Constant(SELU_SCALE), x))


def _softplus(x: Expr, node) -> Expr:
    tail = Unary("log1p", Unary("exp", Unary("neg", Unary("abs", x))))
    return Binary("add", Binary("maximum", x, Constant(0.0)), tail)


def _softsign(x: Expr, node) -> Expr:
    return Binary("div", x, Binary("add", Constant(1.0), Unary("abs", x)))


def _reciprocal(x: Expr, node) -> Expr:
    return Binary("div", Constant(1.0), x)


def _unary(name: str) -> Callable[[Expr, object], Expr]:
    return lambda x, node: Unary(name, x)


#: op -> (body of the statement from the loaded element and the node, whether integer constants fold)
_UNARY: dict[str, tuple[Callable[[Expr, object], Expr], bool]] = {
    "Relu6": (_relu6, False),
    "Neg": (_unary("neg"), True),
    "Square": (_unary("square"), True),
    "Sqrt": (_unary("sqrt"), False),
    "Rsqrt": (_unary("rsqrt"), False),
    "Exp": (_unary("exp"), False),
    "Tanh": (_unary("tanh"), False),
    "Sigmoid": (_unary("sigmoid"), False),
    "Erf": (_unary("erf"), False),
    "Erfc": (_unary("erfc"), False),
    "Log": (_unary("log"), False),
    "Log1p": (_unary("log1p"), False),
    "Abs": (_unary("abs"), True),
    "Sign": (_unary("sign"), True),
    "Floor": (_unary("floor"), False),
    "Ceil": (_unary("ceil"), False),
    "Round": (_unary("round"), False),
    "Reciprocal": (_reciprocal, False),
    "Inv": (_reciprocal, False),
    "LeakyRelu": (_leaky_relu, False),
    "Elu": (_elu, False),
    "Selu": (_selu, False),
    "Softplus": (_softplus, False),
    "Softsign": (_softsign, False),
}

_SOURCES = {op: f"tensorflow/core/ops/nn_ops.cc: {op}" for op in ("Relu6", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign")}


def infer(node, input_types, input_constants):
    """``x -> x``'s type.

    Raises:
        ShapeError: not exactly one input.
    """
    if len(input_types) != 1:
        raise ShapeError(f"{node.op} takes 1 input, got {len(input_types)}")
    return (input_types[0],)


def _numpy_value(expression: Expr, x: np.ndarray) -> np.ndarray:
    """Evaluate a lowering body on a whole array in float64 (the reference)."""
    if isinstance(expression, Load):
        return x
    if isinstance(expression, Constant):
        return np.float64(expression.value)
    if isinstance(expression, Unary):
        return UNARY_OPS[expression.op](_numpy_value(expression.operand, x))
    if isinstance(expression, Binary):
        return BINARY_OPS[expression.op](_numpy_value(expression.lhs, x), _numpy_value(expression.rhs, x))
    if isinstance(expression, Compare):
        return COMPARE_OPS[expression.op](_numpy_value(expression.lhs, x), _numpy_value(expression.rhs, x))
    if isinstance(expression, Select):
        return np.where(_numpy_value(expression.condition, x), _numpy_value(expression.then, x), _numpy_value(expression.otherwise, x))
    raise TypeError(f"unexpected expression {expression!r}")


def reference(node, inputs):
    """float32 result, computed in float64 and rounded; integer ``Neg``/``Square``/``Abs``/``Sign`` keep the dtype.

    Raises:
        ShapeError: not exactly one input.
    """
    if len(inputs) != 1:
        raise ShapeError(f"{node.op} takes 1 input, got {len(inputs)}")
    body, integer_ok = _UNARY[node.op]
    x = np.asarray(inputs[0])
    if integer_ok and np.issubdtype(x.dtype, np.integer):
        return (np.asarray(_numpy_value(body(Load(Access.of("x")), node), x), dtype=x.dtype),)
    value = np.asarray(x, dtype=np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        result = _numpy_value(body(Load(Access.of("x")), node), value)
    return (np.asarray(result, dtype=np.float32),)


def lower(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: Y[d...] = f(X[d...])``."""
    (x,) = inputs
    (y,) = outputs
    body, _ = _UNARY[node.op]
    value = body(Load(broadcast_access(x.name, x.shape, y.shape)), node)
    return pointwise(node, y, value, context)


#: ``Neg(Neg(x)) == x``.
_ALGEBRA = {"Neg": Algebra(Operation.NEGATE, involution=True)}

DEFINITIONS = {
    op: OpDefinition(
        op, ELEMENTWISE, infer, reference, lower, source=_SOURCES.get(op, f"tensorflow/core/ops/math_ops.cc: {op}"),
        dtypes=("float32", "int32", "int64") if integer_ok else ("float32",), foldable=integer_ok, arity=Arity(1, 1), algebra=_ALGEBRA.get(op),
    )
    for op, (_, integer_ok) in _UNARY.items()
}
