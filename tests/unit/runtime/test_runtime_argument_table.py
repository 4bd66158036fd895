"""The bounds check before native calls: ArgumentTable.bind refuses buffers the kernel's
access relations do not fit, and access_bounds rejects Scops whose accesses leave their
arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import graph_matmul_bias_relu, kernels_of

from polytf.errors import PolyhedralError, ShapeError
from polytf.poly.access_bounds import required_bytes
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.runtime.cpu.argument_table import ArgumentTable
from polytf.schedules.recipe import CpuRecipe
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()


@pytest.fixture(scope="module")
def packed_kernel():
    (kernel,) = kernels_of(graph_matmul_bias_relu(m=8, k=13, n=16))
    return kernel, TARGET.compile(kernel.scop, CpuRecipe(tile_sizes=(4, 16), register_tile_sizes=(4, 8), pack=("A1",)))


def test_every_slot_is_checked_before_the_kernel_runs(packed_kernel):
    kernel, compiled = packed_kernel
    assert len(compiled.arrays) == len(kernel.scop.arrays) + 1  # the packed panel of B is an argument
    table = ArgumentTable(compiled)
    x = np.ones((8, 13), np.float32)
    table.bind(table.slot("A0"), x)
    with pytest.raises(ShapeError, match="holds 400 bytes, the kernel's accesses need 416"):
        table.bind(table.slot("A0"), np.ones((100,), np.float32))
    with pytest.raises(ShapeError, match="dtype float64"):
        table.bind(table.slot("A0"), np.ones((8, 13), np.float64))
    with pytest.raises(ShapeError, match="C-contiguous"):
        table.bind(table.slot("A0"), np.ones((13, 8), np.float32).T)
    with pytest.raises(ShapeError, match="are not bound"):
        table.run(1)
    for info in kernel.scop.arrays:
        if info.name != "A0":
            table.bind(table.slot(info.name), np.zeros(info.shape, np.float32))
    with pytest.raises(ShapeError, match="P0"):
        table.run(1)  # the scratch panel is still unbound
    table.allocate_scratch()
    table.run(1)
    w = np.zeros((13, 16), np.float32)
    np.testing.assert_array_equal(table.array(table.slot("A1")), w)


def test_a_table_of_the_wrong_length_is_refused(packed_kernel):
    import ctypes

    kernel, compiled = packed_kernel
    short = len(kernel.scop.arrays)  # the kernel's own arrays, without the scratch panel
    with pytest.raises(ValueError, match=f"takes {short + 1} arrays, the table has {short}"):
        compiled((ctypes.c_void_p * short)(), 1)


def test_required_bytes_follow_the_arrays_and_out_of_bounds_accesses_are_reported():
    read = Access("A", (AffineExpr.of("d0"),))
    inside = Scop("copy", (Statement("S0", ("d0",), (4,), Access.of("B", "d0"), Load(read)),), (ArrayInfo("A", (4,), "float32", "input"), ArrayInfo("B", (4,), "float32", "output")))
    assert required_bytes(inside) == (16, 16)
    shifted = Access("A", (AffineExpr.combine((1, "d0"), constant=1),))
    outside = Scop("shift", (Statement("S0", ("d0",), (4,), Access.of("B", "d0"), Load(shifted)),), inside.arrays)
    with pytest.raises(PolyhedralError, match=r"outside A\[4\], e.g. at .*4"):
        required_bytes(outside)
