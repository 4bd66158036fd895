"""The pass pipeline: fixed point, reports, and compiled results unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from graph_evaluation import assert_same_values, evaluate, ops_of, typed_graph
from hand_built_graphs import const, placeholder

from polytf.config import GraphPassConfig
from polytf.graph import Node
from polytf.passes.pipeline import PASSES, optimize, summary
from polytf.passes.report import PassReport


def _graph():
    rng = np.random.default_rng(0)
    return typed_graph(
        [
            placeholder("x", (2, 4)),
            placeholder("unused", (3,)),
            const("w", rng.standard_normal((4, 5)).astype(np.float32)),
            const("one", np.float32(1.0)),
            const("b", rng.standard_normal(5).astype(np.float32)),
            const("b_copy", np.array(rng.standard_normal(5), np.float32)),
            Node("read_w", "Identity", ("w:0",)),
            Node("mm", "MatMul", ("x:0", "read_w:0")),
            Node("times_one", "Mul", ("mm:0", "one:0")),
            Node("shift", "Sub", ("times_one:0", "b:0")),
            Node("neg", "Neg", ("b_copy:0",)),
            Node("plus", "AddV2", ("shift:0", "neg:0")),
            Node("relu", "Relu", ("plus:0",)),
            Node("dead", "Relu", ("x:0",)),
            Node("Identity", "Identity", ("relu:0",)),
        ],
        ["Identity:0"],
    )


def test_optimize_reaches_a_fixed_point_and_reports_every_pass():
    graph = _graph()
    optimized, reports = optimize(graph)
    assert ops_of(optimized) == ["Placeholder", "Placeholder", "Const", "MatMul", "Const", "BiasAdd", "Relu"]
    assert optimized.nodes["Identity"].op == "Relu" and optimized.outputs == ("Identity:0",)
    assert [r.name for r in reports[: len(PASSES)]] == [name for name, _ in PASSES]
    assert len(reports) % len(PASSES) == 0
    last_round = reports[-len(PASSES) :]
    assert not any(r.changed for r in last_round) and last_round[0].round == reports[-1].round >= 2
    for before, after in zip(reports, reports[1:]):
        assert (after.nodes_before, after.edges_before) == (before.nodes_after, before.edges_after)
    total = summary(reports)
    assert (total.nodes_before, total.nodes_after) == (15, 7)
    assert (total.edges_before, total.edges_after) == (13, 5)
    rng = np.random.default_rng(1)
    assert_same_values(graph, optimized, {"x": rng.standard_normal((2, 4)).astype(np.float32), "unused": np.zeros(3, np.float32)})


def test_rounds_are_bounded():
    _, reports = optimize(_graph(), GraphPassConfig(max_rounds=1))
    assert {r.round for r in reports} == {1} and len(reports) == len(PASSES)


def test_pass_report_stays_importable_from_pruning_and_prints_counts():
    from polytf.passes.pruning import PassReport as FromPruning

    assert FromPruning is PassReport
    text = str(PassReport("prune", 10, 7, 12, 8, 3, "3 dead nodes removed"))
    assert text == "prune: 10 -> 7 nodes, 12 -> 8 edges (3 dead nodes removed)"


def test_compiled_kernels_of_the_optimized_graph_match_the_original_graph():
    from polytf.compiler.kernel_compilation import default_recipe
    from polytf.lowering.lowered_kernel import lower_group
    from polytf.passes.fusion import partition
    from polytf.runtime.cpu.compiled_model import CompiledModel
    from polytf.targets.cpu import CpuTarget

    graph = _graph()
    optimized, _ = optimize(graph)
    target = CpuTarget()
    kernels = [lower_group(optimized, group) for group in partition(optimized)]
    assert len(kernels) == 1, "MatMul + BiasAdd + Relu fuse into one kernel"
    compiled = [(kernel, target.compile(kernel.scop, default_recipe(kernel, 1))) for kernel in kernels]
    model = CompiledModel(optimized, compiled, threads=1)
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32), "unused": np.zeros(3, np.float32)}
    result = model(**feeds)
    expected = evaluate(graph, feeds)["Identity:0"]
    np.testing.assert_allclose(result["Identity"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.tensorflow
def test_prepare_model_runs_the_passes_and_keeps_results(frozen_model):
    from polytf.compiler.model_builder import build_model
    from polytf.compiler.preparation import prepare_model
    from polytf.model_zoo import run_graphdef_with_tensorflow

    path = frozen_model("conv_bias_relu")
    prepared = prepare_model(path)
    plain = prepare_model(path, optimize_graph=False)
    assert [r.name for r in plain.passes] == ["prune"]
    assert prepared.passes[0].nodes_before == plain.passes[0].nodes_before
    assert len(prepared.graph.nodes) < len(plain.graph.nodes)
    assert "Identity" not in ops_of(prepared.graph)
    x = np.random.default_rng(3).standard_normal(prepared.graph.types["input:0"].shape).astype(np.float32)
    result = build_model(prepared, threads=1)(input=x)
    reference = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"])["Identity"]
    np.testing.assert_allclose(result["Identity"], reference, rtol=1e-4, atol=1e-4 * float(np.abs(reference).max()))
