"""Data-layout copies of constants, run once when a model is built.

A kernel that packs a weight into register-tile panels (Goto & van de Geijn, TOMS 2008;
:mod:`polytf.schedules.data_layout`) would copy the same constant on every call. The
target leaves such copies out of the kernel (:attr:`CompiledKernel.constant_copies`);
this module runs them once with numpy and gives the packed arrays to the runtime, which
binds them as read-only arguments shared by every execution context. The copy statement
is evaluated exactly as generated code would: every point of its (box) domain writes
``P[write index] = A[read index]``, and the elements of ``P`` no point writes (the
padding of a last, partial panel) are zero, as in a freshly allocated scratch array.

A copy whose indices are affine in its iterators, or become affine once an iterator is split
into whole panels and the lanes of one (the floor division and remainder of a packed panel),
runs as one numpy assignment between two strided views per box of the split
(:func:`strided_pieces`), at the speed of a memory copy; any other copy runs through numpy's
integer-array indexing, with the same result.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided

from polytf.errors import GraphError, ShapeError
from polytf.graph import Graph
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.passes.fusion import resolve_view
from polytf.plan.buffers import aligned_copy, aligned_empty
from polytf.poly.affine import AffineExpr, DynamicIndex, FloorDiv, Modulo, index_affine
from polytf.poly.expression import Binary, Constant, Load
from polytf.poly.scop import ArrayInfo
from polytf.poly.statement import Statement
from polytf.targets.target import CompiledKernel

__all__ = ["DeferredPacking", "ModelConstants", "evaluate_copy", "evaluate_linear_transform", "packed_constants"]


class ModelConstants:
    """The read-only buffers of one model: the graph constants its kernels read, and the
    weights its kernels pack ahead of time, each 64-byte aligned and read-only, by key.

    A graph constant's key is its storage tensor (``"node:port"``); a packed weight's key is
    ``"<tensor> packed <digest>"``, the digest of the copies that write it with the arrays
    named by the constants they read (:func:`packed_key`): kernels that pack one weight the
    same way (the steps of an unrolled recurrent layer, the time steps of a
    ``TimeDistributed`` layer) share one packed copy, made once. :class:`~polytf.runtime.cpu.compiled_model.CompiledModel`
    binds them as shared arguments; ``polytf compile`` (:mod:`polytf.export`) writes them into
    the object's weights.

    Args:
        graph: the typed graph (its ``constants`` and ``types``).
        source: the model's file, for messages.
        defer_packing: :meth:`packed` gives the keys now and leaves the packing to
            :meth:`deferred_packing`, which holds the weights it reads but not the graph: a
            caller that drops the graph first never holds a weight and all of its packed copy
            at once (``polytf.load``: :meth:`CompiledModel.pack_constants
            <polytf.runtime.cpu.compiled_model.CompiledModel.pack_constants>`).

    Attributes:
        values: key -> array, in the order they were first asked for (without the deferred
            packings).
    """

    def __init__(self, graph: Graph, source: str, defer_packing: bool = False) -> None:
        self.graph = graph
        self.source = source
        self.values: dict[str, np.ndarray] = {}
        self.defer_packing = defer_packing
        self._deferred = DeferredPacking()
        #: the keys of the packed arrays made or deferred so far
        self._packed_keys: set[str] = set()

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

    def unpacked_value(self, storage: str) -> np.ndarray:
        """The value of graph constant ``storage`` for a copy to read: its buffer when a kernel
        reads it as it is, else the graph's own array (no aligned copy is kept for a weight
        that kernels read only packed)."""
        if storage in self.values:
            return self.values[storage]
        return np.asarray(self.graph.constants[storage], dtype=self.graph.types[storage].dtype)

    def packed(self, lowered: LoweredKernel, kernel: CompiledKernel) -> dict[str, str]:
        """Run the kernel's constant copies (weights packed into panels) once, now (with
        ``defer_packing``: record them for :meth:`deferred_packing`); returns the key of each
        packed array, by scratch array name (the ``caller_constants`` of
        :func:`polytf.plan.binding_plan.plan_model`). ``kernel`` needs ``scop``, ``arrays``
        and ``constant_copies``.

        Raises:
            GraphError: a copy packs an array that holds no constant of the model.
        """
        if not kernel.constant_copies:
            return {}
        sources = {access.array for copy in kernel.constant_copies for access in copy.reads}
        storages = {}
        for name in sources:
            tensor = lowered.array_tensors.get(name)
            storage = resolve_view(self.graph, tensor) if tensor else None
            if storage is None or storage not in self.graph.constants:
                raise GraphError(f"kernel {kernel.scop.name} packs '{name}' ahead of time, but it holds no constant of model {self.source}")
            storages[name] = storage
        arrays = {info.name: info for info in kernel.arrays}
        shapes = {name: tuple(lowered.scop.array(name).shape) for name in sources}
        writers: dict[str, list[Statement]] = {}
        for copy in kernel.constant_copies:
            writers.setdefault(copy.write.array, []).append(copy)
        keys = {name: packed_key(writers[name], arrays[name], storages, shapes) for name in sorted(writers)}
        fresh = {name: key for name, key in keys.items() if key not in self._packed_keys}
        self._packed_keys.update(fresh.values())
        read = {access.array for name in fresh for copy in writers[name] for access in copy.reads}
        if not fresh:
            return keys
        if self.defer_packing:
            for name in read:
                self._deferred.originals.setdefault(storages[name], self.unpacked_value(storages[name]))
            self._deferred.packings.append(_Packing(kernel, fresh, {name: (storages[name], shapes[name]) for name in read}))
            return keys
        values = {name: self.unpacked_value(storages[name]).reshape(shapes[name]) for name in read}
        for name, packed in packed_constants(kernel, values, only=fresh).items():
            self.values[fresh[name]] = packed
        return keys

    def deferred_packing(self) -> DeferredPacking:
        """The packings :meth:`packed` deferred (``defer_packing``), with the weights they read
        and no reference to the graph; this object defers no more afterwards."""
        deferred, self._deferred = self._deferred, DeferredPacking()
        self.defer_packing = False
        return deferred


def packed_key(copies: list[Statement], packed: ArrayInfo, storages: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]]) -> str:
    """The key of the array ``copies`` write (``packed``): ``"<tensor> packed <digest>"``, the
    digest of the copies' text with each array named by what it holds (the packed array, or
    the storage tensor and shape of a constant it reads), of the packed array's shape and
    dtype. Two kernels that pack one weight into the same layout get the same key, whatever
    their arrays and statements are named."""
    sources = sorted({access.array for copy in copies for access in copy.reads})
    names = {packed.name: "<packed>", **{source: f"<{storages[source]} {shapes[source]}>" for source in sources}}
    pattern = re.compile(r"\b(" + "|".join(re.escape(name) for name in names) + r")\[")
    texts = [pattern.sub(lambda match: names[match.group(1)] + "[", f"{copy.iterators} {copy.extents} {copy.constraints} {copy.write} = {copy.value}") for copy in copies]
    signature = repr((texts, tuple(packed.shape), str(packed.dtype)))
    return f"{'+'.join(storages[source] for source in sources)} packed {hashlib.sha256(signature.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class _Packing:
    """One kernel's constant copies, deferred: its packed arrays' keys by scratch array name,
    and the storage tensor and Scop shape of each constant array they read."""

    kernel: CompiledKernel
    keys: Mapping[str, str]
    sources: Mapping[str, tuple[str, tuple[int, ...]]]


@dataclass
class DeferredPacking:
    """Constant copies still to run (:class:`ModelConstants` with ``defer_packing``).

    Attributes:
        originals: storage tensor -> the graph's array, for the weights the packings read.
        packings: the kernels' packings, in the order the model's plan asked for them.
    """

    originals: dict[str, np.ndarray] = field(default_factory=dict)
    packings: list[_Packing] = field(default_factory=list)

    def expected(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Key -> ``(shape, dtype)`` of every array :meth:`run` gives, without running it."""
        result = {}
        for packing in self.packings:
            arrays = {info.name: info for info in packing.kernel.arrays}
            for name, key in packing.keys.items():
                result[key] = (tuple(arrays[name].shape), str(arrays[name].dtype))
        return result

    def run(self) -> dict[str, np.ndarray]:
        """Every packing, in order; returns key -> packed array. Each weight is let go (removed
        from :attr:`originals`) as soon as the last packing that reads it has run, so that,
        with the graph gone, at most one weight is held beside its packed copies.

        Raises:
            ShapeError: a copy reads an array it has no value for (a polytf bug).
        """
        readers: dict[str, int] = {}
        for packing in self.packings:
            for storage, _ in packing.sources.values():
                readers[storage] = readers.get(storage, 0) + 1
        result: dict[str, np.ndarray] = {}
        while self.packings:
            packing = self.packings.pop(0)
            values = {name: self.originals[storage].reshape(shape) for name, (storage, shape) in packing.sources.items()}
            for name, packed in packed_constants(packing.kernel, values, only=packing.keys).items():
                result[packing.keys[name]] = packed
            del values
            for storage, _ in packing.sources.values():
                readers[storage] -= 1
                if not readers[storage]:
                    del self.originals[storage]
        return result


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
    source = np.asarray(source, dtype=dtype).reshape(source.shape)
    result = aligned_empty(shape, dtype)
    pieces = strided_pieces(copy, source.shape, result.shape)
    if pieces is None:
        result[...] = 0
        _copy_by_indexing(copy, source, result)
    else:
        # the write map is injective: the copy covers all of P when it has as many points
        if math.prod(copy.extents) != result.size:
            result[...] = 0
        for piece in pieces:
            _view(result, piece.write, piece.extents)[...] = _view(source, piece.read, piece.extents)
    result.flags.writeable = False
    return result


def _copy_by_indexing(copy: Statement, source: np.ndarray, result: np.ndarray) -> None:
    """``result[write index(i)] = source[read index(i)]`` for every point ``i`` of the box,
    with numpy's integer-array indexing over one open grid per iterator (any index
    expressions; slow: an index array per dimension)."""
    grids = np.ogrid[tuple(slice(0, extent) for extent in copy.extents)] if copy.extents else []
    point = dict(zip(copy.iterators, grids))
    read = tuple(np.asarray(index.evaluate(point)) for index in copy.value.access.index)
    write = tuple(np.asarray(index.evaluate(point)) for index in copy.write.index)
    result[write] = source[read]


# -- strided copies --------------------------------------------------------------------------
# A copy whose indices are affine in its iterators reads and writes two strided views of the
# same shape: iterator k moves the address of P by sum(coefficient of k in dimension d *
# stride of d) bytes. A quasi-affine index floor(i / r) or i mod r (a packed panel) becomes
# affine once i is split into i = r*q + m (0 <= m < r): the box splits into the full panels
# and the last, partial one, two boxes over (q, m) where both indices are affine.


@dataclass(frozen=True)
class StridedPiece:
    """One box of a copy as two strided views: each side is ``(offsets, strides)``, the index
    of the box's first point in each dimension of the array and, per iterator of the box,
    how much each index grows with it (``strides[k][d]``)."""

    extents: tuple[int, ...]
    write: tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]
    read: tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]


def strided_pieces(copy: Statement, source_shape: tuple[int, ...], shape: tuple[int, ...]) -> list[StridedPiece] | None:
    """The boxes of strided views that together run ``copy`` (a plain copy over a box), or
    None when it is not one: an index that is neither affine nor a floor division or
    remainder that splitting an iterator makes affine, an index outside its array somewhere
    in the box (indexing wraps or raises there), a write map that cannot be shown to be
    injective (each element written once), an empty box."""
    extents = dict(zip(copy.iterators, copy.extents))
    indices = copy.write.index + copy.value.access.index
    if len(extents) != len(copy.iterators) or len(copy.write.index) != len(shape) or len(copy.value.access.index) != len(source_shape):
        return None
    if not all(copy.extents):
        return None  # nothing to copy
    if copy.iterators and not any(index.iterators for index in copy.write.index):
        return None  # one element written by every point: numpy's indexing says what happens
    # 1. the iterators to split, each by one divisor
    splits: dict[str, int] = {}
    for index in indices:
        if isinstance(index, DynamicIndex) or any(name not in extents for name in index.iterators):
            return None
        if isinstance(index, (FloorDiv, Modulo)):
            for name, coefficient in index.numerator.terms:
                if coefficient % index.divisor:
                    divisor = index.divisor // math.gcd(coefficient, index.divisor)
                    if splits.setdefault(name, divisor) != divisor:
                        return None
    # 2. every index as an affine expression over the split box (the box of the copy,
    # rounded up to whole panels): i -> r*(i//) + (i%), 0 <= i% < r
    box: dict[str, int] = {}
    substitutions: dict[str, AffineExpr] = {}
    for name, extent in extents.items():
        if name in splits:
            divisor = splits[name]
            box[name + "//"], box[name + "%"] = -(-extent // divisor), divisor
            substitutions[name] = AffineExpr.combine((divisor, name + "//"), (1, name + "%"))
        else:
            box[name] = extent
            substitutions[name] = AffineExpr.of(name)
    ranges = {name: (0, extent - 1) for name, extent in box.items()}
    affine = [index_affine(index, substitutions, lambda expr: expr.bounds(ranges)) for index in indices]
    if any(expr is None for expr in affine):
        return None
    write, read = affine[: len(shape)], affine[len(shape) :]
    iterators = tuple(box)
    if not _injective([[expr.coefficient(it) for expr in write] for it in iterators], shape, tuple(box.values())):
        return None
    # 3. the pieces: each split iterator runs over its whole panels, then its last, partial one
    choices = []
    for name, extent in extents.items():
        if name in splits:
            divisor = splits[name]
            full, last = divmod(extent, divisor)
            options = [((0, full), (0, divisor))] if full else []
            options += [((full, 1), (0, last))] if last else []
            choices.append(options)
        else:
            choices.append([((0, extent),)])
    pieces = []
    for choice in itertools.product(*choices):
        ranges = [part for parts in choice for part in parts]  # (start, count), in the order of `iterators`
        start = dict(zip(iterators, (s for s, _ in ranges)))
        counts = tuple(c for _, c in ranges)
        sides = []
        for exprs, bounds in ((write, shape), (read, source_shape)):
            offsets = tuple(expr.evaluate(start) for expr in exprs)
            strides = tuple(tuple(expr.coefficient(it) for expr in exprs) for it in iterators)
            for d, offset in enumerate(offsets):  # the lowest and highest index of each dimension
                low = offset + sum(min(0, strides[k][d] * (counts[k] - 1)) for k in range(len(counts)))
                high = offset + sum(max(0, strides[k][d] * (counts[k] - 1)) for k in range(len(counts)))
                if low < 0 or high >= bounds[d]:
                    return None
            sides.append((offsets, strides))
        pieces.append(StridedPiece(counts, sides[0], sides[1]))
    return pieces


def _injective(coefficients: list[list[int]], shape: tuple[int, ...], extents: tuple[int, ...]) -> bool:
    """Whether the affine map with ``coefficients[k][d]`` (iterator k, dimension d) takes
    distinct row-major offsets at the points of the box ``extents`` (a sufficient test: the
    offset strides, sorted by size, each exceed the span of the smaller ones together, as
    the digits of a mixed-radix number)."""
    row_major = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    strides = sorted((abs(sum(c * s for c, s in zip(row, row_major))), extent) for row, extent in zip(coefficients, extents) if extent > 1)
    span = 0
    for stride, extent in strides:
        if stride <= span:
            return False
        span += stride * (extent - 1)
    return True


def _view(array: np.ndarray, side: tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], extents: tuple[int, ...]) -> np.ndarray:
    """The strided view of ``array`` over a piece: element ``p`` of the view is
    ``array[offsets + sum(p[k] * strides[k])]`` (all of it inside ``array``:
    :func:`strided_pieces` checks the bounds)."""
    offsets, strides = side
    first = array[tuple(slice(offset, None) for offset in offsets) + (Ellipsis,)]
    byte_strides = tuple(sum(c * s for c, s in zip(row, array.strides)) for row in strides)
    return as_strided(first, shape=extents, strides=byte_strides, writeable=array.flags.writeable)


def packed_constants(kernel: CompiledKernel, values: Mapping[str, np.ndarray], only: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """Scratch array name -> its value, for each of ``kernel``'s constant copies.

    Args:
        kernel: a compiled kernel.
        values: Scop array name -> value of each constant array its copies read.
        only: the scratch arrays to make (default: all).

    Raises:
        ShapeError: a copy reads an array that ``values`` does not have (a polytf bug).
    """
    arrays = {info.name: info for info in kernel.arrays}
    result = {}
    writers: dict[str, list[Statement]] = {}
    for copy in kernel.constant_copies:
        if only is not None and copy.write.array not in only:
            continue
        for source in {access.array for access in copy.reads}:
            if source not in values:
                raise ShapeError(f"kernel {kernel.scop.name}: the packing of '{source}' needs its constant value, which the model does not have")
        writers.setdefault(copy.write.array, []).append(copy)
    for name, statements in writers.items():
        target = arrays[name]
        if len(statements) == 1 and isinstance(statements[0].value, Load):  # a plain copy (packing)
            result[name] = evaluate_copy(statements[0], values[statements[0].value.access.array], tuple(target.shape), target.dtype)
        else:  # several statements together (a Winograd filter transform)
            result[name] = evaluate_linear_transform(statements, values, tuple(target.shape), target.dtype)
    return result


def evaluate_linear_transform(statements: list[Statement], values: Mapping[str, np.ndarray], shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The array that ``statements`` write together, each a linear combination of constant
    arrays' elements over a box: ``U[index(i)] = Σ coefficient · A[index'(i)]`` (a Winograd
    filter transform ``G g Gᵀ``, one statement per transformed point,
    :mod:`polytf.schedules.winograd`). Computed in float64 and rounded once to ``dtype``.

    Args:
        statements: the statements that write the array, without guards; their values are
            built of loads, constants and ``add``, ``sub`` and ``mul``.
        values: Scop array name -> value of each array they read.
        shape, dtype: the written array's.

    Returns:
        A new, 64-byte aligned, read-only array of ``shape``, zero where no statement writes.

    Raises:
        ShapeError: a statement has guards or another operation (a polytf bug).
    """
    result64 = np.zeros(shape, np.float64)
    values = {access.array: np.asarray(values[access.array], np.float64) for statement in statements for access in statement.reads}
    for statement in statements:
        if statement.constraints:
            raise ShapeError(f"statement {statement.name} of node '{statement.node}' has guards; it cannot run ahead of time")
        grids = np.ogrid[tuple(slice(0, extent) for extent in statement.extents)] if statement.extents else []
        point = dict(zip(statement.iterators, grids))
        write = tuple(np.asarray(index.evaluate(point)) for index in statement.write.index)
        result64[write] = _linear_value(statement, statement.value, values, point)
    result = aligned_empty(shape, dtype)
    result[...] = result64
    result.flags.writeable = False
    return result


def _linear_value(statement: Statement, expr, values: Mapping[str, np.ndarray], point: dict) -> np.ndarray:
    if isinstance(expr, Load):
        index = tuple(np.asarray(i.evaluate(point)) for i in expr.access.index)
        return values[expr.access.array][index]
    if isinstance(expr, Constant):
        return np.float64(expr.value)
    if isinstance(expr, Binary) and expr.op in ("add", "sub", "mul"):
        operation = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[expr.op]
        return operation(_linear_value(statement, expr.lhs, values, point), _linear_value(statement, expr.rhs, values, point))
    raise ShapeError(f"statement {statement.name} of node '{statement.node}' computes {expr}, not a linear combination; it cannot run ahead of time")
