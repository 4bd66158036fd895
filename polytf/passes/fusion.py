"""Partitions a typed graph into fusion groups: the kernels polytf compiles.

Greedy producer-consumer fusion in the style of XLA's instruction fusion: every
compute node starts a group unless it is element-wise and one of its inputs is
produced, at the same shape, by an open group; then it joins that group and its
loops share the group's outer band (so a MatMul or Conv2D tile is finished by its
BiasAdd and Relu while it is still in cache). A node joins a group only if all its
other inputs come from the graph's sources or from groups created earlier, so the
groups stay acyclic. A group holds at most ``GraphPassConfig.max_fusion_group_nodes``
nodes: a longer chain becomes several kernels, so that the polyhedral work per kernel is
bounded and compile time grows linearly with the graph. Only float32 nodes fuse into a
contraction's group: comparisons, casts and selections on bool masks or integers start
their own, so a contraction's micro-kernel epilogue stays float32 arithmetic; they fuse
with each other and into reductions (an expanded ``ArgMax``'s mask and selection).

Normalizations (LayerNorm, softmax with a mask) fuse into one kernel, with three more rules for
groups without contractions or data movement (element-wise nodes and reductions over axes,
trait ``reduces_axes``), after XLA's input and sibling multi-output fusion
(xla/service/gpu/gpu_fusible.cc, multi_output_fusion.cc): a float32 reduction joins the
group of its data input's producer; a float32 element-wise node joins a group that holds a
node of its shape reading the same data inputs (``x - mean`` and ``SquaredDifference(x,
mean)``); and a float32 element-wise node that reads a value of such a group joins it when its
shape is one that a reduction of the group reduces (``(x - mean) * rsqrt(variance)``). So a
LayerNorm becomes one kernel that passes twice over each row while the row is in cache, and an
attention mask's select or add runs in the softmax's kernel. A reduction never joins a
contraction's group. View ops
(Identity, Reshape, Squeeze) emit no code: their output aliases their input's buffer. Nodes that run on the
host (through their numpy reference: :mod:`polytf.lowering.host_fallback`) each form a
group of their own that nothing fuses into, as XLA leaves unclustered nodes to
TensorFlow's executor (tensorflow/compiler/jit/mark_for_compilation_pass.cc).
"""

from __future__ import annotations

import re

from polytf.config import GraphPassConfig
from polytf.graph import FusionGroup, Graph
from polytf.ops import CONTRACTION, ELEMENTWISE, NO_OUTPUT, SOURCE, VIEW, lookup


def resolve_view(graph: Graph, tensor: str) -> str:
    """Follow view ops back to the tensor that owns the buffer."""
    while True:
        producer = graph.producer(tensor)
        definition = lookup(producer.op)
        if definition is None or definition.category != VIEW:
            return tensor
        tensor = producer.inputs[0]


def is_compute(graph: Graph, node_name: str) -> bool:
    """Whether the node needs code: a registered op that is not a source or a view, and
    whose output is not already known at compile time (folded by shape inference)."""
    node = graph.nodes[node_name]
    definition = lookup(node.op)
    if definition is None or definition.category in (SOURCE, VIEW, NO_OUTPUT):
        return False
    return node.output(0) not in graph.constants


def data_inputs(graph: Graph, node_name: str) -> tuple[str, ...]:
    node = graph.nodes[node_name]
    definition = lookup(node.op)
    return tuple(node.inputs[i] for i in definition.data_input_indices(len(node.inputs)))


def output_tensors(graph: Graph, node_name: str) -> tuple[str, ...]:
    """Every output tensor of a typed node (``node:0``, ``node:1``, ...)."""
    node = graph.nodes[node_name]
    tensors = []
    while node.output(len(tensors)) in graph.types:
        tensors.append(node.output(len(tensors)))
    return tuple(tensors)


def kernel_name(index: int, node_name: str) -> str:
    return f"k{index}_" + re.sub(r"[^A-Za-z0-9_]", "_", node_name)[-48:]


def partition(
    graph: Graph, fuse: bool = True, max_group_nodes: int | None = None, host_nodes: frozenset[str] = frozenset()
) -> tuple[FusionGroup, ...]:
    """Fusion groups of ``graph`` (typed), in an order that respects dependences.

    Args:
        fuse: False puts every compute node in its own group.
        max_group_nodes: most nodes in one group (default
            ``GraphPassConfig.max_fusion_group_nodes``); a node that would make a group
            longer starts a new one.
        host_nodes: nodes that run on the host: each is a group of its own
            (``on_host``), and no node fuses into it.
    """
    if max_group_nodes is None:
        max_group_nodes = GraphPassConfig().max_fusion_group_nodes
    max_group_nodes = max(1, int(max_group_nodes))
    group_of_node: dict[str, int] = {}
    members: list[list[str]] = []
    readers: dict[tuple, int] = {}  # (data inputs, output shape) of an element-wise node -> its group
    for name in graph.nodes:
        if not is_compute(graph, name):
            continue
        node = graph.nodes[name]
        target = None
        if fuse and name not in host_nodes and lookup(node.op).reduces_axes:
            target = _reduction_target(graph, name, members, group_of_node, host_nodes, max_group_nodes)
        if fuse and name not in host_nodes and lookup(node.op).category == ELEMENTWISE:
            output_type = graph.types[node.output(0)]
            float_only = _float_only(graph, name)
            for tensor in data_inputs(graph, name):
                producer = graph.producer(tensor).name
                if producer in group_of_node and producer not in host_nodes and graph.types[tensor].shape == output_type.shape:
                    candidate = group_of_node[producer]
                    if not float_only and lookup(graph.nodes[members[candidate][0]].op).category == CONTRACTION:
                        continue
                    if len(members[candidate]) < max_group_nodes and _inputs_allowed(graph, name, candidate, group_of_node):
                        target = candidate
                        break
            if target is None:
                target = _sibling_target(graph, name, members, readers, group_of_node, max_group_nodes)
            if target is None:
                target = _row_consumer_target(graph, name, members, group_of_node, host_nodes, max_group_nodes)
        if target is None:
            members.append([name])
            group_of_node[name] = len(members) - 1
        else:
            members[target].append(name)
            group_of_node[name] = target
        if lookup(node.op).category == ELEMENTWISE and name not in host_nodes:
            readers.setdefault(_reader_key(graph, name), group_of_node[name])

    consumers = graph.consumers()
    outputs_wanted = {resolve_view(graph, t) for t in graph.outputs}
    groups = []
    for index, names in enumerate(members):
        inside = set(names)
        inputs: dict[str, None] = {}  # ordered set: first use first
        outputs: list[str] = []
        on_host = names[0] in host_nodes
        for name in names:
            node = graph.nodes[name]
            for tensor in node.inputs if on_host else data_inputs(graph, name):
                if graph.producer(tensor).name not in inside:
                    inputs.setdefault(tensor)
            for produced in output_tensors(graph, name) if on_host else (node.output(0),):
                used_outside = any(c.name not in inside for c in _consumers_through_views(graph, produced, consumers))
                if used_outside or produced in outputs_wanted:
                    outputs.append(produced)
        name = ("host" if on_host else "k") + kernel_name(index, names[0])[1:]
        groups.append(FusionGroup(name, tuple(names), tuple(inputs), tuple(outputs), on_host))
    return tuple(groups)


def _float_only(graph: Graph, name: str) -> bool:
    """Whether a node reads and writes float32 only: the nodes that fuse into a contraction's
    group (a comparison, a Cast or a SelectV2 on a bool mask does not, so a contraction's
    micro-kernel epilogue stays float32 arithmetic)."""
    node = graph.nodes[name]
    tensors = (*data_inputs(graph, name), node.output(0))
    return all(graph.types[t].dtype == "float32" for t in tensors)


def _consumers_through_views(graph: Graph, tensor: str, consumers) -> list:
    """Nodes that read ``tensor`` directly or through a chain of views (iteratively: a
    chain may be longer than Python's recursion limit)."""
    result = []
    pending = [tensor]
    while pending:
        for consumer in consumers.get(pending.pop(), []):
            definition = lookup(consumer.op)
            if definition is not None and definition.category == VIEW:
                pending.append(consumer.output(0))
            else:
                result.append(consumer)
    return result


def _inputs_allowed(graph: Graph, name: str, candidate: int, group_of_node: dict[str, int]) -> bool:
    for tensor in data_inputs(graph, name):
        producer = graph.producer(resolve_view(graph, tensor)).name
        if producer in group_of_node and group_of_node[producer] > candidate:
            return False
    return True


def _sibling_target(
    graph: Graph,
    name: str,
    members: list[list[str]],
    readers: dict[tuple, int],
    group_of_node: dict[str, int],
    max_group_nodes: int,
) -> int | None:
    """The group a float32 element-wise node joins as a sibling: a group of element-wise nodes
    and reductions (:func:`_normalization_group`) that holds a node of the same output shape
    reading the same data inputs (``readers``: (inputs, shape) -> group), as XLA's sibling
    multi-output fusion: a LayerNorm's ``x - mean`` and ``SquaredDifference(x, mean)`` read
    ``x`` once; None when there is none."""
    candidate = readers.get(_reader_key(graph, name))
    if candidate is None or not _float_only(graph, name) or len(members[candidate]) >= max_group_nodes:
        return None
    if not _normalization_group(graph, members[candidate]):
        return None
    return candidate if _inputs_allowed(graph, name, candidate, group_of_node) else None


def _reader_key(graph: Graph, name: str) -> tuple:
    """What sibling fusion compares: a node's data inputs (as a set) and its output shape."""
    return frozenset(data_inputs(graph, name)), graph.types[graph.nodes[name].output(0)].shape


def _reduction_target(
    graph: Graph,
    name: str,
    members: list[list[str]],
    group_of_node: dict[str, int],
    host_nodes: frozenset[str],
    max_group_nodes: int,
) -> int | None:
    """The group a float32 reduction over axes joins: the group of its data input's producer
    when that group holds element-wise nodes and reductions only (:func:`_normalization_group`;
    XLA's input fusion of a reduction with its element-wise producers: LayerNorm's
    ``Mean(SquaredDifference(x, mean))`` reads the squared differences while they are in
    cache); None: it starts a group of its own."""
    inputs = data_inputs(graph, name)
    if len(inputs) != 1 or not _float_only(graph, name):
        return None
    producer = graph.producer(inputs[0]).name
    if producer not in group_of_node or producer in host_nodes:
        return None
    candidate = group_of_node[producer]
    if not _normalization_group(graph, members[candidate]):
        return None
    if len(members[candidate]) >= max_group_nodes or not _inputs_allowed(graph, name, candidate, group_of_node):
        return None
    return candidate


def _normalization_group(graph: Graph, names: list[str]) -> bool:
    """A group of element-wise nodes and reductions over axes only (no contraction, no data
    movement): the groups reductions and their broadcast consumers join."""
    return all(lookup(graph.nodes[n].op).category == ELEMENTWISE or lookup(graph.nodes[n].op).reduces_axes for n in names)


def _row_consumer_target(
    graph: Graph,
    name: str,
    members: list[list[str]],
    group_of_node: dict[str, int],
    host_nodes: frozenset[str],
    max_group_nodes: int,
) -> int | None:
    """The group a float32 element-wise node joins when it reads a value of a group of
    reductions (:func:`_normalization_group`) and has the shape that one of its reductions
    reduces: a normalization's ``(x - mean) * rsqrt(variance)`` in the kernel that computed
    the mean and the variance, while the row is in cache (XLA's row-reduction fusion of a
    softmax or a LayerNorm with its epilogue); None when there is none."""
    if not _float_only(graph, name):
        return None
    shape = graph.types[graph.nodes[name].output(0)].shape
    for tensor in data_inputs(graph, name):
        producer = graph.producer(tensor).name
        if producer not in group_of_node or producer in host_nodes:
            continue
        candidate = group_of_node[producer]
        names = members[candidate]
        if len(names) >= max_group_nodes or not _normalization_group(graph, names):
            continue
        reduced = {graph.types[data_inputs(graph, n)[0]].shape for n in names if lookup(graph.nodes[n].op).reduces_axes}
        if shape in reduced and _inputs_allowed(graph, name, candidate, group_of_node):
            return candidate
    return None
