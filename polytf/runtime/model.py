"""Model: what a compiled model offers on any target.

``polytf.load`` returns one: a :class:`~polytf.runtime.cpu.compiled_model.CompiledModel`
(native kernels on this CPU) or a :class:`~polytf.runtime.cuda.model.CudaModel` (GPU
kernels, every tensor on the device). Both implement this protocol explicitly (they
subclass it), so that the tuner, the bench and the command line call, time and describe a
model without asking which target it runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from polytf.graph import TensorType
from polytf.lowering.host_fallback import HostNode
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.kernel import Kernel

__all__ = ["Model"]


@runtime_checkable
class Model(Protocol):
    """A callable model: ``model(**{placeholder_name: array}) -> {output_name: array}``.

    A model keeps no reference to the graph it was compiled from: the graph's constants are
    the weights as read, and a model holds each weight only in the form its kernels read.

    Attributes:
        source: the model's file, for messages.
        input_types: placeholder name -> TensorType (the compiled shape and dtype).
        output_names: keys of the returned dictionary, in the graph's output order.
        host_nodes: the nodes that run on the host, with the reason
            (:mod:`polytf.lowering.host_fallback`).
        recipes: kernel name -> the recipe it runs with.
        tuned_kernels: names of the kernels compiled from a tuning record, sorted.
    """

    source: str
    input_types: dict[str, TensorType]
    output_names: tuple[str, ...]
    host_nodes: tuple[HostNode, ...]
    recipes: dict[str, ScheduleRecipe]
    tuned_kernels: tuple[str, ...]

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        """The compiled kernels, execution order."""
        ...

    @property
    def step_kinds(self) -> tuple[str, ...]:
        """``"kernel"`` or ``"host"`` for each step of a call, execution order (the kernels in
        :attr:`kernels` order)."""
        ...

    @property
    def context_count(self) -> int:
        """Execution contexts built so far (the most calls that ran at once)."""
        ...

    def pack_constants(self) -> None:
        """Put the weights into the form the kernels read (packed panels, device memory) now,
        if the model has not yet; otherwise its first call does. Thread-safe."""
        ...

    def __call__(self, **inputs: Any) -> dict[str, Any]:
        """Run the model once on one array per placeholder, by name, each of its compiled
        shape; a fresh array per output.

        Raises:
            GraphError: a placeholder is missing or an unknown name is given.
            ShapeError: an input has the wrong shape or cannot be converted.
        """
        ...

    def latency_s(self, inputs: Mapping[str, Any], repeats: int = 20, warmup: int = 3) -> list[float]:
        """Seconds of each of ``repeats`` runs of the model's steps (after ``warmup`` untimed
        ones), inputs converted and bound once, outside the timed region."""
        ...

    def kernel_latency_s(self, inputs: Mapping[str, Any], repeats: int = 10, warmup: int = 2) -> list[tuple[Kernel, list[float]]]:
        """Each kernel (execution order) with the seconds of ``repeats`` runs of it alone, on
        the values of one model call on ``inputs`` (after ``warmup`` whole calls)."""
        ...
