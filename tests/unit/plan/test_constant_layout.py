"""Weights packed once, when a model is built: the kernel leaves the packing of constant
operands to the runtime, which evaluates the copy with numpy and binds the packed panels
read-only; the results equal those of a kernel that packs on every call."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import graph_conv_bias_relu, graph_matmul_bias_relu, kernels_of

from polytf.compiler.kernel_compilation import constant_arrays
from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.config import MeasurementConfig
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.plan.constant_layout import evaluate_copy
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.builder import schedule_scop
from polytf.schedules.recipe import CpuRecipe
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)
PACKED_MATMUL = CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), pack=("A1",), parallel=True)


def test_constant_copies_leave_the_kernel_and_others_stay():
    kernel = kernels_of(graph_matmul_bias_relu(13, 9, 21))[0]
    constants = constant_arrays(kernel)
    assert constants  # the MatMul's weights
    scheduled = schedule_scop(kernel.scop, PACKED_MATMUL, limits=TARGET.limits, constant_arrays=constants)
    assert [c.value.access.array for c in scheduled.constant_copies] == ["A1"]
    assert all(s.name not in {c.name for c in scheduled.constant_copies} for s in scheduled.scop.statements)
    kept = schedule_scop(kernel.scop, PACKED_MATMUL, limits=TARGET.limits)
    assert not kept.constant_copies and len(kept.scop.statements) == len(scheduled.scop.statements) + 1


def test_packed_panels_equal_the_per_call_copy():
    # 21 columns in panels of 16: the second panel is partly padding, which must be zero
    kernel = kernels_of(graph_matmul_bias_relu(13, 9, 21))[0]
    scheduled = schedule_scop(kernel.scop, PACKED_MATMUL, limits=TARGET.limits, constant_arrays=constant_arrays(kernel))
    (copy,) = scheduled.constant_copies
    info = scheduled.scop.array(copy.write.array)
    weights = kernel.constant_values["A1"]
    packed = evaluate_copy(copy, weights, info.shape, info.dtype)
    assert packed.shape == (2, 9, 16) and not packed.flags.writeable
    np.testing.assert_array_equal(packed[0], weights[:, :16])
    np.testing.assert_array_equal(packed[1, :, :5], weights[:, 16:])
    assert not packed[1, :, 5:].any()


@pytest.mark.parametrize(
    "graph, recipe",
    [
        (graph_matmul_bias_relu(13, 9, 21), PACKED_MATMUL),
        (graph_conv_bias_relu(8, 8, 3, 16, stride=1), CpuRecipe(tile_sizes=(1, 2, 8, 16), register_tile_sizes=(0, 0, 4, 16), pad=True, pack=("A1",), parallel=True)),
    ],
    ids=["matmul", "conv"],
)
def test_kernels_with_prepacked_weights_compute_the_reference(graph, recipe):
    kernel = kernels_of(graph)[0]
    compiled = TARGET.compile(kernel.scop, recipe, constant_arrays(kernel))
    assert compiled.constant_copies
    error, _ = KernelBench(kernel, seed=3).verify(compiled, 2, CHECK)
    assert error is None
    groups = partition(graph)
    prepared = PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ())
    model = build_model(prepared, {kernel.scop.name: recipe}, TARGET, threads=2)
    assert any("packed" in key for key in model._constants)  # noqa: SLF001 - bound once, shared
    rng = np.random.default_rng(5)
    inputs = {name: rng.standard_normal(t.shape).astype(np.float32) for name, t in model.input_types.items()}
    feeds = {a.name: inputs[a.tensor.split(":")[0]] for a in kernel.input_arrays if a.name not in kernel.constant_values}
    (expected,) = kernel.reference({**feeds, **kernel.constant_values}).values()
    (out,) = model(**inputs).values()
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
