"""``Bucketize``: the bucket of each value, as Keras' ``Discretization`` freezes.

Source: TensorFlow op definition (tensorflow/core/ops/math_ops.cc) and CPU kernel
(tensorflow/core/kernels/bucketize_op.cc): ``Bucketize(input)`` with the attr ``boundaries``
(a sorted float list) -> int32 of the input's shape: the index of ``input``'s bucket,
``std::upper_bound(boundaries, x)``: the number of boundaries ``b`` with ``not (x < b)`` (so
NaN falls past the last boundary).

The op is not lowered itself: it expands (:mod:`polytf.passes.expansion`) into ops polytf
compiles, a comparison with the boundaries broadcast along a new last axis, a cast and a
sum::

    Sum(Cast(LogicalNot(Less(Reshape(x, [..., 1]), boundaries))), axis=-1)
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.ops.expansion import Expansion, GraphBuilder, NodeAdder, lowered_by_expansion


def _boundaries(node) -> np.ndarray:
    """The ``boundaries`` attr as float32.

    Raises:
        ShapeError: missing, or not sorted.
    """
    value = node.attrs.get("boundaries")
    if value is None:
        raise ShapeError(f"Bucketize node '{node.name}' has no boundaries attr")
    boundaries = np.asarray(list(value), np.float32)
    if boundaries.ndim != 1 or np.any(np.diff(boundaries) < 0):
        raise ShapeError(f"Bucketize node '{node.name}': boundaries must be a sorted list of floats, got {list(value)}")
    return boundaries


def infer_bucketize(node, input_types, input_constants):
    """``input -> int32`` of its shape.

    Raises:
        ShapeError: not one input, or bad boundaries.
    """
    if len(input_types) != 1:
        raise ShapeError(f"Bucketize node '{node.name}' takes 1 input, got {len(input_types)}")
    _boundaries(node)
    return (TensorType(input_types[0].shape, "int32"),)


def reference_bucketize(node, inputs):
    x = np.asarray(inputs[0])
    return (np.searchsorted(_boundaries(node), x.astype(np.float32), side="right").astype(np.int32),)


def expand_bucketize(node, builder: GraphBuilder) -> dict[int, str] | None:
    """The comparisons, cast and sum of the module docstring; None for an input that is not a
    static float32 tensor, or no boundaries."""
    x = builder.type_of(node.inputs[0]) if len(node.inputs) == 1 else None
    boundaries = _boundaries(node)
    if x is None or not x.is_static or x.dtype != "float32" or boundaries.size == 0:
        return None
    adder = NodeAdder(builder, node)
    view_shape, wide = (*x.shape, 1), (*x.shape, boundaries.size)
    view = adder.op("values", "Reshape", (node.inputs[0], adder.constant("values_shape", np.asarray(view_shape, np.int32))), TensorType(view_shape, "float32"), T="float32", Tshape="int32")
    below = adder.op("below", "Less", (view, adder.constant("boundaries", boundaries)), TensorType(wide, "bool"), T="float32")
    past = adder.op("past", "LogicalNot", (below,), TensorType(wide, "bool"))
    counted = adder.op("counted", "Cast", (past,), TensorType(wide, "int32"), SrcT="bool", DstT="int32")
    axis = adder.constant("axis", np.asarray([x.rank], np.int32))
    return {0: adder.op(None, "Sum", (counted, axis), TensorType(x.shape, "int32"), T="int32", Tidx="int32", keep_dims=False)}


BUCKETIZE = OpDefinition(
    "Bucketize", REDUCTION, infer_bucketize, reference_bucketize, lowered_by_expansion("is compiled as comparisons with its boundaries and a sum"),
    source="tensorflow/core/ops/math_ops.cc: Bucketize", dtypes=("float32",), arity=Arity(1, 1),
    expand=Expansion(expand_bucketize, "comparisons with the boundaries, a cast and a sum"),
)
