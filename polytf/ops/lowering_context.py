"""What a lowering sees: the arrays it reads and writes (:class:`ArrayRef`) and the Scop being
built (:class:`LoweringContext`: fresh statement names, kernel-local temporaries, the values
of compile-time constant inputs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polytf.graph import TensorType


@dataclass(frozen=True)
class ArrayRef:
    """An array a lowering reads or writes: its Scop name and its type."""

    name: str
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.type.shape)


class LoweringContext:
    """What a lowering may ask of the Scop being built: fresh statement names,
    kernel-local temporary arrays and the values of compile-time constant inputs."""

    def __init__(self, statement_prefix: str = "S", array_prefix: str = "T", constants: Mapping[str, np.ndarray] | None = None) -> None:
        #: graph tensor name -> compile-time value (read with ``constant_inputs.constant_input``).
        self.constants: Mapping[str, np.ndarray] = dict(constants or {})
        self._statement_count = 0
        self._array_count = 0
        self._statement_prefix = statement_prefix
        self._array_prefix = array_prefix
        self.temporaries: list[ArrayRef] = []

    def statement_name(self) -> str:
        """A new unique statement name (``S0``, ``S1``, ...)."""
        name = f"{self._statement_prefix}{self._statement_count}"
        self._statement_count += 1
        return name

    def temporary(self, shape: Sequence[int], dtype: str = "float32") -> ArrayRef:
        """A new array that lives only inside the kernel (e.g. Softmax's row maxima)."""
        ref = ArrayRef(f"{self._array_prefix}{self._array_count}", TensorType(tuple(int(d) for d in shape), dtype))
        self._array_count += 1
        self.temporaries.append(ref)
        return ref


__all__ = ["ArrayRef", "LoweringContext"]
