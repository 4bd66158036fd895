"""Elementwise ops: ``AddV2``/``Add``, ``Sub``, ``Mul``, ``SquaredDifference`` (with
numpy/TensorFlow broadcasting), ``BiasAdd`` and ``Relu``.

Sources: TensorFlow op definitions ``AddV2``, ``Add``, ``Sub``, ``Mul``,
``SquaredDifference`` and ``BiasAdd`` (tensorflow/core/ops/math_ops.cc, nn_ops.cc) and
``Relu`` (tensorflow/core/ops/nn_ops.cc). Unary math ops are in :mod:`polytf.ops.unary`.

* Binary ops broadcast like numpy: shapes are aligned on the right and a dimension
  of size 1 (or a missing leading dimension) is repeated.
* ``SquaredDifference(x, y) = (x - y) * (x - y)``.
* ``BiasAdd(value, bias)``: ``value`` of rank >= 2, ``bias`` of rank 1 with the size of
  ``value``'s last dimension (data_format ``NHWC``; with ``NCHW``, along axis 1: expanded
  into an ``AddV2`` of a ``[C, 1, ...]`` view of the bias).
* ``Relu(x) = max(x, 0)``, NaN for NaN (``maximum``: TensorFlow's ``cwiseMax`` propagates
  NaN, tensorflow/core/kernels/relu_op_functor.h).

Lowering: one statement over the output shape, iterators ``d0..d{R-1}``; an input of
lower rank skips the leading iterators, and a size-1 input dimension that is
broadcast is indexed with the constant 0.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.expansion import Expansion, NodeAdder
from polytf.ops.traits import Algebra, Operation
from polytf.poly.expression import Access, Binary, Constant, Load, Unary
from polytf.poly.statement import Statement


def broadcast_shapes(*shapes: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """numpy broadcasting of static or partly unknown shapes.

    Raises:
        ShapeError: two dimensions differ and neither is 1.
    """
    rank = max((len(s) for s in shapes), default=0)
    result: list[int | None] = []
    for axis in range(rank):
        sizes = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        known = {d for d in sizes if d is not None and d != 1}
        if len(known) > 1:
            raise ShapeError(
                f"shapes {' and '.join(_shape_text(s) for s in shapes)} cannot be broadcast together (dimension {axis})"
            )
        if known:
            result.append(known.pop())
        elif any(d is None for d in sizes):
            result.append(None)
        else:
            result.append(1)
    return tuple(result)


def _shape_text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def broadcast_access(name: str, input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> Access:
    """Access of an input of ``input_shape`` from the output point ``(d0..d{R-1})``."""
    offset = len(output_shape) - len(input_shape)
    if offset < 0:
        raise ShapeError(f"input {_shape_text(input_shape)} has a higher rank than the output {_shape_text(output_shape)}")
    index = []
    for axis, size in enumerate(input_shape):
        out_size = output_shape[axis + offset]
        if size == out_size:
            index.append(f"d{axis + offset}")
        elif size == 1:
            index.append(0)
        else:
            raise ShapeError(f"input {_shape_text(input_shape)} does not broadcast to {_shape_text(output_shape)}")
    return Access.of(name, *index)


def pointwise(node, output, value, context) -> list[Statement]:
    """The one statement of a point-wise op: ``S[d0..d{R-1}]: Y[d...] = value`` over
    ``output``'s shape (``value`` indexes its operands with the iterators ``d0..d{R-1}``,
    e.g. through :func:`broadcast_access`)."""
    iterators = tuple(f"d{i}" for i in range(len(output.shape)))
    write = Access.of(output.name, *iterators)
    return [Statement(context.statement_name(), iterators, output.shape, write, value, node=node.name, op=node.op)]


def _output_access(output) -> tuple[Access, tuple[str, ...]]:
    iterators = tuple(f"d{i}" for i in range(len(output.shape)))
    return Access.of(output.name, *iterators), iterators


# --- binary ops with broadcasting ------------------------------------------------------

_BINARY = {"AddV2": ("add", np.add), "Add": ("add", np.add), "Sub": ("sub", np.subtract), "Mul": ("mul", np.multiply)}


def infer_binary(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"{node.op} takes 2 inputs, got {len(input_types)}")
    a, b = input_types
    if a.dtype != b.dtype:
        raise ShapeError(f"{node.op} inputs have different dtypes: {a} and {b}")
    return (TensorType(broadcast_shapes(a.shape, b.shape), a.dtype),)


def reference_binary(node, inputs):
    """float32 arithmetic; int32/int64 constants (shape arithmetic) keep their dtype."""
    a, b = (np.asarray(x) for x in inputs)
    if a.dtype.kind in "iu" and a.dtype == b.dtype:
        return (np.asarray(_BINARY[node.op][1](a, b), dtype=a.dtype),)
    a, b = a.astype(np.float32), b.astype(np.float32)
    return (np.asarray(_BINARY[node.op][1](a, b), dtype=np.float32),)


def lower_binary(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: C[d...] = op(A[bcast(d)], B[bcast(d)])``."""
    a, b = inputs
    (c,) = outputs
    out, iterators = _output_access(c)
    value = Binary(
        _BINARY[node.op][0],
        Load(broadcast_access(a.name, a.shape, c.shape)),
        Load(broadcast_access(b.name, b.shape, c.shape)),
    )
    return [Statement(context.statement_name(), iterators, c.shape, out, value, node=node.name, op=node.op)]


# --- SquaredDifference -----------------------------------------------------------------


def reference_squared_difference(node, inputs):
    a, b = (np.asarray(x, dtype=np.float32).astype(np.float64) for x in inputs)
    return (np.asarray(np.square(a - b), dtype=np.float32),)


def lower_squared_difference(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: C[d...] = square(A[bcast(d)] - B[bcast(d)])``."""
    a, b = inputs
    (c,) = outputs
    out, iterators = _output_access(c)
    difference = Binary("sub", Load(broadcast_access(a.name, a.shape, c.shape)), Load(broadcast_access(b.name, b.shape, c.shape)))
    return [Statement(context.statement_name(), iterators, c.shape, out, Unary("square", difference), node=node.name, op=node.op)]


# --- BiasAdd ---------------------------------------------------------------------------


def _channels_first(node) -> bool:
    """Whether a BiasAdd adds its bias along axis 1 (``data_format`` ``NCHW``, Keras'
    ``channels_first``) instead of the last axis.

    Raises:
        ShapeError: a data format other than NHWC and NCHW.
    """
    data_format = attr_string(node, "data_format", "NHWC")
    if data_format not in ("NHWC", "NCHW"):
        raise ShapeError(f"BiasAdd with data_format {data_format!r} is not supported: polytf supports NHWC and NCHW")
    return data_format == "NCHW"


def infer_bias_add(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"BiasAdd takes 2 inputs (value, bias), got {len(input_types)}")
    value, bias = input_types
    if value.rank < 2:
        raise ShapeError(f"BiasAdd needs a value of rank >= 2, got {value}")
    if bias.rank != 1:
        raise ShapeError(f"BiasAdd needs a rank-1 bias, got {bias}")
    channels = value.shape[1] if _channels_first(node) else value.shape[-1]
    if channels is not None and bias.shape[0] is not None and channels != bias.shape[0]:
        raise ShapeError(f"BiasAdd bias {bias} does not match the channel dimension of the value {value}")
    return (TensorType(value.shape, value.dtype),)


def reference_bias_add(node, inputs):
    value, bias = (np.asarray(x, dtype=np.float32) for x in inputs)
    if _channels_first(node):
        bias = bias.reshape((-1,) + (1,) * (value.ndim - 2))
    return (np.asarray(value + bias, dtype=np.float32),)


def expand_channels_first_bias(node, builder) -> dict[int, str] | None:
    """A channels-first BiasAdd as ``AddV2(value, Reshape(bias, [C, 1, ...]))`` (a view and a
    broadcasting addition); None for a channels-last one or unknown types."""
    if len(node.inputs) != 2 or not _channels_first(node):
        return None
    value_type, bias_type = (builder.type_of(tensor) for tensor in node.inputs)
    if value_type is None or bias_type is None or not value_type.is_static or not bias_type.is_static:
        return None
    adder = NodeAdder(builder, node)
    shape = (bias_type.shape[0],) + (1,) * (value_type.rank - 2)
    target = adder.constant("bias_shape", np.asarray(shape, np.int32))
    bias = adder.op("bias_view", "Reshape", (node.inputs[1], target), TensorType(shape, bias_type.dtype), T=bias_type.dtype, Tshape="int32")
    return {0: adder.op(None, "AddV2", (node.inputs[0], bias), value_type, T=value_type.dtype)}


def lower_bias_add(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: C[d...] = X[d...] + B[d{R-1}]`` (a channels-first one is expanded
    first: :func:`expand_channels_first_bias`)."""
    if _channels_first(node):
        raise ShapeError(f"BiasAdd node '{node.name}' (NCHW) is compiled as an AddV2 of a [C, 1, ...] view of its bias: run polytf.passes.expansion.expand_ops first")
    x, bias = inputs
    (c,) = outputs
    out, iterators = _output_access(c)
    value = Binary("add", Load(Access.of(x.name, *iterators)), Load(Access.of(bias.name, iterators[-1])))
    return [Statement(context.statement_name(), iterators, c.shape, out, value, node=node.name, op=node.op)]


# --- Relu ------------------------------------------------------------------------------


def infer_relu(node, input_types, input_constants):
    if len(input_types) != 1:
        raise ShapeError(f"Relu takes 1 input, got {len(input_types)}")
    return (input_types[0],)


def reference_relu(node, inputs):
    x = np.asarray(inputs[0], dtype=np.float32)
    return (np.maximum(x, np.float32(0)),)


def lower_relu(node, inputs, outputs, context):
    """``S[d...]: Y[d...] = maximum(X[d...], 0)``."""
    (x,) = inputs
    (y,) = outputs
    out, iterators = _output_access(y)
    value = Binary("maximum", Load(Access.of(x.name, *iterators)), Constant(0.0))
    return [Statement(context.statement_name(), iterators, y.shape, out, value, node=node.name, op=node.op)]


def _arithmetic(op: str, **traits) -> OpDefinition:
    """A binary arithmetic op with broadcasting (tensorflow/core/ops/math_ops.cc)."""
    source = f"tensorflow/core/ops/math_ops.cc: {op}"
    return OpDefinition(op, ELEMENTWISE, infer_binary, reference_binary, lower_binary, source=source, dtypes=("float32", "int32", "int64"), foldable=True, arity=Arity(2, 2), **traits)


#: ``Add`` and ``AddV2`` compute one function; rewrites write ``AddV2``.
_ADDITION = Algebra(Operation.ADD, identity=0, associative=True, canonical="AddV2")
ADD_V2 = _arithmetic("AddV2", commutative=True, algebra=_ADDITION)
ADD = _arithmetic("Add", commutative=True, algebra=_ADDITION)
SUB = _arithmetic("Sub", algebra=Algebra(Operation.SUBTRACT, identity=0, inverse_of=ADD_V2.op))
MUL = _arithmetic("Mul", commutative=True, algebra=Algebra(Operation.MULTIPLY, identity=1, associative=True, canonical="Mul"))
SQUARED_DIFFERENCE = OpDefinition(
    "SquaredDifference", ELEMENTWISE, infer_binary, reference_squared_difference, lower_squared_difference,
    source="tensorflow/core/ops/math_ops.cc: SquaredDifference", arity=Arity(2, 2),
)
BIAS_ADD = OpDefinition(
    "BiasAdd", ELEMENTWISE, infer_bias_add, reference_bias_add, lower_bias_add, source="tensorflow/core/ops/nn_ops.cc: BiasAdd", arity=Arity(2, 2), channel_bias=True,
    expand=Expansion(expand_channels_first_bias, "an AddV2 of a [C, 1, ...] view of the bias when NCHW"),
)
RELU = OpDefinition("Relu", ELEMENTWISE, infer_relu, reference_relu, lower_relu, source="tensorflow/core/ops/nn_ops.cc: Relu", arity=Arity(1, 1))


def bias_add_node(name: str, value: str, bias: str, control_inputs: tuple[str, ...] = ()) -> Node:
    """A float32 NHWC ``BiasAdd(value, bias)`` node (``bias``: one entry per channel of
    ``value``'s last axis)."""
    return Node(name, BIAS_ADD.op, (value, bias), control_inputs, {"T": "float32", "data_format": "NHWC"})


def binary_node(definition: OpDefinition, name: str, a: str, b: str, control_inputs: tuple[str, ...] = (), dtype: str = "float32") -> Node:
    """A node of the binary op ``definition`` (``ADD_V2``, ``MUL``, ...) reading ``a`` and ``b``."""
    return Node(name, definition.op, (a, b), control_inputs, {"T": dtype})
