"""Accuracy of the straight-line float32 math functions of :mod:`polytf.targets.math_functions`.

Each function is JIT-compiled into a loop over an array, once on scalars (``float``) and
once on ``<8 x float>`` vectors, and compared with float64 truth from :mod:`math` over a
dense range plus the extremes (signed zeros, huge values, infinities, NaN)."""

from __future__ import annotations

import ctypes
import math

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from polytf.targets.cpu import CpuTarget
from polytf.targets.math_functions import MATH_FUNCTIONS, math_function

F32 = ir.FloatType()
I64 = ir.IntType(64)
TARGET = CpuTarget()
WIDTH = 8


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _log(x: float) -> float:
    if x < 0 or math.isnan(x):
        return math.nan
    return -math.inf if x == 0 else math.log(x)


def _log1p(x: float) -> float:
    if x < -1 or math.isnan(x):
        return math.nan
    return -math.inf if x == -1 else math.log1p(x)


def _sign(x: float) -> float:
    if math.isnan(x):
        return x
    return 0.0 if x == 0 else math.copysign(1.0, x)


def _expm1(x: float) -> float:
    return math.expm1(x) if x < 709 else math.inf


TRUTH = {
    "exp": lambda x: math.exp(x) if x < 710 else math.inf,
    "tanh": math.tanh,
    "sigmoid": _sigmoid,
    "erf": math.erf,
    "erfc": math.erfc,
    "log": _log,
    "log1p": _log1p,
    "sign": _sign,
    "expm1": _expm1,
}


def _compile(name: str, width: int):
    """``apply(float* x, float* y, i64 n)``: ``y[i] = name(x[i])``, ``n`` a multiple of ``width``."""
    module = ir.Module(name=f"test_{name}")
    value_type = ir.VectorType(F32, width) if width else F32
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [F32.as_pointer(), F32.as_pointer(), I64]), name="apply")
    x, y, n = function.args
    entry = function.append_basic_block("entry")
    loop = function.append_basic_block("loop")
    done = function.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    source = b.bitcast(b.gep(x, [i]), value_type.as_pointer())
    target = b.bitcast(b.gep(y, [i]), value_type.as_pointer())
    b.store(b.call(math_function(module, name, value_type), [b.load(source, align=4)]), target, align=4)
    following = b.add(i, ir.Constant(I64, max(width, 1)))
    i.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    optimised = TARGET.optimise(str(module), module.name)
    engine = llvm.create_mcjit_compiler(optimised, TARGET._create_target_machine())
    engine.finalize_object()
    kernel = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("apply"))
    return kernel, engine, str(optimised)


def _run(name: str, width: int, x: np.ndarray) -> np.ndarray:
    kernel, engine, _ = _compile(name, width)
    padded = np.zeros(-(-len(x) // WIDTH) * WIDTH, dtype=np.float32)
    padded[: len(x)] = x
    out = np.full_like(padded, np.nan)
    kernel(padded.ctypes.data, out.ctypes.data, len(padded))
    del engine
    return out[: len(x)]


def _inputs(name: str) -> np.ndarray:
    span = {"exp": 110.0, "tanh": 12.0, "sigmoid": 110.0, "erf": 6.0, "erfc": 11.0, "log": 1e4, "log1p": 100.0, "sign": 10.0, "expm1": 110.0}[name]
    dense = np.linspace(-span, span, 200_001, dtype=np.float32)
    if name in ("log", "log1p"):  # the whole positive range, subnormals included, and around -1
        dense = np.concatenate([dense, np.float32(2.0) ** np.linspace(-149, 127.9, 20_001, dtype=np.float32)])
        dense = np.concatenate([dense, np.linspace(-1.0, -0.9, 1001, dtype=np.float32)])
    small = np.float32(10.0) ** np.linspace(-30, 0, 301, dtype=np.float32)
    extremes = np.array([0.0, -0.0, 1e-38, -1e-38, 3e38, -3e38, np.inf, -np.inf, 88.7, 88.75, -87.3, -103.0], dtype=np.float32)
    return np.concatenate([dense, small, -small, extremes])


def _truth(name: str, x: np.ndarray) -> np.ndarray:
    """float64 truth; values beyond float32's range become inf (what float32 must give)."""
    truth = np.array([TRUTH[name](float(v)) for v in x], dtype=np.float64)
    return np.where(np.abs(truth) > np.finfo(np.float32).max, np.copysign(np.inf, truth), truth)


@pytest.mark.parametrize("width", [0, WIDTH], ids=["scalar", "vector"])
@pytest.mark.parametrize("name", MATH_FUNCTIONS)
def test_accuracy_against_float64_truth(name, width):
    x = _inputs(name)
    got = _run(name, width, x).astype(np.float64)
    truth = _truth(name, x)
    # tolerance: relative to the result where the result is a normal float32, and an
    # absolute floor that is tiny next to 1 (subnormal results, erfc and sigmoid tails)
    relative = {"exp": 3e-7, "tanh": 4e-7, "sigmoid": 4e-7, "erf": 4e-7, "erfc": 1e-6, "log": 3e-7, "log1p": 4e-7, "sign": 0.0, "expm1": 5e-7}[name]
    floor = {"exp": 1e-37, "tanh": 1e-37, "sigmoid": 1e-37, "erf": 1e-37, "erfc": 1e-37, "log": 1e-37, "log1p": 1e-37, "sign": 1e-45, "expm1": 1e-37}[name]
    finite = np.isfinite(truth)
    error = np.abs(got[finite] - truth[finite])
    allowed = relative * np.abs(truth[finite]) + floor
    worst = int(np.argmax(error / allowed))
    assert np.all(error <= allowed), f"{name}: x={x[finite][worst]!r} got {got[finite][worst]!r}, truth {truth[finite][worst]!r}"
    assert np.array_equal(got[~finite], truth[~finite], equal_nan=True)  # inf stays inf, NaN stays NaN


@pytest.mark.parametrize("width", [0, WIDTH], ids=["scalar", "vector"])
@pytest.mark.parametrize("name", MATH_FUNCTIONS)
def test_nan_passes_through_and_signed_zero(name, width):
    got = _run(name, width, np.array([np.nan, -np.nan, 0.0, -0.0], dtype=np.float32))
    assert np.isnan(got[:2]).all()
    if name in ("tanh", "erf", "log1p", "expm1"):  # odd near zero: keep the sign of zero
        assert got[2] == 0 and not np.signbit(got[2])
        assert got[3] == 0 and np.signbit(got[3])


def test_limits():
    x = np.array([-np.inf, np.inf, -200.0, 200.0, 89.0, -104.0], dtype=np.float32)
    np.testing.assert_array_equal(_run("exp", WIDTH, x), [0.0, np.inf, 0.0, np.inf, np.inf, 0.0])
    np.testing.assert_array_equal(_run("tanh", WIDTH, x), [-1.0, 1.0, -1.0, 1.0, 1.0, -1.0])
    np.testing.assert_array_equal(_run("sigmoid", WIDTH, x), [0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(_run("erf", WIDTH, x), [-1.0, 1.0, -1.0, 1.0, 1.0, -1.0])
    np.testing.assert_array_equal(_run("erfc", WIDTH, x), [2.0, 0.0, 2.0, 0.0, 0.0, 2.0])


@pytest.mark.parametrize("name", MATH_FUNCTIONS)
def test_vector_code_has_no_calls(name):
    _, engine, text = _compile(name, WIDTH)
    del engine
    assert "<8 x float>" in text
    assert "call float @" not in text and "tail call float" not in text  # no scalar libm call per lane
    assert "@tanhf" not in text and "@expf" not in text and "llvm.exp." not in text


def test_microkernel_emits_vector_math_in_its_body():
    """An anchor statement whose body calls the math functions, compiled with a register
    tile: the micro-kernel calls the ``<8 x float>`` versions, and the result matches the
    reference interpreter."""
    from polytf.poly.expression import Access, Binary, Constant, Load, Unary
    from polytf.poly.interpreter import interpret
    from polytf.poly.scop import ArrayInfo, Scop
    from polytf.poly.statement import Statement
    from polytf.schedules.recipe import CpuRecipe

    m, k, n = 6, 5, 16
    c = Access.of("C", "d0", "d1")
    a = Load(Access.of("A", "d0", "r0"))
    b = Load(Access.of("B", "r0", "d1"))
    left = Binary("add", Unary("erfc", a), Binary("mul", Unary("sigmoid", a), Unary("rsqrt", Binary("add", Unary("square", a), Constant(1.0)))))
    right = Binary("add", Unary("tanh", b), Binary("sub", Unary("exp", b), Unary("erf", b)))
    statements = (
        Statement("S0", ("d0", "d1"), (m, n), c, Constant(0.0)),
        Statement("S1", ("d0", "d1", "r0"), (m, n, k), c, Binary("add", Load(c), Binary("mul", left, right))),
    )
    arrays = (ArrayInfo("A", (m, k), "float32", "input"), ArrayInfo("B", (k, n), "float32", "input"), ArrayInfo("C", (m, n), "float32", "output"))
    scop = Scop("math_microkernel", statements, arrays)
    recipe = CpuRecipe(tile_sizes=(m, n), register_tile_sizes=(m, n), vector_width=WIDTH)
    text = TARGET.emit_llvm_ir(scop, recipe)
    for name in ("erfc", "sigmoid", "tanh", "exp", "erf"):
        assert f"polytf.{name}.v{WIDTH}f32" in text, name
    rng = np.random.default_rng(7)
    inputs = {"A": rng.standard_normal((m, k)).astype(np.float32) * 2, "B": rng.standard_normal((k, n)).astype(np.float32)}
    expected = interpret(scop, inputs)["C"]
    buffers = [np.ascontiguousarray(inputs["A"]), np.ascontiguousarray(inputs["B"]), np.full((m, n), np.nan, np.float32)]
    table = (ctypes.c_void_p * 3)(*[buffer.ctypes.data for buffer in buffers])
    TARGET.compile(scop, recipe)(table, 1)
    np.testing.assert_allclose(buffers[2], expected, rtol=2e-5, atol=1e-5 * np.abs(expected).max())
