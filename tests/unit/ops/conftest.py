"""Helpers for op tests: run an op's lowering through the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from polytf.graph import Node, TensorType
from polytf.ops import ArrayRef, LoweringContext, lookup
from polytf.poly.interpreter import interpret
from polytf.poly.scop import ArrayInfo, Scop


def _run_op(node: Node, inputs, *, lower: bool = True):
    """Infer, run the numpy reference and (optionally) the lowering of ``node`` on ``inputs``.

    Returns ``(reference_outputs, lowered_outputs or None, statements)``.
    """
    definition = lookup(node.op)
    assert definition is not None, node.op
    inputs = [np.asarray(x) for x in inputs]
    data = definition.data_input_indices(len(inputs))
    input_types = [TensorType(tuple(x.shape), x.dtype.name) for x in inputs]
    constants = [None if i in data else x for i, x in enumerate(inputs)]
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
    context = LoweringContext()
    statements = definition.lower(node, in_refs, out_refs, context)
    arrays = (
        [ArrayInfo(r.name, r.shape, r.type.dtype, "input") for r in in_refs]
        + [ArrayInfo(r.name, r.shape, r.type.dtype, "output") for r in out_refs]
        + [ArrayInfo(r.name, r.shape, r.type.dtype, "temporary") for r in context.temporaries]
    )
    scop = Scop("k", tuple(statements), tuple(arrays), ((node.name, node.op),))
    state = interpret(scop, {r.name: inputs[i] for r, i in zip(in_refs, data)})
    return expected, [state[r.name] for r in out_refs], statements


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def rand(rng):
    """``rand(*shape)``: standard-normal float32 array."""
    return lambda *shape: rng.standard_normal(shape).astype(np.float32)


@pytest.fixture
def run_op():
    """``run_op(node, inputs, lower=True) -> (reference outputs, lowered outputs, statements)``."""
    return _run_op
