"""TopKV2: shape inference and the numpy reference against ``tf.raw_ops.TopKV2`` (ties,
integers, index types, k = 0 and k = N); it has no lowering by design (a sort), so compiled
models run it on the host (tests/unit/runtime/test_host_fallback.py)."""

from __future__ import annotations

import numpy as np
import pytest

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import lookup


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize(("shape", "k", "index_type"), [((4, 9), 3, "int32"), ((2, 3, 5), 5, "int64"), ((7,), 0, "int32"), ((3, 6), 1, "int32")])
def test_top_k_reference_matches_tensorflow(rng, dtype, shape, k, index_type):
    tf = pytest.importorskip("tensorflow")
    x = rng.integers(-3, 4, size=shape).astype(dtype)  # many ties: the lower position first
    if dtype != "float32":
        x.reshape(-1)[:2] = [np.iinfo(dtype).min, np.iinfo(dtype).max]
    node = Node("t", "TopKV2", ("x:0", "k:0"), attrs={"index_type": index_type})
    definition = lookup("TopKV2")
    assert definition.lower is None
    types = definition.infer(node, [TensorType(shape, dtype), TensorType((), "int32")], [None, np.int32(k)])
    values, indices = definition.reference(node, [x, np.int32(k)])
    expected = tf.raw_ops.TopKV2(input=x, k=k, sorted=True, index_type=tf.as_dtype(index_type))
    np.testing.assert_array_equal(values, expected.values.numpy())
    np.testing.assert_array_equal(indices, expected.indices.numpy())
    assert types == (TensorType(values.shape, dtype), TensorType(indices.shape, index_type)) and indices.dtype == np.dtype(index_type)


def test_top_k_refuses_k_outside_the_row_and_a_run_time_k():
    definition = lookup("TopKV2")
    node = Node("t", "TopKV2", ("x:0", "k:0"))
    types = [TensorType((2, 4)), TensorType((), "int32")]
    with pytest.raises(ShapeError, match="k = 5 is outside \\[0, 4\\]"):
        definition.infer(node, types, [None, np.int32(5)])
    with pytest.raises(ShapeError, match="'t'.*k .* must be a compile-time constant"):
        definition.infer(node, types, [None, None])
