"""Split rewriting: ``Split``, ``SplitV`` and ``Unpack`` become one ``Slice`` per used output.

The lowering binds output 0 of each node only (:mod:`polytf.lowering.lowered_kernel`), so a node with
several computed outputs cannot be lowered as it is. Each output ``k`` of such a node is a
box of its input, so this pass gives every output that some node reads its own node::

    parts = Split(axis, x)            parts/part_0 = Slice(x, begin_0, size_0)
    y = Relu(parts:1)         ->      parts/part_1 = Slice(x, begin_1, size_1)
    z = Exp(parts:0)                  y = Relu(parts/part_1:0); z = Exp(parts/part_0:0)

``Unpack``'s part ``k`` is additionally reshaped to drop the unpacked axis (a Reshape is a
view: no run-time cost). Unused outputs get no node; the original node disappears unless
one of its outputs ``k > 0`` is a graph output (a name the user sees, kept; lowering then
says what is wrong). Output 0 as a graph output stays a node of its name, an ``Identity`` of
its Slice, as :meth:`GraphEditor.forward` does. Nodes whose outputs shape inference folded
to constants are left alone. Works on typed graphs; untyped graphs pass unchanged.
"""

from __future__ import annotations

import numpy as np

from polytf.graph import Graph, Node, TensorType
from polytf.ops.split import split_sizes, value_index
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport

#: The ops rewritten.
MULTI_OUTPUT_OPS = ("Split", "SplitV", "Unpack")


def split_multi_output_ops(graph: Graph) -> tuple[Graph, PassReport]:
    """Rewrite every computed ``Split``/``SplitV``/``Unpack`` as in the module docstring.

    Returns:
        The new graph and its report (``rewrites``: nodes rewritten).
    """
    editor = GraphEditor(graph)
    for name in [n for n, node in graph.nodes.items() if node.op in MULTI_OUTPUT_OPS]:
        if _rewrite(editor, editor.nodes[name]):
            editor.rewrites += 1
    return editor.finish("split rewriting", f"{editor.rewrites} multi-output nodes" if editor.rewrites else "")


def _rewrite(editor: GraphEditor, node: Node) -> bool:
    value = node.inputs[value_index(node)] if len(node.inputs) > value_index(node) else None
    value_type = editor.type_of(value) if value is not None else None
    if value_type is None or not value_type.is_static or editor.constant_value(node.output(0)) is not None:
        return False
    constants = [editor.constant_value(t) for t in node.inputs]
    axis, sizes = split_sizes(node, value_type.shape, constants)
    if any(editor.is_output(node.output(port)) for port in range(1, len(sizes))):
        return False
    mapping: dict[str, str] = {}
    offset = 0
    for port, size in enumerate(sizes):
        tensor = node.output(port)
        begin, extent = offset, size
        offset += size
        if not editor.consumers(tensor) and not (port == 0 and editor.is_output(tensor)):
            continue
        shape = list(value_type.shape)
        shape[axis] = extent
        starts = [0] * len(shape)
        starts[axis] = begin
        part = editor.fresh_name(f"{node.name}/part_{port}")
        begin_tensor = editor.add_constant(f"{part}/begin", np.asarray(starts, np.int32), before=node.name)
        size_tensor = editor.add_constant(f"{part}/size", np.asarray(shape, np.int32), before=node.name)
        editor.set_node(Node(part, "Slice", (value, begin_tensor, size_tensor), attrs={"T": value_type.dtype, "Index": "int32"}),
                        output_types=[TensorType(tuple(shape), value_type.dtype)], before=node.name)
        result = f"{part}:0"
        if node.op == "Unpack":
            del shape[axis]
            shape_tensor = editor.add_constant(f"{part}/shape", np.asarray(shape, np.int32), before=node.name)
            unpacked = editor.fresh_name(f"{part}/unpacked")
            editor.set_node(Node(unpacked, "Reshape", (result, shape_tensor), attrs={"T": value_type.dtype, "Tshape": "int32"}),
                            output_types=[TensorType(tuple(shape), value_type.dtype)], before=node.name)
            result = f"{unpacked}:0"
        mapping[tensor] = result
    editor.rewire(mapping)
    if node.output(0) in mapping and editor.is_output(node.output(0)):
        output_type = editor.type_of(node.output(0))
        editor.set_node(Node(node.name, "Identity", (mapping[node.output(0)],), node.control_inputs, {"T": value_type.dtype}), output_types=[output_type])
    else:
        editor.remove(node.name)
    return True
