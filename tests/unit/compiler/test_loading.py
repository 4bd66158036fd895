"""The model for a target: ``polytf.load`` with its keyword arguments or with a ModelSource
and BuildOptions builds the same model; the backend the options name builds a CompiledModel
on the CPU and a CudaModel for target ``cuda`` (here the CPU emulation)."""

from __future__ import annotations

import numpy as np
import pytest
from graphdef_builders import write_matmul_graphdef

import polytf
from polytf.compiler.backends import CpuBackend, backend_of_options
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.loading import load_model
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import prepare_model
from polytf.config import CUDA_EMULATION_ENVIRONMENT_VARIABLE, CodegenConfig
from polytf.errors import CompileError, PolytfError
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.runtime.cuda.model import CudaModel


@pytest.fixture(scope="module")
def matmul(tmp_path_factory):
    """(model path, weights) of ``mm = MatMul(x: [4, 8], w: [8, 16])``."""
    path = tmp_path_factory.mktemp("model") / "matmul.pb"
    return path, write_matmul_graphdef(path, 4, 8, 16)


def test_load_takes_keywords_or_the_two_values(matmul, tmp_path):
    path, weights = matmul
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    by_keywords = polytf.load(path, cache_dir=tmp_path, threads=1, outputs=["mm"])
    by_values = polytf.load(ModelSource(path, outputs=["mm"]), options=BuildOptions(threads=1, cache_dir=tmp_path))
    assert by_keywords.threads == by_values.threads == 1
    np.testing.assert_array_equal(by_keywords(x=x)["mm"], by_values(x=x)["mm"])
    np.testing.assert_allclose(by_values(x=x)["mm"], x @ weights, rtol=1e-5, atol=1e-5)


def test_a_fact_given_twice_is_an_error(matmul, tmp_path):
    path, _ = matmul
    with pytest.raises(PolytfError, match="outputs given beside a ModelSource"):
        polytf.load(ModelSource(path), outputs=["mm"])
    with pytest.raises(PolytfError, match="threads given beside options=BuildOptions"):
        polytf.load(path, threads=2, options=BuildOptions(cache_dir=tmp_path))
    with pytest.raises(PolytfError, match="not 0"):
        polytf.load(path, threads=0)


def test_the_options_name_the_cpu_backend_and_its_threads():
    backend = backend_of_options(BuildOptions(threads=3), CodegenConfig())
    assert isinstance(backend, CpuBackend) and backend.threads == 3 and backend.target.name == "cpu"


def test_one_builder_for_both_model_kinds(matmul, tmp_path, monkeypatch):
    path, weights = matmul
    prepared = prepare_model(path)
    assert isinstance(backend_of_options(BuildOptions(threads=1)).build_model(prepared), CompiledModel)
    monkeypatch.setenv(CUDA_EMULATION_ENVIRONMENT_VARIABLE, "1")
    model = load_model(path, BuildOptions(target="cuda", cache_dir=tmp_path))
    assert isinstance(model, CudaModel)
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(model(x=x)["mm"], x @ weights, rtol=1e-5, atol=1e-5)


def test_an_export_is_for_the_cpu(matmul, tmp_path):
    from polytf.export import compile_model

    with pytest.raises(CompileError, match="target 'cuda' cannot be exported"):
        compile_model(matmul[0], tmp_path, BuildOptions(target="cuda"))
    assert not list(tmp_path.iterdir())
