"""Fast-math flags of generated code: TensorFlow's float semantics by default, every flag
only with ``CodegenConfig(fast_math=True)`` (:func:`polytf.targets.statement_codegen.float_flags`).

By default no float operation carries ``nnan``/``ninf``/``arcp``/``afn``/``fast``;
``contract`` is everywhere, ``reassoc`` only on a reduction's accumulating operation, ``nsz``
only on ``llvm.maximum``/``llvm.minimum``; Relu and a Max reduction still vectorise; NaN
propagates through the compiled kernels (against the interpreter of the same Scop).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, kernels_of, placeholder

from polytf.config import CodegenConfig, code_knobs
from polytf.graph import Node
from polytf.poly.interpreter import interpret
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.search_space import SearchSpace
from polytf.targets.cpu import CpuTarget
from polytf.targets.statement_codegen import accumulation, float_flags

TARGET = CpuTarget()
FAST = CpuTarget(CodegenConfig(fast_math=True))
#: every LLVM fast-math flag that may change a NaN, an infinity or a signed zero
UNSAFE = ("fast", "nnan", "ninf", "arcp", "afn")


def _kernel(op: str, shape: tuple[int, ...], axis: int | None = None):
    nodes = [placeholder("x", shape)]
    if axis is None:
        nodes.append(Node("y", op, ("x:0",)))
    else:
        nodes += [const("axis", np.int32([axis])), Node("y", op, ("x:0", "axis:0"), attrs={"keep_dims": False})]
    return kernels_of(build_graph(nodes, ["y:0"]))[0]


def _flags(ir: str) -> set[str]:
    """The fast-math flags on the float operations and calls of an LLVM IR text."""
    found = set()
    for line in ir.splitlines():
        match = re.search(
            r"= (?:fadd|fsub|fmul|fdiv|frem|fneg|call) ((?:(?:fast|nnan|ninf|nsz|arcp|afn|reassoc|contract) )+)", line
        )
        if match:
            found.update(match.group(1).split())
    return found


def _recipe(kernel):
    return SearchSpace.for_scop(kernel.scop, 2).default_recipe()


def test_float_flags_are_contract_only_unless_fast_math():
    assert float_flags(False) == ("contract",)
    assert float_flags(True) == ("fast",)
    assert CodegenConfig().fast_math is False  # opt-in, as XLA's xla_cpu_enable_fast_math
    assert code_knobs(CodegenConfig(fast_math=True)) != code_knobs(CodegenConfig())  # part of the cache key


def test_ieee_denormals_enter_the_cache_key_only_when_asked_for():
    """Tuning records made before the option existed keep their keys; kernels compiled with
    IEEE denormals are told apart from the default, flushing ones."""
    assert code_knobs(CodegenConfig()) == {"codegen": {"optimization_level": 3, "fast_math": False}}
    assert code_knobs(CodegenConfig(ieee_denormals=True))["codegen"]["ieee_denormals"] is True
    default = TARGET.emit_llvm_ir(*_kernel_and_recipe())
    ieee = CpuTarget(CodegenConfig(ieee_denormals=True)).emit_llvm_ir(*_kernel_and_recipe())
    assert "llvm.x86.sse.ldmxcsr" in default and "llvm.x86.sse.ldmxcsr" not in ieee


def _kernel_and_recipe():
    kernel = _kernel("Relu", (16, 40), None)
    return kernel.scop, _recipe(kernel)


@pytest.mark.parametrize(
    ("op", "shape", "axis"), [("Relu", (16, 40), None), ("Max", (16, 40), 1), ("Softmax", (6, 40), None), ("Sum", (16, 40), 1)]
)
def test_default_ir_has_no_flag_that_changes_nan_or_infinity(op, shape, axis):
    kernel = _kernel(op, shape, axis)
    ir = TARGET.emit_llvm_ir(kernel.scop, _recipe(kernel))
    flags = _flags(ir)
    assert "contract" in flags
    assert not flags & set(UNSAFE), f"{op}: {flags & set(UNSAFE)}"
    for line in ir.splitlines():
        if "nsz" in line:
            assert '@"llvm.maximum' in line or '@"llvm.minimum' in line, line
    assert "fast" in _flags(FAST.emit_llvm_ir(kernel.scop, _recipe(kernel)))  # the opt-in keeps the old flags


def test_relu_and_max_are_nan_propagating_maximum():
    relu = TARGET.emit_llvm_ir(_kernel("Relu", (16, 40)).scop, _recipe(_kernel("Relu", (16, 40))))
    assert '@"llvm.maximum' in relu and '@"llvm.maxnum' not in relu
    maximum = TARGET.emit_llvm_ir(_kernel("Max", (16, 40), 1).scop, _recipe(_kernel("Max", (16, 40), 1)))
    assert '@"llvm.maximum' in maximum


def test_reassociation_only_on_the_accumulation_of_a_reduction():
    kernel = _kernel("Softmax", (6, 40))
    accumulations = [s for s in kernel.scop.statements if accumulation(s) is not None]
    assert len(accumulations) == 1 and accumulations[0].value.op == "add"  # the row sum; not the row max
    assert all(accumulation(s) is None for s in _kernel("Relu", (4, 4)).scop.statements)
    ir = TARGET.emit_llvm_ir(kernel.scop, _recipe(kernel))
    reassociated = [line for line in ir.splitlines() if "reassoc" in line]
    assert reassociated and all(" fadd " in line for line in reassociated)
    assert any(re.search(r"= (fsub|fdiv) contract ", line) for line in ir.splitlines())  # x - max, e / sum: no reassoc


@pytest.mark.parametrize(("op", "shape", "axis"), [("Relu", (64, 256), None), ("Max", (64, 256), 1), ("Max", (256, 64), 0)])
def test_relu_and_max_reduction_still_vectorise(op, shape, axis):
    kernel = _kernel(op, shape, axis)
    assembly = TARGET.assembly(kernel.scop, _recipe(kernel))
    assert re.search(r"\tvmaxps\t[^\n]*%[yz]mm", assembly), f"{op} is not vectorised"


@pytest.mark.parametrize(
    ("op", "axis"), [("Relu", None), ("Max", 1), ("Min", 0), ("Softmax", None), ("Sum", 1), ("MaxPool", None)]
)
def test_compiled_kernel_propagates_nan_and_infinity_as_the_interpreter(op, axis):
    """NaN and ±inf through the compiled kernel, against the interpreter of the same Scop
    (the semantics of :mod:`polytf.poly.expression`)."""
    shape = (1, 6, 8, 3) if op == "MaxPool" else (6, 8)
    if op == "MaxPool":
        nodes = [
            placeholder("x", shape),
            Node(
                "y",
                op,
                ("x:0",),
                attrs={"ksize": (1, 2, 2, 1), "strides": (1, 2, 2, 1), "padding": "VALID", "data_format": "NHWC"},
            ),
        ]
        kernel = kernels_of(build_graph(nodes, ["y:0"]))[0]
    else:
        kernel = _kernel(op, shape, axis)
    compiled = TARGET.compile(kernel.scop, _recipe(kernel))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[[1, 9, 20, 33]] = [np.nan, np.inf, -np.inf, np.nan]
    flat[40:44] = -np.inf
    bench = KernelBench(kernel, seed=0)
    (source,) = kernel.input_arrays
    (output,) = kernel.output_arrays
    bench.arrays[bench.index[source.name]][...] = x
    bench.table(compiled).run(1)
    got = bench.arrays[bench.index[output.name]]
    expected = interpret(kernel.scop, {source.name: x})[output.name]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got) * np.sign(got), np.isinf(expected) * np.sign(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-5, atol=1e-6)
    assert not np.isfinite(expected).all()  # the special values reach the outputs


def test_register_tiled_selection_takes_the_generic_path():
    """LeakyRelu is a selection (``x > 0 ? x : alpha x``): with a register tile the micro-kernel
    declines it and the generic emitter compiles it, NaN and -inf kept."""
    from polytf.schedules.recipe import CpuRecipe

    nodes = [placeholder("x", (24, 32)), Node("y", "LeakyRelu", ("x:0",), attrs={"alpha": 0.1})]
    kernel = kernels_of(build_graph(nodes, ["y:0"]))[0]
    compiled = TARGET.compile(kernel.scop, CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), vector_width=8))
    bench = KernelBench(kernel, seed=0)
    (source,) = kernel.input_arrays
    (output,) = kernel.output_arrays
    x = bench.arrays[bench.index[source.name]]
    x[0, :3] = [np.nan, -np.inf, -0.0]
    bench.table(compiled).run(1)
    got = bench.arrays[bench.index[output.name]]
    assert np.isnan(got[0, 0]) and got[0, 1] == -np.inf and np.signbit(got[0, 2])
    np.testing.assert_allclose(got[1:], np.where(x[1:] > 0, x[1:], np.float32(0.1) * x[1:]), rtol=1e-6)
