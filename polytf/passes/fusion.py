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
with each other and into reductions (an expanded ``ArgMax``'s mask and selection). View ops
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
    for name in graph.nodes:
        if not is_compute(graph, name):
            continue
        node = graph.nodes[name]
        target = None
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
            members.append([name])
            group_of_node[name] = len(members) - 1
        else:
            members[target].append(name)
            group_of_node[name] = target

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
