"""Static type of a tensor: shape and dtype."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of one tensor.

    Attributes:
        shape: dimension sizes; ``None`` marks a dimension not known yet (e.g. a batch of -1).
        dtype: numpy dtype name, e.g. ``"float32"``.
    """

    shape: tuple[int | None, ...]
    dtype: str = "float32"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is known."""
        return all(d is not None for d in self.shape)

    @property
    def element_count(self) -> int:
        """Number of elements (requires a static shape)."""
        count = 1
        for extent in self.shape:  # Python integers: no overflow on absurd shapes
            count *= int(extent)
        return count

    def __str__(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"
