"""CompiledModel: a whole graph as a sequence of native kernel calls.

Calling the model converts each input once, takes an execution context (its own
intermediate, temporary and scratch buffers: :mod:`polytf.runtime.execution_context`),
binds the inputs and fresh output arrays into the context's argument tables (each
binding size-checked: :mod:`polytf.runtime.argument_table`), calls each kernel once
through ctypes (which releases the GIL) and returns the outputs. There is no
per-element Python on this path.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polytf.errors import GraphError, ShapeError
from polytf.graph import Graph, split_tensor_name
from polytf.graph.passes.fusion import resolve_view
from polytf.ops.gather import index_checks
from polytf.ops.lowering import LoweredKernel
from polytf.runtime.buffers import aligned_copy
from polytf.runtime.constant_layout import packed_constants
from polytf.runtime.execution_context import (
    CONSTANT,
    INPUT,
    INTERMEDIATE,
    OUTPUT,
    PRIVATE,
    ContextPool,
    ExecutionContext,
    HostPlan,
    KernelPlan,
    SlotBinding,
)
from polytf.runtime.host_fallback import HostStep
from polytf.runtime.timing import call_latencies
from polytf.targets.target import CompiledKernel


def output_key(tensor: str) -> str:
    """Name under which an output tensor is returned: the node name, plus ``:port`` if not 0."""
    node, port = split_tensor_name(tensor)
    return node if port == 0 else f"{node}:{port}"


def _converted(value: object, dtype: np.dtype) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype``; integer and bool inputs only when no
    value changes (an int64 token id beyond int32's range, or a float id, is refused).

    Raises:
        ValueError: the conversion would change a value.
    """
    array = np.asarray(value)
    if dtype.kind in "iub" and array.dtype != dtype:
        if array.dtype.kind not in "iub":
            raise ValueError(f"{array.dtype} values would be truncated; pass {dtype} values")
        if dtype.kind != "b" and array.size and (array.min() < np.iinfo(dtype).min or array.max() > np.iinfo(dtype).max):
            raise ValueError(f"values from {array.min()} to {array.max()} do not fit {dtype}")
    return np.ascontiguousarray(array, dtype=dtype)


@dataclass(frozen=True)
class CallTiming:
    """One timed call of a model (:meth:`CompiledModel.timed_calls`).

    Attributes:
        call_s: the whole call, ``model(**inputs)``, seconds.
        step_s: seconds of each step inside it (kernels and host steps, execution order).
    """

    call_s: float
    step_s: tuple[float, ...]

    @property
    def steps_s(self) -> float:
        """Seconds in the steps: the call less the runtime's own work."""
        return sum(self.step_s)


class CompiledModel:
    """A callable model: ``model(**{placeholder_name: array}) -> {output_name: array}``.

    Thread safety: a CompiledModel may be called from any number of threads at once.
    Each call runs on its own execution context (intermediate tensors, temporaries,
    packing and padding scratch), taken from a pool that grows with the number of calls
    in flight; constants are shared and only read. Results are identical to those of
    single-threaded calls.

    Args:
        graph: the typed graph the kernels were compiled from.
        kernels: lowered kernels and their compiled code, and the host steps
            (:class:`~polytf.runtime.host_fallback.HostStep`) between them, in execution order.
        threads: threads each parallel kernel uses.

    Attributes:
        input_types: placeholder name -> TensorType.
        output_names: keys of the returned dictionary, in the graph's output order.
        recipes: kernel name -> the ScheduleRecipe it runs with.

    Raises:
        GraphError: a kernel reads a tensor that nothing provides (a polytf bug).
        ShapeError: a buffer does not fit its kernel (a polytf bug).
    """

    def __init__(
        self, graph: Graph, kernels: Sequence[tuple[LoweredKernel, CompiledKernel] | HostStep], threads: int, source: str = ""
    ) -> None:
        host_steps = [step for step in kernels if isinstance(step, HostStep)]
        self.host_nodes = tuple(step.node for step in host_steps)
        self.graph = graph
        self.threads = int(threads)
        self.source = source or graph.source
        self.input_types = {n.name: graph.types[n.output(0)] for n in graph.placeholders}
        self.output_names = tuple(output_key(t) for t in graph.outputs)
        placeholders = {p.output(0): p.name for p in graph.placeholders}
        produced = {
            resolve_view(graph, info.tensor)
            for item in kernels
            if not isinstance(item, HostStep)
            for info in item[0].scop.arrays
            if info.role == "output"
        }
        produced |= {tensor for step in host_steps for tensor in step.outputs}
        output_storages = {resolve_view(graph, t) for t in graph.outputs}
        #: kernel-produced outputs are written straight into fresh arrays on each call
        self._direct_outputs = tuple(sorted(output_storages & produced))
        self._direct_output_types = tuple((s, tuple(graph.types[s].shape), np.dtype(graph.types[s].dtype)) for s in self._direct_outputs)
        self._placeholder_of = placeholders
        self._constants: dict[str, np.ndarray] = {}
        intermediates: dict[str, tuple[tuple[int, ...], str]] = {}
        plans = []
        read_later = {resolve_view(graph, t) for item in kernels for t in (item.inputs if isinstance(item, HostStep) else item[0].array_tensors.values()) if t}
        for item in kernels:
            if isinstance(item, HostStep):
                plans.append(self._host_plan(item, placeholders, produced, intermediates, read_later))
                continue
            lowered, kernel = item
            bindings = []
            packed = self._packed_constants(lowered, kernel)
            for info in kernel.arrays:
                if info.name in packed:  # a weight packed once, now
                    key = f"{kernel.scop.name}/{info.name} ({info.tensor})"
                    self._constants[key] = packed[info.name]
                    bindings.append(SlotBinding(CONSTANT, key))
                    continue
                tensor = lowered.array_tensors.get(info.name) if info.role in ("input", "output") else None
                if tensor is None:
                    bindings.append(SlotBinding(PRIVATE))
                    continue
                storage = resolve_view(graph, tensor)
                if storage in placeholders:
                    bindings.append(SlotBinding(INPUT, placeholders[storage]))
                elif storage in graph.constants:
                    self._constant(storage)
                    bindings.append(SlotBinding(CONSTANT, storage))
                elif storage in self._direct_outputs:
                    bindings.append(SlotBinding(OUTPUT, storage))
                elif storage in produced:
                    intermediates[storage] = (tuple(graph.types[storage].shape), graph.types[storage].dtype)
                    bindings.append(SlotBinding(INTERMEDIATE, storage))
                else:
                    raise GraphError(f"kernel {kernel.scop.name} reads '{storage}', which no kernel, placeholder or constant provides")
            plans.append(KernelPlan(kernel, tuple(bindings), index_checks(lowered.scop)))
        self._plans = tuple(p for p in plans if isinstance(p, KernelPlan))
        self._steps = tuple(plans)
        self._outputs = [(output_key(t), resolve_view(graph, t), tuple(graph.types[t].shape)) for t in graph.outputs]
        for _, storage, _ in self._outputs:
            if storage not in produced and storage not in placeholders:
                self._constant(storage)
        self._intermediate_types = intermediates
        self._contexts = ContextPool(self._new_context)
        with self._contexts.acquire():  # the first context, built (and its buffers checked) now
            pass
        self.recipes = {plan.kernel.scop.name: plan.kernel.recipe for plan in self._plans}

    def _constant(self, storage: str) -> np.ndarray:
        if storage not in self._constants:
            if storage not in self.graph.constants:
                raise GraphError(f"model {self.source}: tensor '{storage}' is neither computed nor a constant")
            value = aligned_copy(np.asarray(self.graph.constants[storage]), self.graph.types[storage].dtype)
            value.flags.writeable = False
            self._constants[storage] = value
        return self._constants[storage]

    def _packed_constants(self, lowered: LoweredKernel, kernel: CompiledKernel) -> dict[str, np.ndarray]:
        """The kernel's constant copies (weights packed into panels) run once, by scratch array."""
        if not kernel.constant_copies:
            return {}
        sources = {copy.value.access.array for copy in kernel.constant_copies}
        values = {}
        for name in sources:
            tensor = lowered.array_tensors.get(name)
            storage = resolve_view(self.graph, tensor) if tensor else None
            if storage is None or storage not in self.graph.constants:
                raise GraphError(f"kernel {kernel.scop.name} packs '{name}' ahead of time, but it holds no constant of model {self.source}")
            values[name] = self._constant(storage).reshape(lowered.scop.array(name).shape)
        return packed_constants(kernel, values)

    def _host_plan(self, step: HostStep, placeholders, produced, intermediates, read_later) -> HostPlan:
        """Where a host step reads and writes (the buffers of the kernels around it)."""
        sources = []
        for tensor in step.inputs:
            storage = resolve_view(self.graph, tensor)
            if storage in placeholders:
                sources.append(SlotBinding(INPUT, placeholders[storage]))
            elif storage in self.graph.constants:
                self._constant(storage)
                sources.append(SlotBinding(CONSTANT, storage))
            elif storage in self._direct_outputs:
                sources.append(SlotBinding(OUTPUT, storage))
            elif storage in produced:
                intermediates[storage] = (tuple(self.graph.types[storage].shape), self.graph.types[storage].dtype)
                sources.append(SlotBinding(INTERMEDIATE, storage))
            else:
                raise GraphError(f"host node '{step.node.name}' reads '{storage}', which no kernel, placeholder or constant provides")
        destinations = []
        for tensor in step.outputs:
            if tensor in self._direct_outputs:
                destinations.append((tensor, SlotBinding(OUTPUT, tensor)))
            elif tensor in read_later:
                intermediates[tensor] = (tuple(self.graph.types[tensor].shape), self.graph.types[tensor].dtype)
                destinations.append((tensor, SlotBinding(INTERMEDIATE, tensor)))
        return HostPlan(step, tuple(sources), tuple(destinations))

    def _new_context(self) -> ExecutionContext:
        return ExecutionContext(self._steps, self._constants, self._intermediate_types)

    @property
    def kernels(self) -> tuple[CompiledKernel, ...]:
        return tuple(plan.kernel for plan in self._plans)

    @property
    def context_count(self) -> int:
        """Execution contexts built so far (the most calls that ran at once)."""
        return self._contexts.size

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Run the model. Safe to call from several threads at once.

        Args:
            inputs: one array per placeholder, by placeholder name, with exactly the
                compiled shape (anything ``numpy.asarray`` accepts; values are converted
                to the placeholder's dtype once, and the converted array is what is checked
                and what the kernels read).

        Returns:
            output name -> array (a fresh array on every call; inputs that already are
            C-contiguous arrays of the placeholder's dtype are read in place, not copied).

        Raises:
            GraphError: a placeholder is missing or an unknown name is given.
            ShapeError: an input has the wrong shape or cannot be converted.
        """
        return self._call(inputs)

    def _call(self, inputs: Mapping[str, object], clock: list[float] | None = None) -> dict[str, np.ndarray]:
        """:meth:`__call__`; with ``clock``, ``time.perf_counter()`` is appended to it just before
        the first step and after each step (:meth:`timed_calls`)."""
        bound = self._converted_inputs(inputs)
        fresh = {storage: np.empty(shape, dtype) for storage, shape, dtype in self._direct_output_types}
        context = self._contexts.take()
        try:
            context.bind(bound, fresh)
            if clock is not None:
                clock.append(time.perf_counter())
            context.run(self.threads, clock)
        finally:
            self._contexts.release(context)
        result = {}
        for name, storage, shape in self._outputs:
            if storage in fresh:
                result[name] = fresh[storage].reshape(shape)
            elif storage in self._placeholder_of:
                result[name] = bound[self._placeholder_of[storage]].reshape(shape).copy()  # a placeholder passed through
            else:
                result[name] = self._constants[storage].reshape(shape).copy()
        return result

    def _converted_inputs(self, inputs: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Each input converted once to a C-contiguous array of its placeholder's dtype (the
        caller's own array when it already is one), with its shape checked.

        Raises:
            GraphError: missing or unknown names.
            ShapeError: a value that cannot be converted, or has the wrong shape.
        """
        if inputs.keys() != self.input_types.keys():
            unknown = sorted(set(inputs) - set(self.input_types))
            missing = sorted(set(self.input_types) - set(inputs))
            raise GraphError(
                f"model {self.source} takes inputs {sorted(self.input_types)}; "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown {unknown}" if unknown else "")
            )
        converted = {}
        for name, value in inputs.items():
            expected = self.input_types[name]
            try:
                array = _converted(value, np.dtype(expected.dtype))
            except (TypeError, ValueError, OverflowError) as error:
                raise ShapeError(f"input '{name}' cannot be converted to a {expected.dtype} array: {error}") from None
            if tuple(array.shape) != tuple(expected.shape):
                raise ShapeError(
                    f"input '{name}' has shape {tuple(array.shape)}, the model was compiled for {expected}; "
                    f"compile for this shape with input_shapes={{'{name}': {tuple(array.shape)}}} (API) or --input {name}:{','.join(map(str, array.shape))} (CLI)"
                )
            converted[name] = array
        return converted

    @property
    def step_kinds(self) -> tuple[str, ...]:
        """``"kernel"`` or ``"host"`` for each step of a call, execution order (the kernels in
        :attr:`kernels` order)."""
        return tuple("host" if isinstance(step, HostPlan) else "kernel" for step in self._steps)

    def timed_calls(self, inputs: Mapping[str, np.ndarray], repeats: int = 10, warmup: int = 2) -> list[CallTiming]:
        """``repeats`` whole calls ``model(**inputs)`` (after ``warmup`` untimed ones), each with
        the time of the call and of every step inside it, read from one clock: each kernel
        is timed where the model runs it, finding the caches as the kernels before it left
        them, and what the call spends outside its steps (input checks, binding, output
        arrays, the Python between kernels) is the runtime's overhead.
        """
        for _ in range(warmup):
            self._call(inputs)
        timings = []
        for _ in range(repeats):
            clock: list[float] = []
            begin = time.perf_counter()
            self._call(inputs, clock)
            end = time.perf_counter()
            timings.append(CallTiming(end - begin, tuple(b - a for a, b in zip(clock, clock[1:]))))
        return timings

    def latency_s(self, inputs: Mapping[str, np.ndarray], repeats: int = 20, warmup: int = 3) -> list[float]:
        """Per-call latencies in seconds of the kernels alone (inputs converted and bound
        once, outside the timed region)."""
        with self._bound_context(inputs) as context:
            return call_latencies(lambda: context.run(self.threads), repeats, warmup)

    def kernel_latency_s(self, inputs: Mapping[str, np.ndarray], repeats: int = 10, warmup: int = 2) -> list[tuple[CompiledKernel, list[float]]]:
        """Each kernel (execution order) with the seconds of ``repeats`` calls of it alone, on
        the values of one model call on ``inputs`` (after ``warmup`` whole calls), its
        operands hot in the caches from its previous call (:meth:`timed_calls` times the
        kernels where the model runs them)."""
        with self._bound_context(inputs) as context:
            latencies = context.kernel_latencies(self.threads, repeats, warmup)
        return list(zip(self.kernels, latencies))

    @contextlib.contextmanager
    def _bound_context(self, inputs: Mapping[str, np.ndarray]) -> Iterator[ExecutionContext]:
        """A pooled context with ``inputs`` (converted once) and fresh outputs bound, for
        timing the kernels outside the conversion."""
        bound = self._converted_inputs(inputs)
        fresh = {storage: np.empty(shape, dtype) for storage, shape, dtype in self._direct_output_types}
        with self._contexts.acquire() as context:
            context.bind(bound, fresh)
            yield context

