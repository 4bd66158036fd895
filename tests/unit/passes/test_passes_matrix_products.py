"""Matrix products: a 1x1, stride-1 Conv2D becomes a MatMul of row-major views (its op's
``matrix_product`` rule, applied by :func:`polytf.passes.expansion.rewrite_matrix_products`),
computes the same values, and keeps its epilogue in the product's kernel once the pipeline
has moved the element-wise consumers above the output view."""

from __future__ import annotations

import numpy as np
import pytest
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import const, kernels_of, placeholder

from polytf.graph import Node
from polytf.passes.expansion import rewrite_matrix_products
from polytf.passes.pipeline import optimize


def _conv_attrs(stride=1, padding="VALID"):
    return {"strides": (1, stride, stride, 1), "padding": padding, "data_format": "NHWC", "dilations": (1, 1, 1, 1)}


def _pointwise_block(batch=2, h=5, w=4, c=6, o=7, stride=1, kernel=1, padding="VALID"):
    """Conv2D + BiasAdd + Relu6 + a residual AddV2 (MobileNetV2's project layer shape)."""
    rng = np.random.default_rng(0)
    if padding == "SAME":
        oh, ow = -(-h // stride), -(-w // stride)
    else:
        oh, ow = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    return typed_graph(
        [
            placeholder("x", (batch, h, w, c)),
            placeholder("residual", (batch, oh, ow, o)),
            const("f", rng.standard_normal((kernel, kernel, c, o)).astype(np.float32)),
            const("b", rng.standard_normal(o).astype(np.float32)),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs=_conv_attrs(stride, padding)),
            Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu6", "Relu6", ("bias:0",)),
            Node("sum", "AddV2", ("relu6:0", "residual:0")),
        ],
        ["sum:0"],
    )


def _feeds(graph):
    rng = np.random.default_rng(1)
    return {n.name: rng.standard_normal(graph.types[n.output(0)].shape).astype(np.float32) for n in graph.placeholders}


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_pointwise_convolution_becomes_a_matrix_product_of_views(padding):
    graph = _pointwise_block(padding=padding)
    rewritten, report = rewrite_matrix_products(graph)
    assert report.rewrites == 1 and report.detail == "1 Conv2D rewritten as MatMul"
    assert "Conv2D" not in ops_of(rewritten) and ops_of(rewritten).count("MatMul") == 1
    assert rewritten.nodes["conv"].op == "Reshape"  # the node keeps its name: no rewiring
    product = next(n for n in rewritten.nodes.values() if n.op == "MatMul")
    assert rewritten.types[product.output(0)].shape == (2 * 5 * 4, 7)
    assert_types_consistent(rewritten)
    assert_same_values(graph, rewritten, _feeds(graph))


@pytest.mark.parametrize(
    "block",
    [
        {"kernel": 3},  # a window
        {"stride": 2},  # a strided 1x1 reads every other pixel: not a row-major view
        {"kernel": 3, "padding": "SAME"},
    ],
    ids=["3x3", "1x1_stride2", "3x3_same"],
)
def test_other_convolutions_are_left_alone(block):
    graph = _pointwise_block(**block)
    rewritten, report = rewrite_matrix_products(graph)
    assert report.rewrites == 0 and ops_of(rewritten) == ops_of(graph)


def test_the_pipeline_fuses_bias_activation_and_residual_into_the_product():
    graph = _pointwise_block()
    optimized, _ = optimize(graph)
    assert_same_values(graph, optimized, _feeds(graph))
    computing = [kernel for kernel in kernels_of(optimized) if kernel.scop.statements]
    (kernel,) = computing  # one kernel: the views cost no code
    ops = {op for _, op in kernel.scop.ops}
    assert {"MatMul", "BiasAdd", "Relu6", "AddV2"} <= ops
