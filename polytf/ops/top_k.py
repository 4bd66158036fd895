"""``TopKV2``: the ``k`` largest values of each innermost row, and their positions.

Source: TensorFlow op definition ``TopKV2`` (tensorflow/core/ops/nn_ops.cc) and its CPU
kernel (tensorflow/core/kernels/topk_op.cc):

* ``TopKV2(input: [..., N], k: scalar int32/int64)``, attrs ``sorted`` (default True) and
  ``index_type`` (int32 default, or int64) -> ``values: [..., k]`` of the input's dtype and
  ``indices: [..., k]`` of ``index_type``; ``0 <= k <= N``, ``k`` a compile-time constant here
  (it is the outputs' shape).
* Values come largest first; equal values keep the order of their positions (the lower
  position first). With ``sorted=False`` TensorFlow leaves the order unspecified; this
  reference returns the sorted order, which is one of the orders it allows.

A selection by sorting is data-dependent control flow, not an affine loop nest, so this op
has shape inference and a numpy reference and **no lowering**: a compiled model runs it on
the host between its kernels (:mod:`polytf.lowering.host_fallback`), and shape inference folds
it on constants. NaN inputs are ordered as numpy's stable sort of the negated row orders
them (after every number); TensorFlow's CPU kernel does not specify their place either.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.ops.index_ops import scalar_int


def _k(node, value, row_length: int) -> int:
    k = scalar_int(node, value, "k")
    if not 0 <= k <= row_length:
        raise ShapeError(f"TopKV2 node '{node.name}': k = {k} is outside [0, {row_length}], the length of the input's last axis")
    return k


def infer(node, input_types, input_constants):
    """``input: [..., N], k -> (values: [..., k], indices: [..., k] of index_type)``.

    Raises:
        ShapeError: not two inputs, an input of rank 0, ``k`` not a compile-time integer in
            ``[0, N]``, or an ``index_type`` other than int32/int64.
    """
    if len(input_types) != 2:
        raise ShapeError(f"TopKV2 takes 2 inputs (input, k), got {len(input_types)}")
    x = input_types[0]
    if x.rank < 1:
        raise ShapeError(f"TopKV2 node '{node.name}': input must have rank >= 1, got {x}")
    k = _k(node, input_constants[1], x.shape[-1])
    index_type = node.attr("index_type", "int32")
    if index_type not in ("int32", "int64"):
        raise ShapeError(f"TopKV2 node '{node.name}': index_type {index_type} is not int32 or int64")
    shape = tuple(x.shape[:-1]) + (k,)
    return (TensorType(shape, x.dtype), TensorType(shape, index_type))


def reference(node, inputs):
    x = np.asarray(inputs[0])
    k = _k(node, inputs[1], x.shape[-1])
    keys = -x.astype(np.float64) if x.dtype.kind == "f" else ~x  # ~x = -x - 1 reverses the order without overflow
    order = np.argsort(keys, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(node.attr("index_type", "int32"))


TOP_K_V2 = OpDefinition(
    "TopKV2", REDUCTION, infer, reference, None, data_inputs=(0,), source="tensorflow/core/ops/nn_ops.cc: TopKV2",
    dtypes=("float32", "int32", "int64"), foldable=True, arity=Arity(2, 2),
)
