"""MaxPool and AvgPool: 2-D pooling over NHWC tensors.

Source: TensorFlow op definitions ``MaxPool`` and ``AvgPool`` (tensorflow/core/ops/nn_ops.cc),
window geometry as in tensorflow/core/framework/kernel_shape_util.cc:

* input ``[N, H, W, C]`` -> output ``[N, OH, OW, C]``;
* attrs ``ksize`` and ``strides`` are 4-tuples in NHWC order whose batch and channel
  entries must be 1; ``padding`` is ``"SAME"`` or ``"VALID"`` (output size and padding
  as for Conv2D); ``data_format`` must be ``"NHWC"``;
* ``out[n, oh, ow, c] = max_{kh, kw} in[n, oh*sh + kh - pad_top, ow*sw + kw - pad_left, c]``
  where padded cells are ignored (TensorFlow's SAME max pooling never returns a pad value).
  NaN cells are ignored too, and the maximum starts from the lowest float, ``-FLT_MAX``:
  a window of NaN and ``-inf`` only gives ``-FLT_MAX``, as TensorFlow's CPU kernel (oneDNN's
  pooling, which starts from ``numeric_limits<float>::lowest()`` and takes a cell only
  when it is larger; checked against TensorFlow 2.21 in ``tests/e2e/test_float_semantics.py``).

* AvgPool: ``out[n, oh, ow, c] = sum_{kh, kw} in[...] / count`` where the sum and
  ``count`` run over the window cells inside the input only (TensorFlow's SAME average
  pooling divides by the number of valid cells, tensorflow/core/kernels/avgpooling_op.cc).

MaxPool lowering: ``out = -FLT_MAX``, then ``out = in[...] > out ? in[...] : out`` over the
window (a NaN cell is never larger: one ``maxss``/``maxps`` on x86, where ``llvm.maxnum``
without fast-math flags takes three instructions), the padding expressed as domain
constraints.

AvgPool lowering, with a kernel-local sum ``T`` (full output shape) and, when some
window reaches into the padding, a count ``K`` of shape ``[N, OH, OW]``:

1. ``K[d0, d1, d2] = 0``; ``K[d0, d1, d2] += 1`` over the guarded window (iterators
   ``d0, d1, d2, r0, r1``; omitted for VALID, where the count is ``KH*KW``);
2. ``T[d] = 0``; ``T[d] += I[window]`` over the guarded window;
3. ``O[d] = T[d] / K[d0, d1, d2]`` (or ``T[d] / (KH*KW)``).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.conv import PADDINGS, check_nhwc, nhwc_4tuple, window
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.poly.expression import Access, Binary, Compare, Constant, Load, Select
from polytf.poly.statement import Statement


def geometry(node, input_type: TensorType):
    check_nhwc(node)
    if input_type.rank != 4:
        raise ShapeError(f"{node.op} needs a rank-4 NHWC input, got {input_type}")
    if not input_type.is_static:
        raise ShapeError(f"{node.op} needs a static input shape, got {input_type}")
    ksize = nhwc_4tuple(node, "ksize")
    strides = nhwc_4tuple(node, "strides")
    padding = attr_string(node, "padding", allowed=(*PADDINGS, "EXPLICIT"))  # EXPLICIT: refused by window()
    _, h, w, _ = input_type.shape
    height = window(h, ksize[1], strides[1], 1, padding, f"{node.op} height")
    width = window(w, ksize[2], strides[2], 1, padding, f"{node.op} width")
    return height, width


def infer(node, input_types, input_constants):
    if len(input_types) != 1:
        raise ShapeError(f"{node.op} takes 1 input, got {len(input_types)}")
    (x,) = input_types
    height, width = geometry(node, x)
    return (TensorType((x.shape[0], height.output, width.output, x.shape[3]), x.dtype),)


#: Where a window maximum starts: the lowest float32 (``numeric_limits<float>::lowest()``).
LOWEST = float(np.finfo(np.float32).min)


def reference(node, inputs):
    """Window maxima from ``-FLT_MAX``, a cell taken when it is larger (NaN and padded cells never are)."""
    x = np.asarray(inputs[0], dtype=np.float32)
    hh, ww = geometry(node, TensorType(x.shape))
    padded = np.pad(x, ((0, 0), (hh.pad_before, hh.pad_after), (ww.pad_before, ww.pad_after), (0, 0)), constant_values=np.nan)
    out = np.full((x.shape[0], hh.output, ww.output, x.shape[3]), LOWEST, dtype=np.float32)
    for kh in range(hh.kernel):
        for kw in range(ww.kernel):
            rows = slice(kh, kh + (hh.output - 1) * hh.stride + 1, hh.stride)
            cols = slice(kw, kw + (ww.output - 1) * ww.stride + 1, ww.stride)
            cells = padded[:, rows, cols, :]
            with np.errstate(invalid="ignore"):
                out = np.where(cells > out, cells, out)
    return (out,)


def lower(node, inputs, outputs, context):
    """``S_init[d0..d3]: O[d] = -FLT_MAX``;
    ``S_update[d0, d1, d2, d3, r0, r1]: O[d] = select(I[..] > O[d], I[..], O[d])`` with
    ``I[..] = I[d0, sh*d1 + r0 - pt, sw*d2 + r1 - pl, d3]``."""
    (x,) = inputs
    (y,) = outputs
    height, width = geometry(node, x.type)
    out = Access.of(y.name, "d0", "d1", "d2", "d3")
    init = Statement(context.statement_name(), ("d0", "d1", "d2", "d3"), y.shape, out, Constant(LOWEST), node=node.name, op=node.op)
    x_access = Access.of(x.name, "d0", height.input_index("d1", "r0"), width.input_index("d2", "r1"), "d3")
    update = Statement(
        context.statement_name(),
        ("d0", "d1", "d2", "d3", "r0", "r1"),
        y.shape + (height.kernel, width.kernel),
        out,
        Select(Compare("greater", Load(x_access), Load(out)), Load(x_access), Load(out)),
        constraints=height.constraints("d1", "r0") + width.constraints("d2", "r1"),
        node=node.name,
        op=node.op,
    )
    return [init, update]


MAX_POOL = OpDefinition(
    "MaxPool", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: MaxPool", arity=Arity(1, 1),
)


# --- AvgPool ---------------------------------------------------------------------------


def reference_average(node, inputs):
    """Window sums over the zero-padded input divided by the number of valid cells."""
    x = np.asarray(inputs[0], dtype=np.float32)
    hh, ww = geometry(node, TensorType(x.shape))
    pads = ((0, 0), (hh.pad_before, hh.pad_after), (ww.pad_before, ww.pad_after), (0, 0))
    padded = np.pad(x.astype(np.float64), pads)
    valid = np.pad(np.ones((1, x.shape[1], x.shape[2], 1)), pads)
    total = np.zeros((x.shape[0], hh.output, ww.output, x.shape[3]), dtype=np.float64)
    count = np.zeros((1, hh.output, ww.output, 1), dtype=np.float64)
    for kh in range(hh.kernel):
        for kw in range(ww.kernel):
            rows = slice(kh, kh + (hh.output - 1) * hh.stride + 1, hh.stride)
            cols = slice(kw, kw + (ww.output - 1) * ww.stride + 1, ww.stride)
            total += padded[:, rows, cols, :]
            count += valid[:, rows, cols, :]
    return ((total / count).astype(np.float32),)


def lower_average(node, inputs, outputs, context):
    """Count, sum and divide statements (see the module docstring)."""
    (x,) = inputs
    (y,) = outputs
    height, width = geometry(node, x.type)
    constraints = height.constraints("d1", "r0") + width.constraints("d2", "r1")
    kernel = (height.kernel, width.kernel)

    def statement(iterators, extents, write, value, guarded=False):
        return Statement(
            context.statement_name(), iterators, tuple(extents), write, value, constraints if guarded else (), node=node.name, op=node.op
        )

    statements = []
    if constraints:
        count = context.temporary(y.shape[:3])
        k = Access.of(count.name, "d0", "d1", "d2")
        statements += [
            statement(("d0", "d1", "d2"), y.shape[:3], k, Constant(0.0)),
            statement(("d0", "d1", "d2", "r0", "r1"), y.shape[:3] + kernel, k, Binary("add", Load(k), Constant(1.0)), guarded=True),
        ]
        divisor = Load(k)
    else:
        divisor = Constant(float(height.kernel * width.kernel))
    total = context.temporary(y.shape)
    full = ("d0", "d1", "d2", "d3")
    t = Access.of(total.name, *full)
    x_access = Access.of(x.name, "d0", height.input_index("d1", "r0"), width.input_index("d2", "r1"), "d3")
    statements += [
        statement(full, y.shape, t, Constant(0.0)),
        statement(full + ("r0", "r1"), y.shape + kernel, t, Binary("add", Load(t), Load(x_access)), guarded=True),
        statement(full, y.shape, Access.of(y.name, *full), Binary("div", Load(t), divisor)),
    ]
    return statements


AVG_POOL = OpDefinition(
    "AvgPool", REDUCTION, infer, reference_average, lower_average, source="tensorflow/core/ops/nn_ops.cc: AvgPool",
    arity=Arity(1, 1),
)
