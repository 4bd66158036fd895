"""``polytf compile`` of a model with a ``None`` batch: one object file whose ``NAME_run`` takes
the batch as an argument (:mod:`polytf.export.batch_layout`), run by a C program at two batch
sizes, natively and under qemu-aarch64, against ``polytf.load`` at each size; a batch out of
range is a status, a model that mixes samples a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from exported_programs import aarch64_toolchain, build_program, native_toolchain, run_program
from graphdef_builders import write_conv_graphdef

import polytf
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.model_source import ModelSource
from polytf.errors import CompileError
from polytf.export import STATUS_CODES, compile_model

THREADS = 2
IMAGE = (9, 8, 3)


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("conv") / "conv.pb"
    write_conv_graphdef(path, IMAGE, 12, 3, 1, "SAME", pool=True, seed=3)
    return path


def _reference(model: Path, x: np.ndarray, cache: Path) -> np.ndarray:
    return polytf.load(model, cache_dir=cache, threads=THREADS, input_shapes={"x": x.shape}, progress=False)(x=x)["pool"]


def _check_batches(model: Path, exported, toolchain, batches, tmp_path: Path) -> None:
    program = build_program(exported, toolchain)
    for batch in batches:
        x = np.random.default_rng(batch).standard_normal((batch, *IMAGE)).astype(np.float32)
        for threads in (1, THREADS):
            run = run_program(exported, program, {"x": x}, toolchain, threads=threads)
            assert run.status == 0, run.stderr
            np.testing.assert_allclose(run.outputs["pool"], _reference(model, x, tmp_path / "reference"), rtol=1e-5, atol=1e-5)


def test_one_object_runs_at_two_batch_sizes(conv_model, tmp_path):
    exported = compile_model(ModelSource(conv_model, input_shapes={"x": ("N=1..16", *IMAGE)}), tmp_path, BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"))
    assert exported.batch is not None and (exported.batch.symbol, exported.batch.multiple, exported.batch.maximum) == ("N", 1, 16)
    header = exported.header_path.read_text()
    assert "int conv_run(const float *x, float *pool, int64_t batch, int threads);" in header
    assert "size_t conv_workspace_bytes(int64_t batch);" in header and "#define CONV_BATCH_MAX 16" in header
    assert "#define CONV_INPUT0_SIZE(batch) ((size_t)(batch) * 216)" in header
    _check_batches(conv_model, exported, native_toolchain(), (1, 3), tmp_path)


def test_a_batch_outside_the_range_is_a_status(conv_model, tmp_path):
    exported = compile_model(ModelSource(conv_model, input_shapes={"x": ("N=2..4", *IMAGE)}), tmp_path, BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"))
    assert exported.batch.multiple == 2
    toolchain = native_toolchain()
    program = build_program(exported, toolchain)
    x = np.zeros((6, *IMAGE), np.float32)  # 6 > 4
    assert run_program(exported, program, {"x": x}, toolchain).status == STATUS_CODES["ERROR_INVALID_BATCH"]
    assert run_program(exported, program, {"x": x[:4]}, toolchain).status == 0


def test_aarch64_object_runs_at_two_batch_sizes_under_qemu(conv_model, tmp_path):
    toolchain = aarch64_toolchain()
    exported = compile_model(conv_model, tmp_path, BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"), target_triple="aarch64", cpu="neoverse-n1")
    assert exported.batch is not None and exported.batch.maximum is None
    _check_batches(conv_model, exported, toolchain, (2, 5), tmp_path)


def test_a_model_that_mixes_samples_cannot_take_its_batch_as_an_argument(tmp_path):
    path = tmp_path / "gram.pbtxt"  # x^T x: a sum over the batch
    path.write_text(
        'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } '
        'attr { key: "shape" value { shape { dim { size: -1 } dim { size: 4 } } } } }\n'
        'node { name: "gram" op: "MatMul" input: "x" input: "x" attr { key: "T" value { type: DT_FLOAT } } '
        'attr { key: "transpose_a" value { b: true } } }\n'
    )
    with pytest.raises(CompileError, match=r"does not compute each sample of batch N alone.*--input"):
        compile_model(path, tmp_path / "out", BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"))


@pytest.mark.tensorflow
def test_the_cifar_cnn_frozen_with_its_none_batch_matches_tensorflow_at_two_batches(tmp_path):
    from polytf.model_zoo.dynamic_models import write_dynamic_model
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    model = write_dynamic_model("cifar_cnn", tmp_path / "cifar_cnn.pb")
    exported = compile_model(model, tmp_path / "out", BuildOptions(threads=THREADS, cache_dir=tmp_path / "cache"))
    toolchain = native_toolchain()
    program = build_program(exported, toolchain)
    output = exported.outputs[0].name
    for batch in (1, 4):
        x = np.random.default_rng(batch).standard_normal((batch, 32, 32, 3)).astype(np.float32)
        run = run_program(exported, program, {"input": x}, toolchain, threads=THREADS)
        assert run.status == 0, run.stderr
        reference = run_graphdef_with_tensorflow(model, {"input": x}, [output])[output]
        np.testing.assert_allclose(run.outputs[output], reference, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(reference))) + 1e-6)
