"""The CUDA target without a GPU: PTX is emitted and assembled with ptxas, and the GPU
code itself (ids, guards, barriers, shared memory) is run on CPU threads (gpu_threads)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gpu_threads import verify_on_threads
from hand_built_graphs import GRAPHS, graph_conv_bias_relu, graph_matmul_bias_relu, kernels_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip import LEGAL, roundtrip

from polytf.errors import CodegenError, CompileError
from polytf.schedules.gpu_search_space import GpuSearchSpace
from polytf.schedules.recipe import CpuRecipe, GpuRecipe
from polytf.schedules.structure import anchor_statement
from polytf.schedules.target_limits import TargetLimits
from polytf.targets.cuda import CudaKernel, CudaTarget, ptx_compute_capability
from polytf.targets.ptxas import assemble, find_ptxas

ARCHITECTURES = ("sm_80", "sm_90")
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc, polytf's test extra)")
STAGED = GpuRecipe(tile_sizes=(16, 32), thread_tile_sizes=(2, 4), reduction_tile_sizes=(8,), shared_memory=("A0", "A1"), point_order=("r0", "d0", "d1"))


@pytest.fixture(scope="module")
def targets():
    return {a: CudaTarget(compute_capability=a) for a in ARCHITECTURES}


@pytest.fixture(scope="module")
def matmul():
    return kernels_of(graph_matmul_bias_relu(m=37, k=45, n=70))[0]


@needs_ptxas
@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
def test_default_recipes_assemble_for_sm80_and_sm90_without_spills(targets, graph_name):
    for kernel in kernels_of(GRAPHS[graph_name]()):
        for architecture, target in targets.items():
            compiled = target.compile(kernel.scop, target.search_space(kernel.scop).default_recipe())
            report = assemble(compiled.ptx, architecture)
            assert report.registers and report.spill_bytes == 0, report.log
            assert f".target {architecture}" in compiled.ptx and f".entry {kernel.scop.name}" in compiled.ptx


@needs_ptxas
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_search_space_recipes_assemble(targets, data):
    graph_name = data.draw(st.sampled_from(sorted(GRAPHS)), label="graph")
    target = targets[data.draw(st.sampled_from(ARCHITECTURES), label="architecture")]
    for kernel in kernels_of(GRAPHS[graph_name]()):
        space = target.search_space(kernel.scop)
        recipe = space.recipe({name: data.draw(st.sampled_from(choices), label=name) for name, choices in space.dimensions})
        assert assemble(target.compile(kernel.scop, recipe).ptx, target.cpu_name).registers


def test_ptx_of_a_staged_matmul_uses_shared_memory_barriers_and_fma(targets, matmul):
    ptx = targets["sm_90"].compile(matmul.scop, STAGED).ptx
    assert ".version 7.8" in ptx and ".extern .shared" in ptx
    assert "bar.sync" in ptx and re.search(r"ld\.shared\.[bf]32", ptx) and re.search(r"st\.shared\.[bf]32", ptx)
    assert "fma.rn.f32" in ptx and "ld.global.nc" in ptx  # inputs read through the read-only cache (noalias)
    assert "%tid.x" in ptx and "%ctaid.y" in ptx
    assert ".version 7.0" in targets["sm_80"].compile(matmul.scop, STAGED).ptx


def test_accumulators_stay_in_registers_across_the_reduction_tiles(targets):
    # tiles that divide the extents: the point loops unroll, and the promoted accumulator
    # tile becomes registers; C is never read back from global memory (its zeros are
    # forwarded) and no stack frame is left
    kernel = kernels_of(graph_matmul_bias_relu(m=64, k=48, n=128))[0]
    ptx = targets["sm_90"].compile(kernel.scop, STAGED).ptx
    assert not re.search(r"ld\.global\.[bf]32", ptx) and ".local" not in ptx
    assert len(re.findall("fma.rn.f32", ptx)) >= 8  # the 2x4 register tile, unrolled
    # rows of 4-word multiples: each thread copies 128 bits at a time into shared memory, and
    # stores C's 4 consecutive points at once (kernel buffers are 16-byte aligned)
    assert "ld.global.nc.v4" in ptx and "st.shared.v4" in ptx and "st.global.v4" in ptx


def test_launch_of_the_compiled_kernel(targets, matmul):
    kernel = targets["sm_80"].compile(matmul.scop, STAGED)
    assert kernel.launch.grid == (3, 3, 1) and kernel.launch.block == (8, 8, 1)
    assert [a.name for a in kernel.arrays] == [a.name for a in matmul.scop.arrays]  # shared arrays are not arguments
    assert kernel.launch.shared_memory_bytes >= 4 * (16 * 8 + 8 * 32)


@pytest.mark.parametrize(
    "recipe",
    [
        STAGED,
        GpuRecipe(tile_sizes=(8, 8), thread_tile_sizes=(1, 1)),
        GpuRecipe(tile_sizes=(36, 0), thread_tile_sizes=(4, 35), reduction_tile_sizes=(16,), shared_memory=("A1",)),
        # extent 37 = 4 x 9 + 1: the last block holds one row, where isl drops the thread loop
        GpuRecipe(tile_sizes=(4, 8), thread_tile_sizes=(4, 4), reduction_tile_sizes=(32,), shared_memory=("A1", "A0")),
        GpuRecipe(tile_sizes=(36, 8), thread_tile_sizes=(1, 8), reduction_tile_sizes=(16,), shared_memory=("A0",)),
    ],
    ids=lambda r: r.describe(),
)
def test_gpu_code_on_cpu_threads_computes_the_reference(matmul, recipe):
    assert verify_on_threads(matmul, recipe) < 1e-4


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
def test_gpu_code_of_default_recipes_on_cpu_threads(graph_name):
    for kernel in kernels_of(GRAPHS[graph_name]()):
        verify_on_threads(kernel, GpuSearchSpace.for_scop(kernel.scop).default_recipe())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_gpu_code_of_search_space_recipes_on_cpu_threads(data):
    graph_name = data.draw(st.sampled_from(sorted(GRAPHS)), label="graph")
    for kernel in kernels_of(GRAPHS[graph_name]()):
        space = GpuSearchSpace.for_scop(kernel.scop, TargetLimits(max_threads_per_block=64))
        recipe = space.recipe({name: data.draw(st.sampled_from(choices), label=name) for name, choices in space.dimensions})
        verify_on_threads(kernel, recipe)


def test_compute_capability_is_checked_before_llvm_sees_it():
    assert ptx_compute_capability("sm_90") == "sm_90"
    assert ptx_compute_capability("sm_100") == "sm_90"  # PTX is compiled forward by the driver
    assert ptx_compute_capability("sm_90a") == "sm_90"
    with pytest.raises(CompileError, match="older than"):
        ptx_compute_capability("sm_60")
    with pytest.raises(CompileError, match="unknown compute capability"):
        CudaTarget(compute_capability="volta")


def test_a_cpu_recipe_is_refused_by_the_cuda_target(targets, matmul):
    with pytest.raises(CodegenError, match="needs a GPU recipe"):
        targets["sm_80"].compile(matmul.scop, CpuRecipe())


def test_fingerprint_names_the_compute_capability(targets):
    sm80, sm90 = (targets[a].fingerprint() for a in ARCHITECTURES)
    assert sm80 != sm90 and sm80["target"] == "cuda" and sm90["ptx"] == "sm_90+ptx78"


def test_a_launch_checks_every_buffer_before_the_device_is_touched(targets, matmul):
    kernel: CudaKernel = targets["sm_80"].compile(matmul.scop, STAGED)
    buffers = [np.zeros(a.shape, a.dtype) for a in kernel.arrays]
    with pytest.raises(ValueError, match="takes 4 arrays"):
        kernel(buffers[:3])
    buffers[0] = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match=r"A0 .* at least 6660 bytes"):
        kernel(buffers)
    backing = np.zeros(37 * 45 + 1, np.float32)
    buffers[0] = backing[1:].reshape(37, 45)  # 4 bytes past an aligned start
    with pytest.raises(ValueError, match="at a multiple of 16 bytes"):
        kernel(buffers)


@needs_ptxas
def test_ptxas_rejection_is_a_compile_error_with_its_message():
    with pytest.raises(CompileError, match="ptxas -arch=sm_80 rejected"):
        assemble(".version 7.0\n.target sm_80\n.address_size 64\nnot ptx\n", "sm_80")


@pytest.fixture(scope="module")
def batched_conv():
    return kernels_of(graph_conv_bias_relu(h=9, w=7, c=3, o=6, stride=1, batch=3))[0]


@pytest.mark.parametrize(
    "recipe",
    [
        # batch and rows folded into the grid's z, 2 x 3 of them per block
        GpuRecipe(tile_sizes=(2, 3, 4, 4), thread_tile_sizes=(0, 0, 2, 2), reduction_tile_sizes=(1, 0, 0), shared_memory=("A1",)),
        # zero-padding and im2col copies: launches of their own before the kernel's
        GpuRecipe(tile_sizes=(2, 3, 4, 4), thread_tile_sizes=(0, 0, 2, 2), reduction_tile_sizes=(1, 0, 0), shared_memory=("A1",), pad=True),
        GpuRecipe(tile_sizes=(1, 1, 0, 0), thread_tile_sizes=(0, 0, 1, 3), algorithm="im2col"),
    ],
    ids=lambda r: r.describe(),
)
def test_batched_convolution_on_cpu_threads_and_in_the_loop_form(batched_conv, recipe):
    assert verify_on_threads(batched_conv, recipe) < 1e-4
    result = roundtrip(batched_conv, recipe, threads=1)
    assert result.verdict == LEGAL and result.error is None


def test_copies_of_a_recipe_are_launches_of_their_own(targets, batched_conv):
    kernel = targets["sm_90"].compile(batched_conv.scop, GpuRecipe(tile_sizes=(1, 1, 0, 0), thread_tile_sizes=(0, 0, 1, 3), pad=True))
    names = [name for name, _ in kernel.launches]
    assert names == ["k0_conv_copy0", "k0_conv_copy1", "k0_conv"]  # the halo's zeros, the interior, the convolution
    assert all(f".entry {name}(" in kernel.ptx for name in names)
    assert kernel.launch.grid == (1, 1, 27)  # 3 images x 9 rows on z
    padded = [a for a in kernel.arrays if a.role == "scratch"]
    assert len(padded) == 1 and padded[0].shape == (3, 11, 9, 3)  # a global argument the runtime allocates


def test_a_padded_convolution_keeps_a_register_tile_without_guards(targets):
    kernel_ = kernels_of(graph_conv_bias_relu(h=16, w=16, c=8, o=64, stride=1))[0]
    space = targets["sm_90"].search_space(kernel_.scop)
    recipe = space.default_recipe()
    assert recipe.pad and recipe.point_order[0] in anchor_statement(kernel_.scop).reduction_iterators
    ptx = targets["sm_90"].compile(kernel_.scop, recipe).ptx
    main = ptx[ptx.index(".entry k0_conv(") :]
    assert ".local" not in main and main.count("fma.rn.f32") >= 16
