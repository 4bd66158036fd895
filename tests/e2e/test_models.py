"""End to end: zoo models compiled by polytf agree with TensorFlow running the same GraphDef.

API under test: ``polytf.load(path, cache_dir=None, input_shapes=None) -> CompiledModel``;
``model(**{placeholder: array}) -> {output node name: array}``;
``polytf.tune(path, trials=N, cache_dir=DIR) -> TuneReport``.

Every zoo model has placeholder ``"input"`` and output node ``"Identity"``. Tolerance (see
conftest.py): rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402

INPUT = "input"
OUTPUT = "Identity"


def compare_with_tensorflow(path: Path, x: np.ndarray, tf_reference, assert_close, **load_kwargs) -> dict[str, np.ndarray]:
    model = polytf.load(path, **load_kwargs)
    result = model(**{INPUT: x})
    assert isinstance(result, dict), f"a CompiledModel call returns a dict, not {type(result).__name__}"
    assert list(result) == [OUTPUT], f"outputs are keyed by output node name: {list(result)}"
    reference = tf_reference(path, {INPUT: x}, [OUTPUT])[OUTPUT]
    assert_close(result[OUTPUT], reference, f"{path.name} {OUTPUT}")
    return result


@pytest.mark.parametrize(
    ("name", "batch", "shape"),
    [
        ("mlp", 1, (1, 784)),
        ("cifar_cnn", 1, (1, 32, 32, 3)),
        ("cifar_cnn", 4, (4, 32, 32, 3)),
        ("odd_matmul", 1, (37, 53)),
    ],
    ids=["mlp_b1", "cifar_cnn_b1", "cifar_cnn_b4", "odd_matmul"],
)
def test_default_recipe_matches_tensorflow(frozen_model, tf_reference, assert_close, rng, name, batch, shape) -> None:
    path = frozen_model(name, batch)
    x = rng.standard_normal(shape).astype(np.float32)
    compare_with_tensorflow(path, x, tf_reference, assert_close)


@pytest.mark.parametrize(("stride", "padding"), [(1, "SAME"), (2, "VALID")], ids=["same_s1", "valid_s2"])
def test_conv_bias_relu_matches_tensorflow(model_dir, tf_reference, assert_close, rng, stride, padding) -> None:
    from polytf.model_zoo import freeze_to_graphdef
    from polytf.model_zoo.keras_models import conv_bias_relu

    path = model_dir / f"conv_bias_relu_{padding}_s{stride}.pb"
    if not path.exists():
        fn = conv_bias_relu(batch=1, stride=stride, padding=padding)
        path.write_bytes(freeze_to_graphdef(fn, [("input", fn.input_shape)]).SerializeToString())
    x = rng.standard_normal((1, 17, 19, 5)).astype(np.float32)
    result = compare_with_tensorflow(path, x, tf_reference, assert_close)
    expected_hw = (17, 19) if padding == "SAME" else (8, 9)
    assert result[OUTPUT].shape == (1, *expected_hw, 7)


@pytest.mark.parametrize(
    ("name", "batch", "shape"),
    [("conv_bias_relu", 1, (1, 17, 19, 5)), ("mlp", 1, (1, 784)), ("cifar_cnn", 1, (1, 32, 32, 3))],
    ids=["conv_bias_relu", "mlp_b1", "cifar_cnn_b1"],
)
def test_tuned_model_matches_tensorflow(frozen_model, tf_reference, assert_close, rng, tmp_path, name, batch, shape) -> None:
    path = frozen_model(name, batch)
    cache_dir = tmp_path / "cache"
    report = polytf.tune(path, trials=3, cache_dir=cache_dir)
    distinct = {row.kernel for row in report.kernels if row.status == "tuned"}
    assert distinct and report.new_trials == 3 * len(distinct)
    assert len(list((cache_dir / "records").glob("*.json"))) == len(distinct)
    assert all(row.tuned_latency_s <= row.default_latency_s for row in report.kernels)
    assert report.model_tuned_latency_s > 0
    x = rng.standard_normal(shape).astype(np.float32)
    model = polytf.load(path, cache_dir=cache_dir)
    assert len(model.tuned_kernels) == len(model.kernels), "every kernel should come from the cache"
    compare_with_tensorflow(path, x, tf_reference, assert_close, cache_dir=cache_dir)

    again = polytf.tune(path, trials=3, cache_dir=cache_dir)
    assert again.new_trials == 0 and {row.status for row in again.kernels} <= {"cached", "shared"}
