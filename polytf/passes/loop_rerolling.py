"""Loop rerolling: a loop TensorFlow unrolled over an axis, run as one node per step again.

Keras' ``TimeDistributed(layer)`` (and ``tf.stack([f(x[t]) for t in ...])``) freezes into one
copy of the layer per step: ``y_t = f(x[t])`` for ``t < T``, then ``Pack(y_0 .. y_{T-1})``.
When ``f`` treats the rows of its input (axis 0) one by one, the steps are one ``f`` over the
steps' rows stacked::

    Pack(f(x[0]), .., f(x[T-1]))  ==  Reshape(f(Reshape(x, [T*B, ...])), [T, B', ...])

for ``x: [T, B, ...]``, ``f(x[t]): [B', ...]``: one kernel (or one per op of ``f``) instead of
``T``, each step's weights read once, every row in one register-tiled matrix product.

What counts as ``f``: a chain of nodes, each reading the previous one's value as its only
computed input (every other input a graph constant, the same tensors in every step) and read
by the next one alone, each either element-wise with constants of a lower rank (broadcast
along the rows: a bias) or a contraction whose weight layout says its rows are independent
(:attr:`~polytf.ops.traits.WeightLayout.independent_rows`: a MatMul without ``transpose_a``,
a channels-last convolution). The steps' chains must be the same ops with the same
attributes and constants. The seams are read from the op traits
(:class:`~polytf.ops.traits.Stacking`): the node that takes index ``t`` of ``x`` along axis 0
(``StridedSlice``), the node that stacks along axis 0 (``Pack``).

Source: loop rerolling, the inverse of unrolling (LLVM's ``LoopRerollPass``); XLA and TVM
batch identical computations on slices the same way ("horizontal fusion").
"""

from __future__ import annotations

import numpy as np

from polytf.graph import Graph, Node, TensorType, split_tensor_name
from polytf.ops import lookup, reshape_node
from polytf.ops.definition import ELEMENTWISE
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport

__all__ = ["reroll_loops"]


def reroll_loops(graph: Graph) -> tuple[Graph, PassReport]:
    """Rewrite every stack of identical per-step chains (module docstring) as one chain over
    the stacked rows.

    Returns:
        The new graph and its report (``rewrites``: loops rerolled; ``detail``: their steps).
    """
    editor = GraphEditor(graph)
    steps = 0
    for name in list(graph.nodes) if editor.typed else ():
        node = editor.nodes.get(name)
        loop = _unrolled_loop(editor, node) if node is not None else None
        if loop is None:
            continue
        source, chains = loop
        _reroll(editor, node, source, chains)
        editor.rewrites += 1
        steps += len(chains)
    detail = f"{editor.rewrites} loops of {steps} steps in all rerolled" if editor.rewrites else ""
    return editor.finish("loop rerolling", detail)


#: one step's chain: ``(node, index of the input the previous node feeds)``, first to last
Chain = list[tuple[Node, int]]


def _unrolled_loop(editor: GraphEditor, stack: Node) -> tuple[str, list[Chain]] | None:
    """``(x, chains)`` when ``stack`` stacks ``f(x[t])`` for every ``t`` along axis 0 (each chain
    the nodes of ``f`` for one step, first to last), else None."""
    definition = lookup(stack.op)
    stacking = definition.stacking if definition is not None else None
    if stacking is None or stacking.stacked is None or len(stack.inputs) < 2:
        return None
    first_type = editor.type_of(stack.inputs[0])
    if first_type is None or not first_type.is_static or stacking.stacked(stack, first_type.rank) != 0:
        return None
    chains, sources = [], set()
    for step, tensor in enumerate(stack.inputs):
        walked = _chain(editor, tensor, step)
        if walked is None:
            return None
        source, chain = walked
        sources.add(source)
        chains.append(chain)
    if len(sources) != 1 or not chains[0] or any(not _same_step(chains[0], chain) for chain in chains[1:]):
        return None
    (source,) = sources
    source_type = editor.type_of(source)
    if source_type is None or not source_type.is_static or source_type.shape[0] != len(chains) or source_type.rank < 2:
        return None
    return source, chains


def _chain(editor: GraphEditor, tensor: str, step: int) -> tuple[str, Chain] | None:
    """``(x, chain)``: the nodes from the one that reads ``x[step]`` up to the producer of
    ``tensor``, when each reads the previous one's value alone and is read once; else None."""
    chain: Chain = []
    while True:
        node_name, port = split_tensor_name(tensor)
        node = editor.nodes.get(node_name)
        if node is None or port != 0 or editor.is_output(tensor) or not editor.has_single_use(tensor):
            return None
        definition = lookup(node.op)
        if definition is None:
            return None
        stacking = definition.stacking
        if stacking is not None and stacking.picked is not None and chain:
            input_type = editor.type_of(node.inputs[0])
            constants = [None] + [editor.constant_value(t) for t in node.inputs[1:]]
            picked = stacking.picked(node, constants, input_type.shape) if input_type is not None and input_type.is_static else None
            if picked != (0, step):
                return None
            chain.reverse()
            return node.inputs[0], chain
        data = _row_input(editor, node, definition)
        if data is None:
            return None
        chain.append((node, data))
        tensor = node.inputs[data]


def _row_input(editor: GraphEditor, node: Node, definition) -> int | None:
    """The input through which ``node`` treats its rows one by one (every other input a
    constant), or None when it does not (module docstring)."""
    computed = [i for i, tensor in enumerate(node.inputs) if editor.constant_value(tensor) is None]
    if len(computed) != 1 or node.control_inputs:
        return None
    (data,) = computed
    data_type = editor.type_of(node.inputs[data])
    if data_type is None or not data_type.is_static or data_type.rank < 1:
        return None
    if definition.category == ELEMENTWISE:
        ranks = [np.ndim(editor.constant_value(t)) for i, t in enumerate(node.inputs) if i != data]
        return data if all(rank < data_type.rank for rank in ranks) else None
    layout = definition.weight_layout
    if layout is not None and data == 0 and layout.input != 0 and layout.independent_rows(node):
        return data
    return None


def _same_step(first: Chain, other: Chain) -> bool:
    """Whether two steps' chains are the same ops with the same attributes and constants."""
    if len(first) != len(other):
        return False
    for (a, data), (b, other_data) in zip(first, other):
        if a.op != b.op or a.attrs != b.attrs or len(a.inputs) != len(b.inputs) or data != other_data:
            return False
        if any(x != y for i, (x, y) in enumerate(zip(a.inputs, b.inputs)) if i != data):
            return False
    return True


def _reroll(editor: GraphEditor, stack: Node, source: str, chains: list[Chain]) -> None:
    """Replace ``stack`` by ``Reshape(f(Reshape(x, [T*B, ...])), [T, B', ...])`` (module docstring)."""
    steps = len(chains)
    source_type = editor.type_of(source)
    value = _reshape(editor, stack, "rows", source, (steps * source_type.shape[1], *source_type.shape[2:]), source_type.dtype)
    for node, data in chains[0]:
        output_type = editor.type_of(node.output(0))
        inputs = tuple(value if i == data else tensor for i, tensor in enumerate(node.inputs))
        name = editor.fresh_name(f"{stack.name}/rerolled_{node.op}")
        rows = TensorType((steps * output_type.shape[0], *output_type.shape[1:]), output_type.dtype)
        editor.set_node(Node(name, node.op, inputs, (), dict(node.attrs)), output_types=[rows], before=stack.name)
        value = f"{name}:0"
    stacked = editor.type_of(stack.output(0))
    shape = editor.add_constant(f"{stack.name}/steps_shape", np.asarray(stacked.shape, np.int32), before=stack.name)
    editor.set_node(reshape_node(stack.name, value, shape, stacked.dtype, stack.control_inputs), output_types=[stacked])


def _reshape(editor: GraphEditor, stack: Node, suffix: str, tensor: str, shape: tuple[int, ...], dtype: str) -> str:
    target = editor.add_constant(f"{stack.name}/{suffix}_shape", np.asarray(shape, np.int32), before=stack.name)
    name = editor.fresh_name(f"{stack.name}/{suffix}")
    editor.set_node(reshape_node(name, tensor, target, dtype), output_types=[TensorType(shape, dtype)], before=stack.name)
    return f"{name}:0"
