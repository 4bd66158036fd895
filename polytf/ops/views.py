"""View ops: ``Identity``, ``StopGradient``, ``Snapshot``, ``Reshape``, ``Squeeze``,
``ExpandDims`` (no code: the output aliases data input 0, row-major) and ``NoOp``
(nothing at all).

Sources: TensorFlow op definitions ``Identity``, ``StopGradient``, ``Snapshot``,
``Reshape``, ``Squeeze``, ``ExpandDims`` (tensorflow/core/ops/array_ops.cc) and ``NoOp``
(tensorflow/core/ops/no_op.cc).

* ``StopGradient`` and ``Snapshot`` are ``Identity`` at inference time.

* ``Reshape(tensor, shape)``: ``shape`` must be a compile-time constant 1-D int
  tensor; at most one entry may be ``-1`` (inferred from the element count).
* ``Squeeze(input)``: attr ``squeeze_dims`` (TF's GraphDef name; ``axis`` accepted
  too) lists the size-1 dimensions to remove, negative values counting from the end;
  an empty list removes every size-1 dimension.
* ``ExpandDims(input, axis)``: ``axis`` must be a compile-time constant scalar (or
  1-element) int in ``[-(rank + 1), rank]``; a size-1 dimension is inserted there
  (negative values count from the end of the output).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops.attributes import attr_ints
from polytf.ops.definition import ANY_DTYPE, NO_OUTPUT, VIEW, Arity, OpDefinition
from polytf.ops.traits import Forwarding

# --- Identity ------------------------------------------------------------------------


def infer_identity(node, input_types, input_constants):
    return (input_types[0],)


def reference_identity(node, inputs):
    return (np.asarray(inputs[0]),)


def infer_identity_n(node, input_types, input_constants):
    """``IdentityN(x0, ..., xN-1) -> (x0, ..., xN-1)``: output ``k`` is input ``k``."""
    return tuple(input_types)


def reference_identity_n(node, inputs):
    return tuple(np.asarray(x) for x in inputs)


# --- Reshape -------------------------------------------------------------------------


def _target_shape(node, input_type: TensorType, shape_value) -> tuple[int | None, ...]:
    if shape_value is None:
        raise ShapeError(
            f"Reshape's shape input ('{node.inputs[1] if len(node.inputs) > 1 else '?'}') must be a compile-time "
            "constant; polytf does not support data-dependent shapes"
        )
    shape_value = np.asarray(shape_value)
    if shape_value.ndim > 1:
        raise ShapeError(f"Reshape's shape input must be a 1-D int tensor, got shape {shape_value.shape}")
    if shape_value.dtype.kind not in "iu":
        raise ShapeError(f"Reshape's shape input must be int32 or int64, got {shape_value.dtype.name}")
    target = [int(d) for d in shape_value.reshape(-1)]
    unknown = [i for i, d in enumerate(target) if d == -1]
    if len(unknown) > 1:
        raise ShapeError(f"Reshape's shape {target} has more than one -1")
    if any(d < -1 for d in target):
        raise ShapeError(f"Reshape's shape {target} has a negative size")
    if not input_type.is_static:
        if unknown:
            return tuple(None if d == -1 else d for d in target)
        return tuple(target)
    count = input_type.element_count
    known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
    if unknown:
        if known == 0 or count % known != 0:
            raise ShapeError(f"cannot reshape {input_type} ({count} elements) to {target}")
        target[unknown[0]] = count // known
    elif known != count:
        raise ShapeError(f"cannot reshape {input_type} ({count} elements) to {target} ({known} elements)")
    return tuple(target)


def infer_reshape(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"Reshape takes 2 inputs (tensor, shape), got {len(input_types)}")
    shape = _target_shape(node, input_types[0], input_constants[1])
    return (TensorType(shape, input_types[0].dtype),)


def reference_reshape(node, inputs):
    x, shape = inputs
    return (np.reshape(np.asarray(x), tuple(int(d) for d in np.asarray(shape).reshape(-1))),)


# --- Squeeze -------------------------------------------------------------------------


def _squeeze_dims(node) -> tuple[int, ...]:
    if "squeeze_dims" in node.attrs:
        return attr_ints(node, "squeeze_dims")
    return attr_ints(node, "axis", ())


def _squeezed_axes(node, input_type: TensorType) -> tuple[int, ...]:
    rank = input_type.rank
    dims = _squeeze_dims(node)
    if not dims:
        return tuple(i for i, d in enumerate(input_type.shape) if d == 1)
    axes = []
    for d in dims:
        if not -rank <= d < rank:
            raise ShapeError(f"Squeeze dimension {d} is out of range for {input_type} (rank {rank})")
        axis = d % rank
        if input_type.shape[axis] not in (1, None):
            raise ShapeError(f"Squeeze cannot remove dimension {d} of {input_type}: its size is {input_type.shape[axis]}, not 1")
        axes.append(axis)
    return tuple(sorted(set(axes)))


def infer_squeeze(node, input_types, input_constants):
    (x,) = input_types
    axes = _squeezed_axes(node, x)
    return (TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype),)


def reference_squeeze(node, inputs):
    x = np.asarray(inputs[0])
    axes = _squeezed_axes(node, TensorType(tuple(x.shape), x.dtype.name))
    return (np.squeeze(x, axis=axes) if axes else x.copy(),)


# --- ExpandDims ----------------------------------------------------------------------


def _expand_axis(node, rank: int, axis_value) -> int:
    """The position of the new size-1 dimension in the output (rank ``rank + 1``)."""
    if axis_value is None:
        raise ShapeError(
            f"ExpandDims' axis input ('{node.inputs[1] if len(node.inputs) > 1 else '?'}') must be a compile-time constant"
        )
    axis_value = np.asarray(axis_value)
    if axis_value.size != 1 or axis_value.dtype.kind not in "iu":
        raise ShapeError(f"ExpandDims' axis must be a single int32/int64 value, got {axis_value!r}")
    axis = int(axis_value.reshape(-1)[0])
    if not -(rank + 1) <= axis <= rank:
        raise ShapeError(f"ExpandDims axis {axis} is out of range for an input of rank {rank} (allowed: [{-(rank + 1)}, {rank}])")
    return axis % (rank + 1)


def infer_expand_dims(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"ExpandDims takes 2 inputs (input, axis), got {len(input_types)}")
    x = input_types[0]
    axis = _expand_axis(node, x.rank, input_constants[1])
    return (TensorType(x.shape[:axis] + (1,) + x.shape[axis:], x.dtype),)


def reference_expand_dims(node, inputs):
    x = np.asarray(inputs[0])
    return (np.expand_dims(x, _expand_axis(node, x.ndim, inputs[1])),)


# --- NoOp ----------------------------------------------------------------------------


def infer_noop(node, input_types, input_constants):
    return ()


def reference_noop(node, inputs):
    return ()


def _view(op: str, infer, reference, **traits) -> OpDefinition:
    """A view of tensorflow/core/ops/array_ops.cc: no code, data input 0 only."""
    return OpDefinition(op, VIEW, infer, reference, None, data_inputs=(0,), source=f"tensorflow/core/ops/array_ops.cc: {op}", **traits)


IDENTITY = _view("Identity", infer_identity, reference_identity, arity=Arity(1, 1), forwards=Forwarding.FIRST_INPUT)
STOP_GRADIENT = _view("StopGradient", infer_identity, reference_identity, arity=Arity(1, 1), forwards=Forwarding.FIRST_INPUT)
SNAPSHOT = _view("Snapshot", infer_identity, reference_identity, arity=Arity(1, 1), forwards=Forwarding.FIRST_INPUT)
#: Keras' activations with a custom gradient (swish/silu) freeze to ``IdentityN``; the
#: identity removal pass forwards each output to its input, so it never reaches lowering.
IDENTITY_N = OpDefinition(
    "IdentityN", VIEW, infer_identity_n, reference_identity_n, None, source="tensorflow/core/ops/array_ops.cc: IdentityN", dtypes=ANY_DTYPE,
    arity=Arity(1, None), forwards=Forwarding.EACH_INPUT,
)
RESHAPE = _view("Reshape", infer_reshape, reference_reshape, arity=Arity(2, 2))
SQUEEZE = _view("Squeeze", infer_squeeze, reference_squeeze, arity=Arity(1, 1))
EXPAND_DIMS = _view("ExpandDims", infer_expand_dims, reference_expand_dims, dtypes=("float32", "int32"), arity=Arity(2, 2))
NOOP = OpDefinition("NoOp", NO_OUTPUT, infer_noop, reference_noop, None, data_inputs=(), source="tensorflow/core/ops/no_op.cc: NoOp", arity=Arity(0, 0))


def identity_node(name: str, tensor: str, control_inputs: tuple[str, ...] = (), dtype: str | None = None) -> Node:
    """An ``Identity`` node returning ``tensor`` (attr ``T``: ``dtype``, when known)."""
    return Node(name, IDENTITY.op, (tensor,), control_inputs, {"T": dtype} if dtype is not None else {})


def reshape_node(name: str, tensor: str, shape_tensor: str, dtype: str, control_inputs: tuple[str, ...] = ()) -> Node:
    """A ``Reshape(tensor, shape_tensor)`` node of ``dtype`` values (an int32 shape)."""
    return Node(name, RESHAPE.op, (tensor, shape_tensor), control_inputs, {"T": dtype, "Tshape": "int32"})
