"""Decoding of GraphDef attribute protos (``AttrValue``, ``TensorProto``) to Python values.

No TensorFlow import: the protos come from ``tensorboard.compat.proto``.

Decoding rules (see :func:`decode_attr`):

=========== ===============================================================
proto field Python value
=========== ===============================================================
``i``       ``int``
``f``       ``float``
``b``       ``bool``
``s``       ``str`` (UTF-8), or ``bytes`` when not valid UTF-8
``type``    numpy dtype name, e.g. ``DT_FLOAT`` -> ``"float32"`` (see :func:`dtype_name`)
``shape``   tuple of ``int | None`` (``-1`` -> ``None``), or ``None`` for an unknown rank
``tensor``  :class:`~polytf.frontend.lazy_tensor.LazyTensor` (``numpy.asarray`` decodes it: :func:`decode_tensor`)
``list``    tuple of decoded values
``func``    the function name, ``str``
``placeholder`` the placeholder name, ``str``
=========== ===============================================================
"""

from __future__ import annotations

from typing import Any

from tensorboard.compat.proto import attr_value_pb2

from polytf.frontend.lazy_tensor import LazyTensor
from polytf.frontend.tensor_proto import decode_shape, decode_tensor, dtype_name, numpy_dtype

__all__ = ["decode_attr", "decode_attrs", "decode_shape", "decode_tensor", "dtype_name", "numpy_dtype"]  # the last four from tensor_proto

def _decode_bytes(value: bytes) -> str | bytes:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(value)


def _decode_list(value: attr_value_pb2.AttrValue.ListValue, owner: str = "") -> tuple[Any, ...]:
    # A ListValue has one repeated field per kind; at most one is non-empty in practice.
    if value.s:
        return tuple(_decode_bytes(v) for v in value.s)
    if value.i:
        return tuple(int(v) for v in value.i)
    if value.f:
        return tuple(float(v) for v in value.f)
    if value.b:
        return tuple(bool(v) for v in value.b)
    if value.type:
        return tuple(dtype_name(v) for v in value.type)
    if value.shape:
        return tuple(decode_shape(v) for v in value.shape)
    if value.tensor:
        return tuple(LazyTensor(v, owner) for v in value.tensor)
    if value.func:
        return tuple(v.name for v in value.func)
    return ()


def decode_attr(value: attr_value_pb2.AttrValue, owner: str = "") -> Any:
    """One ``AttrValue`` as a Python value (see the module docstring for the rules); a
    tensor becomes a :class:`~polytf.frontend.lazy_tensor.LazyTensor` of node ``owner``,
    checked but not decoded.

    Raises:
        ValueError: when a tensor or shape attribute is malformed.
    """
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "i":
        return int(value.i)
    if kind == "f":
        return float(value.f)
    if kind == "b":
        return bool(value.b)
    if kind == "s":
        return _decode_bytes(value.s)
    if kind == "type":
        return dtype_name(value.type)
    if kind == "shape":
        return decode_shape(value.shape)
    if kind == "tensor":
        return LazyTensor(value.tensor, owner)
    if kind == "list":
        return _decode_list(value.list, owner)
    if kind == "func":
        return value.func.name
    if kind == "placeholder":
        return value.placeholder
    return None  # a kind added by a newer proto version


def decode_attrs(attrs: Any, owner: str = "") -> dict[str, Any]:
    """A NodeDef's ``attr`` map as a dict, keys sorted for deterministic output (``owner``:
    the node's name, for messages about its tensors)."""
    return {key: decode_attr(attrs[key], owner) for key in sorted(attrs)}
