"""CompiledModel: a whole graph as a sequence of native kernel calls (the CPU's
:class:`~polytf.runtime.model.Model`).

Calling the model converts each input once, takes an execution context (its own
intermediate, temporary and scratch buffers: :mod:`polytf.runtime.cpu.execution_context`),
binds the inputs and fresh output arrays into the context's argument tables (each
binding size-checked: :mod:`polytf.runtime.cpu.argument_table`), calls each kernel once
through ctypes (which releases the GIL) and returns the outputs. There is no
per-element Python on this path.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polytf.graph import Graph
from polytf.lowering.host_fallback import HostStep
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.ops.sources import placeholder_shape
from polytf.plan.binding_plan import output_key, plan_model
from polytf.plan.bindings import CONSTANT, HostPlan
from polytf.plan.constant_layout import DeferredPacking, ModelConstants
from polytf.plan.memory_plan import MemoryPlan, plan_memory
from polytf.runtime.context_pool import ContextPool
from polytf.runtime.cpu.execution_context import CpuExecutionContext
from polytf.runtime.input_checks import converted_inputs
from polytf.runtime.model import Model
from polytf.runtime.timing import call_latencies
from polytf.targets.target import CompiledKernel


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


class CompiledModel(Model):
    """A callable model: ``model(**{placeholder_name: array}) -> {output_name: array}``.

    Thread safety: a CompiledModel may be called from any number of threads at once.
    Each call runs on its own execution context (intermediate tensors, temporaries,
    packing and padding scratch), taken from a pool that grows with the number of calls
    in flight; constants are shared and only read. Results are identical to those of
    single-threaded calls.

    Args:
        graph: the typed graph the kernels were compiled from.
        kernels: lowered kernels and their compiled code, and the host steps
            (:class:`~polytf.lowering.host_fallback.HostStep`) between them, in execution order.
        threads: threads each parallel kernel uses.
        share_buffers: whether the intermediates, kernel temporaries and scratch arrays
            written whole of a context share one arena by liveness
            (:mod:`polytf.plan.memory_plan`); False gives each its own buffer (the same
            results; for comparisons).

    Attributes:
        input_types, output_names, host_nodes, recipes, tuned_kernels: as a
            :class:`~polytf.runtime.model.Model`'s (``recipes``: CpuRecipes).
        threads: threads each parallel kernel uses.
        memory_plan: the offsets of each context's planned buffers in its arena (computed
            either way; used when ``share_buffers``).
        share_buffers: as the argument.

    Raises:
        GraphError: a kernel reads a tensor that nothing provides (a polytf bug).
        ShapeError: a buffer does not fit its kernel (a polytf bug).
    """

    def __init__(
        self,
        graph: Graph,
        kernels: Sequence[tuple[LoweredKernel, CompiledKernel] | HostStep],
        threads: int,
        source: str = "",
        share_buffers: bool = True,
    ) -> None:
        self.host_nodes = tuple(step.node for step in kernels if isinstance(step, HostStep))
        # The model keeps no reference to ``graph``: its constants are the weights as read, and
        # each weight kernels read only packed is kept in that form alone (issue 28's memory plan).
        self.threads = int(threads)
        self.source = source or graph.source
        self.input_types = {n.name: graph.types[n.output(0)] for n in graph.placeholders}
        self._declared_shapes = {n.name: placeholder_shape(n) for n in graph.placeholders}
        self.output_names = tuple(output_key(t) for t in graph.outputs)
        constants = ModelConstants(graph, self.source, defer_packing=True)
        plan = plan_model(graph, kernels, self.source, constants.packed)
        for storage in plan.constants:
            constants.constant(storage)
        # a weight whose every reader takes its packed copy is kept only in that form
        read = set(plan.constants) | {b.key for step in plan.kernel_plans for b in step.bindings if b.kind == CONSTANT}
        self._constants = {key: value for key, value in constants.values.items() if key in read}
        # the deferred packings: each key is a kernel's CONSTANT binding, so every one is read
        self._packing: DeferredPacking | None = constants.deferred_packing()
        self._packing_lock = threading.Lock()
        self._packed_keys: tuple[str, ...] = ()
        #: kernel-produced outputs are written straight into fresh arrays on each call
        self._direct_output_types = tuple((s, shape, np.dtype(dtype)) for s, shape, dtype in plan.direct_output_types)
        self._placeholder_of = plan.placeholder_of
        self._plans = plan.kernel_plans
        self._steps = plan.steps
        self._outputs = list(plan.outputs)
        self._intermediate_types = plan.intermediates
        self.memory_plan: MemoryPlan = plan_memory(plan)
        self.share_buffers = bool(share_buffers)
        self._contexts = ContextPool(self._new_context)
        self.recipes = {plan.kernel.scop.name: plan.kernel.recipe for plan in self._plans}
        self.tuned_kernels: tuple[str, ...] = ()

    def pack_constants(self) -> None:
        """Pack the weights that kernels read packed (:mod:`polytf.plan.constant_layout`) and
        build the first execution context (its buffers checked), if not done yet; the first
        call does it otherwise. Thread-safe; 0.5 s for ResNet50 on 2 cores.

        The model keeps no reference to the graph it was built from, and each weight is let go
        as soon as its last packed copy is made: called once the caller has dropped the graph
        (``polytf.load`` does), a weight and all of its packed copy are never held together.

        Raises:
            ShapeError: a packing reads an array it has no value for, or a buffer does not fit
                its kernel (polytf bugs).
        """
        self._run_packing()
        with self._contexts.acquire():
            pass

    def _run_packing(self) -> None:
        with self._packing_lock:
            if self._packing is not None:
                packed = self._packing.run()
                self._constants.update(packed)
                self._packed_keys = tuple(packed)
                self._packing = None

    def share_constants(self, other: CompiledModel) -> int:
        """Hold ``other``'s array instead of this model's for every constant (a weight as read
        or packed) that both have with the same key, shape, dtype and values: a dynamic model's
        sizes then hold each weight once (the packed panels of a kernel run slice by slice
        are its base's). Packs the weights first; does nothing once an execution context
        exists (it has bound this model's arrays). The arrays are only read. Thread-safe.

        Returns:
            The bytes now shared (no longer held by this model alone).
        """
        self._run_packing()
        with self._packing_lock:
            if self._contexts.size:
                return 0
            shared = 0
            for key, value in self._constants.items():
                theirs = other._constants.get(key)
                if theirs is None or theirs is value or theirs.shape != value.shape or theirs.dtype != value.dtype:
                    continue
                if np.array_equal(theirs, value):
                    self._constants[key] = theirs
                    shared += value.nbytes
            return shared

    @property
    def packed_weights(self) -> dict[str, np.ndarray]:
        """The weights the model packed ahead of time (after :meth:`pack_constants`), by key:
        what :meth:`use_packed_weights` takes back."""
        return {key: self._constants[key] for key in self._packed_keys}

    def use_packed_weights(self, arrays: Mapping[str, np.ndarray]) -> bool:
        """Take ``arrays`` (key -> packed weight, as :attr:`packed_weights` of a model built the
        same way gave them: a cache of them) instead of packing the weights; False, and nothing
        taken, when the packing is done already or the keys, shapes or dtypes differ from the
        packing's. The arrays are only read (they may be read-only). Thread-safe."""
        with self._packing_lock:
            if self._packing is None:
                return False
            expected = self._packing.expected()
            if set(arrays) != set(expected) or any(
                tuple(arrays[key].shape) != shape or arrays[key].dtype != np.dtype(dtype) for key, (shape, dtype) in expected.items()
            ):
                return False
            self._constants.update(arrays)
            self._packed_keys = tuple(arrays)
            self._packing = None  # the weights as read go with it
            return True

    def _new_context(self, share_buffers: bool | None = None) -> CpuExecutionContext:
        self._run_packing()
        shared = self.share_buffers if share_buffers is None else share_buffers
        return CpuExecutionContext(self._steps, self._constants, self._intermediate_types, self.memory_plan if shared else None)

    @property
    def workspace_bytes(self) -> int:
        """Bytes of one execution context's planned buffers (intermediates, temporaries,
        scratch arrays written whole): its arena with shared buffers, else the sum of their
        (aligned) buffers; the scratch arrays with their own zero-filled buffers not included."""
        return self.memory_plan.arena_bytes if self.share_buffers else self.memory_plan.unshared_bytes

    @property
    def kernels(self) -> tuple[CompiledKernel, ...]:
        """The compiled kernels, execution order."""
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
            GraphError: a placeholder is missing or an unknown name is given (a placeholder
                ``x`` may be named ``x`` or ``x:0``).
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
        caller's own array when it already is one), with its shape checked
        (:func:`polytf.runtime.input_checks.converted_inputs`).

        Raises:
            GraphError: missing or unknown names.
            ShapeError: a value that cannot be converted, or has the wrong shape.
        """
        return converted_inputs(inputs, self.input_types, self.source, self._declared_shapes)

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
        kernels where the model runs them). The kernels run on a context of their own whose
        buffers are not shared (a kernel run alone finds its operands as the whole call left
        them, not overwritten by later kernels that share their memory)."""
        with self._bound_context(inputs, pooled=False) as context:
            latencies = context.kernel_latencies(self.threads, repeats, warmup)
        return list(zip(self.kernels, latencies))

    @contextlib.contextmanager
    def _bound_context(self, inputs: Mapping[str, np.ndarray], pooled: bool = True) -> Iterator[CpuExecutionContext]:
        """A context with ``inputs`` (converted once) and fresh outputs bound, for timing the
        kernels outside the conversion: a pooled one, or (``pooled=False``) a new one with a
        buffer of its own for every intermediate, temporary and scratch array."""
        bound = self._converted_inputs(inputs)
        fresh = {storage: np.empty(shape, dtype) for storage, shape, dtype in self._direct_output_types}
        if not pooled:
            context = self._new_context(share_buffers=False)
            context.bind(bound, fresh)
            yield context
            context.unbind()
            return
        with self._contexts.acquire() as context:
            context.bind(bound, fresh)
            yield context

