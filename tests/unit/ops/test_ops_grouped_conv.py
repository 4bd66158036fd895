"""Grouped convolution (Conv2D whose filter has C/G input channels): the numpy reference vs
an independent loop nest and vs TensorFlow, the expansion into a view and GroupedConv2D, the
lowering through the interpreter, FLOP counts, and compiled kernels (default and heuristic
recipes) vs the reference."""

import itertools

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, kernels_of, placeholder

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.lowering.shape_inference import infer_types
from polytf.ops import ArrayRef, LoweringContext, lookup
from polytf.passes.expansion import expand_ops
from polytf.poly.flops import contraction_flops
from polytf.schedules.data_layout import can_zero_pad
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.structure import anchor_statement


def conv_attrs(padding="SAME", stride=1, dilation=1):
    return {"strides": (1, stride, stride, 1), "dilations": (1, dilation, dilation, 1), "padding": padding, "data_format": "NHWC"}


def naive_grouped_conv(x, f, stride, dilation, pads):
    """Direct loops over the definition (tensorflow/core/kernels/conv_ops_impl.h: output
    channel ``o`` of group ``o // Og`` sums input channels ``g*Cg .. g*Cg + Cg - 1``);
    ``pads = (top, bottom, left, right)``."""
    n, h, w, c = x.shape
    kh, kw, cg, o = f.shape
    groups = c // cg
    og = o // groups
    top, bottom, left, right = pads
    oh = (h + top + bottom - (kh - 1) * dilation - 1) // stride + 1
    ow = (w + left + right - (kw - 1) * dilation - 1) // stride + 1
    y = np.zeros((n, oh, ow, o), np.float64)
    for b, i, j, out, p, s, channel in itertools.product(
        range(n), range(oh), range(ow), range(o), range(kh), range(kw), range(cg)
    ):
        r, t = i * stride + p * dilation - top, j * stride + s * dilation - left
        if 0 <= r < h and 0 <= t < w:
            y[b, i, j, out] += x[b, r, t, (out // og) * cg + channel] * f[p, s, channel, out]
    return y


def same_pads(size, k, stride, dilation):
    effective = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


#: (groups, channels per group, outputs per group, kernel, padding, stride, dilation)
GEOMETRIES = [
    (2, 3, 2, 3, "SAME", 1, 1),
    (3, 2, 1, 3, "VALID", 2, 1),  # one output channel per group
    (4, 1, 3, 2, "SAME", 2, 1),  # depthwise with a multiplier
    (5, 1, 1, 3, "SAME", 1, 2),  # depthwise
    (2, 4, 4, 1, "VALID", 1, 1),  # 1x1 grouped (ShuffleNet)
]


@pytest.mark.parametrize("groups,cg,og,kernel,padding,stride,dilation", GEOMETRIES)
def test_conv2d_with_groups_matches_loops_and_its_expansion(rand, run_op, groups, cg, og, kernel, padding, stride, dilation):
    x, f = rand(2, 7, 6, groups * cg), rand(kernel, kernel, cg, groups * og)
    node = Node("conv", "Conv2D", ("x:0", "w:0"), attrs=conv_attrs(padding, stride, dilation))
    (expected,), _, _ = run_op(node, [x, f], lower=False)
    pads = same_pads(7, kernel, stride, dilation) + same_pads(6, kernel, stride, dilation) if padding == "SAME" else (0, 0, 0, 0)
    np.testing.assert_allclose(expected, naive_grouped_conv(x, f, stride, dilation, pads), rtol=1e-5, atol=1e-5)
    # the GroupedConv2D of the [N, H, W, G, Cg] view: its reference and its lowering
    grouped = Node("conv", "GroupedConv2D", ("view:0", "w:0"), attrs=conv_attrs(padding, stride, dilation))
    (reference,), (lowered,), (init, update) = run_op(grouped, [x.reshape(2, 7, 6, groups, cg), f])
    np.testing.assert_allclose(reference, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lowered, expected, rtol=1e-5, atol=1e-5)
    assert init.iterators == ("d0", "d1", "d2", "d3")
    assert update.iterators == ("d0", "d1", "d2", "d3", "r0", "r1") + (("r2",) if cg > 1 else ())
    group_index = "d3" if og == 1 else f"(d3) // {og}"
    channel = "r2" if cg > 1 else "0"
    assert str(update.reads[1]).endswith(f", {group_index}, {channel}]") and str(update.reads[2]) == f"X1[r0, r1, {channel}, d3]"


@pytest.mark.parametrize("groups,cg,og,kernel,padding,stride,dilation", GEOMETRIES[:4])
def test_grouped_reference_matches_tensorflow(rand, run_op, groups, cg, og, kernel, padding, stride, dilation):
    tf = pytest.importorskip("tensorflow")
    x, f = rand(2, 9, 8, groups * cg), rand(kernel, kernel, cg, groups * og)
    node = Node("conv", "Conv2D", ("x:0", "w:0"), attrs=conv_attrs(padding, stride, dilation))
    (expected,), _, _ = run_op(node, [x, f], lower=False)
    actual = tf.nn.conv2d(x, f, [1, stride, stride, 1], padding, dilations=[1, dilation, dilation, 1]).numpy()
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-5)


def test_conv2d_refuses_filters_that_do_not_split_into_groups():
    definition = lookup("Conv2D")
    node = Node("conv", "Conv2D", ("x:0", "w:0"), attrs=conv_attrs())
    with pytest.raises(ShapeError, match="'conv'.* 6 channels, which the filter .*'s 4 input channels do not divide"):
        definition.infer(node, [TensorType((1, 5, 5, 6)), TensorType((3, 3, 4, 4))], [None, None])
    with pytest.raises(ShapeError, match="'conv'.* 3 groups .* do not divide .* 4 output channels"):
        definition.infer(node, [TensorType((1, 5, 5, 6)), TensorType((3, 3, 2, 4))], [None, None])
    grouped = lookup("GroupedConv2D")
    with pytest.raises(ShapeError, match="rank-5"):
        grouped.infer(node, [TensorType((1, 5, 5, 6)), TensorType((3, 3, 2, 6))], [None, None])
    with pytest.raises(ShapeError, match="2 channels per group but the filter .* expects 3"):
        grouped.infer(node, [TensorType((1, 5, 5, 3, 2)), TensorType((3, 3, 3, 6))], [None, None])


def test_a_grouped_conv2d_is_lowered_only_after_its_expansion():
    definition = lookup("Conv2D")
    node = Node("conv", "Conv2D", ("x:0", "w:0"), attrs=conv_attrs())
    inputs = [ArrayRef("X", TensorType((1, 5, 5, 4))), ArrayRef("F", TensorType((3, 3, 2, 4)))]
    with pytest.raises(ShapeError, match="2 groups .*GroupedConv2D.*expand_ops"):
        definition.lower(node, inputs, [ArrayRef("Y", TensorType((1, 5, 5, 4)))], LoweringContext())


def grouped_graph(h=9, w=8, groups=4, cg=2, og=2, kernel=3, padding="SAME", stride=1, dilation=1, seed=3, epilogue=True):
    """``Relu(BiasAdd(Conv2D(x, f)))`` with a grouped filter, expanded and typed as the graph
    optimizer leaves it."""
    rng = np.random.default_rng(seed)
    nodes = [
        placeholder("x", (1, h, w, groups * cg)),
        const("f", rng.standard_normal((kernel, kernel, cg, groups * og)).astype(np.float32)),
        Node("conv", "Conv2D", ("x:0", "f:0"), attrs=conv_attrs(padding, stride, dilation)),
    ]
    output = "conv:0"
    if epilogue:
        nodes += [
            const("b", rng.standard_normal(groups * og).astype(np.float32)),
            Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu", "Relu", ("bias:0",)),
        ]
        output = "relu:0"
    expanded, report = expand_ops(build_graph(nodes, [output]))
    assert report.detail == "1 Conv2D expanded"
    return infer_types(expanded.with_changes(types={}, constants={}))


def test_expansion_views_the_input_by_group_and_keeps_the_epilogue_fused():
    graph = grouped_graph(groups=4, cg=2, og=3)
    view = graph.producer(graph.nodes["conv"].inputs[0])
    assert view.op == "Reshape" and graph.types[view.output(0)].shape == (1, 9, 8, 4, 2)
    assert graph.nodes["conv"].op == "GroupedConv2D" and graph.types["conv:0"].shape == (1, 9, 8, 12)
    (kernel,) = kernels_of(graph)  # the view is no kernel; bias and ReLU fuse into the convolution
    assert kernel.scop.ops == (("conv", "GroupedConv2D"), ("bias", "BiasAdd"), ("relu", "Relu"))
    plain = build_graph(
        [
            placeholder("x", (1, 5, 5, 4)),
            const("f", np.ones((3, 3, 4, 2), np.float32)),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs=conv_attrs()),
        ],
        ["conv:0"],
    )
    assert expand_ops(plain)[0] is plain or expand_ops(plain)[1].detail == ""


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_flops_count_the_group_channels_only(padding):
    graph = grouped_graph(h=8, w=8, groups=4, cg=3, og=2, kernel=3, padding=padding, epilogue=False)
    (kernel,) = kernels_of(graph)
    textbook = 2 * 1 * 6 * 6 * 8 * 3 * 3 * 3 if padding == "VALID" else 2 * 8 * 8 * 8 * 3 * 3 * 3
    flops = contraction_flops(kernel.scop)
    if padding == "VALID":
        assert flops == textbook
    else:  # the padding taps are not work: 8 + 2 * 7 of the 3 x 8 (row, tap) pairs read inside, per axis
        assert flops == 2 * 8 * 3 * ((8 * 3 - 2) ** 2)
        assert flops < textbook


def test_groups_equal_to_channels_lower_like_a_depthwise_convolution():
    """ConvNeXt's 7x7 depthwise written as Conv2D(groups=C): the same loops, the same
    contiguous channel index and the same search space as DepthwiseConv2dNative."""
    rng = np.random.default_rng(0)
    filters = rng.standard_normal((7, 7, 1, 16)).astype(np.float32)
    grouped = kernels_of(grouped_graph(h=10, w=10, groups=16, cg=1, og=1, kernel=7, epilogue=False))[0]
    depthwise_graph = build_graph(
        [
            placeholder("x", (1, 10, 10, 16)),
            const("f", filters.reshape(7, 7, 16, 1)),
            Node("conv", "DepthwiseConv2dNative", ("x:0", "f:0"), attrs=conv_attrs()),
        ],
        ["conv:0"],
    )
    depthwise = kernels_of(depthwise_graph)[0]
    a, b = anchor_statement(grouped.scop), anchor_statement(depthwise.scop)
    assert (a.iterators, a.extents, a.constraints) == (b.iterators, b.extents, b.constraints)
    assert str(a.reads[1]).endswith(", d3, 0]") and str(b.reads[1]).endswith(", d3]")
    assert can_zero_pad(grouped.scop) and can_zero_pad(depthwise.scop)
    spaces = [SearchSpace.for_scop(kernel.scop, 2, 8, 16) for kernel in (grouped, depthwise)]
    assert spaces[0].dimensions == spaces[1].dimensions and spaces[0].default_recipe() == spaces[1].default_recipe()


@pytest.mark.parametrize(
    "groups,cg,og,padding,stride",
    [
        (4, 2, 8, "SAME", 1),  # RegNet-like: a group's outputs fill a vector
        (2, 3, 5, "SAME", 2),  # groups straddle vectors
        (8, 1, 1, "SAME", 1),  # depthwise as Conv2D
        (3, 4, 1, "VALID", 1),  # one output per group: an affine channel index
    ],
)
def test_grouped_conv_compiles_correctly_under_default_and_heuristic_recipes(monkeypatch, groups, cg, og, padding, stride):
    kernels, failures = verify_all_recipes(
        monkeypatch, grouped_graph(h=9, w=10, groups=groups, cg=cg, og=og, padding=padding, stride=stride)
    )
    assert [k.scop.ops for k in kernels] == [(("conv", "GroupedConv2D"), ("bias", "BiasAdd"), ("relu", "Relu"))]
    assert failures == []


def test_weight_layout_folds_a_scale_into_the_grouped_filter(rand):
    definition = lookup("GroupedConv2D")
    node = Node("y", "GroupedConv2D", ("x:0", "w:0"), attrs=conv_attrs("VALID"))
    x, w = rand(1, 6, 5, 3, 2), rand(3, 3, 2, 6)
    (y,) = definition.reference(node, [x, w])
    scale = rand(6)
    (scaled,) = definition.reference(node, [x, definition.weight_layout.scale_weight(node, w, scale)])
    np.testing.assert_allclose(scaled, y * scale, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("groups,cg,og", [(4, 2, 8), (8, 1, 1)])
def test_grouped_conv_gpu_recipe_computes_the_reference_on_the_emulated_device(groups, cg, og):
    """The GPU mapping of the default GPU recipe (PTX emitted for sm_80; the launch run on the
    host by the emulated device)."""
    from polytf.config import MeasurementConfig
    from polytf.runtime.cpu.kernel_bench import reference_data
    from polytf.runtime.cuda.emulation import EmulatedDevice
    from polytf.runtime.cuda.kernel_bench import CudaKernelBench
    from polytf.targets.cuda import CudaTarget

    target = CudaTarget(compute_capability="sm_80")
    (kernel,) = kernels_of(grouped_graph(h=9, w=10, groups=groups, cg=cg, og=og))
    compiled = target.compile(kernel.scop, target.search_space(kernel.scop).default_recipe())
    inputs, expected = reference_data(kernel, seed=1)
    measurement = CudaKernelBench(kernel.scop, inputs, expected, EmulatedDevice()).measure(
        compiled, MeasurementConfig(warmup_runs=0, repeats=1, min_repeat_s=0.0)
    )
    assert measurement.ok, measurement.error
