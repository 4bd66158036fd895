"""Arithmetic simplification: algebraic identities with constants.

Source: Grappler's arithmetic optimizer and constant folding
(tensorflow/core/grappler/optimizers/arithmetic_optimizer.cc: ``RemoveRedundantNeg``...,
constant_folding.cc: ``SimplifyArithmeticOperations`` for ``x*1``/``x+0`` and
``ConstantPushDown`` for chains with constants). Binary ops broadcast as numpy does
(tensorflow/core/ops/math_ops.cc: ``Add``, ``AddV2``, ``Sub``, ``Mul``).

The rules read each op's algebraic laws (``OpDefinition.algebra``: its operation, neutral
element, associativity, involution, the op a rewrite writes) and ``commutative``. With the
ops of the table (``c``, ``c1``, ``c2`` are compile-time constants, ``x`` is not):

* ``x * 1``, ``1 * x``, ``x + 0``, ``0 + x``, ``x - 0`` -> ``x``, only where broadcasting
  the constant leaves ``x``'s shape and dtype unchanged (``x: [4]`` times ``ones([2, 4])``
  is a ``[2, 4]`` tensor, not ``x``); in an untyped graph only for scalar constants;
* ``Neg(Neg(x))`` -> ``x``;
* ``Sub(x, c)`` -> ``AddV2(x, -c)`` (so that it joins an addition chain or becomes a bias);
* ``(x * c1) * c2`` -> ``x * (c1 * c2)`` and ``(x + c1) + c2`` -> ``x + (c1 + c2)`` when the
  inner node has no other reader (broadcasting is associative, so the shape is the same;
  the float32 result may differ by rounding).

A node simplified to ``x`` is forwarded (its readers read ``x``; a graph output stays, as an
``Identity``); a rewritten node keeps its name.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from polytf.graph import Graph, Node
from polytf.ops import Algebra, lookup
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport


def simplify_arithmetic(graph: Graph) -> tuple[Graph, PassReport]:
    """Apply the rewrites of the module docstring, in topological order (so a rewritten node
    is seen by its readers' rewrites in the same pass). Works on typed and untyped graphs.

    Returns:
        The new graph and its report (``rewrites``: rules applied; ``detail``: per rule).
    """
    editor = GraphEditor(graph)
    applied: Counter[str] = Counter()
    for name in list(editor.nodes):
        while name in editor.nodes:
            rule = _simplify_once(editor, editor.nodes[name])
            if rule is None:
                break
            applied[rule] += 1
    editor.rewrites = sum(applied.values())
    detail = ", ".join(f"{count} x {rule}" for rule, count in sorted(applied.items()))
    return editor.finish("arithmetic simplification", detail)


def _algebra(node: Node | None) -> Algebra | None:
    definition = lookup(node.op) if node is not None else None
    return definition.algebra if definition is not None else None


def _simplify_once(editor: GraphEditor, node: Node) -> str | None:
    """Apply one rule to ``node``; its name, or None when none applies."""
    algebra = _algebra(node)
    if algebra is None:
        return None
    if algebra.involution and len(node.inputs) == 1:
        inner = editor.producer(node.inputs[0])
        if inner is not None and inner.op == node.op and node.inputs[0] == inner.output(0) and len(inner.inputs) == 1:
            editor.forward(node.name, inner.inputs[0])
            return f"{node.op}({node.op}(x)) -> x"
        return None
    if algebra.identity is None or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    value_a, value_b = editor.constant_value(a), editor.constant_value(b)
    if (value_a is None) == (value_b is None):
        return None  # no constant (nothing to do) or two (constant folding's job)
    x, c, constant_first = (b, value_a, True) if value_a is not None else (a, value_b, False)
    symbol = algebra.operation.symbol

    if (lookup(node.op).commutative or not constant_first) and np.all(c == algebra.identity) and _keeps_type(editor, x, c):
        editor.forward(node.name, x)
        return f"x{symbol}{algebra.identity} -> x"

    if algebra.inverse_of:
        if constant_first:
            return None
        negated = editor.add_constant(f"{node.name}/negated", np.negative(c).astype(c.dtype), before=node.name)
        editor.set_node(Node(node.name, algebra.inverse_of, (x, negated), node.control_inputs, dict(node.attrs)))
        return f"{node.op}(x, c) -> {algebra.inverse_of}(x, -c)"

    inner = editor.producer(x)
    inner_algebra = _algebra(inner)
    if (
        not algebra.associative
        or inner_algebra is None
        or inner_algebra.operation is not algebra.operation
        or len(inner.inputs) != 2
        or x != inner.output(0)
        or not editor.has_single_use(x)
    ):
        return None
    inner_a, inner_b = (editor.constant_value(t) for t in inner.inputs)
    if (inner_a is None) == (inner_b is None):
        return None
    inner_x, inner_c = (inner.inputs[1], inner_a) if inner_a is not None else (inner.inputs[0], inner_b)
    combined = algebra.operation.function(inner_c, c)
    constant = editor.add_constant(f"{node.name}/combined", np.asarray(combined, dtype=_dtype(editor, node, c)), before=node.name)
    editor.set_node(Node(node.name, algebra.canonical, (inner_x, constant), node.control_inputs, dict(node.attrs)))
    return f"(x{symbol}c1){symbol}c2 -> x{symbol}(c1{symbol}c2)"


def _keeps_type(editor: GraphEditor, x: str, constant: np.ndarray) -> bool:
    """True when ``x op constant`` has ``x``'s shape and dtype."""
    x_type = editor.type_of(x)
    if x_type is None or not x_type.is_static:
        return constant.ndim == 0
    if constant.dtype.name != x_type.dtype:
        return False
    try:
        return tuple(np.broadcast_shapes(x_type.shape, constant.shape)) == tuple(x_type.shape)
    except ValueError:
        return False


def _dtype(editor: GraphEditor, node: Node, constant: np.ndarray) -> str:
    output_type = editor.type_of(node.output(0))
    return output_type.dtype if output_type is not None else constant.dtype.name
