"""Float classification and checks: ``IsNan``, ``IsInf``, ``IsFinite`` and ``CheckNumerics``.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``IsNan``, ``IsInf``,
``IsFinite``; tensorflow/core/ops/array_ops.cc: ``CheckNumerics``) and the CPU kernel of
the latter (tensorflow/core/kernels/check_numerics_op.cc):

* ``IsNan(x)``, ``IsInf(x)`` (``+inf`` or ``-inf``), ``IsFinite(x)`` (neither):
  ``x: [D...]`` float32 -> bool ``[D...]``.
* ``CheckNumerics(tensor; message)``: ``tensor: [D...]`` float32 -> the same tensor, when
  every element is finite; otherwise the call fails with ``InvalidArgumentError``:
  ``"<message> : Tensor had NaN values"`` (``"Inf values"``, ``"Inf and NaN values"``).

Lowering: the classifications are one point-wise statement
``Y[d...] = is<test>(X[d...])`` (:class:`~polytf.poly.expression.FloatTest`), category
ELEMENTWISE. ``CheckNumerics`` copies its input and, in the same kernel, reduces a status
of two flags (``STATUS[0]``: some element is NaN; ``STATUS[1]``: some element is ±inf)::

    S0[k]:    STATUS[k] = false                                   (k < 2)
    S1[d...]: STATUS[0] = STATUS[0] or isnan(X[d...])
    S2[d...]: STATUS[1] = STATUS[1] or isinf(X[d...])
    S3[d...]: Y[d...] = X[d...]

``STATUS`` is a kernel temporary, so each call has its own (generated code stays
re-entrant) and the kernel reads nothing outside ``X``. The tests of S1 and S2 carry the
node and its message; the runtime reads the status after the kernel
(:func:`polytf.poly.numerics_checks.run_time_numerics_checks`,
:func:`polytf.runtime.numerics_checks.check_numerics`) and raises
:class:`~polytf.errors.InvalidArgumentError` from the model's call. It is a REDUCTION: it
starts a kernel of its own (which later element-wise nodes join), so that its status
reductions never enter a contraction's micro-kernel.

The checks hold with TensorFlow's float semantics, polytf's default; with
``CodegenConfig(fast_math=True)`` LLVM may assume no value is NaN or infinite and drop them.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import InvalidArgumentError, ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.definition import ELEMENTWISE, REDUCTION, Arity, OpDefinition
from polytf.ops.elementwise import pointwise
from polytf.poly.expression import FLOAT_TESTS, Access, Constant, FloatTest, Load, Logical
from polytf.poly.numerics_checks import STATUS_INFINITY, STATUS_NAN, STATUS_SHAPE
from polytf.poly.statement import Statement

#: TensorFlow op -> float test of :data:`~polytf.poly.expression.FLOAT_TESTS`
CLASSIFICATIONS = {"IsNan": "nan", "IsInf": "inf", "IsFinite": "finite"}


def _float_input(node, input_types) -> TensorType:
    """The one float32 input.

    Raises:
        ShapeError: not one input, or not float32.
    """
    if len(input_types) != 1:
        raise ShapeError(f"{node.op} takes 1 input, got {len(input_types)}")
    (x,) = input_types
    if x.dtype != "float32":
        raise ShapeError(f"{node.op} node '{node.name}' takes a float32 tensor, got {x}")
    return x


def infer_classification(node, input_types, input_constants):
    """``x: [D...]`` float32 -> bool ``[D...]``."""
    return (TensorType(_float_input(node, input_types).shape, "bool"),)


def reference_classification(node, inputs):
    return (np.asarray(FLOAT_TESTS[CLASSIFICATIONS[node.op]](np.asarray(inputs[0], dtype=np.float32)), dtype=bool),)


def lower_classification(node, inputs, outputs, context):
    """``S[d...]: Y[d...] = is<test>(X[d...])``."""
    (x,) = inputs
    (y,) = outputs
    iterators = tuple(f"d{i}" for i in range(len(y.shape)))
    return pointwise(node, y, FloatTest(CLASSIFICATIONS[node.op], Load(Access.of(x.name, *iterators))), context)


# --- CheckNumerics -----------------------------------------------------------------------


def infer_check(node, input_types, input_constants):
    """``tensor: [D...]`` float32 -> float32 ``[D...]``.

    Raises:
        ShapeError: not one float32 input, or a ``message`` that is not text.
    """
    attr_string(node, "message", "")
    return (_float_input(node, input_types),)


def failure(status_nan: bool, status_infinity: bool, node: str, message: str) -> str | None:
    """TensorFlow's error text for a CheckNumerics node that found NaN and/or ±inf
    (check_numerics_op.cc: ``"<message> : Tensor had Inf and NaN values"``), with the node
    named; None when it found neither."""
    if not (status_nan or status_infinity):
        return None
    kinds = " and ".join(kind for kind, found in (("Inf", status_infinity), ("NaN", status_nan)) if found)
    return f"{message} : Tensor had {kinds} values (CheckNumerics node '{node}')"


def reference_check(node, inputs):
    """The tensor itself.

    Raises:
        InvalidArgumentError: some element is NaN or ±inf (:func:`failure`'s text).
    """
    x = np.asarray(inputs[0], dtype=np.float32)
    text = failure(bool(np.isnan(x).any()), bool(np.isinf(x).any()), node.name, attr_string(node, "message", ""))
    if text is not None:
        raise InvalidArgumentError(text)
    return (x.copy(),)


def lower_check(node, inputs, outputs, context):
    """The status reductions and the copy (module docstring)."""
    (x,) = inputs
    (y,) = outputs
    message = attr_string(node, "message", "")
    iterators = tuple(f"d{i}" for i in range(len(y.shape)))
    source = Load(Access.of(x.name, *iterators))
    status = context.temporary(STATUS_SHAPE, "bool")

    def statement(names, extents, write, value):
        return Statement(context.statement_name(), tuple(names), tuple(extents), write, value, node=node.name, op=node.op)

    def flag(position: int, test: str) -> Statement:
        element = Access.of(status.name, position)
        return statement(
            iterators, y.shape, element, Logical("or", Load(element), FloatTest(test, source, node=node.name, message=message))
        )

    return [
        statement(("d0",), STATUS_SHAPE, Access.of(status.name, "d0"), Constant(0, "bool")),
        flag(STATUS_NAN, "nan"),
        flag(STATUS_INFINITY, "inf"),
        statement(iterators, y.shape, Access.of(y.name, *iterators), source),
    ]


DEFINITIONS = {
    op: OpDefinition(
        op,
        ELEMENTWISE,
        infer_classification,
        reference_classification,
        lower_classification,
        source=f"tensorflow/core/ops/math_ops.cc: {op}",
        foldable=True,
        arity=Arity(1, 1),
    )
    for op in CLASSIFICATIONS
}
CHECK_NUMERICS = OpDefinition(
    "CheckNumerics",
    REDUCTION,
    infer_check,
    reference_check,
    lower_check,
    source="tensorflow/core/ops/array_ops.cc: CheckNumerics",
    arity=Arity(1, 1),
)


__all__ = ["CHECK_NUMERICS", "CLASSIFICATIONS", "DEFINITIONS", "failure"]
