"""How each node of a model runs, by op: compiled, on the host, no code, rewritten by a graph
pass, or unsupported (and why).

``polytf ops --model FILE`` prints it. :func:`model_op_coverage` follows every node of the file
through the steps of :func:`polytf.compiler.preparation.prepare_model` and goes as far as each
node can go::

    read ─► stand in for ─► infer types ─► graph passes ─► type afresh ─► partition + lower
            unsupported      cut out a       (each pass                    (host fallback)
            nodes            rejected node   observed)
                             and its readers

Each node ends with one status:

* ``unsupported``: its op is not in the op table, or shape inference rejected the node (the
  reason is the ShapeError/GraphError message), or, with ``fallback=False``, it would run on
  the host;
* ``not reached``: it depends on a node shape inference rejected, or on an unsupported node
  whose output shape is unknown;
* ``no code``: a source (input, constant), a view or an op without outputs (its category),
  whether a pass removed it or not;
* ``rewritten``: a graph pass folded it into a constant, removed, merged or expanded it into
  other ops; the pass is named (:data:`polytf.passes.pipeline.PASSES`);
* ``on the host``: lowering failed or the op has no lowering, and its numpy reference runs
  between the kernels (:mod:`polytf.lowering.host_fallback`);
* ``compiled``: lowered into a fusion group's kernel.

How far the analysis goes: every node shape inference accepts is analysed
(:func:`polytf.compiler.partial_typing.type_what_can_be_typed`: an unsupported node stands in
as a placeholder, a rejected node is cut out with the nodes that depend on it). The graph passes
run with an observer (:func:`polytf.passes.pipeline.optimize`): a node is rewritten by the first
pass after which its name is gone or holds another op (a producer that takes the name of the
identity-like node reading it, as identity removal does, is the same node); nodes a pass makes
(the constant of a folded node, the slices of an expanded Split) are listed with that pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from polytf.compiler.model_source import ModelSource
from polytf.compiler.partial_typing import NOT_IN_OP_TABLE, type_what_can_be_typed
from polytf.errors import PolytfError
from polytf.frontend import load_graph
from polytf.graph import Graph, Node, tensor_name
from polytf.lowering.host_fallback import lower_with_fallback
from polytf.lowering.shape_inference import infer_types
from polytf.ops import NO_OUTPUT, SOURCE, VIEW, lookup
from polytf.ops.coverage import rewritten_ops
from polytf.passes.fusion import is_compute
from polytf.passes.pipeline import optimize

__all__ = [
    "COMPILED",
    "HOST",
    "NOT_REACHED",
    "NOT_IN_OP_TABLE",
    "NO_CODE",
    "REWRITTEN",
    "STATUSES",
    "UNSUPPORTED",
    "ModelCoverage",
    "NodeCoverage",
    "OpCoverage",
    "model_op_coverage",
    "rewritten_ops",
]

#: How a node runs (:data:`STATUSES`, the order a row lists them in).
UNSUPPORTED = "unsupported"
NOT_REACHED = "not reached"
HOST = "on the host"
COMPILED = "compiled"
REWRITTEN = "rewritten"
NO_CODE = "no code"
STATUSES = (UNSUPPORTED, NOT_REACHED, HOST, COMPILED, REWRITTEN, NO_CODE)
#: What a node of each no-code category is.
NO_CODE_KINDS = {SOURCE: "input / constant", VIEW: "view", NO_OUTPUT: "no output"}


@dataclass(frozen=True)
class NodeCoverage:
    """How one node runs.

    Attributes:
        name: the node's name in the file (or the name the pass that made it gave it).
        op: its TensorFlow op type.
        status: one of :data:`STATUSES`.
        reason: for ``rewritten`` the pass; for ``no code`` what the node is; else why it
            runs on the host, is unsupported or was not reached ("" for compiled nodes).
        made_by: the graph pass that made the node; "" for a node of the file.
    """

    name: str
    op: str
    status: str
    reason: str = ""
    made_by: str = ""

    @property
    def label(self) -> str:
        """The status, with the pass for a rewritten node: ``"rewritten (constant folding)"``."""
        return f"{REWRITTEN} ({self.reason})" if self.status == REWRITTEN else self.status


@dataclass(frozen=True)
class OpCoverage:
    """How the nodes of one op run.

    Attributes:
        op: the TensorFlow op type.
        nodes_in_file: its nodes in the model file.
        made_by_passes: graph pass -> nodes of this op it made.
        statuses: :attr:`NodeCoverage.label` -> nodes (of the file and made by passes).
        reasons: why, for the nodes that are not compiled or rewritten, each reason once
            (for a rewritten op with an expansion rule, what it is compiled as).
    """

    op: str
    nodes_in_file: int
    made_by_passes: Mapping[str, int] = field(default_factory=dict)
    statuses: Mapping[str, int] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelCoverage:
    """Every node of a model (:func:`model_op_coverage`).

    Attributes:
        model: the model file.
        nodes: every node of the file and every node the graph passes made, in the order
            they were met.
        errors: what stopped the analysis of some nodes, one message each (each names its
            node): unsupported ops, shape errors, a failing pass.
    """

    model: str
    nodes: tuple[NodeCoverage, ...]
    errors: tuple[str, ...] = ()

    @property
    def ops(self) -> tuple[OpCoverage, ...]:
        """One entry per op, by op name."""
        by_op: dict[str, list[NodeCoverage]] = {}
        for node in self.nodes:
            by_op.setdefault(node.op, []).append(node)
        expansions = rewritten_ops()
        return tuple(_op_coverage(op, nodes, expansions.get(op)) for op, nodes in sorted(by_op.items()))

    @property
    def unsupported_ops(self) -> tuple[str, ...]:
        """The ops with an unsupported node, by name (the model cannot be compiled while there are any)."""
        return tuple(sorted({node.op for node in self.nodes if node.status == UNSUPPORTED}))

    @property
    def compiles(self) -> bool:
        """Whether polytf compiles the model: no error, no unsupported or unreached node."""
        return not self.errors and all(node.status not in (UNSUPPORTED, NOT_REACHED) for node in self.nodes)


def _op_coverage(op: str, nodes: Sequence[NodeCoverage], expansion: str | None) -> OpCoverage:
    """The nodes of ``op`` counted; ``expansion``: what the op is compiled as when expanded."""
    statuses = Counter(node.label for node in nodes)
    order = {status: k for k, status in enumerate(STATUSES)}
    reasons = [node.reason for node in nodes if node.status not in (COMPILED, REWRITTEN) and node.reason]
    if expansion is not None and any(node.status == REWRITTEN for node in nodes):
        reasons.append(expansion)
    return OpCoverage(
        op,
        sum(1 for node in nodes if not node.made_by),
        dict(Counter(node.made_by for node in nodes if node.made_by)),
        dict(sorted(statuses.items(), key=lambda item: (order[item[0].split(" (")[0]], item[0]))),
        tuple(dict.fromkeys(reasons)),
    )


@dataclass
class _Record:
    """A node being followed (mutable while :func:`model_op_coverage` runs)."""

    name: str
    op: str
    made_by: str = ""
    status: str = ""
    reason: str = ""


class _NodeTracker:
    """Follows the nodes of a graph through cuts and graph passes; ``alive`` maps the current
    name of every node not yet decided to its record."""

    def __init__(self, graph: Graph) -> None:
        self.records = [_Record(name, node.op) for name, node in graph.nodes.items()]
        self.alive = {record.name: record for record in self.records}

    def decide(self, name: str, status: str, reason: str = "") -> None:
        record = self.alive.pop(name, None)
        if record is not None:
            record.status, record.reason = status, reason

    def observe(self, pass_name: str, before: Graph, after: Graph) -> None:
        """Record what one graph pass did (:func:`polytf.passes.pipeline.optimize`'s observer)."""

        def kept(name: str) -> bool:
            return name in after.nodes and after.nodes[name].op == before.nodes[name].op

        gone = [name for name in before.nodes if not kept(name)]
        if not gone and len(after.nodes) == len(before.nodes):
            return
        readers = before.consumers()
        moved = {}
        for name in gone:
            target = None if name in after.nodes else _renamed_to(name, before, after, readers)
            if target is not None:
                moved[name] = target
        for name in gone:
            if name not in moved:
                self.decide(name, REWRITTEN, pass_name)
        self.alive.update({target: self.alive.pop(name) for name, target in moved.items() if name in self.alive})
        targets = set(moved.values())
        for name, node in after.nodes.items():
            if name not in targets and not (name in before.nodes and kept(name)):
                self.records.append(record := _Record(name, node.op, made_by=pass_name))
                self.alive[name] = record

    def nodes(self) -> tuple[NodeCoverage, ...]:
        """Every record as a :class:`NodeCoverage`; a source, view or no-output node a pass
        rewrote is ``no code`` all the same."""
        result = []
        for record in self.records:
            status, reason = record.status or NOT_REACHED, record.reason
            definition = lookup(record.op)
            if status == REWRITTEN and definition is not None and definition.category in NO_CODE_KINDS:
                status, reason = NO_CODE, NO_CODE_KINDS[definition.category]
            result.append(NodeCoverage(record.name, record.op, status, reason, record.made_by))
        return tuple(result)


def _renamed_to(name: str, before: Graph, after: Graph, readers: Mapping[str, list[Node]]) -> str | None:
    """The name node ``name`` took, when a pass gave it the name of an identity-like node
    (``OpDefinition.forwards``) that read it."""
    op = before.nodes[name].op
    for reader in readers.get(tensor_name(name, 0), ()):
        now = after.nodes.get(reader.name)
        definition = lookup(reader.op)
        if now is not None and now.op == op and reader.op != op and definition is not None and definition.forwards is not None:
            return reader.name
    return None


def model_op_coverage(source: ModelSource, fallback: bool = True) -> ModelCoverage:
    """How each node of ``source`` runs (module docstring).

    Args:
        source: the model, its input shapes and outputs.
        fallback: nodes polytf cannot lower run on the host (as
            :func:`~polytf.compiler.preparation.prepare_model`); False reports them unsupported.

    Raises:
        GraphError: the model file cannot be read (nothing to report on).
    """
    original = load_graph(source.path, outputs=source.output_names, signature=source.signature)
    tracker = _NodeTracker(original)
    typing = type_what_can_be_typed(original, source.input_shapes)
    for name, reason in typing.rejected.items():
        tracker.decide(name, UNSUPPORTED, reason)
    for name, reason in typing.not_reached.items():
        tracker.decide(name, NOT_REACHED, reason)
    errors = list(typing.errors)
    if typing.graph is None:
        return ModelCoverage(str(source.path), tracker.nodes(), tuple(errors))
    stage = "the graph passes"
    try:
        optimized, _ = optimize(typing.graph, observe=tracker.observe)
        stage = "shape inference after the graph passes"
        final = infer_types(optimized.with_changes(types={}, constants={}), typing.input_shapes)
        stage = "lowering"
        _, _, host_nodes = lower_with_fallback(final, fallback=True)
    except PolytfError as error:
        errors.append(f"{stage} failed: {error}")
        for name in list(tracker.alive):
            tracker.decide(name, NOT_REACHED, f"{stage} failed (see the error)")
        return ModelCoverage(str(source.path), tracker.nodes(), tuple(errors))
    host = {node.name: node.reason for node in host_nodes}
    if host and not fallback:
        listing = ", ".join(f"'{node.name}' ({node.op})" for node in host_nodes)
        errors.append(f"{len(host)} node(s) cannot be compiled and would run on the host, which --no-fallback refuses: {listing}")
    for name in list(tracker.alive):
        if name in host and fallback:
            tracker.decide(name, HOST, host[name])
        elif name in host:
            tracker.decide(name, UNSUPPORTED, f"{host[name]} (--no-fallback refuses it)")
        elif is_compute(final, name):
            tracker.decide(name, COMPILED)
        elif (kind := NO_CODE_KINDS.get(lookup(final.nodes[name].op).category)) is not None:
            tracker.decide(name, NO_CODE, kind)
        else:  # shape inference knows its value
            tracker.decide(name, REWRITTEN, "known at compile time")
    return ModelCoverage(str(source.path), tracker.nodes(), tuple(errors))
