"""The one compile driver (polytf.targets.compile_driver): schedule -> AST -> target.emit ->
target.compile_code, used by Target.compile, by the runtime through it, and by polytf show."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hand_built_graphs import graph_matmul_bias_relu, kernels_of

from polytf.cli import main
from polytf.config import MeasurementConfig
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules import builder
from polytf.targets.compile_driver import compile_kernel, emit_kernel
from polytf.targets.cpu import CpuTarget

CHECK = MeasurementConfig(rtol=1e-5, atol_scale=1e-6)


class RecordingTarget(CpuTarget):
    """The CPU target, counting the calls the driver makes of its two code-generation steps."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def emit(self, scheduled, ast, recipe):
        self.calls.append(f"emit {type(ast).__name__}")
        return super().emit(scheduled, ast, recipe)

    def compile_code(self, code, scop, scheduled, recipe):
        self.calls.append("compile_code")
        return super().compile_code(code, scop, scheduled, recipe)


def _kernel_and_recipe():
    (kernel,) = kernels_of(graph_matmul_bias_relu(m=24, k=40, n=32))
    target = CpuTarget()
    return kernel, target.search_space(kernel.scop, 2).default_recipe()


def test_target_compile_runs_the_driver_once_and_the_kernel_is_correct():
    kernel, recipe = _kernel_and_recipe()
    target = RecordingTarget()
    compiled = target.compile(kernel.scop, recipe)
    assert target.calls == ["emit AstNode", "compile_code"]
    error, _ = KernelBench(kernel, seed=2).verify(compiled, 2, CHECK)
    assert error is None


def test_compiled_code_is_the_emitted_code_compiled():
    """Target.compile is exactly compile_code(emit(...)): the driver adds nothing and drops
    nothing (the optimised, JIT-lowered IR of both is the same text)."""
    kernel, recipe = _kernel_and_recipe()
    target = CpuTarget()
    emitted = emit_kernel(kernel.scop, recipe, target)
    assert target.emit_llvm_ir(kernel.scop, recipe) == emitted.code
    direct = target.compile_code(emitted.code, kernel.scop, emitted.scheduled, recipe)
    compiled = compile_kernel(kernel.scop, recipe, target)
    assert compiled.llvm_ir == direct.llvm_ir and compiled.arrays == emitted.scheduled.scop.arrays and compiled.scop is kernel.scop


def test_show_schedules_a_kernel_once_for_every_section(tmp_path, monkeypatch, capsys):
    weights = ", ".join(f"{v:.2f}" for v in np.linspace(-1, 1, 12))
    path = tmp_path / "matmul.pbtxt"
    path.write_text(f"""
node {{ name: "x" op: "Placeholder" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }}
  attr {{ key: "shape" value {{ shape {{ dim {{ size: 2 }} dim {{ size: 4 }} }} }} }} }}
node {{ name: "w" op: "Const" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }}
  attr {{ key: "value" value {{ tensor {{ dtype: DT_FLOAT tensor_shape {{ dim {{ size: 4 }} dim {{ size: 3 }} }} float_val: [{weights}] }} }} }} }}
node {{ name: "mm" op: "MatMul" input: "x" input: "w" }}
""")
    scheduled = []
    original = builder.schedule_scop
    monkeypatch.setattr(builder, "schedule_scop", lambda *a, **k: scheduled.append(a[0].name) or original(*a, **k))
    assert main(["show", str(path), "--kernel", "k0_mm", "--llvm", "--assembly", "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert all(section in out for section in ("schedule tree", "loop AST", "LLVM IR", "assembly"))
    assert scheduled == ["k0_mm"]


class CollectorWatchingTarget(CpuTarget):
    """The CPU target, noting whether Python's cyclic garbage collector ran during ``emit``."""

    def emit(self, scheduled, ast, recipe):
        self.collector_on_during_emit = gc.isenabled()
        return super().emit(scheduled, ast, recipe)


@pytest.mark.parametrize("enabled_before", [True, False])
def test_code_is_emitted_with_the_cyclic_collector_paused_and_its_state_restored(enabled_before):
    kernel, recipe = _kernel_and_recipe()
    target = CollectorWatchingTarget()
    was_enabled = gc.isenabled()
    (gc.enable if enabled_before else gc.disable)()
    try:
        emit_kernel(kernel.scop, recipe, target)
        assert target.collector_on_during_emit is False
        assert gc.isenabled() is enabled_before
    finally:
        (gc.enable if was_enabled else gc.disable)()


class FailingEmitTarget(CpuTarget):
    def emit(self, scheduled, ast, recipe):
        raise RuntimeError("emit failed")


def test_a_failing_emit_turns_the_cyclic_collector_back_on():
    kernel, recipe = _kernel_and_recipe()
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="emit failed"):
        emit_kernel(kernel.scop, recipe, FailingEmitTarget())
    assert gc.isenabled()
