"""In-place concatenation and padding: a tensor written straight into the slab of the buffer
that a ConcatV2 or a Pad would copy it into.

A ConcatV2 lowers to one copy statement per input, a Pad to a halo statement and one
interior copy (:mod:`polytf.ops.concat`, :mod:`polytf.ops.pad`)::

    S_k[d]: Y[d] = X_k[d - o_k]    on  o_k <= d < o_k + shape(X_k)     (a box slab of Y)

DenseNet concatenates the growing feature map at every layer, so these copies move
``O(layers^2)`` bytes per block; MobileNetV2 pads before every stride-2 depthwise layer.
As XLA and TVM do for concatenation (the producers of the operands write their results
into the concatenation's buffer, TVM's "inline concatenate" / XLA's
``CanShareOperandBufferWithUser`` buffer sharing), polytf stores ``X_k`` *inside* ``Y``:
``X_k`` lives at offset ``o_k`` of ``Y``'s buffer, every access of ``X_k`` in every kernel
becomes an access of ``Y`` shifted by ``o_k``, and the copy ``S_k`` becomes
``Y[d] = Y[d]``, which is dropped. In a kernel whose only array of that buffer is ``X_k``'s,
the array becomes instead a *window* of the buffer that begins at ``o_k``: ``Y``'s shape
(its strides), the accesses unshifted, the offset in the binding
(:attr:`LoweredKernel.array_origins <polytf.lowering.lowered_kernel.LoweredKernel.array_origins>`),
so that the producers of a concatenation's pieces are one kernel, compiled once
(:func:`_windows`). A concatenation of concatenations (DenseNet) places every piece in the
outermost buffer (offsets add up); a kernel left with no statement disappears. A Pad keeps only its halo statement (zeros written once per call; the interior
is its producer's output).

A tensor ``X`` is placed in ``Y`` only when:

* a kernel produces ``X`` and ``Y`` (not a placeholder, constant or host step, and neither
  is a model output, which the caller's fresh arrays hold);
* every kernel array holding ``X`` has ``X``'s shape and reads or writes it at affine
  indices (no reshaped view, no run-time gather);
* ``X`` is copied into one slab only (the first copy wins);
* no kernel would then read elements of ``Y`` that it also writes without having written
  them itself: every read of a rewritten kernel's output array lies inside its writes
  (checked with isl on the access relations; a kernel such as ``Y[slab 1] = f(Y[slab 0])``
  keeps its copies, so that a kernel's outputs never depend on their own previous values).

The rewrite is a pure function of the lowered kernels: ``polytf tune`` and ``polytf.load``
make the same one, and the rewritten Scops (other shapes, shifted accesses) have their own
fingerprints and tuning records. Each rewritten kernel's numpy reference wraps the original
one: inputs are cut out of the bigger buffer, outputs placed into it, and the elements the
kernel no longer writes are NaN in the expected value, as they stay NaN in the verified run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from polytf.graph import FusionGroup, Graph
from polytf.islpy_on_demand import isl
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.ops import lookup
from polytf.passes.fusion import resolve_view
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Expr, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement

__all__ = ["Placement", "find_placements", "place_in_consumer_buffers"]


@dataclass(frozen=True)
class Placement:
    """Tensor ``tensor`` lives in ``buffer``'s storage at ``offset`` (a box of its shape).

    Attributes:
        tensor: storage tensor placed (``"node:port"``).
        buffer: storage tensor whose buffer holds it (the outermost one of a chain).
        offset: per dimension of ``buffer``, the index of ``tensor``'s first element.
    """

    tensor: str
    buffer: str
    offset: tuple[int, ...]


@dataclass(frozen=True)
class _Copy:
    """A copy statement ``buffer[d] = source[d - offset]`` over exactly the slab of ``source``."""

    kernel: int
    statement: str
    source: str  # storage tensor read
    buffer: str  # storage tensor written
    offset: tuple[int, ...]


def _storage(graph: Graph, kernel: LoweredKernel, array: str) -> str | None:
    tensor = kernel.array_tensors.get(array)
    return resolve_view(graph, tensor) if tensor else None


def _slab_copy(statement: Statement, source: ArrayInfo, written: ArrayInfo) -> tuple[int, ...] | None:
    """The offset ``o`` when ``statement`` is ``W[d] = S[d - o]`` over exactly ``o <= d < o + shape(S)``
    (W of the statement's extents, S of W's rank), else None."""
    if statement.reduction_iterators or not isinstance(statement.value, Load):
        return None
    iterators = statement.iterators
    if tuple(statement.extents) != tuple(written.shape) or len(source.shape) != len(iterators):
        return None
    if statement.write.index != tuple(AffineExpr.of(it) for it in iterators):
        return None
    offset = []
    for index, iterator in zip(statement.value.access.index, iterators):
        if not isinstance(index, AffineExpr) or index.terms != ((iterator, 1),):
            return None
        offset.append(-index.constant)
    if any(o < 0 or o + size > extent for o, size, extent in zip(offset, source.shape, written.shape)):
        return None
    box = " and ".join(f"{o} <= {it} < {o + size}" for it, o, size in zip(iterators, offset, source.shape))
    slab = isl.Set(f"{{ {statement.name}[{', '.join(iterators)}] : {box} }}")
    return tuple(offset) if statement.domain().is_equal(slab) else None


def _copies(graph: Graph, kernels: tuple[LoweredKernel, ...]) -> list[_Copy]:
    """Every slab copy that writes an output array, by a statement of an op whose operands are
    in-place-placeable (``OpDefinition.slab_copy``: ConcatV2, Concat, Pad, PadV2)."""
    found = []
    for position, kernel in enumerate(kernels):
        scop = kernel.scop
        for statement in scop.statements:
            definition = lookup(statement.op)
            if definition is None or not definition.slab_copy or not isinstance(statement.value, Load):
                continue
            written = scop.array(statement.write.array)
            source = scop.array(statement.value.access.array)
            if written.role != "output" or source.role != "input" or written.dtype != source.dtype:
                continue
            offset = _slab_copy(statement, source, written)
            buffer, tensor = _storage(graph, kernel, written.name), _storage(graph, kernel, source.name)
            if offset is not None and buffer and tensor and buffer != tensor:
                found.append(_Copy(position, statement.name, tensor, buffer, offset))
    return found


def _eligible_tensors(graph: Graph, kernels: tuple[LoweredKernel, ...], host_inputs: frozenset[str]) -> set[str]:
    """Storage tensors a kernel produces, that no host step reads, that are no model output,
    and that every kernel accesses with their own shape at affine indices."""
    outputs = {resolve_view(graph, t) for t in graph.outputs}
    produced: set[str] = set()
    refused: set[str] = set(outputs) | set(host_inputs)
    for kernel in kernels:
        scop = kernel.scop
        quasi_affine = {a.array for s in scop.statements for a in (s.write, *s.reads) if not all(isinstance(i, AffineExpr) for i in a.index)}
        for info in scop.arrays:
            storage = _storage(graph, kernel, info.name)
            if storage is None:
                continue
            if info.role == "output":
                produced.add(storage)
            if tuple(info.shape) != tuple(graph.types[storage].shape) or info.name in quasi_affine:
                refused.add(storage)
    return produced - refused


def find_placements(graph: Graph, kernels: tuple[LoweredKernel, ...], host_inputs: Iterable[str] = ()) -> dict[str, Placement]:
    """Which tensors can live inside the buffer they are concatenated or padded into (see the
    module), before the check that no kernel reads what it writes; storage tensor -> placement."""
    eligible = _eligible_tensors(graph, kernels, frozenset(resolve_view(graph, t) for t in host_inputs))
    direct: dict[str, tuple[str, tuple[int, ...]]] = {}
    for copy in _copies(graph, kernels):
        if copy.source in eligible and copy.buffer in eligible and copy.source not in direct:
            direct[copy.source] = (copy.buffer, copy.offset)
    placements = {}
    for tensor in direct:
        buffer, offset, seen = tensor, [0] * len(graph.types[tensor].shape), {tensor}
        while buffer in direct:
            buffer, step = direct[buffer]
            if buffer in seen:  # a cycle cannot come from a DAG; refuse rather than loop
                break
            seen.add(buffer)
            offset = [a + b for a, b in zip(offset, step)] if len(step) == len(offset) else None
            if offset is None:
                break
        else:
            placements[tensor] = Placement(tensor, buffer, tuple(offset))
    return placements


def place_in_consumer_buffers(
    graph: Graph, groups: tuple[FusionGroup, ...], kernels: tuple[LoweredKernel, ...]
) -> tuple[tuple[FusionGroup, ...], tuple[LoweredKernel, ...]]:
    """The kernels with every placeable tensor written and read inside its consumer's buffer
    (see the module); kernels left without a statement are dropped, with their groups.

    Args:
        graph: the typed graph the kernels were lowered from.
        groups: every fusion group, execution order (host groups included: the tensors they
            read keep buffers of their own).
        kernels: the lowered kernels of the compiled groups, same order.

    Returns:
        ``(groups, kernels)`` (the arguments themselves when nothing is placed).
    """
    host_inputs = [tensor for group in groups if group.on_host for tensor in group.inputs]
    placements = find_placements(graph, kernels, host_inputs)
    while placements:
        rewritten = [_rewrite(graph, kernel, placements) for kernel in kernels]
        buffers = {p.buffer for p in placements.values()}
        conflicts = {
            buffer
            for old, kernel in zip(kernels, rewritten)
            if kernel is not None and kernel is not old
            for buffer in _self_reads(graph, kernel, buffers)
        }
        if not conflicts:
            kept = {id(kernel.group) for kernel in rewritten if kernel is not None}
            return (
                tuple(group for group in groups if group.on_host or id(group) in kept),
                tuple(kernel for kernel in rewritten if kernel is not None),
            )
        placements = {t: p for t, p in placements.items() if p.buffer not in conflicts}
    return groups, kernels


def _self_reads(graph: Graph, kernel: LoweredKernel, buffers: set[str]) -> set[str]:
    """The ``buffers`` the kernel writes and also reads outside the elements it writes."""
    scop = kernel.scop
    result = set()
    for info in scop.arrays:
        if info.role != "output" or _storage(graph, kernel, info.name) not in buffers:
            continue
        reads = [s.access_map(a).range() for s in scop.statements for a in s.reads if a.array == info.name]
        if not reads:
            continue
        writes = [s.access_map(s.write).range() for s in scop.statements if s.write.array == info.name]
        read, written = reads[0], writes[0]
        for part in reads[1:]:
            read = read.union(part)
        for part in writes[1:]:
            written = written.union(part)
        if not read.is_subset(written):
            result.add(_storage(graph, kernel, info.name))
    return result


def _shifted(access: Access, array: str, offset: tuple[int, ...]) -> Access:
    return Access(array, tuple(AffineExpr.of(index) + o for index, o in zip(access.index, offset)))


def _rewrite_expr(expr: Expr, moves: Mapping[str, tuple[str, tuple[int, ...]]]) -> Expr:
    if isinstance(expr, Load):
        move = moves.get(expr.access.array)
        return Load(_shifted(expr.access, *move)) if move else expr
    return expr.map_children(lambda child: _rewrite_expr(child, moves))


def _rewrite(graph: Graph, kernel: LoweredKernel, placements: Mapping[str, Placement]) -> LoweredKernel | None:
    """``kernel`` with its placed arrays moved into their buffers (None: no statement is left)."""
    scop = kernel.scop
    storages = {info.name: _storage(graph, kernel, info.name) for info in scop.arrays}
    moved = {name: placements[s] for name, s in storages.items() if s in placements}
    if not moved:
        return kernel
    # one array per buffer: the kernel's own array of that buffer, else the first array moved into it
    buffer_array = {s: name for name, s in storages.items() if s and s not in placements}
    moves: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, placement in moved.items():
        target = buffer_array.setdefault(placement.buffer, name)
        moves[name] = (target, placement.offset)
    origins = _windows(graph, scop, moved, moves)
    for name in origins:
        moves[name] = (name, (0,) * len(moved[name].offset))
    statements = []
    removed: list[tuple[str, tuple[slice, ...]]] = []  # (array, slab) of each dropped copy
    for statement in scop.statements:
        write = _shifted(statement.write, *moves[statement.write.array]) if statement.write.array in moves else statement.write
        value = _rewrite_expr(statement.value, moves)
        if isinstance(value, Load) and value.access == write and not statement.reduction_iterators:
            source = scop.array(statement.value.access.array)
            offset = moves[source.name][1]
            removed.append((write.array, tuple(slice(o, o + n) for o, n in zip(offset, source.shape))))
            continue  # Y[d] = Y[d]: the producer already wrote it there
        statements.append(replace(statement, write=write, value=value))
    if not statements:
        return None
    written = {s.write.array for s in statements}
    read = {a.array for s in statements for a in s.reads}
    arrays = []
    array_tensors = {}
    for info in scop.arrays:
        if info.name in moves and moves[info.name][0] != info.name:
            continue  # merged into its buffer's array
        if info.name not in written and info.name not in read:
            continue  # only the dropped copies used it
        if info.name in moves:
            buffer = moved[info.name].buffer
            info = replace(info, shape=tuple(graph.types[buffer].shape), tensor=buffer)
            array_tensors[info.name] = buffer
        else:
            array_tensors[info.name] = kernel.array_tensors.get(info.name)
        if info.role != "temporary":
            info = replace(info, role="output" if info.name in written else "input")
        arrays.append(info)
    new_scop = Scop(scop.name, tuple(statements), tuple(arrays), scop.ops)
    reference = _PlacedReference(kernel.reference, scop, new_scop, moves, removed)
    return replace(kernel, scop=new_scop, array_tensors=array_tensors, reference=reference, array_origins={**kernel.array_origins, **origins})


def _windows(graph: Graph, scop: Scop, moved: Mapping[str, Placement], moves: Mapping[str, tuple[str, tuple[int, ...]]]) -> dict[str, int]:
    """The moved arrays that become windows of their buffers: array name -> the element of the
    buffer where the window begins (row-major, the buffer's shape).

    An array is a window when it is the kernel's only array of its buffer (no other array of
    the kernel moved there, and the kernel does not hold the buffer's own tensor) and holds
    floating-point values (an integer array may be a gather's indices, which are checked
    against the array's whole shape). Its accesses then keep their indices, and its argument
    starts at the window (:class:`~polytf.plan.bindings.SlotBinding`), so that the kernels
    that write a tensor into different slabs of buffers of one shape are one computation:
    DenseNet121's 58 3×3 convolutions, each writing its 32 channels at another offset of
    its block's concatenation, had 58 fingerprints and have 8 (the model's distinct kernels:
    187 -> 137).
    """
    sharing: dict[str, list[str]] = {}
    for name, (target, _) in moves.items():
        sharing.setdefault(target, []).append(name)
    origins = {}
    for name, placement in moved.items():
        if sharing.get(name) != [name] or np.dtype(scop.array(name).dtype).kind != "f":
            continue
        strides = np.cumprod((1, *tuple(graph.types[placement.buffer].shape)[:0:-1]))[::-1]
        origin = int(sum(int(offset) * int(stride) for offset, stride in zip(placement.offset, strides)))
        if origin:
            origins[name] = origin
    return origins


class _PlacedReference:
    """The numpy reference of a rewritten kernel, from the original one (see the module)."""

    def __init__(self, original, old: Scop, new: Scop, moves: Mapping[str, tuple[str, tuple[int, ...]]], removed) -> None:
        self.original = original
        self.old_inputs = [(info.name, info.shape, info.dtype) for info in old.arrays if info.role == "input"]
        self.old_outputs = [info for info in old.arrays if info.role == "output"]
        self.new_outputs = [info for info in new.arrays if info.role == "output"]
        self.moves = dict(moves)
        self.removed = list(removed)

    def _slab(self, name: str, shape) -> tuple[str, tuple[slice, ...]]:
        if name in self.moves:
            target, offset = self.moves[name]
            return target, tuple(slice(o, o + n) for o, n in zip(offset, shape))
        return name, tuple(slice(None) for _ in shape)

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        old_inputs = {}
        for name, shape, dtype in self.old_inputs:
            source, slab = self._slab(name, shape)
            if source in inputs:
                old_inputs[name] = np.ascontiguousarray(np.asarray(inputs[source])[slab])
            else:  # moved into a buffer the kernel only writes: only dropped copies read it
                old_inputs[name] = np.zeros(shape, dtype)
        old_outputs = self.original(old_inputs)
        result = {}
        for info in self.new_outputs:
            array = np.full(info.shape, np.nan, dtype=info.dtype) if np.dtype(info.dtype).kind == "f" else np.zeros(info.shape, info.dtype)
            for old in self.old_outputs:
                target, slab = self._slab(old.name, old.shape)
                if target == info.name:
                    array[slab] = old_outputs[old.name]
            for name, slab in self.removed:  # elements only a dropped copy wrote: never written now
                if name == info.name and array.dtype.kind == "f":
                    array[slab] = np.nan
            result[info.name] = array
        return result
