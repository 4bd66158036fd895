"""Host fallback: the nodes polytf cannot lower run on the host through their numpy
reference, between the compiled kernels.

This is XLA's clustering (tensorflow/compiler/jit/mark_for_compilation_pass.cc) in small:
supported subgraphs are compiled, the rest is left to an executor. A node runs on the host
when its op has shape inference and a numpy reference but

* no lowering (``OpDefinition.lower is None``), or
* a lowering that raises a :class:`~polytf.errors.PolytfError` for this node's attributes
  or shapes (e.g. a resize by a non-integer factor).

:func:`lower_with_fallback` partitions the graph with those nodes as host groups, lowers
the rest, and repeats when a lowering fails (each round moves one more node to the host).
With ``fallback=False`` every such node is listed in one
:class:`~polytf.errors.UnsupportedOpError` instead. Ops with neither a reference nor a
lowering are refused by shape inference whatever the setting.

At run time a :class:`HostStep` reads its inputs (placeholders, constants, tensors of
earlier kernels or host steps), calls the reference, checks each result's shape and dtype
against shape inference and writes it where the next kernels read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polytf.errors import PolytfError, UnsupportedOpError
from polytf.graph import FusionGroup, Graph, Node
from polytf.lowering.lowered_kernel import LoweredKernel, lower_group
from polytf.ops import lookup
from polytf.passes.fusion import is_compute, output_tensors, partition

__all__ = ["HostNode", "HostStep", "HostExecutionError", "host_candidates", "lower_with_fallback"]


class HostExecutionError(PolytfError):
    """A node running on the host failed, or returned a value that does not match its type."""


@dataclass(frozen=True)
class HostNode:
    """A node that runs on the host, and why.

    Attributes:
        name: node name.
        op: its TensorFlow op.
        reason: why it is not compiled (``"no lowering"`` or the lowering's error).
    """

    name: str
    op: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name} ({self.op}): {self.reason}"


def host_candidates(graph: Graph) -> list[HostNode]:
    """Compute nodes of ``graph`` (typed) whose op has a reference but no lowering."""
    result = []
    for name, node in graph.nodes.items():
        definition = lookup(node.op)
        if definition is not None and definition.lower is None and is_compute(graph, name):
            result.append(HostNode(name, node.op, f"polytf has no lowering for {node.op}; its numpy reference runs on the host"))
    return result


def lower_with_fallback(
    graph: Graph, fuse: bool = True, fallback: bool = True
) -> tuple[tuple[FusionGroup, ...], tuple[LoweredKernel, ...], tuple[HostNode, ...]]:
    """Partition ``graph`` and lower its compiled groups, sending what cannot be lowered to the host.

    Returns:
        ``(groups, kernels, host_nodes)``: every group in execution order (host groups
        included), the lowered kernels of the compiled groups (same relative order), and the
        host nodes with their reasons.

    Raises:
        UnsupportedOpError: ``fallback`` is False and some node cannot be lowered (all
            nodes known not to lower are listed).
        PolytfError: a lowering failed on something no single node explains.
    """
    host = {node.name: node for node in host_candidates(graph)}
    if host and not fallback:
        raise UnsupportedOpError([(node.name, node.op) for node in host.values()])
    while True:
        groups = partition(graph, fuse=fuse, host_nodes=frozenset(host))
        kernels = []
        failed = None
        for group in groups:
            if group.on_host:
                continue
            try:
                kernels.append(lower_group(graph, group))
            except PolytfError as error:
                node_name = getattr(error, "node_name", None)
                if node_name is None or node_name in host:
                    raise
                failed = HostNode(node_name, graph.nodes[node_name].op, f"its lowering failed: {error}")
                break
        if failed is None:
            return groups, tuple(kernels), tuple(host.values())
        if not fallback:
            raise UnsupportedOpError([(failed.name, failed.op)]).with_context(failed.reason) from None
        host[failed.name] = failed


@dataclass(frozen=True)
class HostStep:
    """One host node as the runtime runs it.

    Attributes:
        node: the host node (name, op, reason).
        inputs: the node's input tensors, in order.
        outputs: its output tensors that later steps or the caller read.
        input_types: ``(shape, dtype)`` of each input.
        output_types: ``(shape, dtype)`` of each output, from shape inference.
        graph_node: the graph's node (op and attributes) the reference runs; the step keeps
            only this node, not the graph, so a built model holds no weight it packed.
    """

    node: HostNode
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_types: tuple[tuple[tuple[int, ...], str], ...]
    output_types: tuple[tuple[tuple[int, ...], str], ...]
    graph_node: Node

    @staticmethod
    def of(graph: Graph, group: FusionGroup, node: HostNode) -> HostStep:
        graph_node = graph.nodes[group.nodes[0]]
        outputs = output_tensors(graph, graph_node.name)

        def type_of(tensor: str) -> tuple[tuple[int, ...], str]:
            return tuple(int(d) for d in graph.types[tensor].shape), graph.types[tensor].dtype

        return HostStep(node, graph_node.inputs, outputs, tuple(map(type_of, graph_node.inputs)), tuple(map(type_of, outputs)), graph_node)

    def run(self, read: Callable[[str], np.ndarray], write: Mapping[str, np.ndarray]) -> None:
        """Compute the node: ``read(tensor)`` gives each input, results are copied into
        ``write[tensor]`` (the buffers later steps read; outputs nobody reads are dropped).

        Raises:
            HostExecutionError: the reference raised, or returned a value whose shape or
                dtype differs from shape inference's.
        """
        arguments = [np.asarray(read(t)).reshape(shape) for t, (shape, _) in zip(self.inputs, self.input_types)]
        definition = lookup(self.node.op)
        try:
            results = definition.reference(self.graph_node, arguments)
        except Exception as error:  # the reference is numpy code run on user data: name the node whatever it raised
            raise HostExecutionError(f"node '{self.node.name}' ({self.node.op}), run on the host, failed: {type(error).__name__}: {error}") from None
        if len(results) < len(self.outputs):
            raise HostExecutionError(f"node '{self.node.name}' ({self.node.op}) returned {len(results)} outputs, expected {len(self.outputs)}")
        for tensor, value, (shape, dtype) in zip(self.outputs, results, self.output_types):
            value = np.asarray(value)
            if tuple(value.shape) != shape or value.dtype != np.dtype(dtype):
                raise HostExecutionError(
                    f"node '{self.node.name}' ({self.node.op}), run on the host, returned {value.dtype}{list(value.shape)} "
                    f"for '{tensor}'; shape inference said {dtype}{list(shape)}"
                )
            if tensor in write:
                write[tensor].reshape(shape)[...] = value


def describe(host_nodes: Sequence[HostNode]) -> list[str]:
    """One line per host node, for ``polytf show`` and ``polytf tune``."""
    return [f"runs on the host: {node}" for node in host_nodes]
