"""LazyTensor: a GraphDef tensor attribute (a Const's ``value``), decoded on first use.

Reading a GraphDef only checks a tensor cheaply (its dtype can be decoded, its shape is
static and non-negative, its content fits the shape) and remembers the proto. The values
are decoded when a compiler stage first asks for them (``numpy.asarray(value)``), which
happens after the graph has been pruned to the fan-in of its outputs: a constant nothing
uses is never decoded. Before decoding, the size is checked against
:class:`polytf.config.FrontendConfig` (TensorFlow fills a shape from fewer values by
repeating the last one, so a one-value proto of a few bytes can stand for gigabytes).
"""

from __future__ import annotations

import numpy as np
from tensorboard.compat.proto import tensor_pb2

from polytf.config import FrontendConfig
from polytf.errors import GraphError, ShapeError
from polytf.frontend.tensor_proto import check_tensor, decode_tensor


class LazyTensor:
    """A tensor attribute decoded on first use (see the module docstring).

    Args:
        proto: the ``TensorProto``.
        owner: the node it belongs to, for messages.

    Attributes:
        dtype_name: numpy dtype name (``"float32"``), or TensorFlow's name when numpy has none.
        shape: the static shape.
        nbytes: bytes of the decoded array.

    Raises:
        ValueError: the proto cannot describe a tensor polytf reads (unknown dtype, unknown
            or negative dimensions, content that does not fit the shape).
    """

    __slots__ = ("proto", "owner", "dtype_name", "shape", "nbytes", "_value")

    def __init__(self, proto: tensor_pb2.TensorProto, owner: str = "") -> None:
        self.proto = proto
        self.owner = owner
        self.dtype_name, self.shape, self.nbytes = check_tensor(proto)
        self._value: np.ndarray | None = None

    def value(self, config: FrontendConfig | None = None) -> np.ndarray:
        """The decoded array (decoded once; read-only).

        Raises:
            ShapeError: it is larger than ``config.max_constant_bytes``.
            GraphError: it cannot be decoded.
        """
        if self._value is None:
            config = config or FrontendConfig.from_environment()
            if self.nbytes > config.max_constant_bytes:
                raise ShapeError(
                    f"constant node '{self.owner}' holds a {self.dtype_name}{list(self.shape)} tensor of {self.nbytes:,} bytes, over the "
                    f"limit of {config.max_constant_bytes:,} bytes (FrontendConfig.max_constant_bytes); if the model really has a "
                    f"constant that large, raise the limit with POLYTF_MAX_CONSTANT_BYTES"
                )
            try:
                value = decode_tensor(self.proto)
            except ValueError as error:
                raise GraphError(f"constant node '{self.owner}': its tensor cannot be decoded: {error}") from None
            value.flags.writeable = False
            self._value = value
        return self._value

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        value = self.value()
        if dtype is not None and np.dtype(dtype) != value.dtype:
            return value.astype(dtype)
        return value.copy() if copy else value

    @property
    def dtype(self) -> np.dtype:
        return self.value().dtype

    @property
    def size(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    def __repr__(self) -> str:
        return f"LazyTensor({self.dtype_name}{list(self.shape)} of '{self.owner}')"


__all__ = ["LazyTensor"]
