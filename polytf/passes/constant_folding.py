"""Constant folding: evaluate at compile time every node whose inputs are all constants
and replace it by a ``Const`` node.

Source: Grappler's constant folding (tensorflow/core/grappler/optimizers/constant_folding.cc):
a node is folded when all its inputs are constants, it is not stateful and its output is not
too large; the value comes from the op's own kernel. Here the kernel is the op table's
numpy reference (``polytf.ops.lookup(op).reference``), the executable specification every
lowering is tested against.

What is folded:

* nodes whose data inputs are all known: ``Const`` outputs and values already folded in this
  pass (so chains fold in one pass), e.g. Keras' frozen batch-norm arithmetic
  ``Rsqrt(var + eps) * gamma`` or a ``Reshape`` of a bias;
* nodes whose outputs shape inference already knows (``graph.constants``), e.g. ``Shape``
  of a placeholder with a static shape (a function of the shape, not of the values).

Never folded: sources (placeholders, constants) and anything that depends on a placeholder's
values, ops polytf does not support (they may be stateful or random), stateful ops
(``OpDefinition.stateful``), ops with no outputs, and
results with more than ``GraphPassConfig.constant_folding_max_elements`` elements
(folding such a node would trade a cheap kernel for a large constant buffer).
A node with one output becomes a ``Const`` of the same name (consumers and graph outputs
are untouched); a node with several outputs gets one ``Const`` per output its readers use.
"""

from __future__ import annotations

import numpy as np

from polytf.config import GraphPassConfig
from polytf.errors import PolytfError
from polytf.graph import Graph, Node, TensorType
from polytf.ops import NO_OUTPUT, SOURCE, const_value, lookup
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport

#: Attributes that name an op's output dtype, in the order they are looked up (for untyped graphs).
_DTYPE_ATTRS = ("out_type", "DstT", "dtype", "T")


def fold_constants(graph: Graph, config: GraphPassConfig | None = None) -> tuple[Graph, PassReport]:
    """Replace every foldable node by a ``Const`` (see the module docstring).

    Args:
        graph: typed or untyped; with types, the recorded output dtypes are kept exactly
            (a reference that computes in float32 is cast back to an int32 result).
        config: the folding size cap.

    Returns:
        The new graph and its report (``rewrites``: nodes folded).
    """
    config = config or GraphPassConfig()
    editor = GraphEditor(graph)
    values: dict[str, np.ndarray] = {}
    folded = 0
    for name in list(editor.nodes):
        node = editor.nodes[name]
        if const_value(node) is not None:
            values[node.output(0)] = editor.constant_value(node.output(0))
            continue
        results = _evaluate(editor, node, values, config)
        if results is None:
            continue
        for port, value in enumerate(results):
            values[node.output(port)] = value
        if len(results) == 1:
            editor.replace_with_constant(node, results[0])
            folded += 1
        elif _split_into_constants(editor, node, results):
            folded += 1
    editor.rewrites = folded
    return editor.finish("constant folding", f"{folded} nodes folded into constants" if folded else "")


def _evaluate(
    editor: GraphEditor, node: Node, values: dict[str, np.ndarray], config: GraphPassConfig
) -> tuple[np.ndarray, ...] | None:
    """The values of ``node``'s outputs when they can be known at compile time, else None."""
    if node.output(0) not in editor.constants and not (node.inputs and all(t in values for t in node.inputs)):
        return None  # nothing known about the node: the common case, decided before anything costlier
    definition = lookup(node.op)
    if definition is None or definition.stateful or definition.category == NO_OUTPUT or (definition.category == SOURCE and not node.inputs):
        return None  # unknown and stateful ops, NoOp, and the graph's leaves (placeholders, constants)
    known = [editor.constants.get(node.output(port)) for port in range(editor.output_count(node))]
    if known and all(value is not None for value in known):
        results = tuple(np.asarray(value) for value in known)
    elif node.inputs and all(t in values for t in node.inputs):
        if any(t.element_count > config.constant_folding_max_elements for t in _recorded_types(editor, node) if t.is_static):
            return None
        try:
            results = tuple(np.asarray(r) for r in definition.reference(node, [values[t] for t in node.inputs]))
        except (PolytfError, ValueError, TypeError, IndexError, ArithmeticError):
            return None  # shape inference reports a bad constant input with its context
    else:
        return None
    if not results or any(r.size > config.constant_folding_max_elements for r in results):
        return None
    return _with_output_dtypes(editor, node, results)


def _recorded_types(editor: GraphEditor, node: Node) -> list[TensorType]:
    return [editor.types[node.output(port)] for port in range(editor.output_count(node))]


def _with_output_dtypes(editor: GraphEditor, node: Node, results: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...] | None:
    """``results`` cast to the dtypes the graph records (or its dtype attrs name); None when
    a cast would change a value (e.g. a float result of an int op)."""
    expected: list[str | None] = [t.dtype for t in _recorded_types(editor, node)]
    if not expected and len(results) == 1:
        expected = [next((str(node.attr(a)) for a in _DTYPE_ATTRS if isinstance(node.attr(a), str)), None)]
    cast = []
    for port, value in enumerate(results):
        dtype = expected[port] if port < len(expected) else None
        if dtype is None or dtype == value.dtype.name:
            cast.append(value)
            continue
        try:
            converted = value.astype(dtype)
        except TypeError:
            return None
        if converted.dtype.kind in "iub" and not np.array_equal(converted, value):
            return None
        cast.append(converted)
    return tuple(cast)


def _split_into_constants(editor: GraphEditor, node: Node, results: tuple[np.ndarray, ...]) -> bool:
    """Readers of each output of a multi-output ``node`` read a new ``Const`` instead; False
    (nothing changed) when one of its outputs is a graph output."""
    if any(editor.is_output(node.output(port)) for port in range(len(results))):
        return False
    mapping = {}
    for port, value in enumerate(results):
        if editor.consumers(node.output(port)):
            mapping[node.output(port)] = editor.add_constant(f"{node.name}/output_{port}", value, before=node.name)
    editor.rewire(mapping)
    return True
