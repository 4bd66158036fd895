"""What keeps compile time linear in a graph's size: fusion groups of bounded length, an
editor that never scans the graph per edit, analyses memoised per Scop. (Seconds are
measured by results/compile_time.py, not here.)"""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from hand_built_graphs import GRAPHS, kernels_of

from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.config import GraphPassConfig
from polytf.frontend import graph_from_graphdef
from polytf.graph import Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.lowering.shape_inference import infer_types
from polytf.model_zoo.chains import chain_reference, elementwise_chain
from polytf.passes.editor import GraphEditor
from polytf.passes.fusion import partition
from polytf.passes.pipeline import PASSES, optimize
from polytf.poly.dependences import compute_dependences
from polytf.schedules import structure
from polytf.schedules.data_layout import apply_data_layout
from polytf.schedules.search_space import SearchSpace

MIXED = ("Relu", "AddV2", "Mul", "Tanh")


def typed_chain(length, kinds=("Relu",), fanout=False):
    graph = infer_types(graph_from_graphdef(elementwise_chain(length, kinds, width=8, fanout=fanout)))
    return optimize(graph)[0]


def test_long_chains_are_split_into_bounded_groups_in_dependence_order():
    graph = typed_chain(300)
    groups = partition(graph, max_group_nodes=48)
    assert [len(g.nodes) for g in groups] == [48] * 6 + [12]
    produced = set()
    for group in groups:
        assert all(t.startswith("x:") or t.rsplit(":", 1)[0] in produced for t in group.inputs)
        produced |= set(group.nodes)
    assert len(partition(graph)) == -(-300 // GraphPassConfig().max_fusion_group_nodes)


@pytest.mark.parametrize("fanout", [False, True])
def test_a_split_chain_computes_the_same_values(fanout):
    graph = typed_chain(23, MIXED, fanout)
    groups = partition(graph, max_group_nodes=5)
    assert len(groups) >= 5 and all(len(g.nodes) <= 5 for g in groups)
    model = build_model(PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ()), threads=2)
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    outputs = model(x=x)
    np.testing.assert_allclose(outputs["Identity"], chain_reference(x, 23, MIXED), rtol=1e-5, atol=1e-6)
    if fanout:
        np.testing.assert_allclose(outputs["side4"], np.maximum(chain_reference(x, 5, MIXED), 0), rtol=1e-5, atol=1e-6)


def test_the_passes_on_a_long_chain_remove_exactly_the_multiplications_by_one():
    graph = typed_chain(400, MIXED)
    by_one = sum(1 for i in range(400) if MIXED[i % 4] == "Mul" and i % 7 == 5)  # constants 0.5 + 0.1 * (i % 7)
    assert by_one > 0
    assert sum(1 for n in graph.nodes.values() if n.op in MIXED) == 400 - by_one


def test_the_editor_keeps_its_reader_index_through_edits():
    graph = typed_chain(6)
    editor = GraphEditor(graph)
    assert editor.consumers("n2:0") == ["n3"] and editor.readers("n2") == ["n3"]
    editor.rewire({"n2:0": "n1:0"})
    assert editor.consumers("n1:0") == ["n2", "n3"] and editor.consumers("n2:0") == []
    editor.rename("n1", "renamed")
    assert editor.consumers("renamed:0") == ["n2", "n3"] and editor.nodes["n3"].inputs == ("renamed:0",)
    assert "renamed:0" in editor.types and "n1:0" not in editor.types
    editor.set_node(Node("n3", "Tanh", ("n2:0",), attrs={"T": "float32"}))
    assert editor.consumers("renamed:0") == ["n2"] and editor.consumers("n2:0") == ["n3"]
    editor.rewire({"n4:0": "n3:0"})
    editor.remove("n4")
    assert "n4:0" not in editor.types and editor.consumers("n3:0") == ["Identity"]  # n5 became the output Identity


def test_structure_queries_are_memoised_per_scop():
    graph = typed_chain(40)
    (group,) = partition(graph, max_group_nodes=48)
    scop = lower_group(graph, group).scop
    structure.anchor_statement.cache_clear()
    for _ in range(len(scop.statements)):
        anchor = structure.anchor_statement(scop)
    assert anchor is scop.statements[0]  # every statement has one iterator: the first wins
    info = structure.anchor_statement.cache_info()
    assert info.misses == 1 and info.hits == len(scop.statements) - 1


def _dataflow_dependences(scop):
    """The reference: isl's dataflow analysis with may-sources under program order."""
    schedule = scop.original_schedule()

    def flow(sink, source):
        return isl.UnionAccessInfo.from_sink(sink).set_may_source(source).set_schedule_map(schedule).compute_flow().get_may_dependence()

    reads, writes = scop.reads(), scop.writes()
    return flow(reads, writes), flow(writes, reads), flow(writes, writes)


def _scops_with_layouts():
    kernels = [k for name in sorted(GRAPHS) for k in kernels_of(GRAPHS[name]())]
    kernels += [lower_group(graph, g) for graph in [typed_chain(30, MIXED, fanout=True)] for g in partition(graph, max_group_nodes=12)]
    for kernel in kernels:
        yield kernel.scop
        for recipe in SearchSpace.for_scop(kernel.scop, 2).heuristic_recipes()[:3]:
            laid_out = apply_data_layout(kernel.scop, recipe)  # packing, padding and im2col copies
            if laid_out is not kernel.scop:
                yield laid_out


def test_dependences_by_joining_accesses_equal_isl_dataflow():
    checked = 0
    for scop in _scops_with_layouts():
        dependences = compute_dependences(scop)
        for (kind, ours), reference in zip(dependences.named(), _dataflow_dependences(scop)):
            assert ours.is_equal(reference), (scop.name, kind, str(ours), str(reference))
        checked += 1
    assert checked > len(GRAPHS) + 3


def test_a_pass_that_changes_nothing_returns_its_input_graph():
    graph = typed_chain(50, MIXED)  # already optimized: a second round changes nothing
    config = GraphPassConfig()
    for name, graph_pass in PASSES:
        result, report = graph_pass(graph, config)
        assert result is graph and not report.changed, name


def test_scop_relations_are_built_once():
    graph = typed_chain(10)
    (group,) = partition(graph)
    scop = lower_group(graph, group).scop
    assert scop.original_schedule() is scop.original_schedule() and scop.reads() is scop.reads()
    statement = scop.statements[0]
    assert statement.access_map(statement.write) is statement.access_map(statement.write)
    assert statement.access_map(statement.write).is_equal(isl.Map(f"{{ {statement.name}[d0, d1] -> {statement.write.array}[d0, d1] : 0 <= d0 < 1 and 0 <= d1 < 8 }}"))


def test_finish_sorts_a_node_added_after_its_reader_and_rejects_a_cycle():
    from polytf.errors import GraphError

    graph = typed_chain(4)
    editor = GraphEditor(graph)
    late = Node("late", "Tanh", ("n0:0",), attrs={"T": "float32"})
    editor.set_node(late, output_types=[graph.types["n0:0"]])  # appended: after n1, which will read it
    editor.set_node(Node("n1", "Relu", ("late:0",), attrs={"T": "float32"}))
    result, _ = editor.finish("test")
    order = list(result.nodes)
    assert order.index("n0") < order.index("late") < order.index("n1")
    editor = GraphEditor(graph)
    editor.set_node(Node("n1", "Relu", ("n2:0",), attrs={"T": "float32"}))
    with pytest.raises(GraphError, match="cycle"):
        editor.finish("test")
