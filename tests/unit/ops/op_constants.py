"""Test helpers for ops whose lowering reads compile-time constant inputs (Pad's paddings,
Transpose's perm, ConcatV2's axis) from ``LoweringContext.constants``."""

from __future__ import annotations

import numpy as np

from polytf.graph import Node, TensorType
from polytf.ops import ArrayRef, LoweringContext, lookup
from polytf.poly.interpreter import interpret
from polytf.poly.scop import ArrayInfo, Scop


def run_op_with_constants(node: Node, inputs, *, lower: bool = True, known: tuple[int, ...] = ()):
    """Like the ``run_op`` fixture, but the lowering context carries the constant inputs
    (and the data inputs at positions ``known``, as when a graph constant feeds them).

    Returns ``(reference outputs, lowered outputs or None, statements)``.
    """
    definition = lookup(node.op)
    assert definition is not None, node.op
    inputs = [np.asarray(x) for x in inputs]
    data = definition.data_input_indices(len(inputs))
    input_types = [TensorType(tuple(x.shape), x.dtype.name) for x in inputs]
    constants = [None if i in data and i not in known else x for i, x in enumerate(inputs)]
    out_types = definition.infer(node, input_types, constants)
    expected = definition.reference(node, inputs)
    assert len(expected) == len(out_types)
    for value, out_type in zip(expected, out_types):
        assert tuple(value.shape) == out_type.shape, (value.shape, out_type)
        assert value.dtype.name == out_type.dtype
    if not lower:
        return expected, None, []
    in_refs = [ArrayRef(f"X{k}", input_types[i]) for k, i in enumerate(data)]
    out_refs = [ArrayRef(f"Y{k}", t) for k, t in enumerate(out_types)]
    context = LoweringContext(constants={node.inputs[i]: c for i, c in enumerate(constants) if c is not None})
    statements = definition.lower(node, in_refs, out_refs, context)
    arrays = (
        [ArrayInfo(r.name, r.shape, r.type.dtype, "input") for r in in_refs]
        + [ArrayInfo(r.name, r.shape, r.type.dtype, "output") for r in out_refs]
        + [ArrayInfo(r.name, r.shape, r.type.dtype, "temporary") for r in context.temporaries]
    )
    scop = Scop("k", tuple(statements), tuple(arrays), ((node.name, node.op),))
    state = interpret(scop, {r.name: inputs[i] for r, i in zip(in_refs, data)})
    return expected, [state[r.name] for r in out_refs], statements
