"""``Cast``: convert a tensor to another dtype.

Source: TensorFlow op definition ``Cast`` (tensorflow/core/ops/math_ops.cc): input ``x``
of dtype ``SrcT``, output of the same shape and dtype ``DstT`` (attr ``Truncate`` only
matters between floating-point types and is ignored). Float to integer conversion
truncates toward zero (C++ ``static_cast``; NaN and out-of-range values are undefined
there and give numpy's result here); bool is ``x != 0``.

What polytf compiles:

* a run-time ``Cast`` between float32, int32, int64 and bool: one element-wise statement
  ``Y[d...] = DstT(X[d...])`` (:class:`~polytf.poly.expression.Convert`), e.g. BERT's
  attention mask ``Cast(int32 -> float32)``;
* a ``Cast`` of a compile-time constant (shape arithmetic, ``Shape -> Cast``) of any of
  float32/float64/int32/int64/bool is folded by shape inference with the numpy reference
  (tensors of up to ``constant_inputs.FOLD_MAX_ELEMENTS`` elements);
* float64 at run time is a :class:`ShapeError` naming the node.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import FOLD_MAX_ELEMENTS
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_access, pointwise
from polytf.poly.expression import Convert, Load

#: dtypes a compile-time constant may be cast between.
CAST_DTYPES = ("float32", "float64", "int32", "int64", "bool")
COMPUTE_DTYPE = "float32"
#: dtypes a run-time Cast converts between.
RUNTIME_CAST_DTYPES = ("float32", "int32", "int64", "bool")


def _dtype_attr(node, name: str, default: str | None) -> str:
    value = node.attr(name, default)
    if value is None:
        raise ShapeError(f"Cast node '{node.name}' has no {name} attr")
    if not isinstance(value, str):
        raise ShapeError(f"Cast node '{node.name}': attr {name} must be a dtype, got {value!r}")
    if value not in CAST_DTYPES:
        raise ShapeError(f"Cast node '{node.name}': {name}={value} is not supported (polytf casts between {', '.join(CAST_DTYPES)})")
    return value


def _constant_fits(value: np.ndarray) -> bool:
    """Whether shape inference folds a constant of this size (see ``FOLD_MAX_ELEMENTS``)."""

    return value.size <= FOLD_MAX_ELEMENTS


def infer(node, input_types, input_constants):
    """``x: [D...] of SrcT -> [D...] of DstT``.

    Raises:
        ShapeError: not one input, an unsupported dtype, ``SrcT`` different from the
            input's dtype, or a run-time (not compile-time constant) cast that is not
            float32 -> float32.
    """
    if len(input_types) != 1:
        raise ShapeError(f"Cast takes 1 input, got {len(input_types)}")
    (x,) = input_types
    source = _dtype_attr(node, "SrcT", x.dtype)
    destination = _dtype_attr(node, "DstT", None)
    if source != x.dtype:
        raise ShapeError(f"Cast node '{node.name}': SrcT={source} but its input '{node.inputs[0]}' has dtype {x.dtype}")
    constant = input_constants[0] if input_constants else None
    runtime = source in RUNTIME_CAST_DTYPES and destination in RUNTIME_CAST_DTYPES
    if not runtime and (constant is None or not _constant_fits(np.asarray(constant))):
        what = "a run-time tensor" if constant is None else "a constant too large to fold at compile time"
        raise ShapeError(
            f"Cast node '{node.name}' converts {what} from {source} to {destination}; generated code casts between "
            f"{', '.join(RUNTIME_CAST_DTYPES)} and other dtypes only in compile-time constants (shape arithmetic). "
            "Export the model without float64 tensors, or make this one a constant."
        )
    return (TensorType(x.shape, destination),)


def reference(node, inputs):
    """numpy ``astype`` (truncation toward zero for float -> int, ``!= 0`` for bool)."""
    x = np.asarray(inputs[0])
    destination = _dtype_attr(node, "DstT", None)
    with np.errstate(invalid="ignore"):
        return (np.asarray(x.astype(destination)),)


def lower(node, inputs, outputs, context):
    """``S[d...]: Y[d...] = DstT(X[d...])`` (a copy when the dtypes agree)."""
    (x,) = inputs
    (y,) = outputs
    if x.type.dtype not in RUNTIME_CAST_DTYPES or y.type.dtype not in RUNTIME_CAST_DTYPES:
        raise ShapeError(f"Cast node '{node.name}': cannot generate code for {x.type.dtype} -> {y.type.dtype}")
    value = Load(broadcast_access(x.name, x.shape, y.shape))
    if x.type.dtype != y.type.dtype:
        value = Convert(y.type.dtype, value)
    return pointwise(node, y, value, context)


CAST = OpDefinition(
    "Cast", ELEMENTWISE, infer, reference, lower, source="tensorflow/core/ops/math_ops.cc: Cast", dtypes=CAST_DTYPES,
    foldable=True, arity=Arity(1, 1),
)
