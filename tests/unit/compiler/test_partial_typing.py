"""Shape inference as far as it goes (:mod:`polytf.compiler.partial_typing`) and what ``polytf
ops --model`` reports from it: over random graphs of branches with an unsupported op or a shape
error somewhere, exactly the broken nodes are rejected, exactly the nodes that depend on them
are not reached, and every other node is typed and analysed."""

from __future__ import annotations

import numpy as np
from coverage_graphs import GraphDefWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytf.compiler.model_source import ModelSource
from polytf.compiler.op_coverage import COMPILED, NO_CODE, NOT_IN_OP_TABLE, NOT_REACHED, REWRITTEN, UNSUPPORTED, model_op_coverage
from polytf.compiler.partial_typing import type_what_can_be_typed
from polytf.frontend import load_graph

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
UNARY = ("Relu", "Tanh", "Neg", "Exp", "Identity")
#: a break in a branch: an op polytf does not know (its shape given or not), or a Reshape of 12 elements to 5
BREAKS = ("unsupported", "unsupported, shape given", "shape error")


@st.composite
def branched_graphs(draw):
    """Branches of unary ops from ``x [3, 4]``, each perhaps broken at one or two nodes, and
    perhaps an ``AddV2`` joining the ends of the first two."""
    branches = []
    for _ in range(draw(st.integers(1, 3))):
        ops = draw(st.lists(st.sampled_from(UNARY), min_size=1, max_size=5))
        breaks = draw(st.dictionaries(st.integers(0, len(ops) - 1), st.sampled_from(BREAKS), max_size=2))
        branches.append((ops, breaks))
    return branches, len(branches) > 1 and draw(st.booleans())


def write(path, branches, join):
    """The GraphDef of ``branched_graphs``; returns it, the input shapes, and per node (but the
    placeholder ``x`` and the constant ``five``) its op and what it must be: ``"rejected"`` (a
    break), ``"after"`` (depends on a break that stops the analysis) or ``"reached"``."""
    graph = GraphDefWriter()
    graph.placeholder("x", (3, 4))
    graph.constant("five", np.array([5]))
    expected, shapes, ends = {}, {}, []
    for b, (ops, breaks) in enumerate(branches):
        tensor, stopped = "x", False
        for k, op in enumerate(ops):
            name = f"b{b}_{k}"
            kind = breaks.get(k)
            if kind is None:
                tensor = graph.node(name, op, tensor)
                expected[name] = (op, "after" if stopped else "reached")
                continue
            op = "Erfinv" if kind.startswith("unsupported") else "Reshape"
            tensor = graph.node(name, op, tensor, *(("five",) if op == "Reshape" else ()))
            # an unsupported op is rejected wherever it is; a Reshape after a stop is not reached
            expected[name] = (op, "after" if stopped and op == "Reshape" else "rejected")
            if kind == "unsupported, shape given":  # its known output type starts the analysis afresh
                shapes[name], stopped = (3, 4), False
            else:
                stopped = True
        ends.append((tensor, stopped))
    if join:
        graph.node("join", "AddV2", ends[0][0], ends[1][0])
        expected["join"] = ("AddV2", "after" if ends[0][1] or ends[1][1] else "reached")
    return graph.write(path), shapes, expected


def named(expected, what):
    return {name for name, (_, found) in expected.items() if found == what}


@SETTINGS
@given(case=branched_graphs())
def test_exactly_the_broken_nodes_are_rejected_and_their_dependents_not_reached(tmp_path, case):
    path, shapes, expected = write(tmp_path / "model.pb", *case)
    typing = type_what_can_be_typed(load_graph(path), shapes)
    assert set(typing.rejected) == named(expected, "rejected")
    assert set(typing.not_reached) == named(expected, "after")
    stand_ins = {name for name, reason in typing.rejected.items() if reason == NOT_IN_OP_TABLE}
    reshapes = {name for name, (op, _) in expected.items() if op == "Reshape"}
    typed_stand_ins = stand_ins & set(shapes)  # the others' output shape is unknown: cut out
    assert set(typing.graph.nodes) == {"x", *(("five",) if reshapes else ()), *named(expected, "reached"), *typed_stand_ins}
    assert all(node.output(0) in typing.graph.types for node in typing.graph.nodes.values())
    assert all(f"node '{name}' (Reshape)" in typing.rejected[name] for name in set(typing.rejected) - stand_ins)
    assert stand_ins == {name for name, (op, _) in expected.items() if op == "Erfinv"}


@SETTINGS
@given(case=branched_graphs())
def test_the_report_follows_the_typing(tmp_path, case):
    path, shapes, expected = write(tmp_path / "model.pb", *case)
    coverage = model_op_coverage(ModelSource(path, input_shapes=shapes))
    status = {node.name: node.status for node in coverage.nodes if not node.made_by}
    for name, (op, what) in expected.items():
        if what == "rejected":
            assert status[name] == UNSUPPORTED
        elif what == "after":
            assert status[name] == NOT_REACHED
        elif op == "Identity":
            assert status[name] == NO_CODE
        else:  # compiled, or rewritten (a duplicate branch by CSE, Neg(Neg(x)) by arithmetic simplification)
            assert status[name] in (COMPILED, REWRITTEN), name
    assert status["x"] == NO_CODE
    assert coverage.compiles == (not named(expected, "rejected"))
