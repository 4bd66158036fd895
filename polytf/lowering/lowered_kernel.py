"""Lowers a fusion group to a Scop, with its numpy reference.

Arrays of the Scop are named positionally (``A0``, ``A1``, ...: inputs, then outputs,
then temporaries), so that the same computation in two models has the same Scop
fingerprint and shares tuning records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from polytf.errors import PolytfError
from polytf.graph import FusionGroup, Graph
from polytf.ops import ArrayRef, LoweringContext, lookup
from polytf.ops.blas_threads import single_threaded_blas
from polytf.passes.fusion import data_inputs
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.temporary_elimination import eliminate_temporaries


@dataclass(frozen=True)
class LoweredKernel:
    """A fusion group as a Scop plus what the runtime needs to bind its arrays.

    Attributes:
        group: the fusion group.
        scop: its statements and arrays.
        array_tensors: Scop array name -> graph tensor it holds (temporaries: None).
        reference: numpy executable specification, ``{input array name: value}`` ->
            ``{output array name: value}``.
    """

    group: FusionGroup
    scop: Scop
    array_tensors: Mapping[str, str | None]
    reference: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
    #: input array name -> its value, for inputs that are graph constants (weights)
    constant_values: Mapping[str, np.ndarray] = field(default_factory=dict)
    #: Scop array name -> the element of its tensor's buffer where the array begins, for an
    #: array that is a window of a bigger buffer (a tensor placed in a slab of its consumer's
    #: buffer: :mod:`polytf.plan.buffer_placement`); absent: 0
    array_origins: Mapping[str, int] = field(default_factory=dict)

    @property
    def input_arrays(self) -> tuple[ArrayInfo, ...]:
        return tuple(a for a in self.scop.arrays if a.role == "input")

    @property
    def output_arrays(self) -> tuple[ArrayInfo, ...]:
        return tuple(a for a in self.scop.arrays if a.role == "output")


def lower_group(graph: Graph, group: FusionGroup) -> LoweredKernel:
    """Lower every node of ``group`` in program order, then remove the temporaries that
    point-wise nodes leave between each other (:func:`eliminate_temporaries`).

    Raises:
        PolytfError subclasses, with the node and op in the message.
    """
    names: dict[str, str] = {}
    infos: list[ArrayInfo] = []

    def add(tensor: str, role: str) -> None:
        name = f"A{len(infos)}"
        names[tensor] = name
        tensor_type = graph.types[tensor]
        infos.append(ArrayInfo(name, tuple(int(d) for d in tensor_type.shape), tensor_type.dtype, role, tensor))

    for tensor in group.inputs:
        add(tensor, "input")
    for tensor in group.outputs:
        add(tensor, "output")
    for node_name in group.nodes:
        produced = graph.nodes[node_name].output(0)
        if produced not in names:
            add(produced, "temporary")

    context = LoweringContext(constants=graph.constants)
    statements = []
    for node_name in group.nodes:
        node = graph.nodes[node_name]
        definition = lookup(node.op)
        inputs = [ArrayRef(names[t], graph.types[t]) for t in data_inputs(graph, node_name)]
        outputs = [ArrayRef(names[node.output(0)], graph.types[node.output(0)])]
        try:
            statements.extend(definition.lower(node, inputs, outputs, context))
        except PolytfError as error:
            error.node_name = node.name  # which node failed, for the host fallback
            raise error.with_context(f"while lowering node '{node.name}' ({node.op})") from None
    for temporary in context.temporaries:
        infos.append(ArrayInfo(temporary.name, temporary.shape, temporary.type.dtype, "temporary", ""))

    scop = Scop(group.name, tuple(statements), tuple(infos), tuple((n, graph.nodes[n].op) for n in group.nodes))
    scop = eliminate_temporaries(scop)
    tensors = {info.name: (info.tensor or None) for info in scop.arrays}
    constant_values = {
        info.name: np.asarray(graph.constants[info.tensor])
        for info in scop.arrays
        if info.role == "input" and info.tensor in graph.constants
    }
    return LoweredKernel(group, scop, tensors, _GroupReference(graph, group, dict(names)), constant_values)


@dataclass(frozen=True)
class _GroupReference:
    """The numpy reference of a fusion group: each node's op reference in program order
    (a value, not a closure, so that a prepared model can be kept: :mod:`polytf.compiler.load_cache`)."""

    graph: Graph
    group: FusionGroup
    names: Mapping[str, str]

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        graph, names = self.graph, self.names
        values = {tensor: arrays[names[tensor]] for tensor in self.group.inputs}
        with single_threaded_blas():
            for node_name in self.group.nodes:
                node = graph.nodes[node_name]
                inputs = [values[t] if t in values else graph.constants[t] for t in node.inputs if not t.startswith("^")]
                (result, *_) = lookup(node.op).reference(node, inputs)
                values[node.output(0)] = np.asarray(result, dtype=graph.types[node.output(0)].dtype)
        return {names[t]: values[t] for t in self.group.outputs}
