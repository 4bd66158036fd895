"""Common-subexpression elimination: nodes computing the same thing are merged.

Source: Grappler's common subgraph elimination
(tensorflow/core/grappler/optimizers/arithmetic_optimizer.cc, ``DedupComputations``):
two nodes are equivalent when they have the same op, the same inputs (in any order for a
commutative op: ``OpDefinition.commutative``), the same control inputs and the same
attributes (internal ``_`` attributes ignored); two ``Const`` nodes when they hold the same
dtype, shape and bytes.

Nodes are visited in topological order, so a merge makes their consumers equivalent too
and whole duplicated chains collapse in one pass. The first node is kept; a later
duplicate's readers read the first. A duplicate that produces a graph output, a
placeholder, a ``NoOp``, stateful ops and ops polytf does not support (possibly stateful)
are never merged; constants above ``GraphPassConfig.cse_max_constant_elements`` are not
compared.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from polytf.config import GraphPassConfig
from polytf.graph import Graph, Node, tensor_name
from polytf.ops import NO_OUTPUT, SOURCE, const_value, lookup
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport


def eliminate_common_subexpressions(graph: Graph, config: GraphPassConfig | None = None) -> tuple[Graph, PassReport]:
    """Merge equivalent nodes (see the module docstring). Works on typed and untyped graphs.

    Returns:
        The new graph and its report (``rewrites``: nodes merged into an equal earlier one).
    """
    config = config or GraphPassConfig()
    editor = GraphEditor(graph)
    first_of: dict[Hashable, str] = {}
    renamed: dict[str, str] = {}  # node name -> the equivalent node kept
    merged = 0
    for name in list(editor.nodes):
        node = editor.nodes[name]
        key = _key(node, renamed, config)
        if key is None:
            continue
        kept = first_of.setdefault(key, name)
        if kept == name or name in editor.output_nodes:
            continue
        editor.rewire({t: tensor_name(kept, port) for t, port in _ports_read(editor, name).items()}, controls={name: kept})
        editor.remove(name)
        renamed[name] = kept
        merged += 1
    editor.rewrites = merged
    return editor.finish("common subexpression elimination", f"{merged} duplicate nodes merged" if merged else "")


def _key(node: Node, renamed: Mapping[str, str], config: GraphPassConfig) -> Hashable | None:
    """What makes ``node`` equal to another node, or None when it must not be merged."""
    value = const_value(node)
    if value is not None:
        if value.size > config.cse_max_constant_elements or value.dtype.kind == "O":
            return None
        return (node.op, value.dtype.str, value.shape, value.tobytes())
    definition = lookup(node.op)
    if definition is None or definition.stateful or definition.category == NO_OUTPUT or (definition.category == SOURCE and not node.inputs):
        return None  # unknown and stateful ops, NoOp, and the graph's leaves (placeholders, constants without a value)
    inputs = tuple(_renamed_tensor(t, renamed) for t in node.inputs)
    if definition.commutative:
        inputs = tuple(sorted(inputs))
    controls = tuple(sorted({renamed.get(c, c) for c in node.control_inputs}))
    attrs = tuple(sorted((k, _hashable(v)) for k, v in node.attrs.items() if not k.startswith("_")))
    return (node.op, inputs, controls, attrs)


def _renamed_tensor(tensor: str, renamed: Mapping[str, str]) -> str:
    node, _, port = tensor.rpartition(":")
    return f"{renamed[node]}:{port}" if node in renamed else tensor


def _hashable(value: Any) -> Hashable:
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _ports_read(editor: GraphEditor, name: str) -> dict[str, int]:
    """Tensors of node ``name`` that some node reads, with their ports."""
    result = {}
    for reader_name in editor.readers(name):
        for tensor in editor.nodes[reader_name].inputs:
            node, _, port = tensor.rpartition(":")
            if node == name:
                result[tensor] = int(port)
    return result
