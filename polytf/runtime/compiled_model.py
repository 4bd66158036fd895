"""CompiledModel: a whole graph as a sequence of native kernel calls over
preallocated buffers.

Calling the model copies the inputs into their buffers, calls each kernel once
through ctypes (which releases the GIL) and returns copies of the outputs. There is
no per-element Python on this path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polytf.errors import GraphError, ShapeError
from polytf.graph import Graph, split_tensor_name
from polytf.graph.passes.fusion import resolve_view
from polytf.ops.lowering import LoweredKernel
from polytf.runtime.buffers import aligned_copy, aligned_empty, pointer_table
from polytf.runtime.timing import call_latencies
from polytf.targets.target import CompiledKernel


def output_key(tensor: str) -> str:
    """Name under which an output tensor is returned: the node name, plus ``:port`` if not 0."""
    node, port = split_tensor_name(tensor)
    return node if port == 0 else f"{node}:{port}"


@dataclass
class KernelCall:
    kernel: CompiledKernel
    lowered: LoweredKernel
    arrays: list[np.ndarray]
    table: object


class CompiledModel:
    """A callable model: ``model(**{placeholder_name: array}) -> {output_name: array}``.

    Args:
        graph: the typed graph the kernels were compiled from.
        kernels: lowered kernels and their compiled code, in execution order.
        threads: threads each parallel kernel uses.

    Attributes:
        input_types: placeholder name -> TensorType.
        output_names: keys of the returned dictionary, in the graph's output order.
        recipes: kernel name -> the ScheduleRecipe it runs with.
    """

    def __init__(self, graph: Graph, kernels: Sequence[tuple[LoweredKernel, CompiledKernel]], threads: int, source: str = "") -> None:
        self.graph = graph
        self.threads = int(threads)
        self.source = source or graph.source
        self.input_types = {n.name: graph.types[n.output(0)] for n in graph.placeholders}
        self.output_names = tuple(output_key(t) for t in graph.outputs)
        self._buffers: dict[str, np.ndarray] = {}
        for placeholder in graph.placeholders:
            tensor_type = graph.types[placeholder.output(0)]
            self._buffers[placeholder.output(0)] = aligned_empty(tuple(tensor_type.shape), tensor_type.dtype)
        self._calls: list[KernelCall] = []
        #: storage tensor -> (kernel call, array slot) pairs that point at it
        self._slots: dict[str, list[tuple[int, int]]] = {}
        for lowered, kernel in kernels:
            arrays = []
            for slot, info in enumerate(lowered.scop.arrays):
                arrays.append(self._buffer_for(lowered, info))
                tensor = lowered.array_tensors.get(info.name)
                if tensor is not None and info.role != "temporary":
                    self._slots.setdefault(resolve_view(self.graph, tensor), []).append((len(self._calls), slot))
            self._calls.append(KernelCall(kernel, lowered, arrays, pointer_table(arrays)))
        for tensor in graph.outputs:
            self._storage(tensor)
        self._outputs = [(output_key(t), resolve_view(graph, t), tuple(graph.types[t].shape)) for t in graph.outputs]
        placeholders = {p.output(0) for p in graph.placeholders}
        # Outputs computed by a kernel are written straight into fresh arrays on each call
        # (no copy out); others (a placeholder or constant passed through) are copied.
        self._direct_outputs = {storage for _, storage, _ in self._outputs if storage in self._slots and storage not in placeholders and storage not in graph.constants}
        self.recipes = {call.lowered.scop.name: call.kernel.recipe for call in self._calls}

    def _storage(self, tensor: str) -> np.ndarray:
        storage = resolve_view(self.graph, tensor)
        if storage not in self._buffers:
            if storage in self.graph.constants:
                tensor_type = self.graph.types[storage]
                self._buffers[storage] = aligned_copy(np.asarray(self.graph.constants[storage]), tensor_type.dtype)
            else:
                tensor_type = self.graph.types[storage]
                self._buffers[storage] = aligned_empty(tuple(tensor_type.shape), tensor_type.dtype)
        return self._buffers[storage]

    def _buffer_for(self, lowered: LoweredKernel, info) -> np.ndarray:
        tensor = lowered.array_tensors.get(info.name)
        if tensor is None or info.role == "temporary":
            return aligned_empty(info.shape, info.dtype)
        return self._storage(tensor)

    @property
    def kernels(self) -> tuple[CompiledKernel, ...]:
        return tuple(call.kernel for call in self._calls)

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Run the model.

        Args:
            inputs: one array per placeholder, by placeholder name, with exactly the
                compiled shape (values are converted to the placeholder's dtype).

        Returns:
            output name -> array (a fresh array on every call; inputs that already are
            C-contiguous arrays of the placeholder's dtype are read in place, not copied).

        Raises:
            GraphError: a placeholder is missing or an unknown name is given.
            ShapeError: an input has the wrong shape.
        """
        bound = self._checked_inputs(inputs)
        fresh: dict[str, np.ndarray] = {}
        patched = [f"{name}:0" for name in bound]
        try:
            for name, value in bound.items():
                self._point_slots(f"{name}:0", value)
            for storage in self._direct_outputs:
                buffer = self._buffers[storage]
                fresh[storage] = np.empty(buffer.shape, buffer.dtype)
                patched.append(storage)
                self._point_slots(storage, fresh[storage])
            for call in self._calls:
                call.kernel.function(call.table, self.threads)
            result = {}
            for name, storage, shape in self._outputs:
                if storage in fresh:
                    result[name] = fresh[storage].reshape(shape)
                elif storage.endswith(":0") and storage[:-2] in bound:
                    result[name] = bound[storage[:-2]].reshape(shape).copy()  # a placeholder passed through
                else:
                    result[name] = self._buffers[storage].reshape(shape).copy()
            return result
        finally:
            # the tables must not keep pointers to the caller's arrays
            for storage in patched:
                self._point_slots(storage, self._buffers[storage])

    def _point_slots(self, storage: str, array: np.ndarray) -> None:
        address = array.ctypes.data
        for call_index, slot in self._slots.get(storage, ()):
            self._calls[call_index].table[slot] = address

    def _checked_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Validated inputs as C-contiguous arrays of the placeholder dtypes (the caller's own
        arrays when they already are: kernels read them in place)."""
        self._validate_inputs(inputs)
        return {name: np.ascontiguousarray(value, dtype=self.input_types[name].dtype) for name, value in inputs.items()}

    def _bind_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Copy the inputs into the model's own buffers (for :meth:`run_kernels`)."""
        self._validate_inputs(inputs)
        for name, value in inputs.items():
            self._buffers[f"{name}:0"][...] = np.asarray(value)

    def _validate_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        unknown = sorted(set(inputs) - set(self.input_types))
        missing = sorted(set(self.input_types) - set(inputs))
        if unknown or missing:
            raise GraphError(
                f"model {self.source} takes inputs {sorted(self.input_types)}; "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown {unknown}" if unknown else "")
            )
        for name, value in inputs.items():
            expected = self.input_types[name]
            value = np.asarray(value)
            if tuple(value.shape) != tuple(expected.shape):
                raise ShapeError(
                    f"input '{name}' has shape {tuple(value.shape)}, the model was compiled for {expected}; "
                    f"compile for this shape with input_shapes={{'{name}': {tuple(value.shape)}}} (API) or --input {name}:{','.join(map(str, value.shape))} (CLI)"
                )

    def run_kernels(self) -> None:
        """Run every kernel on the current buffer contents (for timing)."""
        for call in self._calls:
            call.kernel.function(call.table, self.threads)

    def latency_s(self, inputs: Mapping[str, np.ndarray], repeats: int = 20, warmup: int = 3) -> list[float]:
        """Per-call latencies in seconds (inputs bound once; kernels only)."""
        self._bind_inputs(inputs)
        return call_latencies(self.run_kernels, repeats, warmup)
