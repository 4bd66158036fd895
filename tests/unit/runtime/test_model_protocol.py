"""Both runtimes' models are a :class:`~polytf.runtime.model.Model`: the tuner, the bench and
the command line call, time and describe either the same way."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import graph_matmul_bias_relu

from polytf.compiler.backends import CpuBackend, CudaBackend
from polytf.compiler.preparation import PreparedModel
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.runtime.cuda.emulation import EmulatedDevice
from polytf.runtime.cuda.model import CudaModel
from polytf.runtime.model import Model
from polytf.schedules.recipe import CpuRecipe, GpuRecipe
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import CudaTarget
from polytf.targets.kernel import Kernel

BACKENDS = {
    "cpu": (CpuBackend(CpuTarget(), 2), CompiledModel, CpuRecipe),
    "cuda": (CudaBackend(CudaTarget(compute_capability="sm_80"), 1, EmulatedDevice()), CudaModel, GpuRecipe),
}


@pytest.fixture(scope="module")
def prepared():
    graph = graph_matmul_bias_relu()
    groups = partition(graph)
    return PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ())


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_each_backend_builds_a_model_that_is_a_model(prepared, name):
    backend, kind, recipe_kind = BACKENDS[name]
    model = backend.build_model(prepared)
    assert isinstance(model, kind) and isinstance(model, Model)
    assert not hasattr(model, "graph") and model.source == prepared.graph.source  # no graph: no second copy of a weight
    assert model.output_names == ("relu",) and tuple(model.input_types["x"].shape) == (7, 13)
    assert model.host_nodes == () and model.tuned_kernels == () and model.step_kinds == ("kernel",)
    (kernel,) = model.kernels
    assert isinstance(kernel, Kernel) and isinstance(model.recipes[kernel.scop.name], recipe_kind)
    x = np.random.default_rng(0).standard_normal((7, 13)).astype(np.float32)
    expected = np.maximum(x @ prepared.graph.constants["w:0"] + prepared.graph.constants["b:0"], 0)
    np.testing.assert_allclose(np.asarray(model(x=x)["relu"]), expected, rtol=1e-5, atol=1e-5)
    assert model.context_count == 1
    assert len(model.latency_s({"x": x}, repeats=2, warmup=0)) == 2
    ((timed, latencies),) = model.kernel_latency_s({"x": x}, repeats=2, warmup=0)
    assert timed is kernel and len(latencies) == 2 and min(latencies) > 0


def test_a_model_without_the_runtime_methods_is_not_a_model(prepared):
    class Half:  # the data of a model, nothing to call
        source = ""
        input_types: dict = {}
        output_names = ()
        host_nodes = ()
        recipes: dict = {}
        tuned_kernels = ()

    assert not isinstance(Half(), Model)
