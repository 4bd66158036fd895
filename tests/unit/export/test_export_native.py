"""``polytf compile`` on the host: C programs linked against the exported object (and shared
library) compute exactly what ``polytf.load`` computes, and refuse bad calls with a status."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
from export_graphs import write_embedding_graphdef
from exported_programs import build_program, check_gather_program, native_toolchain, run_program
from graphdef_builders import write_dense_block_graphdef, write_matmul_graphdef

import polytf
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import prepare_model
from polytf.errors import CompileError
from polytf.export import STATUS_CODES, compile_model

THREADS = 2


@pytest.fixture(scope="module")
def matmul_model(tmp_path_factory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("matmul") / "matmul.pb"
    weights = write_matmul_graphdef(path, 33, 70, 45, seed=4)
    return path, weights


def _export(model: Path, directory: Path, outputs: list[str] | None = None, **options):
    build = BuildOptions(threads=THREADS, cache_dir=directory / "cache")
    return compile_model(ModelSource(model, outputs=outputs), directory, build, **options)


def test_c_program_matches_polytf_load_bit_for_bit(matmul_model, tmp_path):
    model, weights = matmul_model
    exported = _export(model, tmp_path)
    assert exported.object_path.is_file() and exported.header_path.is_file()
    assert exported.weights_path is None and exported.weights_bytes >= weights.nbytes
    header = exported.header_path.read_text()
    assert "int matmul_run(const float *x, float *mm, int threads);" in header
    assert "#define MATMUL_INPUT0_SIZE 2310" in header and "{33, 70}" in header and "-lgomp" in header
    x = np.random.default_rng(0).standard_normal((33, 70)).astype(np.float32)
    reference = polytf.load(model, cache_dir=tmp_path / "cache", threads=THREADS)(x=x)["mm"]
    toolchain = native_toolchain()
    for link in ("object", "shared"):
        run = run_program(exported, build_program(exported, toolchain, link), {"x": x}, toolchain, threads=THREADS)
        assert run.status == 0, run.stderr
        np.testing.assert_array_equal(run.outputs["mm"], reference)
    np.testing.assert_allclose(reference, x @ weights, rtol=1e-4, atol=1e-4)


@pytest.mark.tensorflow
def test_cifar_cnn_program_matches_polytf_load(frozen_model, tmp_path):
    """The issue's model: bit-for-bit equal outputs with the same recipes and threads (how fast
    the program runs is measured by results/aot_export.py on a quiet machine, not here)."""
    model = frozen_model("cifar_cnn")
    exported = _export(model, tmp_path)
    loaded = polytf.load(model, cache_dir=tmp_path / "cache", threads=THREADS)
    assert exported.kernels == tuple(k.scop.name for k in loaded.kernels)
    assert exported.recipes == loaded.recipes
    image = np.random.default_rng(1).standard_normal((1, 32, 32, 3)).astype(np.float32)
    toolchain = native_toolchain()
    run = run_program(exported, build_program(exported, toolchain), {"input": image}, toolchain, threads=THREADS, repeats=30)
    assert run.status == 0, run.stderr
    np.testing.assert_array_equal(run.outputs["Identity"], loaded(input=image)["Identity"])
    assert run.median_s is not None and run.median_s > 0  # the program timed its calls


def test_weights_file_is_read_by_init_and_checked(matmul_model, tmp_path):
    model, _ = matmul_model
    exported = _export(model, tmp_path, embed_limit_bytes=0)
    assert exported.weights_path is not None and exported.weights_path.stat().st_size == 64 + exported.weights_bytes
    assert "#define MATMUL_WEIGHTS_EXTERNAL 1" in exported.header_path.read_text()
    x = np.random.default_rng(2).standard_normal((33, 70)).astype(np.float32)
    toolchain = native_toolchain()
    program = build_program(exported, toolchain)
    run = run_program(exported, program, {"x": x}, toolchain, threads=1, weights=exported.weights_path)
    assert run.status == 0, run.stderr
    np.testing.assert_array_equal(run.outputs["mm"], polytf.load(model, cache_dir=tmp_path / "cache", threads=THREADS)(x=x)["mm"])
    # no weights: the model refuses to run; a file of another export or a truncated one: init refuses it
    assert run_program(exported, program, {"x": x}, toolchain).status == STATUS_CODES["ERROR_NOT_INITIALIZED"]
    other = _export(write_matmul_path(tmp_path / "other.pb"), tmp_path / "other", embed_limit_bytes=0)
    assert run_program(exported, program, {"x": x}, toolchain, weights=other.weights_path).status == STATUS_CODES["ERROR_WEIGHTS_FILE"]
    truncated = tmp_path / "truncated.weights"
    truncated.write_bytes(exported.weights_path.read_bytes()[:-4])
    assert run_program(exported, program, {"x": x}, toolchain, weights=truncated).status == STATUS_CODES["ERROR_WEIGHTS_FILE"]


def write_matmul_path(path: Path) -> Path:
    write_matmul_graphdef(path, 33, 70, 45, seed=5)  # same shapes, other weights
    return path


def test_entry_points_refuse_bad_arguments(matmul_model, tmp_path):
    """Through the shared library with ctypes: NULL pointers, threads < 1 and a misaligned
    workspace give their status and run nothing; a reused workspace gives the same result."""
    model, weights = matmul_model
    exported = _export(model, tmp_path)
    library = ctypes.CDLL(str(exported.shared_library_path))
    run = library.matmul_run_with_workspace
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    library.matmul_workspace_bytes.restype = ctypes.c_size_t
    size = library.matmul_workspace_bytes()
    assert size == exported.workspace_bytes and size % 64 == 0
    raw = np.zeros(size + 128, np.uint8)
    workspace = raw[(-raw.ctypes.data) % 64 :][:size]
    x = np.random.default_rng(3).standard_normal((33, 70)).astype(np.float32)
    out = np.full((33, 45), np.nan, np.float32)
    assert run(None, out.ctypes.data, workspace.ctypes.data, 1) == STATUS_CODES["ERROR_NULL_ARGUMENT"]
    assert run(x.ctypes.data, out.ctypes.data, None, 1) == STATUS_CODES["ERROR_NULL_ARGUMENT"]
    assert run(x.ctypes.data, out.ctypes.data, workspace.ctypes.data, 0) == STATUS_CODES["ERROR_INVALID_THREADS"]
    assert run(x.ctypes.data, out.ctypes.data, workspace.ctypes.data + 8, 1) == STATUS_CODES["ERROR_WORKSPACE_ALIGNMENT"]
    assert np.isnan(out).all()
    workspace[:] = 0xAB  # garbage: the model zeroes a workspace it has not used before
    assert run(x.ctypes.data, out.ctypes.data, workspace.ctypes.data, THREADS) == 0
    first = out.copy()
    out[:] = np.nan
    assert run(x.ctypes.data, out.ctypes.data, workspace.ctypes.data, 1) == 0
    np.testing.assert_array_equal(out, first)
    np.testing.assert_allclose(first, x @ weights, rtol=1e-4, atol=1e-4)
    plain = library.matmul_run
    plain.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    out[:] = np.nan
    assert plain(x.ctypes.data, out.ctypes.data, THREADS) == 0
    np.testing.assert_array_equal(out, first)
    assert library.matmul_init(None) == 0  # weights inside the object: nothing to read


def test_gather_ids_are_checked_and_passed_through_outputs_copied(tmp_path):
    model = tmp_path / "embedding.pb"
    table = write_embedding_graphdef(model)
    exported = _export(model, tmp_path, outputs=["out", "ids_out"])
    assert [p.name for p in exported.outputs] == ["out", "ids_out"] and exported.inputs[0].dtype == "int32"
    assert "int embedding_run(const int32_t *ids, float *out, int32_t *ids_out, int threads);" in exported.header_path.read_text()
    check_gather_program(exported, native_toolchain(), table, np.array([0, 9, 3, 3, 1, 7], np.int32), bad_ids=(10, -1), position=4)


def test_two_exported_models_link_into_one_program(matmul_model, tmp_path):
    """Only the four entry points are global: the kernels and weights of two models (with
    kernels of the same names) do not clash."""
    model, weights = matmul_model
    first = _export(model, tmp_path / "a", name="first")
    other_weights = write_matmul_graphdef(tmp_path / "b.pb", 33, 70, 45, seed=9)
    second = _export(tmp_path / "b.pb", tmp_path / "b", name="second")
    symbols = subprocess.run(["nm", "--defined-only", "--extern-only", str(first.object_path)], capture_output=True, text=True, check=True).stdout
    assert sorted(line.split()[-1] for line in symbols.splitlines()) == sorted(
        ["first_init", "first_run", "first_run_with_workspace", "first_workspace_bytes"]
    )
    source = tmp_path / "both.c"
    source.write_text(
        '#include <stdio.h>\n#include "first.h"\n#include "second.h"\n'
        "int main(void) {\n  static float x[33 * 70], a[33 * 45], b[33 * 45];\n"
        "  for (int i = 0; i < 33 * 70; i++) x[i] = (float)(i % 7) - 3.0f;\n"
        "  if (first_run(x, a, 1) || second_run(x, b, 1)) return 1;\n"
        '  for (int i = 0; i < 33 * 45; i++) printf("%.9g %.9g\\n", a[i], b[i]);\n  return 0;\n}\n'
    )
    executable = tmp_path / "both"
    compiler = native_toolchain().compiler
    subprocess.run(
        [compiler, f"-I{tmp_path / 'a'}", f"-I{tmp_path / 'b'}", str(source), str(first.object_path), str(second.object_path), "-lgomp", "-lm", "-o", str(executable)],
        check=True,
        capture_output=True,
    )
    printed = np.array([line.split() for line in subprocess.run([str(executable)], capture_output=True, text=True, check=True).stdout.splitlines()], np.float32)
    x = ((np.arange(33 * 70) % 7) - 3).astype(np.float32).reshape(33, 70)
    np.testing.assert_allclose(printed[:, 0].reshape(33, 45), x @ weights, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(printed[:, 1].reshape(33, 45), x @ other_weights, rtol=1e-4, atol=1e-3)


def test_bad_names_and_host_nodes_are_refused(matmul_model, tmp_path):
    model, _ = matmul_model
    with pytest.raises(CompileError, match="not a C identifier"):
        _export(model, tmp_path, name="9lives")
    with pytest.raises(CompileError, match="polytf generates CPU code for x86_64, aarch64"):
        _export(model, tmp_path, target_triple="riscv64-unknown-linux-gnu")


@pytest.mark.tensorflow
def test_readme_program_builds_and_prints_the_models_logits(frozen_model, tmp_path):
    """The complete C program the README shows, built as it says, prints polytf.load's logits."""
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    program = readme.split("/* main.c */\n", 1)[1].split("```", 1)[0]
    model = frozen_model("cifar_cnn")
    out = tmp_path / "out"
    exported = compile_model(model, out, BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"), name="cifar_cnn")
    (tmp_path / "main.c").write_text(program)
    compiler = native_toolchain().compiler
    subprocess.run([compiler, "-O2", "-Iout", "main.c", str(exported.object_path.relative_to(tmp_path)), "-lgomp", "-lm", "-o", "main"], cwd=tmp_path, check=True)
    printed = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    image = (np.arange(32 * 32 * 3) % 255 / np.float32(255)).astype(np.float32).reshape(1, 32, 32, 3)
    expected = polytf.load(model, cache_dir=tmp_path / "cache", threads=THREADS)(input=image)["Identity"]
    np.testing.assert_allclose(np.array(printed, np.float32), expected.ravel(), rtol=1e-5, atol=1e-6)


def test_kernels_writing_windows_of_a_concatenation_run_in_the_program(tmp_path):
    """A DenseNet block: its 3x3 convolutions write at other offsets of one concatenation's
    buffer, each through a window of it (one compiled kernel); the program's workspace gives
    each the address of its window."""
    model = tmp_path / "dense.pb"
    write_dense_block_graphdef(model)
    prepared = prepare_model(ModelSource(model))
    assert sorted(origin for kernel in prepared.kernels for origin in kernel.array_origins.values()) == [8, 12]
    exported = _export(model, tmp_path)
    x = np.random.default_rng(5).standard_normal((1, 6, 6, 3)).astype(np.float32)
    reference = polytf.load(model, cache_dir=tmp_path / "cache", threads=THREADS)(x=x)["out"]
    toolchain = native_toolchain()
    run = run_program(exported, build_program(exported, toolchain), {"x": x}, toolchain, threads=THREADS)
    assert run.status == 0, run.stderr
    np.testing.assert_array_equal(run.outputs["out"], reference)
