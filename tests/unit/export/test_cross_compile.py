"""Cross-compilation for AArch64: the CPU target parameterised by triple, CPU and features, the
object checked with the LLVM tools, and programs run under qemu-aarch64 against the reference."""

from __future__ import annotations

import subprocess
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from export_graphs import write_embedding_graphdef
from exported_programs import aarch64_toolchain, build_program, check_gather_program, run_program
from graphdef_builders import write_matmul_graphdef
from system_tools import require_tool

import polytf
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.kernel_compilation import default_recipe
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import prepare_model
from polytf.compiler.recorded_recipes import cache_key
from polytf.config import CodegenConfig
from polytf.errors import CompileError
from polytf.export import compile_model
from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow
from polytf.schedules.recipe import CpuRecipe
from polytf.targets.cpu import CpuTarget

THREADS = 2
#: The e2e tests' tolerance against TensorFlow (tests/e2e/conftest.py).
RTOL, ATOL_SCALE, ATOL_FLOOR = 1e-4, 1e-5, 1e-6
LLVM_TOOLS = ["/usr/lib/llvm-*/bin"]


def assert_close(actual: np.ndarray, reference: np.ndarray) -> None:
    atol = ATOL_SCALE * float(np.max(np.abs(reference), initial=0.0)) + ATOL_FLOOR
    np.testing.assert_allclose(actual, reference, rtol=RTOL, atol=atol)


@pytest.fixture(scope="module")
def matmul_model(tmp_path_factory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("matmul") / "matmul.pb"
    return path, write_matmul_graphdef(path, 19, 67, 37, seed=6)


def test_aarch64_target_reads_its_vector_width_and_registers_and_keys_its_records(matmul_model):
    neoverse = CpuTarget(triple="aarch64-unknown-linux-gnu", cpu_name="neoverse-n1")
    generic = CpuTarget(triple="aarch64")
    host = CpuTarget()
    assert generic.triple == "aarch64-unknown-linux-gnu" and generic.cpu_name == "generic"
    assert (neoverse.vector_lanes, neoverse.vector_registers) == (4, 32)
    assert (CpuTarget(triple="aarch64", cpu_name="neoverse-v1", features="+sve").vector_lanes) == 4
    assert not neoverse.runs_here and host.runs_here
    kernel = prepare_model(matmul_model[0]).kernels[0]
    codegen = CodegenConfig()
    keys = {cache_key(kernel, target, THREADS, codegen).digest() for target in (host, neoverse, generic)}
    assert len(keys) == 3  # records of one target are never another's
    recipe = default_recipe(kernel, THREADS, neoverse)
    assert recipe.vector_width <= 4
    assembly = neoverse.assembly(kernel.scop, recipe)
    assert "fmla" in assembly and "v0." in assembly  # NEON fused multiply-adds, no x86
    assert "ymm" not in assembly and "xmm" not in assembly
    with pytest.raises(CompileError, match="cannot run on this"):
        neoverse.compile(kernel.scop, CpuRecipe())


def test_aarch64_object_has_the_arm_machine_and_only_the_entry_points(matmul_model, tmp_path):
    exported = compile_model(matmul_model[0], tmp_path, BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"), target_triple="aarch64", cpu="neoverse-n1")
    assert exported.triple == "aarch64-unknown-linux-gnu" and exported.tuned_kernels == ()
    readobj = require_tool("llvm-readobj", "reads the ELF header of cross-compiled objects (Debian: llvm)", LLVM_TOOLS)
    nm = require_tool("llvm-nm", "lists the symbols of cross-compiled objects (Debian: llvm)", LLVM_TOOLS)
    header = subprocess.run([str(readobj), "--file-headers", str(exported.object_path)], capture_output=True, text=True, check=True).stdout
    assert "EM_AARCH64" in header and "elf64-littleaarch64" in header.lower()
    symbols = subprocess.run([str(nm), str(exported.object_path)], capture_output=True, text=True, check=True).stdout.splitlines()
    defined = sorted(line.split()[-1] for line in symbols if line.split()[-2] == "T")
    assert defined == ["matmul_init", "matmul_run", "matmul_run_with_workspace", "matmul_workspace_bytes"]
    undefined = {line.split()[-1] for line in symbols if line.split()[-2] == "U"}
    assert undefined <= {"GOMP_parallel", "GOMP_barrier", "omp_get_thread_num", "omp_get_num_threads", "memset", "memcpy", "posix_memalign", "free", "fopen", "fread", "fclose", "expf", "logf", "tanhf", "erff", "powf"}


def test_aarch64_programs_run_under_qemu_and_match(matmul_model, tmp_path):
    model, weights = matmul_model
    exported = compile_model(model, tmp_path, BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"), target_triple="aarch64")
    toolchain = aarch64_toolchain()
    assert exported.shared_library_path is not None and exported.shared_library_path.is_file()
    x = np.random.default_rng(7).standard_normal((19, 67)).astype(np.float32)
    run = run_program(exported, build_program(exported, toolchain), {"x": x}, toolchain, threads=THREADS)
    assert run.status == 0, run.stderr
    assert_close(run.outputs["mm"], x.astype(np.float64) @ weights.astype(np.float64))

    embedding = tmp_path / "embedding.pb"
    table = write_embedding_graphdef(embedding)
    source = ModelSource(embedding, outputs=["out", "ids_out"])
    exported = compile_model(source, tmp_path / "embedding", BuildOptions(threads=1, cache_dir=tmp_path / "cache"), target_triple="aarch64")
    check_gather_program(exported, toolchain, table, np.array([9, 0, 4, 4, 2, 8], np.int32), bad_ids=(10,), position=0)


@pytest.mark.tensorflow
@pytest.mark.slow
def test_cifar_cnn_cross_compiled_matches_tensorflow_under_qemu(frozen_model, tmp_path):
    model = frozen_model("cifar_cnn")
    exported = compile_model(model, tmp_path, BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"), target_triple="aarch64", cpu="neoverse-n1")
    toolchain = aarch64_toolchain()
    image = np.random.default_rng(8).standard_normal((1, 32, 32, 3)).astype(np.float32)
    run = run_program(exported, build_program(exported, toolchain), {"input": image}, toolchain, threads=THREADS)
    assert run.status == 0, run.stderr
    reference = run_graphdef_with_tensorflow(model, {"input": image}, ["Identity"])["Identity"]
    assert_close(run.outputs["Identity"], reference)
    host = polytf.load(model, cache_dir=tmp_path / "cache", threads=THREADS)(input=image)["Identity"]
    assert_close(host, reference)
    assert llvm.get_process_triple().split("-")[0] != "aarch64" or np.array_equal(run.outputs["Identity"], host)
