"""How each node of a model runs, computed by the library (``polytf ops --model`` prints it):
every node analysed that can be, whatever else in the model is unsupported or rejected."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from coverage_graphs import (
    GraphDefWriter,
    write_constant_subgraph,
    write_no_code_ops,
    write_shape_error_in_the_middle,
    write_unsupported_in_the_middle,
)

from polytf.compiler.model_source import ModelSource
from polytf.compiler.op_coverage import (
    COMPILED,
    HOST,
    NO_CODE,
    NOT_IN_OP_TABLE,
    NOT_REACHED,
    REWRITTEN,
    STATUSES,
    UNSUPPORTED,
    model_op_coverage,
    rewritten_ops,
)
from polytf.compiler.preparation import prepare_model
from polytf.graph import Graph
from polytf.passes.fusion import is_compute
from polytf.passes.pipeline import PASSES, optimize


def coverage_of(path, **shapes):
    coverage = model_op_coverage(ModelSource(path, input_shapes=shapes))
    return coverage, {node.name: node for node in coverage.nodes if not node.made_by}


def statuses(nodes, *names):
    return {name: nodes[name].status for name in names}


def test_one_unsupported_op_leaves_the_others_analysed(tmp_path):
    coverage, nodes = coverage_of(write_unsupported_in_the_middle(tmp_path / "model.pb"))
    assert nodes["u"].status == UNSUPPORTED and nodes["u"].reason == NOT_IN_OP_TABLE
    assert statuses(nodes, "conv", "relu") == {"conv": COMPILED, "relu": COMPILED}  # before it: compiled, not pruned
    assert statuses(nodes, "x", "filter", "flat_shape", "flat", "weights") == dict.fromkeys(
        ("x", "filter", "flat_shape", "flat", "weights"), NO_CODE
    )
    assert statuses(nodes, "dense", "out") == {"dense": NOT_REACHED, "out": NOT_REACHED}  # its output shape is unknown
    assert "'u' (Erfinv), whose output shape polytf does not know" in nodes["dense"].reason
    assert coverage.unsupported_ops == ("Erfinv",) and not coverage.compiles
    assert "node 'u' (op Erfinv)" in coverage.errors[0] and "--input u:D0,D1,..." in coverage.errors[1]


@pytest.mark.parametrize("how", ["_output_shapes", "input shape"])
def test_an_unsupported_nodes_known_shape_lets_the_nodes_after_it_be_analysed(tmp_path, how):
    if how == "_output_shapes":
        coverage, nodes = coverage_of(write_unsupported_in_the_middle(tmp_path / "model.pb", output_shape=(1, 256)))
    else:
        coverage, nodes = coverage_of(write_unsupported_in_the_middle(tmp_path / "model.pb"), u=(1, 256))
    assert statuses(nodes, "conv", "relu", "dense") == dict.fromkeys(("conv", "relu", "dense"), COMPILED)
    assert nodes["out"].status == NO_CODE and nodes["u"].status == UNSUPPORTED
    assert len(coverage.errors) == 1 and not coverage.compiles


def test_a_shape_error_in_the_middle_names_its_node_and_stops_only_what_depends_on_it(tmp_path):
    coverage, nodes = coverage_of(write_shape_error_in_the_middle(tmp_path / "model.pb"))
    assert (
        nodes["bad"].status == UNSUPPORTED
        and "node 'bad' (MatMul)" in nodes["bad"].reason
        and "inner dimensions" in nodes["bad"].reason
    )
    assert nodes["exp"].status == NOT_REACHED and "'bad' (MatMul), which shape inference rejected" in nodes["exp"].reason
    assert statuses(nodes, "relu", "side") == {"relu": COMPILED, "side": COMPILED}
    assert coverage.errors == (nodes["bad"].reason,) and coverage.unsupported_ops == ("MatMul",)


def test_a_constant_subgraph_is_rewritten_by_constant_folding(tmp_path):
    coverage, nodes = coverage_of(write_constant_subgraph(tmp_path / "model.pb"))
    assert nodes["ab"].status == REWRITTEN and nodes["ab"].label == "rewritten (constant folding)"
    assert nodes["out"].status == COMPILED and coverage.compiles
    rows = {row.op: row for row in coverage.ops}
    assert rows["Mul"].statuses == {"rewritten (constant folding)": 1}
    assert rows["Const"].nodes_in_file == 2 and rows["Const"].made_by_passes == {"constant folding": 1}
    assert rows["Const"].statuses == {NO_CODE: 3} and rows["Const"].reasons == ("input / constant",)


def test_inputs_constants_views_and_noops_need_no_code(tmp_path):
    coverage, nodes = coverage_of(write_no_code_ops(tmp_path / "model.pb"))
    assert statuses(nodes, "x", "c", "view", "out", "order") == dict.fromkeys(("x", "c", "view", "out", "order"), NO_CODE)
    assert [nodes[name].reason for name in ("x", "view", "order")] == ["input / constant", "view", "no output"]
    assert nodes["sum"].status == COMPILED  # it took the name of the output Identity: the same node
    assert coverage.compiles and coverage.errors == ()


def test_an_expanded_op_names_its_pass_and_the_ops_it_became(tmp_path):
    graph = GraphDefWriter()
    graph.placeholder("x", (2, 6))
    graph.constant("axis", np.array(1))
    graph.node("position", "ArgMax", "x", "axis")
    graph.node("same", "Tanh", "x")
    graph.node("twin", "Tanh", "x")
    graph.node("sum", "AddV2", "same", "twin")
    coverage, nodes = coverage_of(graph.write(tmp_path / "model.pb"))
    rows = {row.op: row for row in coverage.ops}
    assert rows["ArgMax"].statuses == {"rewritten (op expansion)": 1} and "(expansion pass)" in rows["ArgMax"].reasons[0]
    made = [row for row in rows.values() if row.nodes_in_file == 0]  # Max, SelectV2, ...: all compiled
    assert made and all(row.made_by_passes == {"op expansion": row.statuses.get(COMPILED)} for row in made)
    assert sorted(node.status for name, node in nodes.items() if name in ("same", "twin")) == [COMPILED, REWRITTEN]
    assert "rewritten (common subexpression elimination)" in rows["Tanh"].statuses
    assert set(rewritten_ops()) >= {"ArgMax", "ArgMin", "OneHot", "Split", "SplitV", "Unpack"}


def topk_graph(tmp_path):
    graph = GraphDefWriter()
    graph.placeholder("x", (2, 6))
    graph.constant("k", np.array(2))
    graph.node("top", "TopKV2", "x", "k")
    graph.node("relu", "Relu", "top")
    return graph.write(tmp_path / "model.pb")


def test_a_node_without_lowering_runs_on_the_host_or_is_refused_without_fallback(tmp_path):
    path = topk_graph(tmp_path)
    coverage, nodes = coverage_of(path)
    assert nodes["top"].status == HOST and "no lowering" in nodes["top"].reason and coverage.compiles
    refused = model_op_coverage(ModelSource(path), fallback=False)
    top = next(node for node in refused.nodes if node.name == "top")
    assert top.status == UNSUPPORTED and "--no-fallback" in top.reason
    assert not refused.compiles and "'top' (TopKV2)" in refused.errors[0]


def test_a_reader_of_a_second_output_of_an_unsupported_node_is_not_reached(tmp_path):
    graph = GraphDefWriter()
    graph.placeholder("x", (5,))
    graph.node("unique", "Unique", "x")
    graph.node("values", "Relu", "unique")
    graph.node("positions", "Neg", "unique:1")
    graph.node("twice", "Neg", "positions")
    _, nodes = coverage_of(graph.write(tmp_path / "model.pb"), unique=(5,))
    assert statuses(nodes, "unique", "values", "positions", "twice") == {
        "unique": UNSUPPORTED,
        "values": COMPILED,
        "positions": NOT_REACHED,
        "twice": NOT_REACHED,
    }
    assert "output 1 of the unsupported node 'unique' (Unique)" in nodes["twice"].reason


def test_an_input_shape_for_no_placeholder_is_an_error_and_nothing_is_reached(tmp_path):
    coverage, nodes = coverage_of(write_constant_subgraph(tmp_path / "model.pb"), nowhere=(4,))
    assert "'nowhere'" in coverage.errors[0] and {node.status for node in nodes.values()} == {NOT_REACHED}


@pytest.mark.parametrize("write", [write_constant_subgraph, write_no_code_ops, topk_graph])
def test_the_counts_match_what_the_compiler_prepares(tmp_path, write):
    """Compiled nodes are those the compiler lowers into kernels, host nodes those it runs on the host."""
    path = write(tmp_path / "model.pb") if write is not topk_graph else write(tmp_path)
    coverage, _ = coverage_of(path)
    prepared = prepare_model(ModelSource(path))
    host = {node.name for node in prepared.host_nodes}
    counts = Counter(node.status for node in coverage.nodes)
    assert counts[COMPILED] == sum(1 for name in prepared.graph.nodes if is_compute(prepared.graph, name) and name not in host)
    assert counts[HOST] == len(host)
    for row in coverage.ops:  # every node of an op is counted once
        assert sum(row.statuses.values()) == row.nodes_in_file + sum(row.made_by_passes.values())
        assert list(row.statuses) == sorted(row.statuses, key=lambda label: STATUSES.index(label.split(" (")[0]))


def test_the_pass_pipeline_reports_each_pass_to_its_observer(tmp_path):
    from polytf.frontend import load_graph
    from polytf.lowering.shape_inference import infer_types

    typed = infer_types(load_graph(write_constant_subgraph(tmp_path / "model.pb")))
    seen: list[tuple[str, Graph, Graph]] = []
    optimized, reports = optimize(typed, observe=lambda name, before, after: seen.append((name, before, after)))
    assert [name for name, _, _ in seen] == [report.name for report in reports]
    assert {name for name, _, _ in seen} <= {name for name, _ in PASSES}
    assert seen[0][1] is typed and seen[-1][2] is optimized
    assert all(seen[k][2] is seen[k + 1][1] for k in range(len(seen) - 1))
