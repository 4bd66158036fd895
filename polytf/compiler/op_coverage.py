"""How each op of a model runs: compiled, on the host (and why), rewritten, or unsupported.

``polytf ops --model FILE`` prints it. Steps of :func:`model_op_coverage`::

    ModelSource ─► read ─► count nodes per op ─► unsupported ops? ─► yes: each is "unsupported"
                                                                 └─► no: prepare the model,
                     count its nodes per op: compiled / host (with the reason) / no code;
                     an op with no node left was rewritten by a pass or folded away

An op is unsupported when the op registry has no definition for it
(:func:`polytf.ops.lookup`); then the model is not prepared (it cannot be). A node
needs code unless it is a source, a view or folded to a constant
(:func:`polytf.passes.fusion.is_compute`); host nodes are those
:func:`polytf.lowering.host_fallback.lower_with_fallback` could not lower.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import prepare_model
from polytf.frontend import load_graph
from polytf.ops import lookup
from polytf.ops.coverage import rewritten_ops
from polytf.passes.fusion import is_compute

__all__ = ["COMPILED", "HOST", "NO_CODE", "UNSUPPORTED", "ModelCoverage", "OpCoverage", "model_op_coverage", "rewritten_ops"]

#: How the nodes of an op run after the graph passes.
COMPILED, HOST, NO_CODE, UNSUPPORTED = "compiled", "host", "no code", "unsupported"
#: :attr:`OpCoverage.fate` of an op whose nodes the graph passes replaced or removed.
REWRITTEN, FOLDED_OR_REMOVED = "rewritten", "folded or removed"


@dataclass(frozen=True)
class OpCoverage:
    """How one op of a model runs.

    Attributes:
        op: the TensorFlow op type.
        nodes_in_file: its nodes in the model file.
        after_passes: status (:data:`COMPILED`, :data:`HOST`, :data:`NO_CODE`,
            :data:`UNSUPPORTED`) -> its nodes of that status after the graph passes.
        fate: when no node of the op is left: :data:`REWRITTEN` (a pass replaced it by
            compiled ops) or :data:`FOLDED_OR_REMOVED`; else "".
        note: why: the reason its nodes run on the host, that polytf does not support it,
            or the pass that rewrote it; else "".
    """

    op: str
    nodes_in_file: int
    after_passes: Mapping[str, int] = field(default_factory=dict)
    fate: str = ""
    note: str = ""


@dataclass(frozen=True)
class ModelCoverage:
    """Every op of a model (:func:`model_op_coverage`).

    Attributes:
        model: the model file.
        ops: one entry per op, in the file or after the passes, by op name.
    """

    model: str
    ops: tuple[OpCoverage, ...]

    @property
    def unsupported_ops(self) -> tuple[str, ...]:
        """The ops polytf does not support (the model cannot be compiled while there are any)."""
        return tuple(row.op for row in self.ops if UNSUPPORTED in row.after_passes)


def model_op_coverage(source: ModelSource) -> ModelCoverage:
    """How each op of ``source`` runs (module docstring).

    Raises:
        GraphError, ShapeError: the model cannot be read or its shapes inferred.
        UnsupportedOpError: the passes leave a node that cannot be compiled (every op of the
            file is supported, so this is rare).
    """
    original = load_graph(source.path, outputs=source.output_names, signature=source.signature)
    before = Counter(node.op for node in original.nodes.values())
    statuses: dict[str, Counter] = {op: Counter() for op in before}
    reasons: dict[str, str] = {}
    unsupported = {op for op in before if lookup(op) is None}
    for op in unsupported:
        statuses[op][UNSUPPORTED] = before[op]
        reasons[op] = "polytf does not support this op"
    if not unsupported:
        prepared = prepare_model(source)
        host = {node.name: node for node in prepared.host_nodes}
        for name, node in prepared.graph.nodes.items():
            if name in host:
                status = HOST
                reasons.setdefault(node.op, host[name].reason)
            else:
                status = COMPILED if is_compute(prepared.graph, name) else NO_CODE
            statuses.setdefault(node.op, Counter())[status] += 1
    rewritten = rewritten_ops()
    rows = []
    for op in sorted(statuses):
        counts = dict(sorted(statuses[op].items()))
        fate = "" if counts else REWRITTEN if op in rewritten else FOLDED_OR_REMOVED
        note = reasons.get(op) or (rewritten.get(op, "") if fate else "")
        rows.append(OpCoverage(op, before.get(op, 0), counts, fate, note))
    return ModelCoverage(str(source.path), tuple(rows))
