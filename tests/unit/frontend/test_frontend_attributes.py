"""Decoding of AttrValue / TensorProto protos (polytf.frontend.attributes)."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto import attr_value_pb2, tensor_pb2, types_pb2

from polytf.frontend.attributes import decode_attr, decode_tensor, dtype_name


def attr(text: str):
    return decode_attr(text_format.Parse(text, attr_value_pb2.AttrValue()))


def tensor(text: str) -> np.ndarray:
    return decode_tensor(text_format.Parse(text, tensor_pb2.TensorProto()))


@pytest.mark.parametrize(
    ("enum", "name"),
    [
        ("DT_FLOAT", "float32"),
        ("DT_DOUBLE", "float64"),
        ("DT_HALF", "float16"),
        ("DT_INT32", "int32"),
        ("DT_INT64", "int64"),
        ("DT_INT8", "int8"),
        ("DT_UINT8", "uint8"),
        ("DT_BOOL", "bool"),
        ("DT_STRING", "string"),
        ("DT_BFLOAT16", "bfloat16"),
        ("DT_QINT8", "qint8"),
        ("DT_FLOAT_REF", "float32"),
        ("DT_RESOURCE", "resource"),
    ],
)
def test_dtype_names(enum: str, name: str) -> None:
    assert dtype_name(types_pb2.DataType.Value(enum)) == name
    assert attr(f"type: {enum}") == name


def test_scalars() -> None:
    assert attr("i: -3") == -3 and isinstance(attr("i: 7"), int)
    assert attr("f: 0.25") == 0.25 and isinstance(attr("f: 1"), float)
    assert attr("b: true") is True
    assert attr("b: false") is False
    assert attr('s: "SAME"') == "SAME"
    assert attr(r's: "\377\376"') == b"\xff\xfe"  # not UTF-8: stays bytes
    assert attr('func { name: "my_fn" }') == "my_fn"
    assert attr('placeholder: "T"') == "T"
    assert attr("") is None


def test_shapes() -> None:
    assert attr("shape { dim { size: -1 } dim { size: 784 } }") == (None, 784)
    assert attr("shape { }") == ()
    assert attr("shape { unknown_rank: true }") is None


def test_lists() -> None:
    assert attr("list { i: 1 i: 2 i: 2 i: 1 }") == (1, 2, 2, 1)
    assert attr("list { f: 0.5 f: 1.5 }") == (0.5, 1.5)
    assert attr('list { s: "a" s: "b" }') == ("a", "b")
    assert attr("list { b: true b: false }") == (True, False)
    assert attr("list { type: DT_FLOAT type: DT_INT32 }") == ("float32", "int32")
    assert attr("list { shape { dim { size: 2 } } shape { unknown_rank: true } }") == ((2,), None)
    assert attr("list { }") == ()
    tensors = attr("list { tensor { dtype: DT_INT32 tensor_shape { } int_val: 4 } }")
    assert len(tensors) == 1 and np.asarray(tensors[0]).item() == 4


def test_tensor_content_float_and_int() -> None:
    floats = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=floats.astype("<f4").tobytes())
    proto.tensor_shape.dim.add(size=2)
    proto.tensor_shape.dim.add(size=3)
    value = decode_tensor(proto)
    assert value.dtype == np.float32 and value.shape == (2, 3)
    np.testing.assert_array_equal(value, floats)
    # a read-only view of the bytes the field read copied out of the proto: no second copy
    assert not value.flags.writeable
    with pytest.raises(ValueError):
        value[0, 0] = 1
    assert decode_tensor(proto) is not value and proto.tensor_content == floats.astype("<f4").tobytes()

    ints = tensor(r'dtype: DT_INT32 tensor_shape { dim { size: 2 } } tensor_content: "\001\000\000\000\376\377\377\377"')
    assert ints.dtype == np.int32
    np.testing.assert_array_equal(ints, [1, -2])

    int64 = np.array([[1 << 40, -5]], dtype="<i8")
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64, tensor_content=int64.tobytes())
    proto.tensor_shape.dim.add(size=1)
    proto.tensor_shape.dim.add(size=2)
    np.testing.assert_array_equal(decode_tensor(proto), int64)


def test_repeated_values_fill_the_shape() -> None:
    one = tensor("dtype: DT_FLOAT tensor_shape { dim { size: 2 } dim { size: 3 } } float_val: 1.5")
    assert one.dtype == np.float32 and one.shape == (2, 3)
    np.testing.assert_array_equal(one, np.full((2, 3), 1.5, np.float32))

    last = tensor("dtype: DT_INT32 tensor_shape { dim { size: 4 } } int_val: 7 int_val: 9")
    np.testing.assert_array_equal(last, [7, 9, 9, 9])

    exact = tensor("dtype: DT_INT64 tensor_shape { dim { size: 3 } } int64_val: 1 int64_val: 2 int64_val: 3")
    assert exact.dtype == np.int64
    np.testing.assert_array_equal(exact, [1, 2, 3])

    zeros = tensor("dtype: DT_FLOAT tensor_shape { dim { size: 2 } }")
    np.testing.assert_array_equal(zeros, [0.0, 0.0])

    scalar = tensor("dtype: DT_DOUBLE tensor_shape { } double_val: 2.25")
    assert scalar.shape == () and scalar.dtype == np.float64 and scalar.item() == 2.25

    flags = tensor("dtype: DT_BOOL tensor_shape { dim { size: 3 } } bool_val: true bool_val: false")
    assert flags.dtype == np.bool_
    np.testing.assert_array_equal(flags, [True, False, False])

    empty = tensor("dtype: DT_FLOAT tensor_shape { dim { size: 0 } dim { size: 4 } }")
    assert empty.shape == (0, 4)


def test_half_and_bfloat16() -> None:
    bits = int(np.array(1.5, np.float16).view(np.uint16))
    half = tensor(f"dtype: DT_HALF tensor_shape {{ dim {{ size: 2 }} }} half_val: {bits}")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, [1.5, 1.5])

    bf_bits = int(np.array(-2.0, np.float32).view(np.uint32)) >> 16
    bf = tensor(f"dtype: DT_BFLOAT16 tensor_shape {{ }} half_val: {bf_bits}")
    assert bf.dtype == np.float32 and bf.item() == -2.0


def test_strings() -> None:
    value = tensor('dtype: DT_STRING tensor_shape { dim { size: 2 } } string_val: "ab" string_val: "c"')
    assert value.dtype == object and list(value) == [b"ab", b"c"]


def test_bad_tensors() -> None:
    with pytest.raises(ValueError, match="needs 3"):
        tensor(r'dtype: DT_FLOAT tensor_shape { dim { size: 3 } } tensor_content: "\000\000\200?"')
    with pytest.raises(ValueError, match="needs 1"):
        tensor("dtype: DT_FLOAT tensor_shape { dim { size: 1 } } float_val: 1 float_val: 2")
    with pytest.raises(ValueError, match="non-static"):
        tensor("dtype: DT_FLOAT tensor_shape { dim { size: -1 } }")
