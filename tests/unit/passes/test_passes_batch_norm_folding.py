"""Batch-norm folding into convolution weights and biases, checked numerically with
random, non-trivial BN statistics (trivial ones would hide a dropped term)."""

from __future__ import annotations

import numpy as np
import pytest
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import const, placeholder

from polytf.graph import Node
from polytf.ops import lookup
from polytf.passes.batch_norm_folding import fold_batch_norms
from polytf.passes.pipeline import optimize

CONV_ATTRS = {"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}
EPSILON = 1e-3


def _statistics(rng, channels, prefix):
    """gamma, beta, mean, variance Const nodes for ``channels`` channels."""
    return [
        const(f"{prefix}/gamma", rng.uniform(0.5, 2.0, channels).astype(np.float32)),
        const(f"{prefix}/beta", rng.standard_normal(channels).astype(np.float32)),
        const(f"{prefix}/mean", rng.standard_normal(channels).astype(np.float32)),
        const(f"{prefix}/variance", rng.uniform(0.2, 3.0, channels).astype(np.float32)),
    ]


def _keras_batch_norm(prefix, x):
    """Keras 3's frozen inference batch norm: Rsqrt(var + eps) * gamma = scale;
    y = x * scale + (beta - mean * scale)."""
    return [
        const(f"{prefix}/epsilon", np.float32(EPSILON)),
        Node(f"{prefix}/add", "AddV2", (f"{prefix}/variance:0", f"{prefix}/epsilon:0")),
        Node(f"{prefix}/Rsqrt", "Rsqrt", (f"{prefix}/add:0",)),
        Node(f"{prefix}/mul", "Mul", (f"{prefix}/Rsqrt:0", f"{prefix}/gamma:0")),
        Node(f"{prefix}/mul_1", "Mul", (x, f"{prefix}/mul:0")),
        Node(f"{prefix}/mul_2", "Mul", (f"{prefix}/mean:0", f"{prefix}/mul:0")),
        Node(f"{prefix}/sub", "Sub", (f"{prefix}/beta:0", f"{prefix}/mul_2:0")),
        Node(f"{prefix}/add_1", "AddV2", (f"{prefix}/mul_1:0", f"{prefix}/sub:0")),
    ]


def _feeds(shape=(1, 6, 5, 3)):
    return {"x": np.random.default_rng(7).standard_normal(shape).astype(np.float32)}


@pytest.fixture(autouse=True)
def _needs_rsqrt():
    if lookup("Rsqrt") is None:
        pytest.skip("Rsqrt is not registered yet")


@pytest.mark.parametrize("with_bias", [False, True])
def test_conv2d_with_keras_batch_norm_becomes_conv_plus_bias(with_bias):
    rng = np.random.default_rng(0)
    nodes = [placeholder("x", (1, 6, 5, 3)), const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32))]
    nodes += _statistics(rng, 4, "bn")
    nodes.append(Node("conv", "Conv2D", ("x:0", "w:0"), attrs=CONV_ATTRS))
    bn_input = "conv:0"
    if with_bias:
        nodes += [const("b", rng.standard_normal(4).astype(np.float32)), Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"})]
        bn_input = "bias:0"
    nodes += _keras_batch_norm("bn", bn_input)
    nodes.append(Node("relu", "Relu", ("bn/add_1:0",)))
    graph = typed_graph(nodes, ["relu:0"])

    optimized, reports = optimize(graph)
    assert sorted(ops_of(optimized)) == sorted(["Placeholder", "Const", "Const", "Conv2D", "BiasAdd", "Relu"])
    assert any(r.name == "batch norm folding" and "Mul folded into filter" in r.detail for r in reports)
    assert_same_values(graph, optimized, _feeds(), rtol=1e-5)
    assert_types_consistent(optimized)


def test_depthwise_conv_with_channel_multiplier_folds_per_output_channel():
    rng = np.random.default_rng(1)
    nodes = [placeholder("x", (1, 6, 5, 3)), const("w", rng.standard_normal((3, 3, 3, 2)).astype(np.float32))]
    nodes += _statistics(rng, 6, "bn")
    nodes.append(Node("dw", "DepthwiseConv2dNative", ("x:0", "w:0"), attrs=CONV_ATTRS))
    nodes += _keras_batch_norm("bn", "dw:0")
    graph = typed_graph(nodes, ["bn/add_1:0"])
    optimized, _ = optimize(graph)
    assert sorted(ops_of(optimized)) == sorted(["Placeholder", "Const", "Const", "DepthwiseConv2dNative", "BiasAdd"])
    assert optimized.nodes["bn/add_1"].op == "BiasAdd", "the output keeps its name"
    assert_same_values(graph, optimized, _feeds(), rtol=1e-5)


def test_fused_batch_norm_v3_after_conv2d_folds():
    rng = np.random.default_rng(2)
    # a 3x3 filter: a 1x1 convolution would go on to become a MatMul (matrix products)
    nodes = [placeholder("x", (1, 6, 5, 3)), const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32))]
    nodes += _statistics(rng, 4, "bn")
    nodes += [
        Node("conv", "Conv2D", ("x:0", "w:0"), attrs=CONV_ATTRS),
        Node(
            "bn",
            "FusedBatchNormV3",
            ("conv:0", "bn/gamma:0", "bn/beta:0", "bn/mean:0", "bn/variance:0"),
            attrs={"epsilon": EPSILON, "is_training": False, "data_format": "NHWC"},
        ),
        Node("relu", "Relu", ("bn:0",)),
    ]
    graph = typed_graph(nodes, ["relu:0"])
    expanded, report = fold_batch_norms(graph)
    assert "FusedBatchNormV3" not in ops_of(expanded) and report.changed
    optimized, _ = optimize(graph)
    assert sorted(ops_of(optimized)) == sorted(["Placeholder", "Const", "Const", "Conv2D", "BiasAdd", "Relu"])
    assert_same_values(graph, optimized, _feeds(), rtol=1e-5)
    assert_types_consistent(optimized)


def test_matmul_times_per_column_constant_folds_into_the_weights():
    rng = np.random.default_rng(3)
    graph = typed_graph(
        [
            placeholder("x", (1, 6, 5, 3)),
            const("shape", np.array([6, 15], np.int32)),
            Node("flat", "Reshape", ("x:0", "shape:0")),
            const("w", rng.standard_normal((7, 15)).astype(np.float32)),
            const("s", rng.standard_normal((1, 7)).astype(np.float32)),
            const("t", rng.standard_normal(7).astype(np.float32)),
            Node("mm", "MatMul", ("flat:0", "w:0"), attrs={"transpose_b": True}),
            Node("scaled", "Mul", ("s:0", "mm:0")),
            Node("shifted", "AddV2", ("scaled:0", "t:0")),
        ],
        ["shifted:0"],
    )
    optimized, _ = optimize(graph)
    assert sorted(ops_of(optimized)) == sorted(["Placeholder", "Const", "Reshape", "Const", "MatMul", "Const", "BiasAdd"])
    assert_same_values(graph, optimized, _feeds(), rtol=1e-5)


def test_a_conv_output_read_elsewhere_is_not_folded():
    rng = np.random.default_rng(4)
    graph = typed_graph(
        [
            placeholder("x", (1, 6, 5, 3)),
            const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32)),
            const("s", rng.standard_normal(4).astype(np.float32)),
            Node("conv", "Conv2D", ("x:0", "w:0"), attrs=CONV_ATTRS),
            Node("scaled", "Mul", ("conv:0", "s:0")),
            Node("out", "AddV2", ("scaled:0", "conv:0")),
        ],
        ["out:0"],
    )
    optimized, report = fold_batch_norms(graph)
    assert not report.changed and ops_of(optimized) == ops_of(graph)


def test_a_scale_that_is_not_per_channel_is_not_folded():
    rng = np.random.default_rng(5)
    graph = typed_graph(
        [
            placeholder("x", (1, 6, 5, 3)),
            const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32)),
            const("s", rng.standard_normal((6, 1, 1)).astype(np.float32)),  # varies along H
            Node("conv", "Conv2D", ("x:0", "w:0"), attrs=CONV_ATTRS),
            Node("scaled", "Mul", ("conv:0", "s:0")),
        ],
        ["scaled:0"],
    )
    optimized, report = fold_batch_norms(graph)
    assert not report.changed


@pytest.mark.slow
def test_mobilenet_v2_loses_more_than_half_of_its_nodes(frozen_model):
    from polytf.frontend import load_graph
    from polytf.lowering.shape_inference import infer_types

    graph = infer_types(load_graph(frozen_model("mobilenet_v2", 1)))
    optimized, reports = optimize(graph)
    assert reports[0].nodes_before == len(graph.nodes) > 1000
    assert len(optimized.nodes) <= len(graph.nodes) // 2, [str(r) for r in reports]
    ops = ops_of(optimized)
    assert not set(ops) & {"Identity", "NoOp", "Rsqrt", "Sub", "Mul", "FusedBatchNormV3"}
    assert ops.count("BiasAdd") == ops.count("Conv2D") + ops.count("DepthwiseConv2dNative") + ops.count("MatMul")
    assert optimized.outputs == graph.outputs == ("Identity:0",)
    assert_types_consistent(optimized)
