"""MatMul: ``c = op(a) @ op(b)`` with ``op`` an optional transpose.

Source: TensorFlow op definition ``MatMul`` (tensorflow/core/ops/math_ops.cc):
a: [M, K] (or [K, M] with transpose_a), b: [K, N] (or [N, K] with transpose_b)
-> c: [M, N], all float32.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_bool
from polytf.ops.definition import CONTRACTION, Arity, OpDefinition
from polytf.ops.traits import WeightLayout
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement


def infer(node, input_types, input_constants):
    a, b = input_types
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(f"MatMul needs rank-2 inputs, got {a} and {b}")
    m, k = (a.shape[1], a.shape[0]) if attr_bool(node, "transpose_a", False) else a.shape
    k2, n = (b.shape[1], b.shape[0]) if attr_bool(node, "transpose_b", False) else b.shape
    if k is not None and k2 is not None and k != k2:
        raise ShapeError(
            f"MatMul inner dimensions differ: {a} x {b} (transpose_a={attr_bool(node, 'transpose_a', False)}, transpose_b={attr_bool(node, 'transpose_b', False)})"
        )
    return (TensorType((m, n), a.dtype),)


def reference(node, inputs):
    a, b = inputs
    if attr_bool(node, "transpose_a", False):
        a = a.T
    if attr_bool(node, "transpose_b", False):
        b = b.T
    return (np.matmul(a, b).astype(np.float32),)


def lower(node, inputs, outputs, context):
    """``S_init[d0, d1]: C[d0, d1] = 0``; ``S_update[d0, d1, r0]: C[d0, d1] += A[d0, r0] * B[r0, d1]``."""
    a, b = inputs
    (c,) = outputs
    m, n = c.shape
    k = a.shape[0] if attr_bool(node, "transpose_a", False) else a.shape[1]
    a_access = Access.of(a.name, "r0", "d0") if attr_bool(node, "transpose_a", False) else Access.of(a.name, "d0", "r0")
    b_access = Access.of(b.name, "d1", "r0") if attr_bool(node, "transpose_b", False) else Access.of(b.name, "r0", "d1")
    out = Access.of(c.name, "d0", "d1")
    init = Statement(context.statement_name(), ("d0", "d1"), (m, n), out, Constant(0.0), node=node.name, op=node.op)
    update = Statement(
        context.statement_name(),
        ("d0", "d1", "r0"),
        (m, n, k),
        out,
        Binary("add", Load(out), Binary("mul", Load(a_access), Load(b_access))),
        node=node.name,
        op=node.op,
    )
    return [init, update]


#: the weight ``b: [K, N]`` (``[N, K]`` with ``transpose_b``): output channel ``n``, reduction over ``k``.
WEIGHT_LAYOUT = WeightLayout(
    input=1,
    rank=2,
    output_rank=2,
    window_axes=(),
    channel_axes=lambda node: (0,) if node.attr("transpose_b", False) else (1,),
    independent_rows=lambda node: not node.attr("transpose_a", False),
)
MATMUL = OpDefinition("MatMul", CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/math_ops.cc: MatMul", arity=Arity(2, 2), weight_layout=WEIGHT_LAYOUT)
