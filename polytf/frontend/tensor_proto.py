"""Decoding of ``TensorProto`` values and TensorFlow dtypes to numpy, without TensorFlow.

Source: tensorflow/core/framework/tensor.proto and types.proto (the protos come from
``tensorboard.compat.proto``): a tensor holds its elements either packed in
``tensor_content`` or in the repeated ``*_val`` field of its dtype, where a shorter list
repeats its last value over the shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

__all__ = ["check_tensor", "decode_shape", "decode_tensor", "dtype_name", "numpy_dtype"]

# TensorFlow DataType enum name -> numpy dtype name (or a descriptive name when numpy has none).
_DTYPE_NAMES: dict[str, str] = {
    "DT_FLOAT": "float32",
    "DT_DOUBLE": "float64",
    "DT_HALF": "float16",
    "DT_BFLOAT16": "bfloat16",
    "DT_INT8": "int8",
    "DT_INT16": "int16",
    "DT_INT32": "int32",
    "DT_INT64": "int64",
    "DT_UINT8": "uint8",
    "DT_UINT16": "uint16",
    "DT_UINT32": "uint32",
    "DT_UINT64": "uint64",
    "DT_BOOL": "bool",
    "DT_COMPLEX64": "complex64",
    "DT_COMPLEX128": "complex128",
    "DT_STRING": "string",
    "DT_RESOURCE": "resource",
    "DT_VARIANT": "variant",
}

# Repeated *_val field of a TensorProto holding values of each numpy dtype name.
_VAL_FIELDS: dict[str, str] = {
    "float32": "float_val",
    "float64": "double_val",
    "float16": "half_val",
    "bfloat16": "half_val",
    "int8": "int_val",
    "int16": "int_val",
    "int32": "int_val",
    "uint8": "int_val",
    "uint16": "int_val",
    "int64": "int64_val",
    "uint32": "uint32_val",
    "uint64": "uint64_val",
    "bool": "bool_val",
    "complex64": "scomplex_val",
    "complex128": "dcomplex_val",
    "string": "string_val",
}

_REF_OFFSET = 100  # DT_FLOAT_REF == DT_FLOAT + 100, and so on.


def dtype_name(enum_value: int) -> str:
    """Numpy dtype name of a TensorFlow ``DataType`` enum value.

    ``DT_FLOAT`` -> ``"float32"``, ``DT_INT32`` -> ``"int32"``, ``DT_BOOL`` -> ``"bool"``; reference
    types (``DT_FLOAT_REF``) map like their base type. Types numpy has no dtype for come back
    as a lower-case name without the ``DT_`` prefix (``"qint8"``, ``"resource"``); an unknown enum
    value as ``"dtype_<number>"``.
    """
    value = int(enum_value)
    if value > _REF_OFFSET:
        value -= _REF_OFFSET
    try:
        name = types_pb2.DataType.Name(value)
    except ValueError:
        return f"dtype_{int(enum_value)}"
    if name in _DTYPE_NAMES:
        return _DTYPE_NAMES[name]
    return name[3:].lower() if name.startswith("DT_") else name.lower()


def numpy_dtype(name: str) -> np.dtype | None:
    """The numpy dtype for a dtype name from :func:`dtype_name`, or ``None`` if numpy has none."""
    if name in ("string", "resource", "variant"):
        return np.dtype(object)
    if name == "bfloat16":
        return np.dtype(np.float32)  # decoded (widened) to float32
    try:
        return np.dtype(name)
    except TypeError:
        return None


def decode_shape(shape: tensor_shape_pb2.TensorShapeProto) -> tuple[int | None, ...] | None:
    """A ``TensorShapeProto`` as a tuple; ``-1`` dimensions become ``None``; unknown rank -> ``None``.

    Raises:
        ValueError: a dimension below -1 (TensorFlow's TensorShapeProto allows only -1 as
            "unknown").
    """
    if shape.unknown_rank:
        return None
    for d in shape.dim:
        if d.size < -1:
            raise ValueError(f"shape {[int(x.size) for x in shape.dim]} has a dimension {d.size} (only -1, meaning unknown, may be negative)")
    return tuple(None if d.size < 0 else int(d.size) for d in shape.dim)


def check_tensor(tensor: tensor_pb2.TensorProto) -> tuple[str, tuple[int, ...], int]:
    """Check, without decoding, that a ``TensorProto`` describes a tensor :func:`decode_tensor`
    can decode: a known dtype, a static non-negative shape, content that fits it.

    Returns:
        ``(dtype name, shape, bytes of the decoded array)``.

    Raises:
        ValueError: naming what is wrong.
    """
    name = dtype_name(tensor.dtype)
    shape = decode_shape(tensor.tensor_shape)
    if shape is None or any(d is None for d in shape):
        raise ValueError(f"tensor attribute with a non-static shape {shape}")
    count = 1
    for extent in shape:
        count *= extent
    if name in ("resource", "variant") or (numpy_dtype(name) is None and name != "bfloat16"):
        raise ValueError(f"cannot decode a tensor of dtype {name}")
    itemsize = 4 if name == "bfloat16" else numpy_dtype(name).itemsize
    content = len(tensor.tensor_content)  # each read of the field copies its bytes: one read
    if content and name != "string":
        raw = 2 if name == "bfloat16" else itemsize
        if content != count * raw:
            raise ValueError(f"tensor_content holds {content} bytes but the shape {list(shape)} of {name} needs {count * raw}")
    else:
        field = _VAL_FIELDS.get(name)
        if field is None:
            raise ValueError(f"cannot decode a tensor of dtype {name}")
        values = len(getattr(tensor, field)) // (2 if name in ("complex64", "complex128") else 1)
        if values > count:
            raise ValueError(f"tensor holds {values} {name} values but the shape {list(shape)} needs {count}")
    return name, tuple(int(d) for d in shape), count * itemsize


def _bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """A new float32 array: the bfloat16 bits, the high half of each float32."""
    wide = bits.astype(np.uint32)
    wide <<= 16
    return wide.view(np.float32)


def decode_tensor(tensor: tensor_pb2.TensorProto) -> np.ndarray:
    """A ``TensorProto`` as a numpy array.

    Values come from ``tensor_content`` (raw little-endian bytes) when it is set, otherwise from
    the repeated ``*_val`` field of the dtype. As in TensorFlow, fewer values than the shape holds
    means the last value is repeated to fill it (a single value fills the whole tensor), and no
    values at all means zeros. ``bfloat16`` is widened to ``float32``; strings come back as an
    object array of ``bytes``. An array from ``tensor_content`` in native byte order is a
    read-only view of the bytes read from the field (copy it to write into it).

    Raises:
        ValueError: for a dtype that cannot be decoded or content that does not fit the shape.
    """
    name = dtype_name(tensor.dtype)
    shape = decode_shape(tensor.tensor_shape)
    if shape is None or any(d is None for d in shape):
        raise ValueError(f"tensor attribute with a non-static shape {shape}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1

    content = tensor.tensor_content  # each read of the field copies its bytes: one read
    if content and name not in ("string", "resource", "variant"):
        raw_dtype = {"bfloat16": np.dtype("<u2")}.get(name)
        if raw_dtype is None:
            np_dtype = numpy_dtype(name)
            if np_dtype is None:
                raise ValueError(f"cannot decode a tensor of dtype {name}")
            raw_dtype = np_dtype.newbyteorder("<")
        data = np.frombuffer(content, dtype=raw_dtype)
        if data.size != count:
            raise ValueError(f"tensor_content holds {data.size} {name} values but the shape {shape} needs {count}")
        if name == "bfloat16":
            return _bfloat16_to_float32(data).reshape(shape)  # a new array already
        if data.dtype.isnative:
            # a view of the field's bytes, which reading the field copied out of the proto: no
            # second copy (nor a freed temporary as large as the tensor); read-only
            return data.reshape(shape)
        return data.astype(data.dtype.newbyteorder("="), copy=True).reshape(shape)

    field = _VAL_FIELDS.get(name)
    if field is None:
        raise ValueError(f"cannot decode a tensor of dtype {name}")
    values = list(getattr(tensor, field))
    if name in ("complex64", "complex128"):
        values = [complex(re, im) for re, im in zip(values[0::2], values[1::2])]

    if name == "string":
        array = np.empty(len(values), dtype=object)
        array[:] = [bytes(v) for v in values]
        fill: Any = b""
    elif name in ("float16", "bfloat16"):
        bits = np.array(values, dtype=np.uint16)
        array = bits.view(np.float16) if name == "float16" else _bfloat16_to_float32(bits)
        fill = 0
    else:
        np_dtype = numpy_dtype(name)
        assert np_dtype is not None
        array = np.array(values, dtype=np_dtype)
        fill = 0

    if array.size == count:
        return array.reshape(shape)
    if array.size > count:
        raise ValueError(f"tensor holds {array.size} {name} values but the shape {shape} needs {count}")
    out = np.empty(count, dtype=array.dtype)
    if array.size == 0:
        out[:] = fill
    else:
        out[: array.size] = array
        out[array.size :] = array[-1]
    return out.reshape(shape)
