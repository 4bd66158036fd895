"""Compile a small graph's kernels with the default recipe and every heuristic recipe of
the search space, and verify each against the numpy reference."""

from __future__ import annotations

import numpy as np
from hand_built_graphs import kernels_of

from polytf.config import MeasurementConfig
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.search_space import SearchSpace
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)
THREADS = 2


def positive_inputs(*tensors):
    """An ``inputs`` hook for :func:`verify_all_recipes`: the kernel inputs holding ``tensors``
    get absolute values plus 0.1 (e.g. a batch norm's variance, which the bench's standard
    normal draws would make negative)."""

    def adjust(kernel, bench):
        for info in kernel.input_arrays:
            if info.tensor in tensors:
                value = np.abs(bench.inputs[info.name]) + np.float32(0.1)
                bench.inputs[info.name] = value
                bench.arrays[bench.index[info.name]][...] = value
        bench.expected = kernel.reference(bench.inputs)

    return adjust


def verify_all_recipes(monkeypatch, graph, *, skip=lambda recipe: False, inputs=None):
    """Lower ``graph``, then compile and verify every kernel under the default recipe and
    each heuristic recipe of ``SearchSpace.for_scop(scop, 2)``; ``inputs(kernel, bench)``
    may adjust the bench's random inputs first.

    Returns:
        the lowered kernels and the ``(kernel name, recipe, error)`` failures.
    """
    kernels = kernels_of(graph)
    failures = []
    for kernel in kernels:
        space = SearchSpace.for_scop(kernel.scop, THREADS)
        for recipe in dict.fromkeys([space.default_recipe(), *space.heuristic_recipes()]):
            if skip(recipe):
                continue
            try:
                compiled = TARGET.compile(kernel.scop, recipe)
                bench = KernelBench(kernel, seed=1)
                if inputs is not None:
                    inputs(kernel, bench)
                error, _ = bench.verify(compiled, THREADS, CHECK)
            except Exception as problem:  # noqa: BLE001 - a failure is reported with its recipe
                error = f"{type(problem).__name__}: {problem}"
            if error is not None:
                failures.append((kernel.scop.name, recipe.to_json(), error))
    return kernels, failures
