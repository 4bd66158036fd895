"""Element-wise unary math ops: ``Relu6``, ``Neg``, ``Square``, ``Sqrt``, ``Rsqrt``,
``Exp``, ``Tanh``, ``Sigmoid``, ``Erf``, ``Erfc``.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``Neg``, ``Square``,
``Sqrt``, ``Rsqrt``, ``Exp``, ``Tanh``, ``Sigmoid``, ``Erf``, ``Erfc``;
tensorflow/core/ops/nn_ops.cc: ``Relu6``). Each maps ``x: [D0, ..., Dn-1] -> y`` of the
same shape and dtype:

* ``Relu6(x) = min(max(x, 0), 6)``
* ``Neg(x) = -x``, ``Square(x) = x * x``
* ``Sqrt(x)``, ``Rsqrt(x) = 1 / sqrt(x)`` (NaN for ``x < 0``, ``inf`` at 0)
* ``Exp``, ``Tanh``, ``Sigmoid(x) = 1 / (1 + exp(-x))``, ``Erf``, ``Erfc(x) = 1 - erf(x)``

The numpy references compute in float64 and round to float32 (the correctly rounded
result, which TensorFlow's Eigen kernels match to a few ulp). ``Neg`` and ``Square`` also
fold int32/int64 compile-time constants (shape arithmetic), keeping the dtype.

Lowering: one statement over the output shape, ``S[d...]: Y[d...] = f(X[d...])``, with
``f`` a :class:`~polytf.poly.expression.Unary` (``Relu6``: ``min(max(x, 0), 6)``).
Category ELEMENTWISE, so each fuses into the group of its producer; the code generator
emits exp, tanh, sigmoid, erf and erfc as vectorisable straight-line code
(:mod:`polytf.targets.math_functions`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polytf.errors import ShapeError
from polytf.ops.registry import ELEMENTWISE, OpDefinition, register
from polytf.poly.expression import UNARY_OPS, Access, Binary, Constant, Expr, Load, Unary
from polytf.poly.statement import Statement


def _relu6(x: Expr) -> Expr:
    return Binary("min", Binary("max", x, Constant(0.0)), Constant(6.0))


#: op -> (body of the statement from the loaded element, whether integer constants fold)
_UNARY: dict[str, tuple[Callable[[Expr], Expr], bool]] = {
    "Relu6": (_relu6, False),
    "Neg": (lambda x: Unary("neg", x), True),
    "Square": (lambda x: Unary("square", x), True),
    "Sqrt": (lambda x: Unary("sqrt", x), False),
    "Rsqrt": (lambda x: Unary("rsqrt", x), False),
    "Exp": (lambda x: Unary("exp", x), False),
    "Tanh": (lambda x: Unary("tanh", x), False),
    "Sigmoid": (lambda x: Unary("sigmoid", x), False),
    "Erf": (lambda x: Unary("erf", x), False),
    "Erfc": (lambda x: Unary("erfc", x), False),
}

_SOURCES = {"Relu6": "tensorflow/core/ops/nn_ops.cc: Relu6"}


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
        return {"min": np.minimum, "max": np.maximum}[expression.op](_numpy_value(expression.lhs, x), _numpy_value(expression.rhs, x))
    raise TypeError(f"unexpected expression {expression!r}")


def reference(node, inputs):
    """float32 result, computed in float64 and rounded; integer ``Neg``/``Square`` keep the dtype.

    Raises:
        ShapeError: not exactly one input.
    """
    if len(inputs) != 1:
        raise ShapeError(f"{node.op} takes 1 input, got {len(inputs)}")
    body, integer_ok = _UNARY[node.op]
    x = np.asarray(inputs[0])
    if integer_ok and np.issubdtype(x.dtype, np.integer):
        return (np.asarray(_numpy_value(body(Load(Access.of("x"))), x), dtype=x.dtype),)
    value = np.asarray(x, dtype=np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        result = _numpy_value(body(Load(Access.of("x"))), value)
    return (np.asarray(result, dtype=np.float32),)


def lower(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: Y[d...] = f(X[d...])``."""
    (x,) = inputs
    (y,) = outputs
    iterators = tuple(f"d{i}" for i in range(len(y.shape)))
    body, _ = _UNARY[node.op]
    value = body(Load(Access.of(x.name, *iterators)))
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), value, node=node.name, op=node.op)]


DEFINITIONS = {
    op: register(
        OpDefinition(
            op,
            ELEMENTWISE,
            infer,
            reference,
            lower,
            source=_SOURCES.get(op, f"tensorflow/core/ops/math_ops.cc: {op}"),
            dtypes=("float32", "int32", "int64") if integer_ok else ("float32",),
            foldable=integer_ok,
        )
    )
    for op, (_, integer_ok) in _UNARY.items()
}
