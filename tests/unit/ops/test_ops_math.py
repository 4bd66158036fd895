"""The math ops EfficientNet, GPT-2 and Keras activations freeze to: Maximum, Minimum,
RealDiv, Div, FloorDiv, FloorMod, Pow, ClipByValue (polytf.ops.binary_math); Log, Log1p,
Abs, Sign, Floor, Ceil, Round, Reciprocal, Inv, LeakyRelu, Elu, Selu, Softplus, Softsign
(polytf.ops.unary); IdentityN (removed by identity removal).

Each op: its numpy reference against ``tf.raw_ops`` (float32, tolerance 4 ulp relative
plus 1e-30 absolute unless stated), its lowering through the reference interpreter against
the reference, and small fused graphs compiled for this CPU under the default recipe and
recipes drawn from the search space, verified against the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, kernels_of, placeholder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytf.graph import Node
from polytf.ops import ELEMENTWISE, lookup
from polytf.ops.binary_math import power
from polytf.passes.identity_removal import remove_identities
from polytf.poly.expression import Access, Load

ULP = 4 * np.finfo(np.float32).eps
BINARY = ["Maximum", "Minimum", "RealDiv", "Div", "FloorDiv", "FloorMod", "Pow"]
UNARY = ["Log", "Log1p", "Abs", "Sign", "Floor", "Ceil", "Round", "Reciprocal", "Inv", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign"]
#: tf.raw_ops keyword of each unary op's input
_UNARY_ARGUMENT = {"LeakyRelu": "features", "Elu": "features", "Selu": "features", "Softplus": "features", "Softsign": "features"}


def _binary_inputs(rng, op, shape_a, shape_b):
    a = (rng.standard_normal(shape_a) * 3).astype(np.float32)
    b = (rng.standard_normal(shape_b) * 3).astype(np.float32)
    if op == "Pow":
        a = np.abs(a) + np.float32(0.1)  # a run-time exponent: positive bases (see binary_math's docstring)
    if op in ("RealDiv", "Div", "FloorDiv", "FloorMod"):
        b = np.where(np.abs(b) < 0.25, np.float32(0.5), b).astype(np.float32)
    return a, b


def _unary_input(rng, op, shape=(4, 33)):
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    if op in ("Log", "Log1p"):
        x = np.abs(x) + np.float32(1e-3)
    if op == "Round":  # exact halves: TensorFlow rounds them to even
        x.reshape(-1)[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]
    return x


def _tensorflow_binary(tf, op, a, b):
    return getattr(tf.raw_ops, op)(x=a, y=b).numpy()


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 3))], ids=str)
@pytest.mark.parametrize("op", BINARY)
def test_binary_reference_matches_tensorflow(rng, op, shapes):
    tf = pytest.importorskip("tensorflow")
    a, b = _binary_inputs(rng, op, *shapes)
    (expected,) = lookup(op).reference(Node("n", op, ("a:0", "b:0")), [a, b])
    actual = _tensorflow_binary(tf, op, a, b)
    assert expected.dtype == np.float32 and expected.shape == actual.shape
    # FloorMod: TensorFlow's fmod-based remainder and numpy's agree to a few ulp of |b|
    atol = 4 * ULP * np.max(np.abs(b)) if op == "FloorMod" else 1e-30
    np.testing.assert_allclose(expected, actual, rtol=ULP, atol=atol)


@pytest.mark.parametrize("op", BINARY)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rank=st.integers(0, 3),
    data=st.data(),
)
def test_binary_lowering_matches_reference_for_random_broadcasts(run_op, op, rank, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    # each operand keeps a suffix of the output's dimensions, some of them squeezed to 1
    shapes = []
    for _ in range(2):
        keep = data.draw(st.integers(0, rank))
        shapes.append(tuple(d if data.draw(st.booleans()) else 1 for d in shape[rank - keep :]))
    a, b = _binary_inputs(np.random.default_rng(data.draw(st.integers(0, 99))), op, *shapes)
    (expected,), (got,), (statement,) = run_op(Node("n", op, ("a:0", "b:0")), [a, b])
    assert expected.shape == np.broadcast_shapes(a.shape, b.shape)
    np.testing.assert_allclose(got, expected, rtol=2 * ULP, atol=4 * ULP * float(np.max(np.abs(b), initial=1.0)))


def test_maximum_and_minimum_propagate_nan_as_tensorflow(run_op):
    a = np.array([np.nan, 1.0, -0.5], np.float32)
    b = np.array([1.0, np.nan, 2.0], np.float32)
    for op, finite in (("Maximum", 2.0), ("Minimum", -0.5)):
        (expected,), (got,), _ = run_op(Node("n", op, ("a:0", "b:0")), [a, b])
        assert np.isnan(expected[:2]).all() and np.isnan(got[:2]).all()
        assert expected[2] == got[2] == finite


def test_integer_constants_fold_with_tensorflow_semantics():
    x, y = np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)
    results = {op: lookup(op).reference(Node("n", op, ("a:0", "b:0")), [x, y])[0] for op in ("Div", "FloorDiv", "FloorMod", "Maximum")}
    np.testing.assert_array_equal(results["Div"], [3, -3, -3, 3])  # toward zero
    np.testing.assert_array_equal(results["FloorDiv"], [3, -4, -4, 3])
    np.testing.assert_array_equal(results["FloorMod"], [1, 1, -1, -1])  # sign of the divisor
    np.testing.assert_array_equal(results["Maximum"], [7, 2, 7, -2])
    assert all(r.dtype == np.int32 for r in results.values())


@pytest.mark.parametrize(
    ("exponent", "text"),
    [
        (3.0, "mul(X0[d0], mul(X0[d0], X0[d0]))"),
        (2.0, "mul(X0[d0], X0[d0])"),
        (-2.0, "div(1.0, mul(X0[d0], X0[d0]))"),
        (0.5, "sqrt(X0[d0])"),
        (-0.5, "rsqrt(X0[d0])"),
        (0.0, "1.0"),
        (1.5, "select(equal(X0[d0], 1.0), 1.0, select(and(less(X0[d0], 0.0), isfinite(X0[d0])), nan, exp(mul(1.5, log(abs(X0[d0]))))))"),
    ],
)
def test_pow_with_a_constant_exponent_is_a_chain_or_a_root(exponent, text):
    x = Load(Access.of("X0", "d0"))
    assert str(power(x, None, exponent)) == text


def test_pow_cube_of_negative_numbers_matches_tensorflow():
    """GPT-2's tanh-GELU freezes ``x ** 3`` with a constant exponent: negative x must stay exact."""
    tf = pytest.importorskip("tensorflow")
    graph = build_graph(
        [placeholder("x", (64,)), const("three", np.float32(3.0)), Node("cube", "Pow", ("x:0", "three:0"))],
        ["cube:0"],
    )
    (kernel,) = kernels_of(graph)
    x = np.linspace(-4, 4, 64, dtype=np.float32)
    from polytf.poly.interpreter import interpret

    inputs = {info.name: x if info.tensor == "x:0" else np.float32(3.0) for info in kernel.input_arrays}
    expected = tf.raw_ops.Pow(x=x, y=np.float32(3.0)).numpy()
    (reference,) = kernel.reference(inputs).values()
    np.testing.assert_allclose(reference, expected, rtol=ULP)
    (interpreted,) = (value for name, value in interpret(kernel.scop, inputs).items() if name in {a.name for a in kernel.output_arrays})
    np.testing.assert_allclose(interpreted, expected, rtol=ULP)
    assert "mul(" in str(kernel.scop.statements[0].value) and "log" not in str(kernel.scop.statements[0].value)


@pytest.mark.parametrize("op", UNARY)
def test_unary_reference_matches_tensorflow(rng, op):
    tf = pytest.importorskip("tensorflow")
    x = _unary_input(rng, op)
    (expected,) = lookup(op).reference(Node("n", op, ("x:0",)), [x])
    actual = getattr(tf.raw_ops, op)(**{_UNARY_ARGUMENT.get(op, "x"): x}).numpy()
    np.testing.assert_allclose(expected, actual, rtol=ULP, atol=1e-30)


@pytest.mark.parametrize("op", UNARY)
def test_unary_lowering_matches_reference(rng, run_op, op):
    x = _unary_input(rng, op)
    (expected,), (got,), (statement,) = run_op(Node("n", op, ("x:0",)), [x])
    np.testing.assert_allclose(got, expected, rtol=2 * ULP, atol=1e-30)
    assert lookup(op).category == ELEMENTWISE


def test_leaky_relu_alpha_attribute(run_op):
    x = np.array([-2.0, 0.0, 3.0], np.float32)
    for alpha, expected in ((0.1, [-0.2, 0.0, 3.0]), (2.0, [-4.0, 0.0, 3.0])):
        node = Node("l", "LeakyRelu", ("x:0",), attrs={"alpha": alpha})
        (reference,), (got,), _ = run_op(node, [x])
        np.testing.assert_allclose(reference, expected, rtol=1e-7)
        np.testing.assert_allclose(got, expected, rtol=1e-7)


def test_unary_edge_values_match_tensorflow():
    tf = pytest.importorskip("tensorflow")
    x = np.array([0.0, -0.0, -1.0, 1e-30, np.inf, -np.inf, 1e-7, -1e-7, 100.0, -100.0], np.float32)
    for op in ("Log", "Log1p", "Sign", "Softplus", "Elu", "Selu", "Softsign", "Abs"):
        (expected,) = lookup(op).reference(Node("n", op, ("x:0",)), [x])
        with np.errstate(invalid="ignore"):
            actual = getattr(tf.raw_ops, op)(**{_UNARY_ARGUMENT.get(op, "x"): x}).numpy()
        # TensorFlow's Elu/Selu compute exp(x) - 1 (absolute error up to an ulp of 1 near 0); polytf expm1(x)
        atol = 2 * np.finfo(np.float32).eps if op in ("Elu", "Selu") else 1e-30
        np.testing.assert_allclose(expected, actual, rtol=ULP, atol=atol, err_msg=op)


def test_identity_n_is_removed_and_its_readers_read_its_inputs():
    graph = build_graph(
        [
            placeholder("x", (3, 4)),
            placeholder("y", (3, 4)),
            Node("both", "IdentityN", ("x:0", "y:0")),
            Node("sum", "AddV2", ("both:0", "both:1")),
            Node("out", "Mul", ("sum:0", "both:1")),
        ],
        ["out:0"],
    )
    cleaned, report = remove_identities(graph)
    assert "IdentityN" not in {n.op for n in cleaned.nodes.values()}
    assert cleaned.nodes["sum"].inputs == ("x:0", "y:0") and cleaned.nodes["out"].inputs == ("sum:0", "y:0")
    assert "1 IdentityN removed" in report.detail


def _graph_efficientnet_tail():
    """EfficientNet's swish (Sigmoid * x through IdentityN), squeeze-excite and its
    normalisation's Maximum/RealDiv, and a few activations in one chain."""
    return build_graph(
        [
            placeholder("x", (2, 5, 7, 8)),
            const("floor", np.float32(1e-3)),
            const("alpha", np.float32(0.3)),
            Node("sig", "Sigmoid", ("x:0",)),
            Node("swish", "Mul", ("x:0", "sig:0")),
            Node("ident", "IdentityN", ("swish:0", "x:0")),
            Node("sq", "Square", ("ident:1",)),
            Node("safe", "Maximum", ("sq:0", "floor:0")),
            Node("ratio", "RealDiv", ("ident:0", "safe:0")),
            Node("elu", "Elu", ("ratio:0",)),
            Node("soft", "Softplus", ("elu:0",)),
            Node("sign", "Sign", ("ident:1",)),
            Node("mixed", "Mul", ("soft:0", "sign:0")),
            Node("leaky", "LeakyRelu", ("mixed:0",), attrs={"alpha": 0.2}),
            Node("clip", "ClipByValue", ("leaky:0", "alpha:0", "floor:0")),
            Node("out", "AddV2", ("clip:0", "leaky:0")),
        ],
        ["out:0"],
    )


def _graph_rounding_and_logs():
    return build_graph(
        [
            placeholder("x", (3, 37)),
            placeholder("y", (37,)),
            Node("abs", "Abs", ("x:0",)),
            Node("log", "Log1p", ("abs:0",)),
            Node("floor", "Floor", ("x:0",)),
            Node("ceil", "Ceil", ("x:0",)),
            Node("round", "Round", ("x:0",)),
            Node("a", "AddV2", ("floor:0", "ceil:0")),
            Node("b", "Sub", ("a:0", "round:0")),
            Node("ysq", "Square", ("y:0",)),
            Node("pos", "AddV2", ("ysq:0", "abs:0")),
            Node("lg", "Log", ("pos:0",)),
            Node("min", "Minimum", ("b:0", "lg:0")),
            Node("fm", "FloorMod", ("min:0", "pos:0")),
            Node("out", "AddV2", ("fm:0", "log:0")),
        ],
        ["out:0"],
    )


@pytest.mark.parametrize("graph", [_graph_efficientnet_tail, _graph_rounding_and_logs], ids=["efficientnet_tail", "rounding_and_logs"])
def test_compiled_kernels_match_reference_under_every_heuristic_recipe(monkeypatch, graph):
    built = graph()
    from polytf.passes.pipeline import optimize

    optimized, _ = optimize(built)
    kernels, failures = verify_all_recipes(monkeypatch, optimized)
    assert kernels and not failures, failures


def test_compiled_math_ops_are_vector_code_without_calls():
    from polytf.schedules.recipe import CpuRecipe
    from polytf.targets.cpu import CpuTarget

    target = CpuTarget()
    ops = set()
    for kernel in kernels_of(_graph_rounding_and_logs()):
        ops |= {op for _, op in kernel.scop.ops}
        text = str(target.optimise(target.emit_llvm_ir(kernel.scop, CpuRecipe()), kernel.scop.name))
        assert "x float>" in text, kernel.scop.name
        assert "@logf" not in text and "llvm.log." not in text and "@log1pf" not in text and "@floorf" not in text
    assert {"Log", "Log1p", "Floor", "Round", "FloorMod"} <= ops
