"""DepthwiseConv2dNative, Pad/PadV2 and AvgPool: numpy reference vs an independent loop
nest and vs TensorFlow, the lowering vs the reference (through the interpreter), and
compiled kernels (default and heuristic recipes) vs the reference."""

import itertools

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, kernels_of, placeholder
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import ArrayRef, LoweringContext, lookup
from polytf.schedules.search_space import SearchSpace

# --- DepthwiseConv2dNative ------------------------------------------------------------------


def depthwise_node(padding, stride, dilation, explicit=None, **attrs):
    attrs = {
        "strides": (1, stride, stride, 1),
        "dilations": (1, dilation, dilation, 1),
        "padding": padding,
        "data_format": "NHWC",
        **attrs,
    }
    if explicit is not None:
        attrs["explicit_paddings"] = explicit
    return Node("dw", "DepthwiseConv2dNative", ("x:0", "w:0"), attrs=attrs)


def naive_depthwise(x, f, stride, dilation, pads):
    """Direct loops over the TF definition; ``pads = (top, bottom, left, right)``."""
    n, h, w, c = x.shape
    kh, kw, _, m = f.shape
    top, bottom, left, right = pads
    oh = (h + top + bottom - (kh - 1) * dilation - 1) // stride + 1
    ow = (w + left + right - (kw - 1) * dilation - 1) // stride + 1
    y = np.zeros((n, oh, ow, c * m), np.float64)
    for b, i, j, ch, q, p, s in itertools.product(range(n), range(oh), range(ow), range(c), range(m), range(kh), range(kw)):
        r, t = i * stride + p * dilation - top, j * stride + s * dilation - left
        if 0 <= r < h and 0 <= t < w:
            y[b, i, j, ch * m + q] += x[b, r, t, ch] * f[p, s, ch, q]
    return y


def same_pads(size, k, stride, dilation):
    effective = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


DEPTHWISE_CASES = [
    ("SAME", 1, 1, 1),
    ("SAME", 2, 1, 1),
    ("VALID", 1, 1, 2),
    ("VALID", 2, 1, 3),
    ("SAME", 1, 2, 2),
    ("SAME", 2, 1, 3),
    ("EXPLICIT", 2, 1, 1),
    ("EXPLICIT", 1, 2, 2),
]


@pytest.mark.parametrize("padding,stride,dilation,multiplier", DEPTHWISE_CASES)
def test_depthwise_lowering_matches_reference_and_loops(rand, run_op, padding, stride, dilation, multiplier):
    x, f = rand(2, 7, 6, 3), rand(3, 2, 3, multiplier)
    explicit = (0, 0, 1, 2, 2, 0, 0, 0) if padding == "EXPLICIT" else None
    (expected,), (got,), (init, update) = run_op(depthwise_node(padding, stride, dilation, explicit), [x, f])
    if padding == "SAME":
        pads = same_pads(7, 3, stride, dilation) + same_pads(6, 2, stride, dilation)
    elif padding == "EXPLICIT":
        pads = (1, 2, 2, 0)
    else:
        pads = (0, 0, 0, 0)
    np.testing.assert_allclose(expected, naive_depthwise(x, f, stride, dilation, pads), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert expected.shape[3] == 3 * multiplier
    assert init.iterators == ("d0", "d1", "d2", "d3")
    assert update.iterators == ("d0", "d1", "d2", "d3", "r0", "r1")  # reductions: kh, kw only
    assert update.is_reduction
    if padding == "VALID":
        assert update.constraints == ()


def test_depthwise_multiplier_one_reads_the_output_channel():
    definition = lookup("DepthwiseConv2dNative")
    x, f, y = ArrayRef("I", TensorType((1, 8, 8, 32))), ArrayRef("F", TensorType((3, 3, 32, 1))), ArrayRef("O", TensorType((1, 4, 4, 32)))
    _, update = definition.lower(depthwise_node("SAME", 2, 1), [x, f], [y], LoweringContext())
    assert [str(a) for a in update.reads[1:]] == ["I[d0, 2*d1 + r0, 2*d2 + r1, d3]", "F[r0, r1, d3, 0]"]
    assert update.constraints == ("0 <= 2*d1 + r0 < 8", "0 <= 2*d2 + r1 < 8")


@pytest.mark.parametrize("padding,stride,dilation,multiplier", DEPTHWISE_CASES)
def test_depthwise_reference_matches_tensorflow(rand, run_op, padding, stride, dilation, multiplier):
    tf = pytest.importorskip("tensorflow")
    x, f = rand(2, 9, 8, 4), rand(3, 2, 4, multiplier)
    explicit = (0, 0, 1, 2, 2, 0, 0, 0) if padding == "EXPLICIT" else None
    (expected,), _, _ = run_op(depthwise_node(padding, stride, dilation, explicit), [x, f], lower=False)
    if dilation == 1:
        kwargs = {"explicit_paddings": list(explicit)} if explicit else {}
        actual = tf.raw_ops.DepthwiseConv2dNative(
            input=x, filter=f, strides=[1, stride, stride, 1], padding=padding, dilations=[1, 1, 1, 1], data_format="NHWC", **kwargs
        ).numpy()
    else:  # TF's CPU kernel has no dilations; tf.nn.depthwise_conv2d emulates them (stride 1 only)
        pads = [[0, 0], [1, 2], [2, 0], [0, 0]] if explicit else padding
        actual = tf.nn.depthwise_conv2d(x, f, [1, 1, 1, 1], pads, dilations=[dilation, dilation]).numpy()
    assert expected.shape == actual.shape
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-5)


def test_depthwise_rejects_bad_input():
    definition = lookup("DepthwiseConv2dNative")
    types = [TensorType((1, 5, 5, 2)), TensorType((3, 3, 2, 1))]
    with pytest.raises(ShapeError, match="NHWC"):
        definition.infer(depthwise_node("SAME", 1, 1, data_format="NCHW"), types, [None, None])
    with pytest.raises(ShapeError, match="channels"):
        definition.infer(depthwise_node("SAME", 1, 1), [TensorType((1, 5, 5, 3)), types[1]], [None, None])
    with pytest.raises(ShapeError, match="explicit_paddings"):
        definition.infer(depthwise_node("EXPLICIT", 1, 1, (0, 0, 1, 1)), types, [None, None])
    with pytest.raises(ShapeError, match="batch or channel"):
        definition.infer(depthwise_node("EXPLICIT", 1, 1, (1, 0, 1, 1, 1, 1, 0, 0)), types, [None, None])
    with pytest.raises(ShapeError, match="batch and channel"):
        definition.infer(depthwise_node("SAME", 1, 1, strides=(2, 1, 1, 1)), types, [None, None])


# --- Pad / PadV2 ----------------------------------------------------------------------------


def pad_node(op="Pad"):
    inputs = ("x:0", "p:0", "v:0") if op == "PadV2" else ("x:0", "p:0")
    return Node("pad", op, inputs, attrs={})


PAD_CASES = [
    ((2, 5, 4, 3), [[0, 0], [1, 1], [1, 1], [0, 0]]),
    ((1, 6, 6, 2), [[0, 0], [0, 1], [0, 1], [0, 0]]),  # Keras' stride-2 depthwise padding
    ((3, 4), [[2, 0], [1, 3]]),
    ((5,), [[0, 0]]),
    ((2, 3, 2), [[1, 2], [0, 0], [3, 1]]),
]


@pytest.mark.parametrize("shape,paddings", PAD_CASES)
@pytest.mark.parametrize("op", ["Pad", "PadV2"])
def test_pad_lowering_matches_reference(rand, shape, paddings, op):
    x = rand(*shape)
    inputs = [x, np.asarray(paddings, np.int32)] + ([np.float32(-2.5)] if op == "PadV2" else [])
    (expected,), (got,), statements = run_op_with_constants(pad_node(op), inputs)
    fill = -2.5 if op == "PadV2" else 0.0
    np.testing.assert_array_equal(expected, np.pad(x, paddings, constant_values=fill))
    np.testing.assert_array_equal(got, expected)
    for statement in statements:  # both statements run over the output iterators: one shared band
        assert statement.iterators == tuple(f"d{k}" for k in range(len(shape)))
        assert statement.extents == expected.shape
    assert len(statements) == (2 if np.any(paddings) else 1)


@pytest.mark.parametrize("shape,paddings", PAD_CASES)
def test_pad_reference_matches_tensorflow(rand, shape, paddings):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    (expected,), _, _ = run_op_with_constants(pad_node(), [x, np.asarray(paddings, np.int64)], lower=False)
    np.testing.assert_array_equal(expected, tf.raw_ops.Pad(input=x, paddings=np.asarray(paddings, np.int64)).numpy())
    (expected,), _, _ = run_op_with_constants(pad_node("PadV2"), [x, np.asarray(paddings, np.int32), np.float32(3.0)], lower=False)
    actual = tf.raw_ops.PadV2(input=x, paddings=np.asarray(paddings, np.int32), constant_values=np.float32(3.0)).numpy()
    np.testing.assert_array_equal(expected, actual)


def test_pad_rejects_bad_paddings():
    definition = lookup("Pad")
    x = TensorType((2, 3))
    int_type = TensorType((2, 2), "int32")
    with pytest.raises(ShapeError, match="compile-time constant"):
        definition.infer(pad_node(), [x, int_type], [None, None])
    with pytest.raises(ShapeError, match=r"shape \[2, 2\]"):
        definition.infer(pad_node(), [x, TensorType((3, 2), "int32")], [None, np.zeros((3, 2), np.int32)])
    with pytest.raises(ShapeError, match="non-negative"):
        definition.infer(pad_node(), [x, int_type], [None, np.asarray([[0, -1], [0, 0]], np.int32)])
    with pytest.raises(ShapeError, match="int32 or int64"):
        definition.infer(pad_node(), [x, int_type], [None, np.zeros((2, 2), np.float32)])
    with pytest.raises(ShapeError, match="constant_values"):
        lookup("PadV2").infer(pad_node("PadV2"), [x, int_type, TensorType(())], [None, np.zeros((2, 2), np.int32), None])


def test_pad_lowering_without_constants_says_what_is_missing():
    definition = lookup("Pad")
    x, y = ArrayRef("I", TensorType((2, 3))), ArrayRef("O", TensorType((4, 3)))
    with pytest.raises(ShapeError, match="compile-time value of its paddings input 'p:0'"):
        definition.lower(pad_node(), [x], [y], LoweringContext())


# --- AvgPool --------------------------------------------------------------------------------


def avg_pool_node(padding, ksize, stride):
    window = (1, ksize[0], ksize[1], 1) if isinstance(ksize, tuple) else (1, ksize, ksize, 1)
    return Node("pool", "AvgPool", ("x:0",), attrs={"ksize": window, "strides": (1, stride, stride, 1), "padding": padding, "data_format": "NHWC"})


def naive_avg_pool(x, ksize, stride, padding):
    n, h, w, c = x.shape
    kh, kw = ksize
    (top, _), (left, _) = (same_pads(h, kh, stride, 1), same_pads(w, kw, stride, 1)) if padding == "SAME" else ((0, 0), (0, 0))
    oh = -(-h // stride) if padding == "SAME" else (h - kh) // stride + 1
    ow = -(-w // stride) if padding == "SAME" else (w - kw) // stride + 1
    y = np.zeros((n, oh, ow, c))
    for i, j in itertools.product(range(oh), range(ow)):
        rows = [r for r in range(i * stride - top, i * stride - top + kh) if 0 <= r < h]
        cols = [s for s in range(j * stride - left, j * stride - left + kw) if 0 <= s < w]
        y[:, i, j, :] = x[:, rows][:, :, cols].mean(axis=(1, 2))
    return y


AVG_POOL_CASES = [("SAME", 3, 2), ("VALID", 3, 2), ("SAME", 2, 2), ("VALID", 2, 1), ("SAME", 3, 1), ("SAME", (2, 3), 1)]


@pytest.mark.parametrize("padding,ksize,stride", AVG_POOL_CASES)
def test_avg_pool_lowering_matches_reference(rand, run_op, padding, ksize, stride):
    x = np.abs(rand(2, 7, 5, 3)) + 1.0  # all positive: dividing SAME windows by KH*KW would show
    (expected,), (got,), statements = run_op(avg_pool_node(padding, ksize, stride), [x])
    kernel = ksize if isinstance(ksize, tuple) else (ksize, ksize)
    np.testing.assert_allclose(expected, naive_avg_pool(x, kernel, stride, padding), rtol=1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert statements[-1].iterators == ("d0", "d1", "d2", "d3") and statements[-1].value.op == "div"
    if padding == "VALID":  # constant divisor, no count statements
        assert len(statements) == 3 and str(statements[-1].value.rhs) == repr(float(kernel[0] * kernel[1]))


@pytest.mark.parametrize("padding,ksize,stride", AVG_POOL_CASES)
def test_avg_pool_reference_matches_tensorflow(rand, run_op, padding, ksize, stride):
    tf = pytest.importorskip("tensorflow")
    x = rand(2, 9, 7, 3)
    (expected,), _, _ = run_op(avg_pool_node(padding, ksize, stride), [x], lower=False)
    kernel = ksize if isinstance(ksize, tuple) else (ksize, ksize)
    actual = tf.raw_ops.AvgPool(value=x, ksize=[1, *kernel, 1], strides=[1, stride, stride, 1], padding=padding).numpy()
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-6)


def test_avg_pool_rejects_bad_attrs():
    definition = lookup("AvgPool")
    with pytest.raises(ShapeError, match="AvgPool needs a rank-4"):
        definition.infer(avg_pool_node("SAME", 2, 2), [TensorType((4, 4, 1))], [None])
    with pytest.raises(ShapeError, match="does not fit"):
        definition.infer(avg_pool_node("VALID", 5, 1), [TensorType((1, 4, 4, 1))], [None])


# --- compiled kernels: default and heuristic recipes ------------------------------------------


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def graph_depthwise_bias_relu(h=9, w=8, c=16, stride=1, padding="SAME", multiplier=1, dilation=1):
    rng = np.random.default_rng(5)
    return build_graph(
        [
            placeholder("x", (1, h, w, c)),
            const("f", _rand(rng, 3, 3, c, multiplier)),
            const("b", _rand(rng, c * multiplier)),
            Node("dw", "DepthwiseConv2dNative", ("x:0", "f:0"), attrs={"strides": (1, stride, stride, 1), "padding": padding, "data_format": "NHWC", "dilations": (1, dilation, dilation, 1)}),
            Node("bias", "BiasAdd", ("dw:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu", "Relu", ("bias:0",)),
        ],
        ["relu:0"],
    )


@pytest.mark.parametrize(
    "stride,padding,multiplier,dilation", [(1, "SAME", 1, 1), (2, "SAME", 1, 1), (2, "VALID", 1, 1), (1, "VALID", 2, 1), (1, "SAME", 1, 2)]
)
def test_depthwise_bias_relu_compiles_correctly_under_default_and_heuristic_recipes(monkeypatch, stride, padding, multiplier, dilation):
    kernels, failures = verify_all_recipes(monkeypatch, graph_depthwise_bias_relu(stride=stride, padding=padding, multiplier=multiplier, dilation=dilation))
    assert [k.scop.ops for k in kernels] == [(("dw", "DepthwiseConv2dNative"), ("bias", "BiasAdd"), ("relu", "Relu"))]  # one fused group
    assert failures == []


def test_depthwise_heuristic_recipes_put_channels_innermost(monkeypatch):
    """MobileNetV2-like layer: a register-tiled micro-kernel over (width, channels) or a loop
    order ending with the channels, vectorised."""
    graph = graph_depthwise_bias_relu(14, 14, 96, stride=2)
    (kernel,) = kernels_of(graph)
    recipes = SearchSpace.for_scop(kernel.scop, 2).heuristic_recipes()
    assert recipes[0].register_tile_sizes[-1] % 8 == 0 and recipes[0].register_tile_sizes[-2] > 0
    assert any(r.point_order[-1] == "d3" and r.vector_width >= 8 for r in recipes)


def test_depthwise_with_multiplier_and_same_padding_under_pad_recipes(monkeypatch):
    _, failures = verify_all_recipes(monkeypatch, graph_depthwise_bias_relu(c=5, padding="SAME", multiplier=2))
    assert failures == []


def test_depthwise_with_multiplier_and_same_padding_without_pad_recipes(monkeypatch):
    _, failures = verify_all_recipes(monkeypatch, graph_depthwise_bias_relu(c=5, padding="SAME", multiplier=2), skip=lambda recipe: recipe.pad)
    assert failures == []


def test_pad_then_valid_conv_compiles_correctly(monkeypatch):
    rng = np.random.default_rng(6)
    graph = build_graph(
        [
            placeholder("x", (1, 6, 7, 3)),
            const("p", np.asarray([[0, 0], [0, 1], [1, 1], [0, 0]], np.int32)),
            const("f", _rand(rng, 3, 3, 3, 8)),
            Node("pad", "Pad", ("x:0", "p:0")),
            Node("relu", "Relu", ("pad:0",)),
            Node("conv", "Conv2D", ("relu:0", "f:0"), attrs={"strides": (1, 2, 2, 1), "padding": "VALID", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}),
        ],
        ["conv:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [k.scop.ops for k in kernels] == [(("pad", "Pad"), ("relu", "Relu")), (("conv", "Conv2D"),)]
    assert failures == []


def graph_avg_pool_relu(padding, ksize, stride):
    nodes = [placeholder("x", (2, 9, 8, 16)), avg_pool_node(padding, ksize, stride), Node("relu", "Relu", ("pool:0",))]
    return build_graph(nodes, ["relu:0"])


def _guarded_register_tile(recipe):
    return bool(recipe.register_tile_sizes) and not recipe.pad


@pytest.mark.parametrize("padding,ksize,stride", [("SAME", 3, 2), ("VALID", 2, 2), ("SAME", 3, 1)])
def test_avg_pool_compiles_correctly(monkeypatch, padding, ksize, stride):
    kernels, failures = verify_all_recipes(monkeypatch, graph_avg_pool_relu(padding, ksize, stride))
    assert [k.scop.ops for k in kernels] == [(("pool", "AvgPool"), ("relu", "Relu"))]
    assert failures == []


@pytest.mark.parametrize("op", ["AvgPool", "MaxPool"])
def test_same_pooling_under_register_tile_recipes(monkeypatch, op):
    # A register tile over a window-guarded dimension: the tile's row bound names a window
    # iterator, so the micro-kernel leaves it to the generic loops (it used to fail with
    # "AST uses unknown identifier").
    attrs = dict(avg_pool_node("SAME", 3, 2).attrs)
    graph = build_graph([placeholder("x", (2, 9, 8, 16)), Node("pool", op, ("x:0",), attrs=attrs)], ["pool:0"])
    _, failures = verify_all_recipes(monkeypatch, graph, skip=lambda recipe: not _guarded_register_tile(recipe))
    assert failures == []
