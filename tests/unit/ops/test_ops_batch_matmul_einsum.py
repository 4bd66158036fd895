"""BatchMatMulV2 and Einsum: reference vs lowering (interpreter), vs TensorFlow, and
compiled through CpuTarget with the default and heuristic recipes."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, kernels_of, placeholder

from polytf.config import MeasurementConfig
from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import ArrayRef, LoweringContext, lookup
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.search_space import SearchSpace
from polytf.targets.cpu import CpuTarget

CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)

# --- BatchMatMulV2 -----------------------------------------------------------------------


def _bmm(adj_x=False, adj_y=False, op="BatchMatMulV2"):
    return Node("bmm", op, ("x:0", "y:0"), attrs={"adj_x": adj_x, "adj_y": adj_y})


def _transpose_last(shape, adjoint):
    return shape[:-2] + (shape[-1], shape[-2]) if adjoint else shape


@pytest.mark.parametrize(
    "x_shape,y_shape,out_shape",
    [
        ((2, 3, 4), (2, 4, 5), (2, 3, 5)),
        ((1, 6, 8), (8, 5), (1, 6, 5)),  # Keras Dense on a rank-3 input
        ((3, 1, 4, 5), (2, 5, 6), (3, 2, 4, 6)),  # batch broadcasting
        ((4, 5), (2, 5, 3), (2, 4, 3)),
        ((3, 4), (4, 2), (3, 2)),
    ],
)
@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("adj_y", [False, True])
def test_batch_matmul_lowering_and_tensorflow(rand, run_op, x_shape, y_shape, out_shape, adj_x, adj_y):
    x = rand(*_transpose_last(x_shape, adj_x))
    y = rand(*_transpose_last(y_shape, adj_y))
    (expected,), (got,), statements = run_op(_bmm(adj_x, adj_y), [x, y])
    assert expected.shape == out_shape
    assert [s.is_reduction for s in statements] == [False, True]
    assert statements[1].iterators == tuple(f"d{k}" for k in range(len(out_shape))) + ("r0",)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    tf = pytest.importorskip("tensorflow")
    actual = tf.raw_ops.BatchMatMulV2(x=x, y=y, adj_x=adj_x, adj_y=adj_y).numpy()
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-5)


def test_batch_matmul_v3_matches_v2(rand, run_op):
    x, y = rand(2, 3, 4), rand(4, 5)
    node = Node("bmm", "BatchMatMulV3", ("x:0", "y:0"), attrs={"Ta": "float32", "Tb": "float32", "Tout": "float32"})
    (expected,), (got,), _ = run_op(node, [x, y])
    np.testing.assert_allclose(got, x @ y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "x_shape,y_shape,message",
    [((2, 3, 4), (2, 5, 6), "inner"), ((4,), (4, 5), "rank >= 2"), ((2, 3, 4), (3, 4, 5), "batch")],
)
def test_batch_matmul_rejects_bad_shapes(x_shape, y_shape, message):
    with pytest.raises(ShapeError, match=message):
        lookup("BatchMatMulV2").infer(_bmm(), [TensorType(x_shape), TensorType(y_shape)], [None, None])


def test_batch_matmul_v3_rejects_integer_output():
    node = Node("bmm", "BatchMatMulV3", ("x:0", "y:0"), attrs={"Ta": "float32", "Tb": "float32", "Tout": "int32"})
    with pytest.raises(ShapeError, match="Tout=int32"):
        lookup("BatchMatMulV3").infer(node, [TensorType((2, 3)), TensorType((3, 2))], [None, None])


# --- Einsum ------------------------------------------------------------------------------

EQUATIONS = [
    ("BTNH,BSNH->BNTS", (1, 5, 2, 3), (1, 4, 2, 3)),  # MultiHeadAttention scores
    ("BNTS,BSNH->BTNH", (1, 2, 5, 4), (1, 4, 2, 3)),  # MultiHeadAttention context
    ("abc,cd->abd", (2, 3, 4), (4, 5)),  # EinsumDense
    ("abc,cde->abde", (2, 3, 4), (4, 2, 3)),  # EinsumDense into heads
    ("abcd,cde->abe", (2, 3, 2, 4), (2, 4, 5)),  # EinsumDense out of heads
    ("aecd,abcd->acbe", (2, 3, 2, 4), (2, 5, 2, 4)),  # Keras 2 attention scores
    ("acbe,aecd->abcd", (2, 2, 5, 3), (2, 3, 2, 4)),  # Keras 2 attention context
    ("ij,kl->ijkl", (2, 3), (3, 2)),  # outer product, nothing contracted
    ("abc,ab->c", (3, 4, 5), (3, 4)),
    ("ab,ab->", (3, 4), (3, 4)),  # full contraction to a scalar
    ("abc,d->ad", (2, 3, 4), (5,)),  # b, c summed from one operand only
]


def _einsum(equation):
    return Node("einsum", "Einsum", ("a:0", "b:0"), attrs={"equation": equation, "N": 2})


@pytest.mark.parametrize("equation,a_shape,b_shape", EQUATIONS)
def test_einsum_lowering_and_tensorflow(rand, run_op, equation, a_shape, b_shape):
    a, b = rand(*a_shape), rand(*b_shape)
    (expected,), (got,), statements = run_op(_einsum(equation), [a, b])
    np.testing.assert_allclose(expected, np.einsum(equation, a.astype(np.float64), b.astype(np.float64)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    operands, output = equation.split("->")
    contracted = {c for c in operands if c not in output + ","}
    assert len(statements) == (2 if contracted else 1)
    tf = pytest.importorskip("tensorflow")
    actual = tf.einsum(equation, a, b).numpy()
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-5)
    raw = tf.raw_ops.Einsum(inputs=[a, b], equation=equation).numpy()
    np.testing.assert_allclose(expected, raw, rtol=1e-5, atol=1e-5)


def test_einsum_statement_iterators():
    node = _einsum("BTNH,BSNH->BNTS")
    statements = lookup("Einsum").lower(
        node,
        [ArrayRef("A", TensorType((1, 5, 2, 3))), ArrayRef("B", TensorType((1, 4, 2, 3)))],
        [ArrayRef("C", TensorType((1, 2, 5, 4)))],
        LoweringContext(),
    )
    init, update = statements
    assert init.iterators == ("d0", "d1", "d2", "d3")
    assert update.iterators == ("d0", "d1", "d2", "d3", "r0") and update.extents == (1, 2, 5, 4, 3)
    assert str(update) == "S1[d0, d1, d2, d3, r0]: C[d0, d1, d2, d3] = add(C[d0, d1, d2, d3], mul(A[d0, d2, d1, r0], B[d0, d3, d1, r0]))"


def test_einsum_accepts_bytes_equation(rand, run_op):
    a, b = rand(2, 3), rand(3, 4)
    (expected,), (got,), _ = run_op(_einsum(b"ij,jk->ik"), [a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "equation,shapes,message",
    [
        ("...ij,jk->...ik", [(2, 3), (3, 4)], "ellipsis"),
        ("ij->ji", [(2, 3)], "1 operand"),
        ("ij,jk", [(2, 3), (3, 4)], "exactly one '->'"),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "3 operand"),
        ("ii,ij->j", [(3, 3), (3, 4)], "repeated within operand"),
        ("ij,jk->iki", [(2, 3), (3, 4)], "repeated in the output"),
        ("ij,jk->iz", [(2, 3), (3, 4)], "appears in no operand"),
        ("ij,jk->ik", [(2, 3), (4, 5)], "index 'j'"),
        ("ijk,jk->ik", [(2, 3), (3, 4)], "rank 2"),
    ],
)
def test_einsum_rejects_unsupported_equations(equation, shapes, message):
    with pytest.raises(ShapeError, match=message) as info:
        lookup("Einsum").infer(_einsum(equation), [TensorType(s) for s in shapes], [None] * len(shapes))
    assert "'einsum'" in str(info.value)


# --- compiled through CpuTarget ------------------------------------------------------------


def _attention_graph(sequence=16, heads=2, head_width=8):
    shape = (1, sequence, heads, head_width)
    return build_graph(
        [
            placeholder("query", shape),
            placeholder("key", shape),
            placeholder("value", shape),
            const("scale", np.float32(head_width**-0.5)),
            Node("scores", "Einsum", ("query:0", "key:0"), attrs={"equation": "BTNH,BSNH->BNTS", "N": 2}),
            Node("scaled", "Mul", ("scores:0", "scale:0")),
            Node("softmax", "Softmax", ("scaled:0",)),
            Node("context", "Einsum", ("softmax:0", "value:0"), attrs={"equation": "BNTS,BSNH->BTNH", "N": 2}),
            Node("out", "Identity", ("context:0",)),
        ],
        ["out:0"],
    )


def _dense_graph():
    rng = np.random.default_rng(6)
    return build_graph(
        [
            placeholder("x", (1, 16, 32)),
            const("w", rng.standard_normal((32, 24)).astype(np.float32)),
            const("b", rng.standard_normal(24).astype(np.float32)),
            Node("bmm", "BatchMatMulV2", ("x:0", "w:0"), attrs={"adj_x": False, "adj_y": False}),
            Node("bias", "BiasAdd", ("bmm:0", "b:0"), attrs={"data_format": "NHWC"}),
        ],
        ["bias:0"],
    )


def _batched_graph():
    rng = np.random.default_rng(7)
    return build_graph(
        [
            placeholder("x", (3, 8, 12)),
            const("w", rng.standard_normal((3, 16, 12)).astype(np.float32)),
            Node("bmm", "BatchMatMulV2", ("x:0", "w:0"), attrs={"adj_x": False, "adj_y": True}),
        ],
        ["bmm:0"],
    )


GRAPHS = {"attention": _attention_graph, "dense_rank3": _dense_graph, "batched_adj_y": _batched_graph}


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
def test_compiled_default_and_heuristic_recipes(graph_name):
    target = CpuTarget()
    kernels = kernels_of(GRAPHS[graph_name]())
    assert kernels
    for kernel in kernels:
        space = SearchSpace.for_scop(kernel.scop, 2)
        for recipe in [space.default_recipe(), *space.heuristic_recipes()]:
            compiled = target.compile(kernel.scop, recipe)
            error, _ = KernelBench(kernel, seed=1).verify(compiled, 2, CHECK)
            assert error is None, f"{kernel.scop.name}: {recipe}: {error}"


def test_keras_transformer_encoder_block(tmp_path):
    """A frozen Keras MultiHeadAttention block types (BatchMatMulV2 rank-3 x rank-2, both
    attention Einsums, StopGradient) and compiles to the values TensorFlow computes."""
    pytest.importorskip("tensorflow")
    import polytf
    from polytf.frontend import load_graph
    from polytf.lowering.shape_inference import infer_types
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.modern_models import transformer_encoder
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    model = transformer_encoder(sequence=16, model_width=32, heads=2, feed_forward_width=64)
    path = tmp_path / "transformer.pb"
    path.write_bytes(freeze_to_graphdef(model, [("input", (1, 16, 32))]).SerializeToString())
    typed = infer_types(load_graph(path))
    einsums = {typed.nodes[t.split(":")[0]].attr("equation"): shape for t, shape in typed.types.items() if typed.nodes[t.split(":")[0]].op == "Einsum"}
    assert einsums == {"BTNH,BSNH->BNTS": TensorType((1, 2, 16, 16)), "BNTS,BSNH->BTNH": TensorType((1, 16, 2, 16))}
    assert any(node.op == "BatchMatMulV2" for node in typed.nodes.values())

    x = np.random.default_rng(8).standard_normal((1, 16, 32)).astype(np.float32)
    result = polytf.load(path, cache_dir=tmp_path / "cache")(input=x)
    reference = run_graphdef_with_tensorflow(path, {"input": x}, list(result))
    for name, value in result.items():
        np.testing.assert_allclose(value, reference[name], rtol=1e-4, atol=1e-5 * float(np.abs(reference[name]).max()) + 1e-6)
