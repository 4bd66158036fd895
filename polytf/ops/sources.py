"""Source ops: ``Placeholder`` (a model input) and ``Const`` (a constant buffer).

Source: TensorFlow op definitions ``Placeholder`` and ``Const``
(tensorflow/core/ops/array_ops.cc). Neither generates code: a placeholder is a
kernel argument supplied by the caller, a constant is a buffer known at compile time.

* ``Placeholder``: attr ``dtype`` (numpy dtype name) and ``shape`` (tuple of
  ``int | None``, ``None`` for an unknown dimension; ``None`` for an unknown rank).
* ``Const``: attr ``value`` (a numpy array); its output has that array's shape and dtype.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.definition import SOURCE, Arity, OpDefinition


def dtype_name(dtype) -> str:
    """Normalise a dtype given as a name, a numpy dtype or a numpy type to its name."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def placeholder_shape(node) -> tuple[int | None, ...] | None:
    """The declared shape of a placeholder: a tuple (``None`` = unknown dimension), or
    ``None`` when the rank is unknown. Negative sizes (GraphDef's ``-1``) mean unknown."""
    shape = node.attr("shape")
    if shape is None:
        return None
    if not isinstance(shape, tuple) or not all(d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in shape):
        raise ShapeError(f"placeholder '{node.name}' has a shape attribute that is not a shape: {shape!r}")
    return tuple(None if d is None or d < 0 else d for d in shape)


def infer_placeholder(node, input_types, input_constants):
    shape = placeholder_shape(node)
    dtype = dtype_name(attr_string(node, "dtype"))
    if shape is None:
        raise ShapeError(
            f"placeholder '{node.name}' has unknown rank; fix it with --input {node.name}:D0,D1,... (CLI) "
            f"or input_shapes={{'{node.name}': (D0, D1, ...)}} (API)"
        )
    return (TensorType(shape, dtype),)


def reference_placeholder(node, inputs):
    raise ShapeError(f"placeholder '{node.name}' has no value: it is a model input that the caller supplies")


def infer_const(node, input_types, input_constants):
    value = node.attr("value")
    if value is None:
        raise ShapeError(f"Const node '{node.name}' has no 'value' attribute")
    value = np.asarray(value)
    return (TensorType(tuple(int(d) for d in value.shape), value.dtype.name),)


def reference_const(node, inputs):
    return (np.asarray(node.attr("value")),)


def static_const(node, input_types):
    """A ``Const``'s value: known from the node alone."""
    return reference_const(node, ())


PLACEHOLDER = OpDefinition(
    "Placeholder", SOURCE, infer_placeholder, reference_placeholder, None, data_inputs=(), source="tensorflow/core/ops/array_ops.cc: Placeholder", arity=Arity(0, 0)
)
CONST = OpDefinition(
    "Const", SOURCE, infer_const, reference_const, None, data_inputs=(), source="tensorflow/core/ops/array_ops.cc: Const",
    dtypes=("float32", "int32", "int64"), static_value=static_const, arity=Arity(0, 0),
)


def const_node(name: str, value: np.ndarray, control_inputs: tuple[str, ...] = ()) -> Node:
    """A ``Const`` node holding ``value``, the way the frontend decodes one: attrs ``value``
    (the numpy array) and ``dtype`` (its dtype name)."""
    value = np.asarray(value)
    return Node(name, CONST.op, (), control_inputs, {"dtype": value.dtype.name, "value": value})


def const_value(node: Node) -> np.ndarray | None:
    """The value a ``Const`` node holds; None for a node of another op or without a value."""
    if node.op != CONST.op or node.attr("value") is None:
        return None
    return np.asarray(node.attr("value"))
