"""CudaModel: a whole graph as a sequence of GPU kernel launches, every tensor on the device
(the CUDA target's :class:`~polytf.runtime.model.Model`).

Built once (:meth:`polytf.compiler.backends.CudaBackend.build_model`): the kernels are compiled for the GPU
(:class:`polytf.targets.cuda.CudaTarget`), the graph's constants (weights) are uploaded to
device memory once, and the first execution context (intermediate tensors and kernel
temporaries in device memory: :mod:`polytf.runtime.cuda.execution_context`) is allocated and
checked against the kernels. A call then

1. checks the inputs: every placeholder given, each of its compiled shape and dtype
   (:mod:`polytf.runtime.input_checks`); host arrays are converted once and uploaded,
   device arrays (``cupy.ndarray``) are used where they are, without a copy;
2. allocates the outputs in device memory and queues every kernel on the current stream
   (host-fallback steps run on the host between them, with copies in and out);
3. returns the outputs: device arrays when an input was a device array (nothing is copied
   to the host), else numpy arrays (one download per output).

The buffers and launches go through a :class:`~polytf.runtime.cuda.backend.DeviceBackend`:
:class:`~polytf.runtime.cuda.backend.CupyBackend` on a GPU,
:class:`~polytf.runtime.cuda.emulation.EmulatedDevice` on the CPU (tests).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Graph
from polytf.lowering.host_fallback import HostStep
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.ops.sources import placeholder_shape
from polytf.plan.binding_plan import output_key, plan_model
from polytf.plan.bindings import HostPlan
from polytf.plan.buffers import aligned_copy
from polytf.runtime.context_pool import ContextPool
from polytf.runtime.cuda.backend import DeviceBackend
from polytf.runtime.cuda.execution_context import CudaExecutionContext
from polytf.runtime.input_checks import check_input_shape, checked_input, named_inputs
from polytf.runtime.model import Model
from polytf.targets.cuda import CudaKernel

__all__ = ["CudaModel"]


class CudaModel(Model):
    """A callable model on a GPU: ``model(**{placeholder_name: array}) -> {output_name: array}``.

    Thread safety: a CudaModel may be called from several threads at once; each call runs
    on its own execution context (taken from a pool), constants are shared and only read.

    Args:
        graph: the typed graph the kernels were compiled from.
        kernels: ``(lowered kernel, compiled GPU kernel)`` pairs and host steps
            (:class:`~polytf.lowering.host_fallback.HostStep`), execution order; the
            backend launches the kernels.
        backend: the device.
        source: the model's file, for messages (default: the graph's).

    Attributes:
        input_types, output_names, host_nodes, recipes, tuned_kernels: as a
            :class:`~polytf.runtime.model.Model`'s (``recipes``: GpuRecipes).

    Raises:
        GraphError: a kernel reads a tensor that nothing provides (a polytf bug).
        ShapeError: a buffer does not fit its kernel (a polytf bug).
    """

    def __init__(self, graph: Graph, kernels: Sequence[tuple[LoweredKernel, CudaKernel] | HostStep], backend: DeviceBackend, source: str = "") -> None:
        self.backend = backend
        self.source = source or graph.source
        self.host_nodes = tuple(step.node for step in kernels if isinstance(step, HostStep))
        self.input_types = {n.name: graph.types[n.output(0)] for n in graph.placeholders}
        self._declared_shapes = {n.name: placeholder_shape(n) for n in graph.placeholders}
        self.output_names = tuple(output_key(t) for t in graph.outputs)
        self.tuned_kernels: tuple[str, ...] = ()
        plan = plan_model(graph, kernels, self.source)
        self._plan = plan
        self._host_constants: dict[str, np.ndarray] = {}
        self._constants: dict[str, Any] = {}
        for storage in plan.constants:  # uploaded once, now
            value = aligned_copy(np.asarray(graph.constants[storage]), graph.types[storage].dtype)
            value.flags.writeable = False
            self._host_constants[storage] = value
            self._constants[storage] = backend.upload(value)
        self._contexts = ContextPool(self._new_context)
        with self._contexts.acquire():  # the first context, allocated (and its buffers checked) now
            pass
        self.recipes = {p.kernel.scop.name: p.kernel.recipe for p in plan.kernel_plans}

    def pack_constants(self) -> None:
        """Nothing to do: the constants were uploaded when the model was built."""

    def _new_context(self) -> CudaExecutionContext:
        return CudaExecutionContext(self._plan.steps, self._constants, self._host_constants, self._plan.intermediates, self.backend)

    @property
    def kernels(self) -> tuple[CudaKernel, ...]:
        """The GPU kernels, execution order."""
        return tuple(p.kernel for p in self._plan.kernel_plans)

    @property
    def step_kinds(self) -> tuple[str, ...]:
        """``"kernel"`` or ``"host"`` for each step of a call, execution order."""
        return tuple("host" if isinstance(step, HostPlan) else "kernel" for step in self._plan.steps)

    @property
    def context_count(self) -> int:
        """Device contexts allocated so far (the most calls that ran at once)."""
        return self._contexts.size

    def __call__(self, **inputs: Any) -> dict[str, Any]:
        """Run the model (see :meth:`run`): device arrays out when an input is a device array,
        numpy arrays out otherwise."""
        return self.run(inputs)

    def run(self, inputs: Mapping[str, Any], device_outputs: bool | None = None) -> dict[str, Any]:
        """Run the model once.

        Args:
            inputs: one array per placeholder, by name, with exactly the compiled shape: a
                device array of the placeholder's dtype (used in place; a non-contiguous one
                is copied on the device), or anything ``numpy.asarray`` accepts (converted
                to the placeholder's dtype once, then uploaded).
            device_outputs: return device arrays (True) or numpy arrays (False); None: device
                arrays when some input is a device array.

        Returns:
            output name -> a fresh array (device or host, see ``device_outputs``).

        Raises:
            GraphError: a placeholder is missing or an unknown name is given.
            ShapeError: an input has the wrong shape or dtype, cannot be converted, or lives
                on another device (the message names the placeholder).
        """
        device, host, any_device = self._bound_inputs(inputs)
        if device_outputs is None:
            device_outputs = any_device
        fresh = {storage: self.backend.allocate(shape, dtype) for storage, shape, dtype in self._plan.direct_output_types}
        context = self._contexts.take()
        try:
            self.backend.wait(context.fence)
            context.bind(device, fresh, host)
            context.run()
            context.fence = self.backend.fence()
        finally:
            self._contexts.release(context)
        return {name: self._output(storage, shape, fresh, device, host, device_outputs) for name, storage, shape in self._plan.outputs}

    def _output(self, storage: str, shape: tuple[int, ...], fresh: Mapping[str, Any], device: Mapping[str, Any], host: Mapping[str, np.ndarray], device_outputs: bool) -> Any:
        """One output, as a fresh device or host array."""
        placeholder = self._plan.placeholder_of.get(storage)
        if storage in fresh:
            value = fresh[storage]
            return value.reshape(shape) if device_outputs else self.backend.download(value).reshape(shape)
        if placeholder is not None:  # a placeholder passed through
            if device_outputs:
                return self.backend.duplicate(device[placeholder]).reshape(shape)
            return host[placeholder].reshape(shape).copy() if placeholder in host else self.backend.download(device[placeholder]).reshape(shape)
        if device_outputs:  # a constant output
            return self.backend.duplicate(self._constants[storage]).reshape(shape)
        return self._host_constants[storage].reshape(shape).copy()

    def _bound_inputs(self, inputs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray], bool]:
        """Each input as a device buffer: ``(device buffers, host arrays of the inputs given
        on the host, whether some input was a device array)``.

        Raises:
            GraphError, ShapeError: as :meth:`run`.
        """
        named = named_inputs(inputs, self.input_types, self.source)
        device: dict[str, Any] = {}
        host: dict[str, np.ndarray] = {}
        any_device = False
        for name, value in named.items():
            expected = self.input_types[name]
            declared = self._declared_shapes.get(name)
            if self.backend.is_device_array(value):
                any_device = True
                if value.dtype != np.dtype(expected.dtype):
                    raise ShapeError(
                        f"input '{name}' is a device array of dtype {value.dtype}, the model takes {expected.dtype}; "
                        f"convert it on the device first (value.astype('{expected.dtype}'))"
                    )
                check_input_shape(name, tuple(value.shape), expected, declared)
                try:
                    device[name] = self.backend.adopt(value)
                except ShapeError as error:
                    raise ShapeError(f"input '{name}': {error}") from None
                continue
            array = checked_input(name, value, expected, declared)
            host[name] = array
            device[name] = self.backend.upload(array)
        return device, host, any_device

    @contextlib.contextmanager
    def _bound_context(self, inputs: Mapping[str, Any]) -> Iterator[CudaExecutionContext]:
        """A pooled context with ``inputs`` (uploaded once) and fresh outputs bound."""
        device, host, _ = self._bound_inputs(inputs)
        fresh = {storage: self.backend.allocate(shape, dtype) for storage, shape, dtype in self._plan.direct_output_types}
        with self._contexts.acquire() as context:
            self.backend.wait(context.fence)
            context.bind(device, fresh, host)
            try:
                yield context
            finally:
                context.fence = self.backend.fence()

    def latency_s(self, inputs: Mapping[str, Any], repeats: int = 20, warmup: int = 3) -> list[float]:
        """Device seconds of each of ``repeats`` runs of the model's steps (after ``warmup``
        untimed ones), inputs uploaded and bound once, outside the timed region (CUDA events
        on a GPU: the time from the first kernel's start to the last one's end)."""
        with self._bound_context(inputs) as context:
            for _ in range(warmup):
                context.run()
            return [self.backend.elapsed_s(context.run) for _ in range(repeats)]

    def kernel_latency_s(self, inputs: Mapping[str, Any], repeats: int = 10, warmup: int = 2) -> list[tuple[CudaKernel, list[float]]]:
        """Each kernel (execution order) with the device seconds of ``repeats`` launches of it
        alone, on the values of one model run on ``inputs`` (after ``warmup`` whole runs)."""
        with self._bound_context(inputs) as context:
            latencies = context.kernel_latencies(repeats, warmup)
        return list(zip(self.kernels, latencies))
