import itertools

import numpy as np
import pytest

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import ArrayRef, LoweringContext, lookup
from polytf.ops.conv import window

CONV_CASES = list(itertools.product(["SAME", "VALID"], [1, 2], [1, 2]))


def conv_node(padding, stride, dilation, **attrs):
    return Node(
        "conv",
        "Conv2D",
        ("x:0", "w:0"),
        attrs={
            "strides": (1, stride, stride, 1),
            "dilations": (1, dilation, dilation, 1),
            "padding": padding,
            "data_format": "NHWC",
            **attrs,
        },
    )


def naive_conv(x, f, stride, dilation, padding):
    """Direct loops over the TF definition, independent of the module's helpers."""
    n, h, w, c = x.shape
    kh, kw, _, o = f.shape

    def geom(size, k):
        eff = (k - 1) * dilation + 1
        if padding == "VALID":
            return -(-(size - eff + 1) // stride), 0
        out = -(-size // stride)
        return out, max((out - 1) * stride + eff - size, 0) // 2

    oh, pt = geom(h, kh)
    ow, pl = geom(w, kw)
    y = np.zeros((n, oh, ow, o), np.float64)
    for b, i, j, a, p, q, ch in itertools.product(range(n), range(oh), range(ow), range(o), range(kh), range(kw), range(c)):
        r, s = i * stride + p * dilation - pt, j * stride + q * dilation - pl
        if 0 <= r < h and 0 <= s < w:
            y[b, i, j, a] += x[b, r, s, ch] * f[p, q, ch, a]
    return y


@pytest.mark.parametrize("padding,stride,dilation", CONV_CASES)
def test_conv2d_lowering_matches_reference(rand, run_op, padding, stride, dilation):
    x, f = rand(1, 7, 6, 2), rand(3, 2, 2, 3)
    (expected,), (got,), statements = run_op(conv_node(padding, stride, dilation), [x, f])
    np.testing.assert_allclose(expected, naive_conv(x, f, stride, dilation, padding), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    init, update = statements
    assert init.iterators == ("d0", "d1", "d2", "d3")
    assert update.iterators == ("d0", "d1", "d2", "d3", "r0", "r1", "r2")
    assert update.is_reduction and not init.is_reduction
    if padding == "VALID":
        assert update.constraints == ()


def test_conv2d_padding_is_a_domain_constraint():
    definition = lookup("Conv2D")
    x, f, y = (
        ArrayRef("I", TensorType((1, 32, 32, 3))),
        ArrayRef("F", TensorType((3, 3, 3, 8))),
        ArrayRef("O", TensorType((1, 16, 16, 8))),
    )
    _, update = definition.lower(conv_node("SAME", 2, 1), [x, f], [y], LoweringContext())
    # out 16, pad_total = 15*2 + 3 - 32 = 1, pad_top = 0: only the upper bound is needed
    assert update.constraints == ("0 <= 2*d1 + r0 < 32", "0 <= 2*d2 + r1 < 32")
    _, update = definition.lower(conv_node("SAME", 1, 1), [x, f], [ArrayRef("O", TensorType((1, 32, 32, 8)))], LoweringContext())
    assert update.constraints == ("0 <= d1 + r0 - 1 < 32", "0 <= d2 + r1 - 1 < 32")
    assert str(update.reads[1]) == "I[d0, d1 + r0 - 1, d2 + r1 - 1, r2]"


@pytest.mark.parametrize(
    "size,kernel,stride,dilation,padding,expected",
    [
        (7, 3, 2, 1, "SAME", (4, 1, 1)),
        (8, 3, 2, 1, "SAME", (4, 0, 1)),
        (7, 2, 1, 1, "SAME", (7, 0, 1)),
        (7, 3, 1, 2, "SAME", (7, 2, 2)),
        (7, 3, 2, 2, "VALID", (2, 0, 0)),
        (7, 3, 2, 1, "VALID", (3, 0, 0)),
        (5, 5, 3, 1, "VALID", (1, 0, 0)),
    ],
)
def test_window_geometry_matches_tf_formulas(size, kernel, stride, dilation, padding, expected):
    w = window(size, kernel, stride, dilation, padding, "t")
    assert (w.output, w.pad_before, w.pad_after) == expected


def test_conv2d_rejects_unsupported_attrs():
    definition = lookup("Conv2D")
    types = [TensorType((1, 5, 5, 2)), TensorType((3, 3, 2, 4))]
    with pytest.raises(ShapeError, match="EXPLICIT.*unsupported"):
        definition.infer(conv_node("EXPLICIT", 1, 1), types, [None, None])
    with pytest.raises(ShapeError, match="NHWC"):
        definition.infer(conv_node("SAME", 1, 1, data_format="NCHW_VECT_C"), types, [None, None])
    with pytest.raises(ShapeError, match="channels"):
        definition.infer(conv_node("SAME", 1, 1), [TensorType((1, 5, 5, 3)), types[1]], [None, None])
    with pytest.raises(ShapeError, match="does not fit"):
        definition.infer(conv_node("VALID", 1, 3), types, [None, None])


@pytest.mark.parametrize("padding,stride,dilation", CONV_CASES)
def test_conv2d_reference_matches_tensorflow(rand, run_op, padding, stride, dilation):
    tf = pytest.importorskip("tensorflow")
    x, f = rand(2, 9, 8, 3), rand(3, 2, 3, 4)
    (expected,), _, _ = run_op(conv_node(padding, stride, dilation), [x, f], lower=False)
    actual = tf.raw_ops.Conv2D(
        input=x,
        filter=f,
        strides=[1, stride, stride, 1],
        padding=padding,
        dilations=[1, dilation, dilation, 1],
        data_format="NHWC",
    ).numpy()
    assert expected.shape == actual.shape
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-5)


def pool_node(padding, ksize, stride):
    return Node(
        "pool", "MaxPool", ("x:0",), attrs={"ksize": (1, ksize, ksize, 1), "strides": (1, stride, stride, 1), "padding": padding}
    )


POOL_CASES = [("SAME", 3, 2), ("VALID", 3, 2), ("SAME", 2, 2), ("VALID", 2, 2), ("SAME", 3, 1)]


@pytest.mark.parametrize("padding,ksize,stride", POOL_CASES)
def test_max_pool_lowering_matches_reference(rand, run_op, padding, ksize, stride):
    x = -np.abs(rand(2, 7, 5, 2)) - 1.0  # all negative: a padded cell read as 0 would show
    (expected,), (got,), (init, update) = run_op(pool_node(padding, ksize, stride), [x])
    assert (expected < 0).all()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert update.iterators == ("d0", "d1", "d2", "d3", "r0", "r1")
    assert float(init.value.value) == float(np.finfo(np.float32).min)  # TensorFlow: a window maximum starts at -FLT_MAX


@pytest.mark.parametrize("padding,ksize,stride", POOL_CASES)
def test_max_pool_reference_matches_tensorflow(rand, run_op, padding, ksize, stride):
    tf = pytest.importorskip("tensorflow")
    x = -np.abs(rand(2, 9, 7, 3))
    (expected,), _, _ = run_op(pool_node(padding, ksize, stride), [x], lower=False)
    actual = tf.raw_ops.MaxPool(input=x, ksize=[1, ksize, ksize, 1], strides=[1, stride, stride, 1], padding=padding).numpy()
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-6)


def test_max_pool_rejects_batch_window():
    definition = lookup("MaxPool")
    node = Node("p", "MaxPool", ("x:0",), attrs={"ksize": (2, 2, 2, 1), "strides": (1, 2, 2, 1), "padding": "VALID"})
    with pytest.raises(ShapeError, match="batch and channel"):
        definition.infer(node, [TensorType((2, 4, 4, 1))], [None])
