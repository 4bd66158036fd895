"""End to end: polytf's float semantics are TensorFlow's on NaN, ±inf, -0.0 and denormals.

For every element-wise op of the op table that takes float32 tensors (taken from the table,
so a new op is covered when it is added), every reduction, Softmax and the poolings, a
one-op GraphDef is compiled with polytf (once per op) and run by TensorFlow itself
(``run_graphdef_with_tensorflow``, TensorFlow 2.21's CPU kernels) on inputs that hold NaN,
±inf, ±0.0, denormals and ordinary values: first a grid of every pair of special values,
then inputs drawn by hypothesis. The outputs must agree bit for bit on NaN-ness and on
infinities (the same positions are NaN, +inf, -inf; bool outputs equal) and within the
project's tolerance elsewhere (rtol 1e-4, atol 1e-5 * max|reference| + 1e-6).

Denormals: TensorFlow's CPU kernels run with flush-to-zero and denormals-are-zero
(tensorflow/core/platform/denormal.h), and so do polytf's kernels
(:class:`polytf.config.CodegenConfig`, ``ieee_denormals`` off): a denormal operand is 0 to
both (``1 / 1e-40`` is inf), so every position is compared, denormal inputs included;
:func:`test_denormals_are_flushed_as_tensorflow_flushes_them` checks the flush itself, that
the caller's floating-point state comes back, and the IEEE option.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

tf = pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.errors import InvalidArgumentError  # noqa: E402
from polytf.model_zoo import run_graphdef_with_tensorflow  # noqa: E402
from polytf.ops.definition import ELEMENTWISE  # noqa: E402
from polytf.ops.table import OP_DEFINITIONS  # noqa: E402

#: The special values: NaN, ±inf, ±0, denormals, and small ordinary values around them.
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -3e-39, 1.0, -1.0, 0.5, -2.5, 3.0], np.float32)
#: The shape of every element-wise input (a vector loop and its remainder).
SHAPE = (len(SPECIALS), 2 * len(SPECIALS))
#: Ordinary values: small enough that no op overflows near the float32 limit, where the
#: last ulp would decide between a finite result and inf, and large enough that no
#: intermediate result becomes a denormal (which TensorFlow flushes to zero: module docstring).
_SMALLEST = float(np.float32(1e-3))
ORDINARY = st.one_of(st.floats(_SMALLEST, 16.0, width=32), st.floats(-16.0, -_SMALLEST, width=32), st.sampled_from([0.0, -0.0]))
SETTINGS = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
TOLERANCE = (1e-4, 1e-5, 1e-6)  # rtol, atol scale, atol floor


# --- one-op graphs ------------------------------------------------------------------------


def _tensorflow_op(op: str):
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op)


def _input_dtypes(op: str) -> tuple[str, ...] | None:
    """The dtype of each input of a float32 node of ``op``: its type attributes float32, a
    fixed bool input bool; None when an input is neither (a shape, an axis)."""
    definition = _tensorflow_op(op)
    if definition is None:
        return None
    typed = {a.name for a in definition.attr if a.type == "type" and not a.HasField("default_value")}
    dtypes = []
    for argument in definition.input_arg:
        if argument.type_attr in typed:
            dtypes.append("float32")
        elif argument.type == tf.bool.as_datatype_enum:
            dtypes.append("bool")
        else:
            return None
    return tuple(dtypes)


def _elementwise_ops() -> list[str]:
    """Every element-wise op of the op table with a lowering that reads float32 tensors of
    a fixed count (at most three), each float32 or bool."""
    ops = []
    for definition in OP_DEFINITIONS:
        if definition.category != ELEMENTWISE or definition.lower is None or "float32" not in definition.dtypes:
            continue
        if definition.arity.most != definition.arity.fewest or definition.arity.fewest > 3 or definition.data_inputs is not None:
            continue
        dtypes = _input_dtypes(definition.op)
        if dtypes is not None and "float32" in dtypes:
            ops.append(definition.op)
    return ops


def _write_graph(path: Path, op: str, input_types, constants=(), attrs=None) -> Path:
    """``y = op(x0, x1, ..., constants...)`` as a GraphDef at ``path``: placeholders of
    ``input_types`` (``(dtype, shape)``), then Const inputs; every type attribute of ``op``
    without a default float32."""
    graph = tf.compat.v1.GraphDef()
    names = []
    for i, (dtype, shape) in enumerate(input_types):
        node = graph.node.add(name=f"x{i}", op="Placeholder")
        node.attr["dtype"].type = tf.as_dtype(dtype).as_datatype_enum
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(shape).as_proto())
        names.append(node.name)
    for i, value in enumerate(constants):
        node = graph.node.add(name=f"c{i}", op="Const")
        node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
        names.append(node.name)
    node = graph.node.add(name="y", op=op, input=names)
    for attribute in _tensorflow_op(op).attr:
        if attribute.type == "type" and not attribute.HasField("default_value"):
            node.attr[attribute.name].type = tf.float32.as_datatype_enum
    for key, value in (attrs or {}).items():
        node.attr[key].CopyFrom(tf.compat.v1.AttrValue(**value))
    path.write_bytes(graph.SerializeToString())
    return path


class OneOp:
    """A one-op graph compiled by polytf and run by TensorFlow on the same inputs."""

    def __init__(self, path: Path, cache_dir: Path) -> None:
        self.path = path
        self.model = polytf.load(path, cache_dir=cache_dir, fallback=False)

    def run(self, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        feeds = {f"x{i}": a for i, a in enumerate(arrays)}
        got = self.model(**feeds)["y"]
        expected = run_graphdef_with_tensorflow(self.path, feeds, ["y"])["y"]
        return got, expected


# --- the comparison -----------------------------------------------------------------------


def assert_same_float_semantics(
    got: np.ndarray, expected: np.ndarray, what: str, ignored: np.ndarray | None = None, zero_signs: bool = False
) -> None:
    """Bool outputs equal; float outputs NaN, +inf and -inf at the same positions and
    within tolerance elsewhere (with ``zero_signs``, a zero of TensorFlow's has its sign);
    positions where ``ignored`` is true are not compared."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (
        f"{what}: {got.shape} {got.dtype} != TensorFlow's {expected.shape} {expected.dtype}"
    )
    compared = np.ones(got.shape, bool) if ignored is None else ~np.broadcast_to(ignored, got.shape)
    if got.dtype.kind != "f":
        bad = compared & (got != expected)
        assert not bad.any(), (
            f"{what}: differs from TensorFlow at {np.argwhere(bad)[:5].tolist()}: got {got[bad][:5]}, expected {expected[bad][:5]}"
        )
        return
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        bad = compared & (test(got) != test(expected))
        assert not bad.any(), (
            f"{what}: {name} positions differ from TensorFlow at {np.argwhere(bad)[:5].tolist()}: got {got[bad][:5]}, expected {expected[bad][:5]}"
        )
    if zero_signs:
        bad = compared & (expected == 0) & (got == 0) & (np.signbit(got) != np.signbit(expected))
        assert not bad.any(), (
            f"{what}: the sign of a zero differs from TensorFlow at {np.argwhere(bad)[:5].tolist()}: got {got[bad][:5]}"
        )
    finite = compared & np.isfinite(expected)
    rtol, atol_scale, atol_floor = TOLERANCE
    atol = atol_scale * float(np.max(np.abs(expected[finite]), initial=0.0)) + atol_floor
    np.testing.assert_allclose(
        got[finite], expected[finite], rtol=rtol, atol=atol, err_msg=f"{what}: finite values differ from TensorFlow"
    )


# --- inputs -------------------------------------------------------------------------------


@st.composite
def float_inputs(draw, shape, sparse: bool = False):
    """Ordinary values with special values at drawn positions (at most a quarter of them
    with ``sparse``, for reductions: rows without NaN stay common)."""
    values = draw(hnp.arrays(np.float32, shape, elements=ORDINARY)).reshape(-1)
    size = values.size
    positions = st.tuples(st.integers(0, size - 1), st.sampled_from(SPECIALS.tolist()))
    for position, value in draw(st.lists(positions, max_size=size // 4 if sparse else size)):
        values[position] = value
    return values.reshape(shape)


def _pair_grid(count: int) -> list[np.ndarray]:
    """``count`` arrays of :data:`SHAPE` that hold every pair (for 2 or 3, the first two)
    of special values at some position, the rest ordinary values."""
    rng = np.random.default_rng(count)
    arrays = [rng.uniform(-4, 4, SHAPE).astype(np.float32) for _ in range(count)]
    n = len(SPECIALS)
    arrays[0][:, :n] = SPECIALS[:, None]
    if count > 1:
        arrays[1][:, :n] = SPECIALS[None, :]
    for array in arrays[2:]:
        array[:, :n] = SPECIALS[::-1, None]
    return arrays


# --- element-wise ops ---------------------------------------------------------------------

ELEMENTWISE_OPS = _elementwise_ops()
#: Ops whose zero's sign TensorFlow does not define: its scalar loop tail and its vector
#: body disagree (``Relu(-0.0)`` is -0.0 in the one, +0.0 in the other), and polytf's
#: ``maximum``/``minimum`` leave it open (``nsz``: one ``maxps``).
ZERO_SIGN_UNDEFINED = frozenset({"Relu", "Relu6", "Maximum", "Minimum"})


def test_every_float_elementwise_op_of_the_table_is_covered():
    assert {"Relu", "Maximum", "Minimum", "ClipByValue", "Pow", "FloorMod", "IsNan", "SelectV2", "Less", "Elu"} <= set(
        ELEMENTWISE_OPS
    )


@pytest.mark.parametrize("op", ELEMENTWISE_OPS)
def test_elementwise_op_matches_tensorflow_on_special_values(op, tmp_path):
    from polytf.ops import lookup

    dtypes = _input_dtypes(op)
    shapes = [SHAPE[-1:] if i == 1 and lookup(op).channel_bias else SHAPE for i in range(len(dtypes))]
    one_op = OneOp(_write_graph(tmp_path / f"{op}.pb", op, list(zip(dtypes, shapes))), tmp_path / "cache")
    rng = np.random.default_rng(0)

    def with_shapes(arrays):
        result = []
        for array, dtype, shape in zip(arrays, dtypes, shapes):
            if dtype == "bool":
                result.append(rng.random(shape) < 0.5)
            else:
                result.append(np.ascontiguousarray(array[(0,) * (len(SHAPE) - len(shape))] if len(shape) < len(SHAPE) else array))
        return result

    def check(arrays, what):
        got, expected = one_op.run(*arrays)
        assert_same_float_semantics(got, expected, f"{op} ({what})", zero_signs=op not in ZERO_SIGN_UNDEFINED)

    floats = sum(dtype == "float32" for dtype in dtypes)
    grid = iter(_pair_grid(floats))
    check(with_shapes([next(grid) if dtype == "float32" else None for dtype in dtypes]), "every pair of special values")

    @SETTINGS
    @given(st.lists(float_inputs(SHAPE), min_size=floats, max_size=floats))
    def drawn(values):
        values = iter(values)
        check(with_shapes([next(values) if dtype == "float32" else None for dtype in dtypes]), "drawn inputs")

    drawn()


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_cast_of_special_values_matches_tensorflow(dtype, tmp_path):
    """float32 -> integer: NaN, ±inf and values out of range give the integer's lowest value
    (x86's "integer indefinite", TensorFlow's CPU result; never LLVM's poison); -> bool:
    NaN is true."""
    attrs = {"DstT": {"type": tf.as_dtype(dtype).as_datatype_enum}}
    one_op = OneOp(_write_graph(tmp_path / "cast.pb", "Cast", [("float32", SHAPE)], attrs=attrs), tmp_path / "cache")
    x = _pair_grid(1)[0]
    x[0, -4:] = [3e9, -3e9, 2.5e19, -2.5e19]
    got, expected = one_op.run(x)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expected)


# --- reductions, Softmax, poolings -----------------------------------------------------------

ROWS = (6, 24)


#: op name (a trailing 0: over axis 0) -> (constant inputs, attrs)
REDUCTIONS = {
    "Sum": ((np.int32([1]),), {}),
    "Mean": ((np.int32([1]),), {}),
    "Max": ((np.int32([1]),), {}),
    "Min": ((np.int32([1]),), {}),
    "Prod": ((np.int32([1]),), {}),
    "Max0": ((np.int32([0]),), {}),
    "ArgMax": ((np.int32(1),), {}),
    "ArgMin": ((np.int32(1),), {}),
    "Cumsum": ((np.int32(1),), {}),
    "Softmax": ((), {}),
}


def _tensorflow_softmax_is_onednn_on_specials() -> bool:
    """Whether this process's TensorFlow gives Softmax([NaN, 0]) = [NaN, 0].

    TensorFlow has two CPU Softmax kernels. Its Eigen kernel
    (tensorflow/core/kernels/softmax_op_functor.h) computes ``exp(x - max) / sum``, so a row
    holding NaN or ``+inf`` is NaN everywhere; polytf follows it (``polytf/ops/softmax.py``). The
    oneDNN kernel that TensorFlow picks on some hosts (seen on AVX-512 ``znver5``, not on AVX2
    ``znver3``; ``TF_ENABLE_ONEDNN_OPTS=0`` turns it off) gives NaN only at the NaN and ``+inf``
    positions and 0 elsewhere: its ``exp`` of NaN is ``+inf``, so the row sum is ``+inf``.
    """
    return bool(np.isfinite(tf.nn.softmax(np.float32([[np.nan, 0.0]])).numpy()[0, 1]))


_SOFTMAX_KERNELS_DIFFER = _tensorflow_softmax_is_onednn_on_specials()


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_matches_tensorflow_on_special_values(name, tmp_path):
    constants, attrs = REDUCTIONS[name]
    op = name.rstrip("0")
    one_op = OneOp(_write_graph(tmp_path / f"{name}.pb", op, [("float32", ROWS)], constants, attrs), tmp_path / "cache")

    def check(x, what):
        got, expected = one_op.run(x)
        skipped = np.zeros(got.shape, bool)
        if name == "Softmax" and _SOFTMAX_KERNELS_DIFFER:
            # TensorFlow's oneDNN kernel differs from its Eigen kernel on these rows (see
            # _tensorflow_softmax_is_onednn_on_specials): check the Eigen kernel's NaN row instead.
            poisoned = (np.isnan(x) | np.isposinf(x)).any(axis=1, keepdims=True) & ~skipped
            assert np.isnan(got[np.broadcast_to(poisoned, got.shape)]).all(), (
                f"Softmax ({what}): a row holding NaN or +inf is not NaN everywhere"
            )
            skipped = skipped | poisoned
        assert_same_float_semantics(got, expected, f"{name} ({what})", skipped)

    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, ROWS).astype(np.float32)
    x[: len(SPECIALS) // 2, 3] = SPECIALS[: len(SPECIALS) // 2]  # one special value per row
    x[len(SPECIALS) // 2 :, 5] = SPECIALS[len(SPECIALS) // 2 :][: ROWS[0] - len(SPECIALS) // 2]
    x[0, 7], x[1, 9], x[2, 11] = np.inf, -np.inf, -np.inf  # NaN and inf; +inf and -inf
    x[4] = -np.inf  # a row of -inf only
    check(x, "one special value per row")

    @SETTINGS
    @given(float_inputs(ROWS, sparse=True))
    def drawn(x):
        check(x, "drawn inputs")

    drawn()


POOL_SHAPE = (1, 8, 8, 4)


@pytest.mark.parametrize("op", ["MaxPool", "AvgPool"])
def test_pooling_matches_tensorflow_on_special_values(op, tmp_path):
    attrs = {"ksize": {"list": {"i": [1, 2, 2, 1]}}, "strides": {"list": {"i": [1, 2, 2, 1]}}, "padding": {"s": b"VALID"}}
    one_op = OneOp(_write_graph(tmp_path / f"{op}.pb", op, [("float32", POOL_SHAPE)], attrs=attrs), tmp_path / "cache")

    def check(x, what):
        got, expected = one_op.run(x)
        assert_same_float_semantics(got, expected, f"{op} ({what})")

    x = np.random.default_rng(2).uniform(-4, 4, POOL_SHAPE).astype(np.float32)
    x[0, 0:2, 0:2, 0] = np.nan  # a window of NaN only: -FLT_MAX from MaxPool
    x[0, 0:2, 2:4, 0] = [[np.nan, -np.inf], [-np.inf, -np.inf]]  # NaN and -inf only
    x[0, 2, 2, 1], x[0, 4, 4, 2], x[0, 6, 6, 3] = np.nan, np.inf, -np.inf
    check(x, "windows with NaN and infinities")

    @SETTINGS
    @given(float_inputs(POOL_SHAPE, sparse=True))
    def drawn(x):
        check(x, "drawn inputs")

    drawn()


# --- CheckNumerics --------------------------------------------------------------------------


def _tensorflow_error(path: Path, x: np.ndarray) -> str | None:
    try:
        run_graphdef_with_tensorflow(path, {"x0": x}, ["y"])
    except tf.errors.InvalidArgumentError as error:
        return error.message
    return None


@pytest.mark.parametrize(
    ("values", "found"),
    [
        ([1.0, np.nan, 2.0], "NaN"),
        ([np.inf, 1.0, 2.0], "Inf"),
        ([np.nan, -np.inf, 0.0], "Inf and NaN"),
        ([1e-40, -0.0, 3.0], None),
    ],
)
def test_check_numerics_raises_as_tensorflow(values, found, tmp_path):
    path = _write_graph(
        tmp_path / "check.pb", "CheckNumerics", [("float32", SHAPE)], attrs={"message": {"s": b"activations of layer 3"}}
    )
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    assert not model.host_nodes
    x = np.random.default_rng(3).uniform(-4, 4, SHAPE).astype(np.float32)
    x[2, 5:8] = values
    tensorflow_message = _tensorflow_error(path, x)
    if found is None:
        assert tensorflow_message is None
        np.testing.assert_array_equal(model(x0=x)["y"], x)
        return
    assert f"activations of layer 3 : Tensor had {found} values" in tensorflow_message
    with pytest.raises(
        InvalidArgumentError, match=f"activations of layer 3 : Tensor had {found} values .*CheckNumerics node 'y'"
    ):
        model(x0=x)
    np.testing.assert_array_equal(model(x0=np.ones(SHAPE, np.float32))["y"], np.ones(SHAPE))  # the model still works


def test_check_numerics_inside_a_fused_chain(tmp_path):
    """``y = Relu(CheckNumerics(x * 2))``: the check sits between compiled kernels and
    raises from the model's call; finite inputs give TensorFlow's output."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="x0")
        tf.nn.relu(tf.debugging.check_numerics(x * 2.0, "scaled"), name="y")
    path = tmp_path / "chain.pb"
    path.write_bytes(graph.as_graph_def().SerializeToString())
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    x = np.random.default_rng(4).uniform(-4, 4, SHAPE).astype(np.float32)
    np.testing.assert_array_equal(model(x0=x)["y"], run_graphdef_with_tensorflow(path, {"x0": x}, ["y"])["y"])
    x[0, 0] = np.float32(3e38)  # finite, but x * 2 overflows to inf
    assert "scaled : Tensor had Inf values" in _tensorflow_error(path, x)
    with pytest.raises(InvalidArgumentError, match="scaled : Tensor had Inf values"):
        model(x0=x)


# --- denormals ------------------------------------------------------------------------------


def test_denormals_are_flushed_as_tensorflow_flushes_them(tmp_path):
    """A denormal input is 0 to a compiled kernel as to TensorFlow (``1 / 1e-38`` is inf), a
    denormal result is 0 (``1 / 2e38``), and the caller's floating-point state comes back:
    numpy keeps computing with denormals after the call. ``ieee_denormals`` keeps IEEE 754's
    gradual underflow instead."""
    from polytf.config import CodegenConfig, MeasurementConfig
    from polytf.runtime.cpu.kernel_bench import KernelBench
    from polytf.schedules.search_space import SearchSpace
    from polytf.targets.cpu import CpuTarget

    one_op = OneOp(_write_graph(tmp_path / "reciprocal.pb", "Reciprocal", [("float32", (4,))]), tmp_path / "cache")
    x = np.float32([1e-38, -5e-39, 1.0, 2e38])
    got, expected = one_op.run(x)
    np.testing.assert_array_equal(got, expected)
    assert np.isposinf(got[0]) and np.isneginf(got[1]) and got[2] == 1 and got[3] == 0
    assert np.float32(1e-38) * np.float32(0.5) != 0  # numpy's arithmetic still keeps denormals

    (kernel,) = one_op.model.kernels
    ieee = CpuTarget(CodegenConfig(ieee_denormals=True)).compile(kernel.scop, SearchSpace.for_scop(kernel.scop, 1).default_recipe())
    (source,), (result,) = ([info.name for info in kernel.scop.arrays if info.role == role] for role in ("input", "output"))
    gradual = (1 / x.astype(np.float64)).astype(np.float32)  # 1e38, -2e38, 1, 5e-39: gradual underflow kept
    error, _ = KernelBench(scop=kernel.scop, inputs={source: x}, expected={result: gradual}).verify(ieee, 1, MeasurementConfig(atol_scale=0.0))
    assert error is None, error
