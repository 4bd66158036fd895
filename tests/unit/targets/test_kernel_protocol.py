"""Every target's compiled kernel is a :class:`~polytf.targets.kernel.Kernel`: what whoever
runs, measures or exports it reads, the same on the CPU and the GPU."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from polytf.poly.scop import Scop
from polytf.schedules.recipe import CpuRecipe, GpuRecipe
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import CudaKernel, CudaTarget
from polytf.targets.kernel import Kernel
from polytf.targets.target import CompiledKernel

CPU = CpuTarget()
#: the CUDA target without a device: PTX for sm_80
CUDA = CudaTarget(compute_capability="sm_80")


@pytest.mark.parametrize(
    ("target", "recipe", "kind"),
    [
        (CPU, CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(7, 16), pack=("A1",)), CompiledKernel),
        (CUDA, GpuRecipe(tile_sizes=(0, 8), thread_tile_sizes=(1, 1)), CudaKernel),
    ],
    ids=["cpu", "cuda"],
)
def test_both_targets_compile_to_a_kernel(small_kernels, target, recipe, kind):
    (lowered,) = small_kernels("matmul_bias_relu")
    kernel = target.compile(lowered.scop, recipe)
    assert isinstance(kernel, kind) and isinstance(kernel, Kernel)
    assert kernel.scop is lowered.scop and kernel.recipe == recipe and "define" in kernel.llvm_ir
    assert len(kernel.arrays) == len(kernel.argument_bytes) and kernel.arrays[: len(lowered.scop.arrays)] == tuple(lowered.scop.arrays)
    assert kernel.scratch_arrays == kernel.arrays[len(lowered.scop.arrays) :]
    assert all(info.role == "scratch" for info in kernel.scratch_arrays)
    assert kernel.constant_copies == ()  # no weights were named: nothing left to the caller


def test_the_cpu_kernels_scratch_arrays_are_its_packed_panels(small_kernels):
    (lowered,) = small_kernels("matmul_bias_relu")
    kernel = CPU.compile(lowered.scop, CpuRecipe(tile_sizes=(7, 16), register_tile_sizes=(7, 16), pack=("A1",)))
    assert [info.tensor for info in kernel.scratch_arrays] == [f"{lowered.scop.array('A1').tensor} (packed)"]


def test_an_object_without_a_kernels_attributes_is_not_a_kernel():
    @dataclass
    class NoCode:  # a kernel's data, but no code text
        scop: Scop
        recipe: CpuRecipe
        arrays: tuple = ()
        argument_bytes: tuple = ()

    assert not isinstance(NoCode(Scop("k", (), ()), CpuRecipe()), Kernel)
