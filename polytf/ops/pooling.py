"""MaxPool: 2-D max pooling over NHWC tensors.

Source: TensorFlow op definition ``MaxPool`` (tensorflow/core/ops/nn_ops.cc), window
geometry as in tensorflow/core/framework/kernel_shape_util.cc:

* input ``[N, H, W, C]`` -> output ``[N, OH, OW, C]``;
* attrs ``ksize`` and ``strides`` are 4-tuples in NHWC order whose batch and channel
  entries must be 1; ``padding`` is ``"SAME"`` or ``"VALID"`` (output size and padding
  as for Conv2D); ``data_format`` must be ``"NHWC"``;
* ``out[n, oh, ow, c] = max_{kh, kw} in[n, oh*sh + kh - pad_top, ow*sw + kw - pad_left, c]``
  where padded cells are ignored (TensorFlow's SAME max pooling never returns a pad value).

Lowering: ``out = -inf``, then ``out = max(out, in[...])`` over the window, the padding
expressed as domain constraints.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.conv import attr_str, check_nhwc, nhwc_4tuple, window
from polytf.ops.registry import REDUCTION, OpDefinition, register
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement


def geometry(node, input_type: TensorType):
    check_nhwc(node)
    if input_type.rank != 4:
        raise ShapeError(f"MaxPool needs a rank-4 NHWC input, got {input_type}")
    if not input_type.is_static:
        raise ShapeError(f"MaxPool needs a static input shape, got {input_type}")
    ksize = nhwc_4tuple(node, "ksize", None)
    strides = nhwc_4tuple(node, "strides", None)
    padding = attr_str(node, "padding", "VALID")
    _, h, w, _ = input_type.shape
    height = window(h, ksize[1], strides[1], 1, padding, "MaxPool height")
    width = window(w, ksize[2], strides[2], 1, padding, "MaxPool width")
    return height, width


def infer(node, input_types, input_constants):
    if len(input_types) != 1:
        raise ShapeError(f"MaxPool takes 1 input, got {len(input_types)}")
    (x,) = input_types
    height, width = geometry(node, x)
    return (TensorType((x.shape[0], height.output, width.output, x.shape[3]), x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0], dtype=np.float32)
    hh, ww = geometry(node, TensorType(x.shape))
    padded = np.pad(x, ((0, 0), (hh.pad_before, hh.pad_after), (ww.pad_before, ww.pad_after), (0, 0)), constant_values=-np.inf)
    out = np.full((x.shape[0], hh.output, ww.output, x.shape[3]), -np.inf, dtype=np.float32)
    for kh in range(hh.kernel):
        for kw in range(ww.kernel):
            rows = slice(kh, kh + (hh.output - 1) * hh.stride + 1, hh.stride)
            cols = slice(kw, kw + (ww.output - 1) * ww.stride + 1, ww.stride)
            out = np.maximum(out, padded[:, rows, cols, :])
    return (out,)


def lower(node, inputs, outputs, context):
    """``S_init[d0..d3]: O[d] = -inf``;
    ``S_update[d0, d1, d2, d3, r0, r1]: O[d] = max(O[d], I[d0, sh*d1 + r0 - pt, sw*d2 + r1 - pl, d3])``."""
    (x,) = inputs
    (y,) = outputs
    height, width = geometry(node, x.type)
    out = Access.of(y.name, "d0", "d1", "d2", "d3")
    init = Statement(
        context.statement_name(), ("d0", "d1", "d2", "d3"), y.shape, out, Constant(float("-inf")), node=node.name, op=node.op
    )
    x_access = Access.of(x.name, "d0", height.input_index("d1", "r0"), width.input_index("d2", "r1"), "d3")
    update = Statement(
        context.statement_name(),
        ("d0", "d1", "d2", "d3", "r0", "r1"),
        y.shape + (height.kernel, width.kernel),
        out,
        Binary("max", Load(out), Load(x_access)),
        constraints=height.constraints("d1", "r0") + width.constraints("d2", "r1"),
        node=node.name,
        op=node.op,
    )
    return [init, update]


MAX_POOL = register(OpDefinition("MaxPool", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: MaxPool"))
