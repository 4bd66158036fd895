"""A kernel's slices entry (``<kernel>_slices``, :mod:`polytf.targets.llvm_codegen`) runs the
kernel compiled at batch 1 on the slices of a batch and gives what the kernel compiled at
that batch gives, in each of its ways of running: one run after another (one thread), a
block of runs per thread, each on its own copy of the scratch arrays the runs write, and
(fewer runs than threads, a kernel with a parallel loop) every thread in every run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hand_built_graphs import graph_conv_bias_relu, graph_softmax, kernels_of

from polytf.poly.sample_slicing import sample_slicing
from polytf.runtime.cpu.argument_table import ArgumentTable
from polytf.runtime.cpu.sliced_kernel import sliced_kernel
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()


def _run(kernel, inputs: dict[str, np.ndarray], threads: int, calls: int = 1) -> dict[str, np.ndarray]:
    """The outputs of the last of ``calls`` calls on one table (later calls find the scratch
    arrays as the one before left them)."""
    table = ArgumentTable(kernel)
    for name, value in inputs.items():
        table.bind(table.slot(name), value)
    table.allocate_unbound()
    for _ in range(calls):
        table.run(threads)
    return {info.name: table.array(slot).copy() for slot, info in enumerate(kernel.arrays) if info.role == "output"}


def _inputs(scop, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {info.name: rng.standard_normal(info.shape).astype(info.dtype) for info in scop.arrays if info.role == "input"}


def _conv(batch: int):
    return kernels_of(graph_conv_bias_relu(h=8, w=6, c=3, o=10, stride=1, padding="SAME", batch=batch))[0].scop


def _softmax(batch: int):
    return kernels_of(graph_softmax(rows=batch, columns=33))[0].scop


def _workers(kernel) -> set[str]:
    """The parallel regions of the kernel's slices entry, read off its optimised IR."""
    return {mode for mode in ("blocks", "together") if f"@{kernel.symbol}_slices_{mode}(" in kernel.llvm_ir}


@pytest.mark.parametrize(
    ("batch", "threads"),
    [(5, 1), (5, 2), (3, 4)],  # one thread; a block of runs per thread; fewer runs than threads
)
@pytest.mark.parametrize(
    ("build", "changes"),
    [
        (_conv, {"parallel": True, "pad": True}),  # the zero-padded copy: a scratch array each thread has its own of
        (_conv, {"parallel": True, "pad": False, "pack": ()}),
        (_conv, {"parallel": False, "pad": True}),
        (_softmax, {"parallel": False}),
    ],
)
def test_the_slices_entry_matches_the_kernel_compiled_at_the_batch(build, changes, batch, threads):
    base_scop, batch_scop = build(1), build(batch)
    recipe = dataclasses.replace(TARGET.search_space(base_scop, threads).default_recipe(), **changes)
    base = TARGET.compile(base_scop, recipe)
    assert TARGET.slices_function(base.owner, base.symbol) is not None
    assert _workers(base) == ({"blocks", "together"} if changes["parallel"] else {"blocks"})
    slicing = sample_slicing(batch_scop, base_scop)
    assert slicing is not None and slicing.count == batch
    sliced = sliced_kernel(base, batch_scop, slicing, threads)
    static = TARGET.compile(batch_scop, TARGET.search_space(batch_scop, threads).default_recipe())
    inputs = _inputs(batch_scop, 3)
    expected = _run(static, inputs, threads)
    for name, value in _run(sliced, inputs, threads, calls=2).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-5)
