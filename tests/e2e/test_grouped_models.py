"""End to end: Keras ``Conv2D(groups=G)`` (frozen as a ``StatefulPartitionedCall`` of an
``_XlaMustCompile`` function holding a grouped Conv2D) compiles with no host fallback and
agrees with TensorFlow running the same GraphDef: a small grouped block with batch norm and a
depthwise 7x7 written as ``groups=C``, then the zoo's RegNetX-200MF and ConvNeXt-Tiny (slow).

Tolerance (conftest.py): rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.model_zoo import freeze_to_graphdef  # noqa: E402
from polytf.model_zoo.modern_models import randomize_normalization_weights  # noqa: E402

OUTPUT = "Identity"


def _grouped_block(path):
    """``x: [1, 16, 16, 16]`` -> grouped 3x3 (4 groups), BN, ReLU -> depthwise 7x7 as
    ``Conv2D(groups=16)`` with a bias -> 1x1 grouped stride 2 (2 groups), written to ``path``."""
    import keras

    inputs = keras.Input(shape=(16, 16, 16), batch_size=1, name="input")
    x = keras.layers.Conv2D(16, 3, padding="same", groups=4, use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    x = keras.layers.Conv2D(16, 7, padding="same", groups=16)(x)
    outputs = keras.layers.Conv2D(8, 1, strides=2, groups=2)(x)
    model = randomize_normalization_weights(keras.Model(inputs, outputs), seed=3)
    path.write_bytes(freeze_to_graphdef(model, [("input", (1, 16, 16, 16))]).SerializeToString())
    return path


def _compare(path, tf_reference, assert_close, cache_dir) -> polytf.CompiledModel:
    model = polytf.load(path, fallback=False, cache_dir=cache_dir)
    feeds = {"input": np.random.default_rng(7).standard_normal(model.input_types["input"].shape).astype(np.float32)}
    result = model(**feeds)[OUTPUT]
    reference = tf_reference(path, feeds, [OUTPUT])[OUTPUT]
    assert float(np.std(reference)) > 0, "the test model's output should not be flat"
    assert_close(result, reference, f"{path.name} {OUTPUT}")
    return model


def test_keras_grouped_convolutions_match_tensorflow(tf_reference, assert_close, tmp_path) -> None:
    path = _grouped_block(tmp_path / "grouped_block.pb")
    model = _compare(path, tf_reference, assert_close, tmp_path / "cache")
    ops = {op for kernel in model.kernels for _, op in kernel.scop.ops}
    assert "GroupedConv2D" in ops and "Conv2D" not in ops  # every convolution of the block is grouped


@pytest.mark.slow
@pytest.mark.parametrize("name", ["regnetx_200mf", "convnext_tiny"])
def test_grouped_zoo_model_matches_tensorflow(frozen_model, tf_reference, assert_close, tmp_path, name) -> None:
    model = _compare(frozen_model(name, 1), tf_reference, assert_close, tmp_path / "cache")
    assert (
        sum(op == "GroupedConv2D" for kernel in model.kernels for _, op in kernel.scop.ops)
        == {"regnetx_200mf": 13, "convnext_tiny": 18}[name]
    )
