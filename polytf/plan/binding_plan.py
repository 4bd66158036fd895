"""Where each buffer of a model call comes from: the binding plan of a compiled model.

A model is a sequence of kernels and host steps (:mod:`polytf.lowering.host_fallback`). Each
argument of a kernel, and each input and output of a host step, is bound to a buffer of
one kind (:mod:`polytf.runtime.cpu.execution_context`): a placeholder's value (INPUT), a graph
constant (CONSTANT), a fresh output array (OUTPUT), a tensor passed between steps
(INTERMEDIATE, one buffer per execution context) or a kernel temporary (PRIVATE). Views
(Reshape, Squeeze, ...) share their source's buffer (:func:`resolve_view`). A constant
that a kernel reads only through the copy its caller packs ahead of time
(:mod:`polytf.plan.constant_layout`) is UNREAD in that kernel: no buffer, so a weight read
by nothing else is kept in its packed form only (:func:`arrays_read_ahead_only`).

:func:`plan_model` decides this once, for the CPU runtime
(:class:`~polytf.runtime.cpu.compiled_model.CompiledModel`, host buffers) and the CUDA runtime
(:class:`~polytf.runtime.cuda.model.CudaModel`, device buffers) alike; each runtime then
makes the buffers of its own memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from polytf.errors import GraphError
from polytf.graph import Graph, split_tensor_name
from polytf.lowering.host_fallback import HostStep
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.passes.fusion import resolve_view
from polytf.plan.bindings import CONSTANT, INPUT, INTERMEDIATE, OUTPUT, PRIVATE, UNREAD, HostPlan, KernelPlan, SlotBinding
from polytf.poly.access_bounds import array_box, run_time_index_checks
from polytf.poly.affine import AffineExpr
from polytf.poly.numerics_checks import run_time_numerics_checks
from polytf.poly.scop import Scop
from polytf.poly.statement import CopyKind
from polytf.schedules.data_layout import SCRATCH, apply_data_layout
from polytf.schedules.recipe import CpuRecipe

__all__ = ["ModelPlan", "arrays_read_ahead_only", "output_key", "plan_model", "scratch_written_whole"]


def output_key(tensor: str) -> str:
    """Name under which an output tensor is returned: the node name, plus ``:port`` if not 0."""
    node, port = split_tensor_name(tensor)
    return node if port == 0 else f"{node}:{port}"


@dataclass(frozen=True)
class ModelPlan:
    """The bindings of every step of a model.

    Attributes:
        steps: a :class:`KernelPlan` per kernel and a :class:`HostPlan` per host step,
            execution order.
        constants: storage tensors of the graph constants that some step or output reads
            (each needs one shared buffer), first use first; a constant every kernel reads
            only in a packed copy is not among them.
        intermediates: storage tensor -> ``(shape, dtype)`` of each INTERMEDIATE buffer.
        direct_outputs: storage tensors of model outputs that a step writes straight into
            a fresh array on each call (sorted).
        direct_output_types: ``(storage, shape, dtype)`` of each direct output.
        outputs: ``(output name, storage tensor, shape)`` per graph output, in order.
        placeholder_of: storage tensor of each placeholder -> its name.
        scratch_written_whole: step position -> the PRIVATE scratch arrays of that kernel that
            its copies write entirely on every call (:func:`scratch_written_whole`).
    """

    steps: tuple[KernelPlan | HostPlan, ...]
    constants: tuple[str, ...]
    intermediates: dict[str, tuple[tuple[int, ...], str]]
    direct_outputs: tuple[str, ...]
    direct_output_types: tuple[tuple[str, tuple[int, ...], str], ...]
    outputs: tuple[tuple[str, str, tuple[int, ...]], ...]
    placeholder_of: dict[str, str]
    scratch_written_whole: dict[int, frozenset[str]] = field(default_factory=dict)

    @property
    def kernel_plans(self) -> tuple[KernelPlan, ...]:
        return tuple(step for step in self.steps if isinstance(step, KernelPlan))


def kernel_code_scop(kernel: object) -> Scop:
    """The Scop whose statements a CPU kernel's code runs: its Scop after the recipe's
    data-layout transformations (:func:`polytf.schedules.data_layout.apply_data_layout`, a
    pure function of the Scop and the recipe, as :func:`polytf.schedules.builder.schedule_scop`
    applies it), constant copies included (they run ahead of time instead)."""
    return apply_data_layout(kernel.scop, kernel.recipe)


def scratch_written_whole(kernel: object, code: Scop | None = None) -> frozenset[str]:
    """The scratch arrays of ``kernel`` that its copy statements write entirely on every call
    (the union of the ranges of their write relations holds the array's box; the constant
    copies, run ahead of time, left out). A copy without guards whose write index is its
    iterators over the array's shape writes it whole without asking isl.

    Args:
        kernel: a compiled kernel (``scop``, ``recipe``, ``arrays``, ``constant_copies``).
        code: :func:`kernel_code_scop` of it, if already made.
    """
    scratch = [info for info in kernel.arrays if info.role == SCRATCH]
    if not scratch:
        return frozenset()
    ahead = {copy.name for copy in getattr(kernel, "constant_copies", ())}
    code = code or kernel_code_scop(kernel)
    result = set()
    for info in scratch:
        copies = [s for s in code.statements if s.write.array == info.name and s.name not in ahead and s.copy_kind is CopyKind.DATA_LAYOUT]
        if any(
            not s.constraints and tuple(s.extents) == tuple(info.shape) and s.write.index == tuple(AffineExpr.of(it) for it in s.iterators)
            for s in copies
        ):
            result.add(info.name)
            continue
        if not copies:
            continue
        written = copies[0].access_map(copies[0].write).range()
        for statement in copies[1:]:
            written = written.union(statement.access_map(statement.write).range())
        if array_box(info).is_subset(written):
            result.add(info.name)
    return frozenset(result)


def arrays_read_ahead_only(kernel: object, code: Scop | None = None) -> frozenset[str]:
    """The input arrays of ``kernel`` that only its constant copies read
    (:attr:`~polytf.targets.kernel.Kernel.constant_copies`: weights packed into panels,
    transformed ahead of time): its code, which the copies left, never reads them.

    The kernel's code is that of its Scop after the recipe's data-layout transformations
    (:func:`polytf.schedules.data_layout.apply_data_layout`, a pure function of the Scop and
    the recipe, as :func:`polytf.schedules.builder.schedule_scop` applies it) less the
    constant copies; an array none of its other statements reads is read only ahead of time.

    Args:
        kernel: a compiled kernel (``scop``, ``recipe``, ``constant_copies``).
        code: :func:`kernel_code_scop` of it, if already made.
    """
    copies = tuple(getattr(kernel, "constant_copies", ()))
    if not copies:
        return frozenset()
    sources = {access.array for copy in copies for access in copy.reads}
    names = {copy.name for copy in copies}  # a cached kernel's copies may name another node: match by name
    code = code or kernel_code_scop(kernel)
    read = {access.array for statement in code.statements if statement.name not in names for access in statement.reads}
    return frozenset(sources - read)


def plan_model(
    graph: Graph,
    steps: Sequence[tuple[LoweredKernel, object] | HostStep],
    source: str,
    caller_constants: Callable[[LoweredKernel, object], Mapping[str, str]] | None = None,
) -> ModelPlan:
    """Bind every kernel argument and host-step tensor of a model to its buffer kind.

    Args:
        graph: the typed graph the kernels were compiled from.
        steps: ``(lowered kernel, compiled kernel)`` pairs and host steps, execution order.
            A compiled kernel needs ``arrays`` (its arguments, in order) and ``scop``.
        source: the model's file, for messages.
        caller_constants: for a kernel, ``{array name: constant key}`` of the arguments whose
            read-only values the caller supplies under that key (weights packed into panels
            ahead of time); they are bound as CONSTANT with that key, and the constants
            that only those copies read as UNREAD (:func:`arrays_read_ahead_only`).

    Raises:
        GraphError: a kernel or host step reads a tensor that no kernel, host step,
            placeholder or constant provides (a polytf bug), naming both.
    """
    host_steps = [step for step in steps if isinstance(step, HostStep)]
    placeholders = {p.output(0): p.name for p in graph.placeholders}
    produced = {
        resolve_view(graph, info.tensor)
        for item in steps
        if not isinstance(item, HostStep)
        for info in item[0].scop.arrays
        if info.role == "output"
    }
    produced |= {tensor for step in host_steps for tensor in step.outputs}
    output_storages = {resolve_view(graph, t) for t in graph.outputs}
    direct_outputs = tuple(sorted(output_storages & produced))
    constants: dict[str, None] = {}  # an ordered set
    intermediates: dict[str, tuple[tuple[int, ...], str]] = {}
    read_later = {resolve_view(graph, t) for item in steps for t in (item.inputs if isinstance(item, HostStep) else item[0].array_tensors.values()) if t}

    def source_of(storage: str) -> SlotBinding | None:
        """The binding of a tensor a step reads (None: nothing provides it)."""
        if storage in placeholders:
            return SlotBinding(INPUT, placeholders[storage])
        if storage in graph.constants:
            constants[storage] = None
            return SlotBinding(CONSTANT, storage)
        if storage in direct_outputs:
            return SlotBinding(OUTPUT, storage)
        if storage in produced:
            intermediates[storage] = (tuple(graph.types[storage].shape), graph.types[storage].dtype)
            return SlotBinding(INTERMEDIATE, storage)
        return None

    plans: list[KernelPlan | HostPlan] = []
    whole: dict[int, frozenset[str]] = {}
    for item in steps:
        if isinstance(item, HostStep):
            sources = []
            for tensor in item.inputs:
                binding = source_of(resolve_view(graph, tensor))
                if binding is None:
                    raise GraphError(f"host node '{item.node.name}' reads '{resolve_view(graph, tensor)}', which no kernel, placeholder or constant provides")
                sources.append(binding)
            destinations = []
            for tensor in item.outputs:
                if tensor in direct_outputs:
                    destinations.append((tensor, SlotBinding(OUTPUT, tensor)))
                elif tensor in read_later:
                    intermediates[tensor] = (tuple(graph.types[tensor].shape), graph.types[tensor].dtype)
                    destinations.append((tensor, SlotBinding(INTERMEDIATE, tensor)))
            plans.append(HostPlan(item, tuple(sources), tuple(destinations)))
            continue
        lowered, kernel = item
        supplied = dict(caller_constants(lowered, kernel)) if caller_constants else {}
        scratch = isinstance(getattr(kernel, "recipe", None), CpuRecipe) and any(info.role == SCRATCH for info in kernel.arrays)
        # facts a kernel from the code cache brings along; the others need its code's Scop
        known_unread = getattr(kernel, "inputs_read_ahead_only", None)
        known_whole = getattr(kernel, "scratch_written_whole", None)
        needs_code = (supplied and known_unread is None) or (scratch and known_whole is None)
        code = kernel_code_scop(kernel) if needs_code else None
        unread = frozenset()
        if supplied:
            unread = known_unread if known_unread is not None else arrays_read_ahead_only(kernel, code)
        if scratch:
            whole[len(plans)] = known_whole if known_whole is not None else scratch_written_whole(kernel, code)
        bindings = []
        for info in kernel.arrays:
            if info.name in supplied:
                bindings.append(SlotBinding(CONSTANT, supplied[info.name]))
                continue
            if info.name in unread:
                bindings.append(SlotBinding(UNREAD))
                continue
            tensor = lowered.array_tensors.get(info.name) if info.role in ("input", "output") else None
            if tensor is None:
                bindings.append(SlotBinding(PRIVATE))
                continue
            storage = resolve_view(graph, tensor)
            binding = source_of(storage)
            if binding is None:
                raise GraphError(f"kernel {kernel.scop.name} reads '{storage}', which no kernel, placeholder or constant provides")
            origin = lowered.array_origins.get(info.name, 0)
            if origin:
                if binding.kind != INTERMEDIATE:  # placement windows only buffers passed between kernels
                    raise GraphError(f"kernel {kernel.scop.name}: array {info.name} is a window of '{storage}', which is not an intermediate buffer (a polytf bug: please report it)")
                binding = SlotBinding(INTERMEDIATE, storage, origin)
            bindings.append(binding)
        plans.append(KernelPlan(kernel, tuple(bindings), run_time_index_checks(lowered.scop), run_time_numerics_checks(lowered.scop)))
    outputs = tuple((output_key(t), resolve_view(graph, t), tuple(graph.types[t].shape)) for t in graph.outputs)
    for _, storage, _ in outputs:
        if storage not in produced and storage not in placeholders:
            if storage not in graph.constants:
                raise GraphError(f"model {source}: tensor '{storage}' is neither computed nor a constant")
            constants[storage] = None
    direct_types = tuple((s, tuple(graph.types[s].shape), graph.types[s].dtype) for s in direct_outputs)
    return ModelPlan(tuple(plans), tuple(constants), intermediates, direct_outputs, direct_types, outputs, placeholders, whole)
