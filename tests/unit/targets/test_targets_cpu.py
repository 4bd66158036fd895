"""CpuTarget: host fingerprint, loop hints in the IR, vector code, threads."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from polytf.config import CPU_ENVIRONMENT_VARIABLE, MeasurementConfig
from polytf.errors import ArgumentError, CodegenError, ForeignCpuError
from polytf.poly.scop import ArrayInfo, Scop
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.builder import build_ast, build_schedule
from polytf.schedules.recipe import CpuRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.target_limits import TargetLimits
from polytf.targets.cpu import CpuTarget, openmp_available
from polytf.targets.cpu_kinds import CPU_KINDS, cpu_kind_from_environment, missing_features
from polytf.targets.llvm_codegen import KernelModuleBuilder

TARGET = CpuTarget()


def test_fingerprint_names_the_cpu_and_features_code_is_made_for():
    """The host's, or under ``pytest --cpu`` (``POLYTF_CPU``) the forced kind's."""
    fingerprint = TARGET.fingerprint()
    kind = cpu_kind_from_environment()
    expected = (kind.cpu_name, kind.features) if kind else (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
    assert (fingerprint["cpu"], fingerprint["features"]) == expected
    assert fingerprint["triple"]
    other = CpuTarget(cpu_name="x86-64", features="")
    assert other.fingerprint() != fingerprint


@pytest.mark.skipif(llvm.get_process_triple().split("-")[0] != "x86_64", reason="the CPU kinds are x86-64 CPUs")
@pytest.mark.parametrize("name", sorted(CPU_KINDS))
def test_a_cpu_kind_replaces_the_host_cpu_and_keys_its_own_records(monkeypatch, name):
    kind = CPU_KINDS[name]
    monkeypatch.setenv(CPU_ENVIRONMENT_VARIABLE, name)
    target = CpuTarget()
    assert (target.cpu_name, target.features) == (kind.cpu_name, kind.features)
    assert (target.vector_lanes, target.vector_registers) == (kind.vector_lanes, kind.vector_registers)
    assert target.limits == TargetLimits(kind.vector_lanes, kind.vector_registers)
    named = CpuTarget(cpu_name="znver3", features="+avx2,+fma")  # an explicit CPU is not replaced
    assert named.cpu_name == "znver3"
    monkeypatch.setenv(CPU_ENVIRONMENT_VARIABLE, "host")
    host = CpuTarget()
    assert host.cpu_name == llvm.get_host_cpu_name() and host.fingerprint() != target.fingerprint()


def test_an_unknown_cpu_kind_is_an_error_that_names_the_variable_and_the_kinds(monkeypatch):
    monkeypatch.setenv(CPU_ENVIRONMENT_VARIABLE, "avx1024")
    with pytest.raises(ArgumentError, match=r"POLYTF_CPU='avx1024'.*host, avx2, avx512"):
        CpuTarget()


def test_code_for_features_this_cpu_lacks_is_emitted_and_assembled_but_never_run(small_kernels):
    """A CPU kind this host cannot run (here: one with a feature it lacks) still schedules,
    optimises and writes object code; linking it raises ForeignCpuError, naming the features."""
    if llvm.get_process_triple().split("-")[0] != "x86_64":
        pytest.skip("x86-64 features")
    host = llvm.get_host_cpu_features().flatten()
    lacking = [feature for feature in ("avx512fp16", "amx-tile", "avx10.2", "avx512f", "avx2") if missing_features(f"+{feature}", host)]
    if not lacking:
        pytest.skip("this CPU has every feature tried")
    foreign = CpuTarget(cpu_name="x86-64-v3", features="+avx2,+fma,+" + lacking[0])
    assert not foreign.runs_here and foreign.host_architecture and foreign.missing_features == (lacking[0],)
    kernel = small_kernels("matmul_bias_relu")[0]
    assert "vfmadd" in foreign.assembly(kernel.scop, CpuRecipe(tile_sizes=(0, 8), vector_width=8))
    with pytest.raises(ForeignCpuError, match=f"lacks {lacking[0]}"):
        foreign.compile(kernel.scop, CpuRecipe())


def test_loop_hints_reach_the_ir(small_kernels):
    kernel = small_kernels("matmul_bias_relu")[0]
    recipe = CpuRecipe(tile_sizes=(0, 8), point_order=("d0", "r0", "d1"), vector_width=8, unroll=4)
    text = TARGET.emit_llvm_ir(kernel.scop, recipe)
    assert '"llvm.loop.vectorize.width", i32 8' in text
    assert '"llvm.loop.unroll.count", i32 4' in text
    assert "noalias" in text
    off = TARGET.emit_llvm_ir(kernel.scop, CpuRecipe(vector_width=1, unroll=1))
    assert '"llvm.loop.vectorize.width", i32 1' in off and "llvm.loop.unroll.disable" in off


def test_vectorised_recipe_emits_vector_instructions(small_kernels):
    kernel = small_kernels("matmul_bias_relu")[0]
    recipe = CpuRecipe(tile_sizes=(0, 11), point_order=("d0", "r0", "d1"), vector_width=8)
    assembly = TARGET.assembly(kernel.scop, recipe)
    assert "ymm" in assembly or "zmm" in assembly


def test_fast_math_flags_follow_the_config(small_kernels):
    from polytf.config import CodegenConfig

    kernel = small_kernels("matmul_bias_relu")[0]
    assert "fadd fast" not in TARGET.emit_llvm_ir(kernel.scop, CpuRecipe())  # TensorFlow's float semantics by default
    fast = CpuTarget(CodegenConfig(fast_math=True))
    assert "fadd fast" in fast.emit_llvm_ir(kernel.scop, CpuRecipe())


@pytest.mark.skipif(not openmp_available(), reason="libgomp not available")
def test_parallel_kernel_uses_openmp_and_matches_single_thread(small_kernels):
    kernel = small_kernels("conv_same_stride2")[0]
    space = SearchSpace.for_scop(kernel.scop, 2)
    recipe = space.default_recipe()
    assert recipe.parallel
    assert "GOMP_parallel" in TARGET.emit_llvm_ir(kernel.scop, recipe)
    compiled = TARGET.compile(kernel.scop, recipe)
    bench = KernelBench(kernel, seed=0)
    config = MeasurementConfig()
    results = []
    for threads in (1, 2, 3, 5, 16):  # blocks of ceil(n / threads) rows; more threads than rows leave some idle
        error, _ = bench.verify(compiled, threads, config)
        assert error is None
        results.append(bench.arrays[bench.index[kernel.output_arrays[0].name]].copy())
    for result in results[1:]:
        np.testing.assert_array_equal(results[0], result)


def test_arrays_of_other_dtypes_are_a_codegen_error(small_kernels):
    kernel = small_kernels("softmax")[0]
    arrays = tuple(ArrayInfo(a.name, a.shape, "float64" if i == 0 else a.dtype, a.role) for i, a in enumerate(kernel.scop.arrays))
    scop = Scop(kernel.scop.name, kernel.scop.statements, arrays)
    with pytest.raises(CodegenError, match="float64; generated code handles float32, int32, int64, bool"):
        KernelModuleBuilder(scop, build_ast(build_schedule(scop, CpuRecipe())))
