"""Op traits: every op of the table has consistent traits, and each trait means what the passes
and the runtime take it to mean, checked against the op's own numpy reference and lowering."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest
from op_constants import run_op_with_constants

import polytf.ops
from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import (
    CATEGORIES,
    ELEMENTWISE,
    SOURCE,
    VIEW,
    Arity,
    Forwarding,
    OpDefinition,
    Operation,
    convolution_ops,
    lookup,
    supported_ops,
)
from polytf.ops.table import OP_DEFINITIONS, OP_TABLE
from polytf.poly.expression import Constant, Load

OPS = supported_ops()
RNG = np.random.default_rng(7)


def _rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _definitions_with(trait: str) -> list[OpDefinition]:
    return [lookup(op) for op in OPS if getattr(lookup(op), trait)]


# --- the table -------------------------------------------------------------------------------


def test_the_table_lists_every_definition_of_every_op_module_once():
    """An op module's definitions are module constants; the table lists each of them (a
    definition left out of ``OP_DEFINITIONS`` would be a silently unsupported op)."""
    defined = set()
    for module_info in pkgutil.iter_modules(polytf.ops.__path__):
        module = importlib.import_module(f"polytf.ops.{module_info.name}")
        for value in vars(module).values():
            candidates = value.values() if isinstance(value, dict) else (value,)
            defined.update(id(d) for d in candidates if isinstance(d, OpDefinition))
    assert defined == {id(d) for d in OP_DEFINITIONS}
    assert len(OP_TABLE) == len(OP_DEFINITIONS) == len(OPS)
    assert lookup("Conv2D") is OP_TABLE["Conv2D"] and lookup("Erfinv") is None


@pytest.mark.parametrize("op", OPS)
def test_every_op_has_consistent_traits(op):
    definition = lookup(op)
    assert definition.op == op and definition.category in CATEGORIES
    fewest, most = definition.arity
    assert 0 <= fewest and (most is None or most >= fewest)
    if definition.data_inputs is not None and most is not None:
        assert all(0 <= index < most for index in definition.data_inputs)
    if definition.commutative:
        assert definition.arity == Arity(2, 2)
    if definition.forwards is not None:
        assert definition.category == VIEW and fewest >= 1
        assert definition.forwards.input_of(0) in definition.data_input_indices(fewest)
    if definition.slab_copy:
        assert definition.lower is not None and definition.category not in (SOURCE, VIEW, ELEMENTWISE)
    if definition.expand is not None:
        assert definition.expand.result and definition.category not in (SOURCE, VIEW)
    if definition.weight_layout is not None:
        assert definition.weight_layout.input < fewest and definition.lower is not None
    algebra = definition.algebra
    if algebra is not None and algebra.canonical:
        assert lookup(algebra.canonical).algebra.operation is algebra.operation
    if algebra is not None and algebra.inverse_of:
        assert lookup(algebra.inverse_of).algebra.operation is Operation.ADD
    assert not definition.stateful  # polytf supports no stateful op


def test_definitions_refuse_contradicting_traits():
    rules = dict(infer=lambda *_: (), reference=lambda *_: ())
    with pytest.raises(ValueError, match="unknown category"):
        OpDefinition("Test", "kernel", **rules, arity=Arity(1, 1))
    with pytest.raises(ValueError, match="commutative op takes two inputs"):
        OpDefinition("Test", ELEMENTWISE, **rules, arity=Arity(3, 3), commutative=True)
    with pytest.raises(ValueError, match="identity-like op is a view"):
        OpDefinition("Test", ELEMENTWISE, **rules, arity=Arity(1, 1), forwards=Forwarding.FIRST_INPUT)


def test_arity_refuses_a_node_with_a_missing_or_extra_input():
    assert [str(a) for a in (Arity(2, 2), Arity(1, None), Arity(1, 2))] == ["2", "1 or more", "1 to 2"]
    lookup("ConcatV2").check_arity(Node("c", "ConcatV2", ("a:0", "b:0", "c:0", "axis:0")))
    with pytest.raises(ShapeError, match=r"node 'c' \(ConcatV2\) has 1 data input; ConcatV2 takes 2 or more"):
        lookup("ConcatV2").check_arity(Node("c", "ConcatV2", ("a:0",)))


# --- each trait against the op's reference ----------------------------------------------------


@pytest.mark.parametrize("definition", _definitions_with("commutative"), ids=lambda d: d.op)
def test_commutative_ops_do_not_depend_on_the_order_of_their_inputs(definition):
    a, b = _rand(3, 4), _rand(4)
    node = Node("n", definition.op, ("a:0", "b:0"))
    np.testing.assert_array_equal(definition.reference(node, [a, b])[0], definition.reference(node, [b, a])[0])


@pytest.mark.parametrize("definition", _definitions_with("algebra"), ids=lambda d: d.op)
def test_algebraic_laws_hold_for_the_reference(definition):
    algebra = definition.algebra
    x, c1, c2 = _rand(5), _rand(5), _rand(5)

    def apply(op: str, *values):
        return lookup(op).reference(Node("n", op, tuple(f"v{k}:0" for k in range(len(values)))), list(values))[0]

    if algebra.involution:
        np.testing.assert_array_equal(apply(definition.op, apply(definition.op, x)), x)
    if algebra.identity is not None:
        np.testing.assert_array_equal(apply(definition.op, x, np.full(5, algebra.identity, np.float32)), x)
    if algebra.associative:
        np.testing.assert_allclose(apply(definition.op, apply(definition.op, x, c1), c2), apply(definition.op, x, algebra.operation.function(c1, c2)), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(apply(definition.op, x, c1), apply(algebra.canonical, x, c1))
    if algebra.inverse_of:
        np.testing.assert_array_equal(apply(definition.op, x, c1), apply(algebra.inverse_of, x, -c1))


@pytest.mark.parametrize("definition", _definitions_with("forwards"), ids=lambda d: d.op)
def test_identity_like_ops_return_the_inputs_they_forward(definition):
    inputs = [_rand(2, 3), _rand(4)][: max(definition.arity.fewest, 2 if definition.arity.most is None else 1)]
    outputs = definition.reference(Node("n", definition.op, tuple(f"x{k}:0" for k in range(len(inputs)))), inputs)
    assert len(outputs) == definition.forwards.output_count(len(inputs))
    for port, output in enumerate(outputs):
        np.testing.assert_array_equal(output, inputs[definition.forwards.input_of(port)])


SLAB_COPIES = {
    "ConcatV2": (Node("c", "ConcatV2", ("a:0", "b:0", "axis:0")), [_rand(2, 3), _rand(2, 5), np.int32(1)]),
    "Concat": (Node("c", "Concat", ("axis:0", "a:0", "b:0")), [np.int32(0), _rand(2, 3), _rand(4, 3)]),
    "Pad": (Node("p", "Pad", ("x:0", "p:0")), [_rand(3, 4), np.asarray([[1, 0], [2, 1]], np.int32)]),
    "PadV2": (Node("p", "PadV2", ("x:0", "p:0", "v:0")), [_rand(3, 4), np.asarray([[0, 1], [1, 1]], np.int32), np.float32(0)]),
}


def test_slab_copy_ops_copy_each_operand_into_a_slab_of_the_output():
    """The ops whose operands the runtime may place in the output's buffer
    (:mod:`polytf.plan.buffer_placement`) lower to plain copies of data operands (and
    constant halos), each writing what the reference computes."""
    assert {d.op for d in _definitions_with("slab_copy")} == set(SLAB_COPIES)
    for op, (node, inputs) in SLAB_COPIES.items():
        (expected,), (lowered,), statements = run_op_with_constants(node, inputs)
        np.testing.assert_array_equal(lowered, expected)
        copies = [s for s in statements if isinstance(s.value, Load)]
        assert copies and all(isinstance(s.value, (Load, Constant)) for s in statements), op
        assert {s.value.access.array for s in copies} <= {f"X{k}" for k in range(len(lookup(op).data_input_indices(len(inputs))))}


WEIGHTED = {
    "Conv2D": (Node("y", "Conv2D", ("x:0", "w:0"), attrs={"strides": (1, 1, 1, 1), "padding": "VALID"}), (1, 6, 5, 3), (3, 2, 3, 4)),
    "DepthwiseConv2dNative": (Node("y", "DepthwiseConv2dNative", ("x:0", "w:0"), attrs={"strides": (1, 1, 1, 1), "padding": "VALID"}), (1, 6, 5, 3), (3, 2, 3, 2)),
    "GroupedConv2D": (Node("y", "GroupedConv2D", ("x:0", "w:0"), attrs={"strides": (1, 1, 1, 1), "padding": "VALID"}), (1, 6, 5, 2, 3), (3, 2, 3, 4)),
    "MatMul": (Node("y", "MatMul", ("x:0", "w:0"), attrs={"transpose_b": True}), (4, 6), (5, 6)),
}


@pytest.mark.parametrize("op", sorted(WEIGHTED))
def test_weight_layout_scales_output_channels(op):
    definition = lookup(op)
    layout = definition.weight_layout
    node, x_shape, w_shape = WEIGHTED[op]
    x, w = _rand(*x_shape), _rand(*w_shape)
    (y,) = definition.reference(node, [x, w])
    channels = layout.output_channels(node, w.shape)
    assert channels == y.shape[-1] and y.ndim == layout.output_rank
    scale = _rand(channels)
    (scaled,) = definition.reference(node, [x, layout.scale_weight(node, w, scale)])
    np.testing.assert_allclose(scaled, y * scale, rtol=1e-4, atol=1e-5)
    assert layout.is_convolution == (op in convolution_ops())
    assert layout.depthwise == (op == "DepthwiseConv2dNative")


@pytest.mark.parametrize("scale_dtype", [np.float32, np.float64])
def test_a_scaled_weight_is_the_rounded_product_in_the_weight_dtype(scale_dtype):
    node = Node("y", "Conv2D", ("x:0", "w:0"), attrs={"data_format": "NHWC"})
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 3, 5, 7)).astype(np.float32)
    w.flags.writeable = False  # a decoded weight is read-only: the product is a new array
    scale = rng.standard_normal(7).astype(scale_dtype)
    scaled = lookup("Conv2D").weight_layout.scale_weight(node, w, scale)
    assert scaled.dtype == np.float32 and scaled.flags.writeable
    # exactly what multiplying in the wider dtype and rounding once gives
    np.testing.assert_array_equal(scaled, (w * scale).astype(np.float32))


def test_a_weight_layout_needs_channels_last():
    node = Node("y", "Conv2D", ("x:0", "w:0"), attrs={"data_format": "NCHW"})
    assert lookup("Conv2D").weight_layout.output_channels(node, (3, 3, 2, 4)) is None
    assert convolution_ops() == ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "GroupedConv2D")


@pytest.mark.parametrize("op", ["FusedBatchNorm", "FusedBatchNormV3"])
def test_the_affine_form_of_a_batch_norm_computes_its_output(op):
    definition = lookup(op)
    x, gamma, beta, mean = _rand(1, 2, 3, 4), _rand(4), _rand(4), _rand(4)
    variance = np.abs(_rand(4)) + 0.5
    node = Node("bn", op, ("x:0", "g:0", "b:0", "m:0", "v:0"), attrs={"is_training": False, "epsilon": 0.001})
    scale, shift = definition.affine(node, [None, gamma, beta, mean, variance])
    np.testing.assert_allclose(x * scale + shift, definition.reference(node, [x, gamma, beta, mean, variance])[0], rtol=1e-5, atol=1e-6)
    assert definition.affine(node, [None, gamma, None, mean, variance]) is None
    training = Node("bn", op, node.inputs, attrs={"is_training": True})
    assert definition.affine(training, [None, gamma, beta, mean, variance]) is None


def test_static_values_are_known_from_the_node_and_input_types():
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    const = Node("c", "Const", attrs={"dtype": "int32", "value": value})
    (static,) = lookup("Const").static_value(const, [])
    np.testing.assert_array_equal(static, value)
    (shape,) = lookup("Shape").static_value(Node("s", "Shape", ("x:0",)), [TensorType((2, 5))])
    np.testing.assert_array_equal(shape, [2, 5])
