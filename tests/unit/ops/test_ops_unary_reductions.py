"""Unary math ops, SquaredDifference, Sum/Mean/Max and Cast: numpy reference vs the
lowering (reference interpreter), reference vs TensorFlow, and small fused graphs compiled
for the CPU (default recipe and recipes of the search space) and verified."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, kernels_of, placeholder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from op_constants import run_op_with_constants

from polytf.config import MeasurementConfig
from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import ELEMENTWISE, lookup
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.recipe import CpuRecipe
from polytf.schedules.search_space import SearchSpace

UNARY = ["Relu6", "Neg", "Square", "Sqrt", "Rsqrt", "Exp", "Tanh", "Sigmoid", "Erf", "Erfc"]
SHAPES = [(), (7,), (2, 3, 5)]


def _formula(op, x):
    """float64 truth, written independently of the implementation."""
    x = x.astype(np.float64)
    return {
        "Relu6": lambda: np.clip(x, 0, 6),
        "Neg": lambda: -x,
        "Square": lambda: x * x,
        "Sqrt": lambda: np.sqrt(x),
        "Rsqrt": lambda: 1 / np.sqrt(x),
        "Exp": lambda: np.exp(x),
        "Tanh": lambda: np.tanh(x),
        "Sigmoid": lambda: 1 / (1 + np.exp(-x)),
        "Erf": lambda: np.array([math.erf(v) for v in x.reshape(-1)]).reshape(x.shape),
        "Erfc": lambda: np.array([math.erfc(v) for v in x.reshape(-1)]).reshape(x.shape),
    }[op]()


def _unary_input(rng, op, shape):
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    return np.abs(x) + np.float32(0.1) if op in ("Sqrt", "Rsqrt") else x


# --- unary ops -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", UNARY)
def test_unary_lowering_matches_reference(rng, run_op, op, shape):
    x = _unary_input(rng, op, shape)
    (expected,), (got,), statements = run_op(Node("n", op, ("x:0",)), [x])
    assert expected.dtype == np.float32 and expected.shape == x.shape
    np.testing.assert_allclose(expected, _formula(op, x), rtol=2e-7, atol=1e-30)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-30)
    assert len(statements) == 1 and statements[0].iterators == tuple(f"d{i}" for i in range(len(shape)))
    assert lookup(op).category == ELEMENTWISE


def test_relu6_clamps_both_sides(run_op):
    x = np.array([-3.0, 0.0, 2.5, 6.0, 7.5], dtype=np.float32)
    (expected,), (got,), (statement,) = run_op(Node("r", "Relu6", ("x:0",)), [x])
    np.testing.assert_array_equal(expected, [0.0, 0.0, 2.5, 6.0, 6.0])
    np.testing.assert_array_equal(got, expected)
    assert str(statement.value) == "minimum(maximum(X0[d0], 0.0), 6.0)"


def test_unary_extremes_in_reference(run_op):
    x = np.array([-np.inf, -100.0, -0.0, 0.0, 100.0, np.inf], dtype=np.float32)
    (sigmoid,), _, _ = run_op(Node("s", "Sigmoid", ("x:0",)), [x], lower=False)
    np.testing.assert_array_equal(sigmoid, [0.0, np.float32(math.exp(-100)), 0.5, 0.5, 1.0, 1.0])
    (erfc,), _, _ = run_op(Node("e", "Erfc", ("x:0",)), [x], lower=False)
    np.testing.assert_array_equal(erfc, [2.0, 2.0, 1.0, 1.0, 0.0, 0.0])
    (rsqrt,), _, _ = run_op(Node("r", "Rsqrt", ("x:0",)), [np.array([0.0, 4.0, -1.0], np.float32)], lower=False)
    assert rsqrt[0] == np.inf and rsqrt[1] == 0.5 and np.isnan(rsqrt[2])


def test_neg_and_square_fold_integer_constants():
    x = np.array([3, -4], dtype=np.int32)
    (neg,) = lookup("Neg").reference(Node("n", "Neg", ("x:0",)), [x])
    (square,) = lookup("Square").reference(Node("s", "Square", ("x:0",)), [x])
    assert neg.dtype == np.int32 and square.dtype == np.int32
    np.testing.assert_array_equal(neg, [-3, 4])
    np.testing.assert_array_equal(square, [9, 16])


def test_unary_rejects_two_inputs():
    with pytest.raises(ShapeError, match="takes 1 input"):
        lookup("Exp").infer(Node("e", "Exp", ("a:0", "b:0")), [TensorType((2,)), TensorType((2,))], [None, None])


# --- SquaredDifference -------------------------------------------------------------------


@pytest.mark.parametrize("shapes", [((3, 1), (4,)), ((2, 3, 4), (4,)), ((), (2, 3)), ((2, 1, 3), (1, 4, 1))], ids=str)
def test_squared_difference_broadcasts(rand, run_op, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    (expected,), (got,), (statement,) = run_op(Node("n", "SquaredDifference", ("a:0", "b:0")), [a, b])
    np.testing.assert_allclose(expected, (a.astype(np.float64) - b) ** 2, rtol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert str(statement.value).startswith("square(sub(")


# --- reductions -----------------------------------------------------------------------------

REDUCTION_CASES = [
    ((1, 7, 7, 12), [1, 2], False),  # MobileNetV2 global pooling
    ((1, 5, 8), [-1], True),  # LayerNorm statistics
    ((1, 5, 8), -1, False),  # scalar axis
    ((3, 4), [0], True),
    ((3, 4), [1, 0], False),  # whole tensor, unsorted axes
    ((2, 3, 4), [0, 2], True),
    ((2, 3), [], False),  # nothing to reduce: a copy
    ((5,), [0], False),  # rank-0 output
]


def _reduce(op, x, axes, keep):
    axes = tuple(np.asarray(axes).reshape(-1) % max(x.ndim, 1))
    x = x.astype(np.float64)
    return {"Sum": np.sum, "Mean": np.mean, "Max": np.max}[op](x, axis=axes, keepdims=keep)


@pytest.mark.parametrize("case", REDUCTION_CASES, ids=str)
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max"])
def test_reduction_lowering_matches_reference(rand, op, case):
    shape, axes, keep = case
    x = rand(*shape)
    node = Node("n", op, ("x:0", "axes:0"), attrs={"keep_dims": keep, "Tidx": "int32"})
    (expected,), (got,), statements = run_op_with_constants(node, [x, np.asarray(axes, dtype=np.int32)])
    np.testing.assert_allclose(expected, _reduce(op, x, axes, keep), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    if np.asarray(axes).size:
        update = statements[1]
        assert update.is_reduction and len(update.reduction_iterators) == np.asarray(axes).size
        assert len(statements) == (3 if op == "Mean" else 2)


def test_reduction_axes_from_shapes_without_constants(rand, run_op):
    """The lowering driver may not hand over constants: shapes then decide where they can."""
    x = rand(1, 7, 7, 6)
    node = Node("m", "Mean", ("x:0", "axes:0"), attrs={"keep_dims": False})
    (expected,), (got,), _ = run_op(node, [x, np.array([1, 2], np.int32)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    node = Node("m", "Mean", ("x:0", "axes:0"), attrs={"keep_dims": True})
    (expected,), (got,), _ = run_op(node, [x, np.array([3], np.int32)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="compile-time value of reduction_indices"):
        run_op(Node("s", "Sum", ("x:0", "axes:0"), attrs={"keep_dims": False}), [rand(2, 2), np.array([1], np.int32)])


def test_reduction_errors():
    node = Node("s", "Sum", ("x:0", "axes:0"), attrs={"keep_dims": False})
    infer = lookup("Sum").infer
    x = TensorType((2, 3))
    with pytest.raises(ShapeError, match="compile-time constant"):
        infer(node, [x, TensorType((1,), "int32")], [None, None])
    with pytest.raises(ShapeError, match="out of range"):
        infer(node, [x, TensorType((1,), "int32")], [None, np.array([2], np.int32)])
    with pytest.raises(ShapeError, match="appears twice"):
        infer(node, [x, TensorType((2,), "int32")], [None, np.array([0, -2], np.int32)])


def test_integer_reductions_fold_like_tensorflow():
    x = np.array([[1, 2], [3, -4]], dtype=np.int32)
    node = Node("m", "Mean", ("x:0", "a:0"), attrs={"keep_dims": False})
    (mean,) = lookup("Mean").reference(node, [x, np.int32(1)])
    assert mean.dtype == np.int32
    np.testing.assert_array_equal(mean, [1, 0])  # truncation toward zero: -1/2 -> 0
    (total,) = lookup("Sum").reference(Node("s", "Sum", ("x:0", "a:0")), [x, np.array([0, 1], np.int32)])
    assert total == 2 and total.dtype == np.int32


# --- Cast -------------------------------------------------------------------------------


def _cast(source, destination):
    return Node("c", "Cast", ("x:0",), attrs={"SrcT": source, "DstT": destination, "Truncate": False})


def test_cast_reference_truncates_toward_zero():
    x = np.array([-2.7, -0.5, 0.5, 2.7, 3.0], dtype=np.float32)
    (y,) = lookup("Cast").reference(_cast("float32", "int32"), [x])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [-2, 0, 0, 2, 3])
    (z,) = lookup("Cast").reference(_cast("int32", "float32"), [np.array([7, -8], np.int32)])
    assert z.dtype == np.float32
    np.testing.assert_array_equal(z, [7.0, -8.0])


def test_cast_folds_constants_and_copies_float32(rand, run_op):
    x = rand(2, 3)
    (expected,), (got,), _ = run_op(_cast("float32", "float32"), [x])
    np.testing.assert_array_equal(got, x)
    graph = build_graph(
        [placeholder("x", (2, 3)), const("k", np.array([1, 2, 3], np.int32)), Node("c", "Cast", ("k:0",), attrs={"SrcT": "int32", "DstT": "float32"}), Node("a", "AddV2", ("x:0", "c:0"))],
        ["a:0"],
    )
    np.testing.assert_array_equal(graph.constants["c:0"], np.array([1, 2, 3], np.float32))


def test_cast_of_run_time_float64_names_the_node():
    assert lookup("Cast").infer(_cast("float32", "int32"), [TensorType((2,))], [None]) == (TensorType((2,), "int32"),)
    with pytest.raises(ShapeError, match="Cast node 'c' converts a run-time tensor from float64 to float32"):
        lookup("Cast").infer(_cast("float64", "float32"), [TensorType((2,), "float64")], [None])
    with pytest.raises(ShapeError, match="SrcT=int32"):
        lookup("Cast").infer(_cast("int32", "float32"), [TensorType((2,))], [None])


# --- against TensorFlow ---------------------------------------------------------------------


@pytest.mark.tensorflow
def test_references_match_tensorflow(rng):
    tf = pytest.importorskip("tensorflow")
    for op in UNARY:
        x = _unary_input(rng, op, (4, 33))
        x[0, :6] = [0.0, -0.0, 30.0, -30.0, 5.5, -5.5] if op not in ("Sqrt", "Rsqrt") else [0.1, 1e-6, 30.0, 1e6, 5.5, 2.0]
        (ours,) = lookup(op).reference(Node("n", op, ("x:0",)), [x])
        theirs = getattr(tf.raw_ops, op)(x=x).numpy() if op != "Relu6" else tf.raw_ops.Relu6(features=x).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-7, err_msg=op)
    a, b = rng.standard_normal((3, 1, 5)).astype(np.float32), rng.standard_normal((4, 1)).astype(np.float32)
    (ours,) = lookup("SquaredDifference").reference(Node("n", "SquaredDifference", ("a:0", "b:0")), [a, b])
    np.testing.assert_allclose(ours, tf.raw_ops.SquaredDifference(x=a, y=b).numpy(), rtol=1e-6)
    for op in ("Sum", "Mean", "Max"):
        for shape, axes, keep in REDUCTION_CASES:
            x = rng.standard_normal(shape).astype(np.float32)
            indices = np.asarray(axes, dtype=np.int32)
            (ours,) = lookup(op).reference(Node("n", op, ("x:0", "a:0"), attrs={"keep_dims": keep}), [x, indices])
            theirs = getattr(tf.raw_ops, op)(input=x, axis=indices, keep_dims=keep).numpy()
            assert ours.shape == theirs.shape, (op, shape, axes)
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=f"{op} {shape} {axes}")
    integers = np.array([[1, 2, 7], [3, -4, -6]], dtype=np.int32)
    (ours,) = lookup("Mean").reference(Node("n", "Mean", ("x:0", "a:0")), [integers, np.int32(1)])
    np.testing.assert_array_equal(ours, tf.raw_ops.Mean(input=integers, axis=1).numpy())
    floats = np.array([-2.7, -0.5, 0.5, 2.7, 1e5], dtype=np.float32)
    (ours,) = lookup("Cast").reference(_cast("float32", "int32"), [floats])
    np.testing.assert_array_equal(ours, tf.raw_ops.Cast(x=floats, DstT=tf.int32).numpy())


# --- compiled for the CPU -------------------------------------------------------------------

CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)


def _target():
    from polytf.targets.cpu import CpuTarget

    return CpuTarget()


def _graph_matmul_bias_erfc():
    rng = np.random.default_rng(5)
    return build_graph(
        [
            placeholder("x", (6, 9)),
            const("w", rng.standard_normal((9, 20)).astype(np.float32)),
            const("b", rng.standard_normal(20).astype(np.float32)),
            const("scale", np.float32(-0.70710678)),
            Node("mm", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
            Node("bias", "BiasAdd", ("mm:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("scaled", "Mul", ("bias:0", "scale:0")),
            Node("erfc", "Erfc", ("scaled:0",)),
            Node("gelu", "Mul", ("erfc:0", "bias:0")),
        ],
        ["gelu:0"],
    )


def _graph_unary_chain():
    return build_graph(
        [
            placeholder("x", (3, 17)),
            placeholder("y", (17,)),
            Node("d", "SquaredDifference", ("x:0", "y:0")),
            Node("r", "Rsqrt", ("d:0",)),
            Node("t", "Tanh", ("x:0",)),
            Node("s", "Sigmoid", ("t:0",)),
            Node("e", "Exp", ("s:0",)),
            Node("erf", "Erf", ("x:0",)),
            Node("n", "Neg", ("erf:0",)),
            Node("q", "Sqrt", ("e:0",)),
            Node("a", "AddV2", ("q:0", "n:0")),
            Node("m", "Mul", ("a:0", "r:0")),
            Node("six", "Relu6", ("m:0",)),
        ],
        ["six:0"],
    )


def _graph_reduction(op, shape, axes, keep):
    return build_graph(
        [placeholder("x", shape), const("axes", np.asarray(axes, np.int32)), Node("red", op, ("x:0", "axes:0"), attrs={"keep_dims": keep})],
        ["red:0"],
    )


def _graph_layer_norm():
    """Keras LayerNorm statistics: mean, variance by SquaredDifference, rsqrt."""
    return build_graph(
        [
            placeholder("x", (1, 6, 16)),
            const("axes", np.array([-1], np.int32)),
            const("eps", np.float32(1e-3)),
            Node("mean", "Mean", ("x:0", "axes:0"), attrs={"keep_dims": True}),
            Node("sq", "SquaredDifference", ("x:0", "mean:0")),
            Node("var", "Mean", ("sq:0", "axes:0"), attrs={"keep_dims": True}),
            Node("add", "AddV2", ("var:0", "eps:0")),
            # kernels are verified on random normal inputs (eps and the variance included):
            # squaring keeps Rsqrt's operand positive
            Node("positive", "Square", ("add:0",)),
            Node("rs", "Rsqrt", ("positive:0",)),
            Node("centered", "Sub", ("x:0", "mean:0")),
            Node("out", "Mul", ("centered:0", "rs:0")),
        ],
        ["out:0"],
    )


COMPILED_GRAPHS = {
    "matmul_bias_erfc": _graph_matmul_bias_erfc,
    "unary_chain": _graph_unary_chain,
    "mean_last_keep_dims": lambda: _graph_reduction("Mean", (1, 12, 32), [-1], True),
    "mean_spatial": lambda: _graph_reduction("Mean", (1, 7, 7, 40), [1, 2], False),
    "sum_first": lambda: _graph_reduction("Sum", (9, 5, 6), [0], False),
    "max_middle_keep_dims": lambda: _graph_reduction("Max", (4, 9, 10), [1], True),
    "mean_all": lambda: _graph_reduction("Mean", (5, 8), [0, 1], False),
    "layer_norm": _graph_layer_norm,
}


def _kernels(monkeypatch, name):
    graph = COMPILED_GRAPHS[name]()
    return kernels_of(graph)


def _verify(target, kernel, recipe, threads):
    compiled = target.compile(kernel.scop, recipe)
    bench = KernelBench(kernel, seed=2)
    assert all(np.isfinite(value).all() for value in bench.expected.values()), "the test graph must give finite results"
    error, _ = bench.verify(compiled, threads, CHECK)
    return error


@pytest.mark.parametrize("name", sorted(COMPILED_GRAPHS))
def test_compiled_default_recipe(monkeypatch, name):
    target = _target()
    kernels = _kernels(monkeypatch, name)
    if name == "matmul_bias_erfc":
        assert len(kernels) == 1  # BiasAdd, Mul, Erfc, Mul fused into the MatMul's kernel
    for kernel in kernels:
        for threads in (1, 2):
            recipe = SearchSpace.for_scop(kernel.scop, threads).default_recipe()
            assert _verify(target, kernel, recipe, threads) is None, (kernel.scop.name, recipe)


def test_compiled_math_is_vector_code_without_calls(monkeypatch):
    target = _target()
    ops = set()
    for kernel in _kernels(monkeypatch, "unary_chain"):
        ops |= {op for _, op in kernel.scop.ops}  # the fused nodes (inlined statements keep no op of their own)
        text = str(target.optimise(target.emit_llvm_ir(kernel.scop, CpuRecipe()), kernel.scop.name))
        assert "x float>" in text, kernel.scop.name  # the loop vectorised
        assert "@tanhf" not in text and "llvm.exp." not in text and "@expf" not in text and "@erff" not in text
    assert {"Tanh", "Sigmoid", "Exp", "Erf"} <= ops


@pytest.mark.parametrize("name", sorted(COMPILED_GRAPHS))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_search_space_recipes(monkeypatch, name, data):
    target = _target()
    for kernel in _kernels(monkeypatch, name):
        space = SearchSpace.for_scop(kernel.scop, 2)
        params = {key: data.draw(st.sampled_from(choices), label=key) for key, choices in space.dimensions}
        recipe = space.recipe(params)
        assert _verify(target, kernel, recipe, 2) is None, recipe


@pytest.mark.tensorflow
def test_frozen_tensorflow_graph_end_to_end(tmp_path):
    """GELU (Erfc), LayerNorm statistics (Mean, SquaredDifference, Rsqrt), Relu6, Sigmoid,
    Tanh, Exp, Square, Sum/Mean/Max and a folded Cast of a Shape, frozen by TensorFlow and
    compiled by polytf, against TensorFlow's own run."""
    tf = pytest.importorskip("tensorflow")
    import polytf
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    rng = np.random.default_rng(0)
    weights = tf.constant(rng.standard_normal((16, 32)).astype(np.float32) * 0.3)

    def model(x):
        h = tf.nn.gelu(tf.matmul(tf.reshape(x, (-1, 16)), weights), approximate=False)
        h = tf.reshape(h, (2, 8, 32))
        mean, variance = tf.nn.moments(h, axes=[-1], keepdims=True)
        normalized = (h - mean) * tf.math.rsqrt(variance + 1e-3)
        pooled = tf.reduce_mean(tf.nn.relu6(normalized * 3), axis=[1]) * tf.cast(tf.shape(normalized)[-1], tf.float32)
        largest = tf.reduce_max(tf.sigmoid(normalized), axis=-1)
        total = tf.reduce_sum(tf.tanh(normalized) * tf.exp(-tf.square(normalized)), axis=[0, 2], keepdims=True)
        return pooled, largest, total

    graphdef = freeze_to_graphdef(model, [("x", (2, 8, 16))])
    ops = {node.op for node in graphdef.node}
    assert {"Erfc", "Mean", "SquaredDifference", "Rsqrt", "Relu6", "Sigmoid", "Tanh", "Exp", "Sum", "Max", "Cast"} <= ops
    path = tmp_path / "model.pb"
    path.write_bytes(graphdef.SerializeToString())
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    outputs = ["Identity", "Identity_1", "Identity_2"]
    expected = run_graphdef_with_tensorflow(str(path), {"x": x}, outputs)
    got = polytf.load(path, cache_dir=tmp_path / "cache", outputs=outputs, threads=2)(x=x)
    for name in outputs:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5 * np.abs(expected[name]).max(), err_msg=name)
