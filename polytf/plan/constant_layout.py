"""Data-layout copies of constants, run once when a model is built.

A kernel that packs a weight into register-tile panels (Goto & van de Geijn, TOMS 2008;
:mod:`polytf.schedules.data_layout`) would copy the same constant on every call. The
target leaves such copies out of the kernel (:attr:`CompiledKernel.constant_copies`);
this module runs them once with numpy and gives the packed arrays to the runtime, which
binds them as read-only arguments shared by every execution context. The copy statement
is evaluated exactly as generated code would: every point of its (box) domain writes
``P[write index] = A[read index]``, and the elements of ``P`` no point writes (the
padding of a last, partial panel) are zero, as in a freshly allocated scratch array.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polytf.errors import GraphError, ShapeError
from polytf.graph import Graph
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.passes.fusion import resolve_view
from polytf.plan.buffers import aligned_copy, aligned_empty
from polytf.poly.expression import Load
from polytf.poly.statement import Statement
from polytf.targets.target import CompiledKernel

__all__ = ["ModelConstants", "evaluate_copy", "packed_constants"]


class ModelConstants:
    """The read-only buffers of one model: the graph constants its kernels read, and the
    weights its kernels pack ahead of time, each 64-byte aligned and read-only, by key.

    A graph constant's key is its storage tensor (``"node:port"``); a packed weight's key is
    ``"<kernel>/<scratch array> (<tensor>)"``. :class:`~polytf.runtime.cpu.compiled_model.CompiledModel`
    binds them as shared arguments; ``polytf compile`` (:mod:`polytf.export`) writes them into
    the object's weights.

    Args:
        graph: the typed graph (its ``constants`` and ``types``).
        source: the model's file, for messages.

    Attributes:
        values: key -> array, in the order they were first asked for.
    """

    def __init__(self, graph: Graph, source: str) -> None:
        self.graph = graph
        self.source = source
        self.values: dict[str, np.ndarray] = {}

    def constant(self, storage: str) -> np.ndarray:
        """The buffer of graph constant ``storage`` (made on first use).

        Raises:
            GraphError: ``storage`` is no constant of the graph (a polytf bug).
        """
        if storage not in self.values:
            if storage not in self.graph.constants:
                raise GraphError(f"model {self.source}: tensor '{storage}' is neither computed nor a constant")
            value = aligned_copy(np.asarray(self.graph.constants[storage]), self.graph.types[storage].dtype)
            value.flags.writeable = False
            self.values[storage] = value
        return self.values[storage]

    def packed(self, lowered: LoweredKernel, kernel: CompiledKernel) -> dict[str, str]:
        """Run the kernel's constant copies (weights packed into panels) once, now; returns the
        key of each packed array, by scratch array name (the ``caller_constants`` of
        :func:`polytf.plan.binding_plan.plan_model`). ``kernel`` needs ``scop``, ``arrays``
        and ``constant_copies``.

        Raises:
            GraphError: a copy packs an array that holds no constant of the model.
        """
        if not kernel.constant_copies:
            return {}
        sources = {copy.value.access.array for copy in kernel.constant_copies}
        values = {}
        for name in sources:
            tensor = lowered.array_tensors.get(name)
            storage = resolve_view(self.graph, tensor) if tensor else None
            if storage is None or storage not in self.graph.constants:
                raise GraphError(f"kernel {kernel.scop.name} packs '{name}' ahead of time, but it holds no constant of model {self.source}")
            values[name] = self.constant(storage).reshape(lowered.scop.array(name).shape)
        keys = {}
        for name, packed in packed_constants(kernel, values).items():
            info = next(info for info in kernel.arrays if info.name == name)
            keys[name] = f"{kernel.scop.name}/{info.name} ({info.tensor})"
            self.values[keys[name]] = packed
        return keys


def evaluate_copy(copy: Statement, source: np.ndarray, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The array ``copy`` writes, from its source array's value.

    Args:
        copy: a data-layout copy statement ``P[index(i)] = A[index'(i)]`` over the box
            ``0 <= i < extents`` (no guards).
        source: the value of ``A``.
        shape, dtype: ``P``'s shape and dtype.

    Returns:
        A new, 64-byte aligned, read-only array of ``shape``, zero where no point writes.

    Raises:
        ShapeError: the statement is not a plain copy of one array over a box (a polytf bug).
    """
    if copy.constraints or not isinstance(copy.value, Load):
        raise ShapeError(f"copy statement {copy.name} of node '{copy.node}' is not a plain copy over a box; it cannot run ahead of time")
    # one open grid per iterator (np.ogrid): index expressions broadcast to the box
    grids = np.ogrid[tuple(slice(0, extent) for extent in copy.extents)] if copy.extents else []
    point = dict(zip(copy.iterators, grids))
    read = tuple(np.asarray(index.evaluate(point)) for index in copy.value.access.index)
    write = tuple(np.asarray(index.evaluate(point)) for index in copy.write.index)
    result = aligned_empty(shape, dtype)
    result[...] = 0
    result[write] = np.asarray(source, dtype=dtype).reshape(source.shape)[read]
    result.flags.writeable = False
    return result


def packed_constants(kernel: CompiledKernel, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Scratch array name -> its value, for each of ``kernel``'s constant copies.

    Args:
        kernel: a compiled kernel.
        values: Scop array name -> value of each constant array its copies read.

    Raises:
        ShapeError: a copy reads an array that ``values`` does not have (a polytf bug).
    """
    arrays = {info.name: info for info in kernel.arrays}
    result = {}
    for copy in kernel.constant_copies:
        source = copy.value.access.array
        if source not in values:
            raise ShapeError(f"kernel {kernel.scop.name}: the packing of '{source}' needs its constant value, which the model does not have")
        target = arrays[copy.write.array]
        result[target.name] = evaluate_copy(copy, values[source], tuple(target.shape), target.dtype)
    return result
