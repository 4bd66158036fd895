"""Where every buffer of an exported model lives: the caller's arrays, the weights, the workspace.

A model exported by ``polytf compile`` runs its kernels in order, as
:class:`~polytf.runtime.cpu.compiled_model.CompiledModel` does, from one C function. The binding
plan (:func:`polytf.plan.binding_plan.plan_model`) says where each kernel argument comes
from; here each kind becomes an address the entry function can compute:

======================  =========================================================================
binding                 address in the exported code
======================  =========================================================================
INPUT                   the caller's input pointer (``const float *input``)
OUTPUT                  the caller's output pointer (kernels write model outputs in place)
CONSTANT                ``weights + offset``: graph constants and weights packed ahead of time
                        (:class:`~polytf.plan.constant_layout.ModelConstants`), each 64-byte
                        aligned in one read-only blob
INTERMEDIATE, PRIVATE   ``workspace + offset``: tensors between kernels, kernel temporaries and
                        scratch (zero-padded, im2col and packed copies), each 64-byte aligned
UNREAD                  ``weights``: a weight the kernel reads only through its copy packed at
                        export (never dereferenced; the original is not in the blob)
======================  =========================================================================

The workspace starts with a :data:`WORKSPACE_HEADER_BYTES` header holding the model's tag;
the entry function zero-fills the scratch arrays of a workspace whose header does not hold it
(a new one) before the first kernel, because scratch arrays must start zeroed as the
runtime's do (a padded copy's halo is written by nobody); intermediates and temporaries are
written before they are read, as in the runtime's uninitialised buffers. The intermediates,
temporaries and the scratch arrays that their copies write whole on every call share one arena
after the header by liveness, at the offsets of the memory plan that ``polytf.load``'s execution
contexts use (:mod:`polytf.plan.memory_plan`); the other scratch arrays follow it, each its own,
zeroed. The workspace is as large as one execution context of ``polytf.load``.

Every buffer is checked here to hold at least the bytes its kernel's access relations need
(``argument_bytes``), as :class:`~polytf.runtime.cpu.argument_table.ArgumentTable` checks before
each native call in Python; the caller's arrays are sized by the header's constants.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polytf.errors import CompileError, GraphError
from polytf.export.kernel_code import LinkableKernel
from polytf.graph import Graph
from polytf.lowering.host_fallback import HostStep
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.plan.binding_plan import plan_model
from polytf.plan.bindings import CONSTANT, INPUT, INTERMEDIATE, OUTPUT, UNREAD, KernelPlan
from polytf.plan.buffers import ALIGNMENT_BYTES
from polytf.plan.constant_layout import ModelConstants
from polytf.plan.memory_plan import MemoryPlan, plan_memory, temporary_key
from polytf.poly.access_bounds import array_bytes
from polytf.schedules.target_limits import round_up

__all__ = [
    "ALIGNMENT_BYTES",
    "WORKSPACE_HEADER_BYTES",
    "BufferAddress",
    "KernelCall",
    "IndexCheck",
    "OutputCopy",
    "TensorPort",
    "ModelLayout",
    "layout_model",
]

#: Bytes at the start of the workspace that hold the model's tag (one cache line).
WORKSPACE_HEADER_BYTES = 64
#: C type of each dtype an exported model's inputs and outputs may have.
C_TYPES = {"float32": "float", "int32": "int32_t", "int64": "int64_t", "bool": "bool"}

INPUT_POINTER = "input"
OUTPUT_POINTER = "output"
WEIGHTS = "weights"
WORKSPACE = "workspace"


def _aligned(offset: int) -> int:
    """``offset`` rounded up to the alignment of every weight and workspace buffer, and of
    the workspace itself: the runtime's (:data:`polytf.plan.buffers.ALIGNMENT_BYTES`), so
    the kernels see the same alignment as under ``polytf.load``."""
    return round_up(offset, ALIGNMENT_BYTES)


@dataclass(frozen=True)
class TensorPort:
    """An input or output of the exported function.

    Attributes:
        name: the placeholder's name, or the output's key (``node`` or ``node:port``).
        parameter: its C parameter name (a unique identifier made from ``name``).
        shape: its shape (row-major, C-contiguous).
        dtype: ``"float32"``, ``"int32"``, ``"int64"`` or ``"bool"``.
    """

    name: str
    parameter: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(self.dtype).itemsize

    @property
    def c_type(self) -> str:
        return C_TYPES[self.dtype]


@dataclass(frozen=True)
class BufferAddress:
    """Where one buffer is: ``base`` (INPUT_POINTER or OUTPUT_POINTER with ``index`` the
    port, WEIGHTS or WORKSPACE with ``index`` the byte offset)."""

    base: str
    index: int


@dataclass(frozen=True)
class IndexCheck:
    """Ids of a run-time gather checked before its kernel runs (as
    :func:`polytf.runtime.index_checks.check_indices` does in Python).

    Attributes:
        address: the index array.
        count: its elements.
        dtype: ``"int32"`` or ``"int64"``.
        extent: the table's first dimension: every id must lie in ``[0, extent)``.
        node: the GatherV2 node (named in the header's comment).
    """

    address: BufferAddress
    count: int
    dtype: str
    extent: int
    node: str


@dataclass(frozen=True)
class KernelCall:
    """One kernel call of the entry function: its arguments' addresses (``kernel.arrays`` order)."""

    kernel: LinkableKernel
    arguments: tuple[BufferAddress, ...]
    index_checks: tuple[IndexCheck, ...] = ()


@dataclass(frozen=True)
class OutputCopy:
    """An output no kernel writes in place (a placeholder or a constant passed through, or an
    output that is another output's tensor): ``nbytes`` copied from ``source`` after the kernels."""

    output: int
    source: BufferAddress
    nbytes: int


@dataclass(frozen=True)
class ModelLayout:
    """Everything the entry function and the header need.

    Attributes:
        inputs, outputs: the function's parameters, graph order.
        calls: kernel calls, execution order.
        output_copies: outputs filled by copying, after the calls.
        weights: the read-only blob (every CONSTANT buffer at its offset).
        weight_entries: ``(key, offset, nbytes)`` of each buffer in ``weights``.
        workspace_bytes: the workspace's size (header included).
        workspace_entries: ``(what, offset, nbytes)`` of each workspace buffer.
        zeroed: ``(offset, nbytes)`` of the workspace ranges a new workspace must have zeroed
            (the scratch arrays, adjacent ones merged).
        tag: 64-bit identity of this export (weights and layout): written into a
            workspace's header and the weights file, checked on use.
        arena_offset: where the arena of the intermediates and temporaries starts in the
            workspace (their ``workspace_entries`` overlap where ``memory_plan`` lets them).
        memory_plan: the offsets inside that arena (:mod:`polytf.plan.memory_plan`).
    """

    inputs: tuple[TensorPort, ...]
    outputs: tuple[TensorPort, ...]
    calls: tuple[KernelCall, ...]
    output_copies: tuple[OutputCopy, ...]
    weights: bytes
    weight_entries: tuple[tuple[str, int, int], ...]
    workspace_bytes: int
    workspace_entries: tuple[tuple[str, int, int], ...]
    tag: int
    zeroed: tuple[tuple[int, int], ...] = ()
    arena_offset: int = WORKSPACE_HEADER_BYTES
    memory_plan: MemoryPlan | None = None


def c_identifiers(names: Sequence[str], taken: set[str]) -> list[str]:
    """A unique C identifier for each name (other characters become ``_``; a leading digit
    gets a ``_``), none of them in ``taken`` (which grows)."""
    result = []
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "tensor"
        if base[0].isdigit():
            base = "_" + base
        candidate, suffix = base, 1
        while candidate in taken:
            suffix += 1
            candidate = f"{base}_{suffix}"
        taken.add(candidate)
        result.append(candidate)
    return result


#: Names the entry function's parameters may not take (C keywords and its own parameters).
RESERVED_NAMES = {
    "workspace", "threads", "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "bool", "true", "false",
}  # fmt: skip


def layout_model(graph: Graph, steps: Sequence[tuple[LoweredKernel, LinkableKernel] | HostStep], source: str) -> ModelLayout:
    """Lay out the buffers of a model whose kernels were compiled to linkable code.

    Args:
        graph: the typed graph the kernels were lowered from.
        steps: ``(lowered, linkable kernel)`` pairs in execution order (host steps refused).
        source: the model's file, for messages.

    Raises:
        CompileError: a node runs on the host (an exported model runs compiled kernels
            only), a CheckNumerics node (whose error the entry point cannot report yet), an
            input or output has a dtype C cannot take, or a buffer is smaller than
            its kernel's accesses need (a polytf bug).
        GraphError: a kernel reads a tensor nothing provides (a polytf bug).
    """
    host = [step.node for step in steps if isinstance(step, HostStep)]
    if host:
        listed = "; ".join(f"'{node.name}' ({node.op}: {node.reason})" for node in host)
        raise CompileError(
            f"model {source}: {len(host)} node(s) run on the host in Python, which an exported model cannot do: {listed}. "
            "Export a model whose nodes polytf compiles (`polytf ops --model` lists them)"
        )
    constants = ModelConstants(graph, source)
    plan = plan_model(graph, steps, source, constants.packed)
    checked = [node for step in plan.steps if isinstance(step, KernelPlan) for _, node, _ in step.numerics_checks]
    if checked:
        raise CompileError(
            f"model {source}: CheckNumerics node(s) {', '.join(repr(n) for n in checked)} raise an error from polytf.load's models, "
            "which an exported C entry point has no status for yet; export the model without them (remove tf.debugging.check_numerics)"
        )
    for storage in plan.constants:
        constants.constant(storage)
    # a weight whose every reader takes its packed copy is not in the blob
    read = set(plan.constants) | {b.key for step in plan.kernel_plans for b in step.bindings if b.kind == CONSTANT}
    weight_values = {key: value for key, value in constants.values.items() if key in read}

    taken = set(RESERVED_NAMES)
    placeholders = list(graph.placeholders)
    input_parameters = c_identifiers([p.name for p in placeholders], taken)
    inputs = tuple(
        TensorPort(p.name, parameter, tuple(graph.types[p.output(0)].shape), graph.types[p.output(0)].dtype)
        for p, parameter in zip(placeholders, input_parameters)
    )
    output_parameters = c_identifiers([name for name, _, _ in plan.outputs], taken)
    outputs = tuple(
        TensorPort(name, parameter, tuple(shape), graph.types[tensor].dtype)
        for (name, _, shape), parameter, tensor in zip(plan.outputs, output_parameters, graph.outputs)
    )
    for port in inputs + outputs:
        if port.dtype not in C_TYPES:
            raise CompileError(f"model {source}: tensor '{port.name}' has dtype {port.dtype}; an exported model takes {', '.join(C_TYPES)}")
    input_index = {name: i for i, name in enumerate(p.name for p in inputs)}

    # weights: every constant buffer, 64-byte aligned, in first-use order
    weight_offsets: dict[str, int] = {}
    entries, offset = [], 0
    for key, value in weight_values.items():
        offset = _aligned(offset)
        weight_offsets[key] = offset
        entries.append((key, offset, value.nbytes))
        offset += value.nbytes
    blob = bytearray(offset)
    for key, start, nbytes in entries:
        blob[start : start + nbytes] = np.ascontiguousarray(weight_values[key]).tobytes()

    # which output pointer holds each direct output (the first output of that storage)
    output_of_storage: dict[str, int] = {}
    for i, (_, storage, _) in enumerate(plan.outputs):
        if storage in plan.direct_outputs:
            output_of_storage.setdefault(storage, i)

    workspace: list[tuple[str, int, int]] = []
    zeroed: list[tuple[int, int]] = []
    cursor = WORKSPACE_HEADER_BYTES

    def reserve(what: str, nbytes: int, zero: bool = False) -> int:
        nonlocal cursor
        cursor = _aligned(cursor)
        start = cursor
        workspace.append((what, start, nbytes))
        cursor += max(int(nbytes), 1)
        if zero:
            if zeroed and zeroed[-1][0] + zeroed[-1][1] >= start - ALIGNMENT_BYTES:
                zeroed[-1] = (zeroed[-1][0], start + nbytes - zeroed[-1][0])
            else:
                zeroed.append((start, nbytes))
        return start

    # intermediates and temporaries: one arena shared by liveness, right after the header
    memory = plan_memory(plan)
    arena = _aligned(cursor)
    cursor = arena + memory.arena_bytes
    planned_bytes = {lifetime.key: lifetime.nbytes for lifetime in memory.lifetimes}
    for lifetime in memory.lifetimes:
        workspace.append((lifetime.key, arena + memory.offsets[lifetime.key], lifetime.nbytes))
    intermediate_bytes = {storage: int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for storage, (shape, dtype) in plan.intermediates.items()}
    intermediate_offsets = {storage: arena + memory.offsets[storage] for storage in intermediate_bytes}

    def sized(binding, slot_bytes: int, info, key: str) -> tuple[BufferAddress, int]:
        """The address of a binding and the bytes there (``key``: the binding's
        :func:`~polytf.plan.memory_plan.temporary_key`)."""
        if binding.kind == INPUT:
            port = input_index[binding.key]
            return BufferAddress(INPUT_POINTER, port), inputs[port].nbytes
        if binding.kind == OUTPUT:
            port = output_of_storage[binding.key]
            return BufferAddress(OUTPUT_POINTER, port), outputs[port].nbytes
        if binding.kind == CONSTANT:
            return BufferAddress(WEIGHTS, weight_offsets[binding.key]), weight_values[binding.key].nbytes
        if binding.kind == UNREAD:  # the kernel's code never reads it: any valid address, no bytes needed
            return BufferAddress(WEIGHTS, 0), slot_bytes
        if key in memory.offsets:  # a temporary, in the arena
            return BufferAddress(WORKSPACE, arena + memory.offsets[key]), planned_bytes[key]
        if binding.kind == INTERMEDIATE:  # from the element ``origin`` on (a window of the buffer)
            skipped = binding.origin * np.dtype(plan.intermediates[binding.key][1]).itemsize
            return BufferAddress(WORKSPACE, intermediate_offsets[binding.key] + skipped), intermediate_bytes[binding.key] - skipped
        own = max(slot_bytes, array_bytes(info))
        what = f"{info.name} of {info.tensor or 'kernel'} ({info.role})"
        return BufferAddress(WORKSPACE, reserve(what, own, zero=info.role == "scratch")), own

    calls = []
    for position, step in enumerate(plan.steps):
        assert isinstance(step, KernelPlan)
        kernel: LinkableKernel = step.kernel
        arguments = []
        for slot, (binding, info) in enumerate(zip(step.bindings, kernel.arrays)):
            address, available = sized(binding, kernel.argument_bytes[slot], info, temporary_key(position, slot))
            if available < kernel.argument_bytes[slot]:
                raise CompileError(
                    f"kernel {kernel.symbol}: array {info.name} ({info.tensor or info.role}) gets {available} bytes, "
                    f"its accesses need {kernel.argument_bytes[slot]} (a polytf bug: please report it)"
                )
            arguments.append(address)
        slots = {info.name: slot for slot, info in enumerate(kernel.arrays)}
        checks = tuple(
            IndexCheck(arguments[slots[array]], int(np.prod(kernel.arrays[slots[array]].shape, dtype=np.int64)), kernel.arrays[slots[array]].dtype, extent, node)
            for array, extent, node in step.index_checks
        )
        calls.append(KernelCall(kernel, tuple(arguments), checks))

    copies = []
    for i, (_, storage, _) in enumerate(plan.outputs):
        if output_of_storage.get(storage) == i:
            continue
        if storage in output_of_storage:
            source_address = BufferAddress(OUTPUT_POINTER, output_of_storage[storage])
        elif storage in plan.placeholder_of:
            source_address = BufferAddress(INPUT_POINTER, input_index[plan.placeholder_of[storage]])
        elif storage in weight_offsets:
            source_address = BufferAddress(WEIGHTS, weight_offsets[storage])
        else:
            raise GraphError(f"model {source}: output '{outputs[i].name}' comes from nothing the exported code has")
        copies.append(OutputCopy(i, source_address, outputs[i].nbytes))

    digest = hashlib.sha256(bytes(blob))
    digest.update(repr((inputs, outputs, [(c.kernel.symbol, c.arguments) for c in calls], workspace)).encode())
    tag = int.from_bytes(digest.digest()[:8], "little") | 1  # never 0: a zeroed header is a new workspace
    return ModelLayout(inputs, outputs, tuple(calls), tuple(copies), bytes(blob), tuple(entries), _aligned(cursor), tuple(workspace), tag, tuple(zeroed), arena, memory)
