"""End to end: the zoo's coverage models — a GPT-2-style decoder block and a BERT-style
encoder on int32 token ids, a U-Net with Conv2DTranspose, ResizeBilinear and ConcatV2, a
U-Net with three Conv2DTranspose decoders, a Swin Transformer block (Roll), a video
classifier (Conv3D, MaxPool3D, AvgPool3D, Conv3DTranspose), the Keras applications — compile with no host fallback and agree with TensorFlow running the
same GraphDef, untuned and tuned; a SavedModel export gives polytf the same outputs as its
frozen GraphDef; an out-of-range token id is an error naming the embedding node.

Tolerance (conftest.py): rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.errors import PolytfError  # noqa: E402
from polytf.model_zoo.language_models import VOCABULARY_SIZE, zoo_inputs  # noqa: E402

OUTPUT = "Identity"
SMALL_MODELS = ["gpt2_block", "bert_encoder", "unet"]
#: Compared untuned only, each with the op it was added for and whether a kernel computes it
#: (a transposed convolution becomes a convolution over its output phases: none is left).
UNTUNED_MODELS = {"transposed_unet": ("Conv2DBackpropInput", False), "swin_block": ("Roll", True), "video_cnn": ("Conv3D", True)}
#: Keras applications at batch 1: minutes each to build and run, so marked slow.
KERAS_APPLICATIONS = ["resnet50", "inception_v3", "densenet121", "mobilenet_v2", "efficientnet_b0", "xception", "nasnet_mobile"]


def _feeds(model: polytf.CompiledModel, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return zoo_inputs(model.input_types, seed=int(rng.integers(1 << 30)))


def _compare(path, rng, tf_reference, assert_close, **load_kwargs) -> polytf.CompiledModel:
    model = polytf.load(path, fallback=False, **load_kwargs)
    feeds = _feeds(model, np.random.default_rng(rng))
    result = model(**feeds)
    reference = tf_reference(path, feeds, [OUTPUT])[OUTPUT]
    assert float(np.std(reference)) > 0, "the test model's output should not be flat"
    assert_close(result[OUTPUT], reference, f"{path.name} {OUTPUT}")
    return model


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_small_model_matches_tensorflow_untuned_and_tuned(frozen_model, tf_reference, assert_close, rng, tmp_path, name) -> None:
    path = frozen_model(name, 1)
    _compare(path, 7, tf_reference, assert_close, cache_dir=tmp_path / "untuned")
    cache_dir = tmp_path / "tuned"
    report = polytf.tune(path, trials=2, cache_dir=cache_dir, fallback=False)
    assert report.new_trials > 0
    model = _compare(path, 7, tf_reference, assert_close, cache_dir=cache_dir)
    assert model.tuned_kernels, "the tuned build should use the cache's records"


@pytest.mark.parametrize("name", UNTUNED_MODELS)
def test_untuned_model_matches_tensorflow(frozen_model, tf_reference, assert_close, tmp_path, name) -> None:
    path = frozen_model(name, 1)
    model = _compare(path, 7, tf_reference, assert_close, cache_dir=tmp_path / "cache")
    op, compiled = UNTUNED_MODELS[name]
    assert any(kernel_op == op for kernel in model.kernels for _, kernel_op in kernel.scop.ops) == compiled


def test_bert_mask_changes_the_output(frozen_model, rng, tmp_path) -> None:
    """The attention mask is a real run-time input: padding keys changes unpadded positions."""
    path = frozen_model("bert_encoder", 1)
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    feeds = _feeds(model, rng)
    masked = model(**feeds)[OUTPUT]
    unmasked = model(**{**feeds, "attention_mask": np.ones_like(feeds["attention_mask"])})[OUTPUT]
    assert np.max(np.abs(masked[:, :8] - unmasked[:, :8])) > 1e-3


def test_out_of_range_token_id_names_the_embedding_node(frozen_model, rng, tmp_path) -> None:
    path = frozen_model("gpt2_block", 1)
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    feeds = _feeds(model, rng)
    for bad in (VOCABULARY_SIZE, -1):
        ids = feeds["input"].copy()
        ids[0, 5] = bad
        with pytest.raises(PolytfError) as raised:
            model(input=ids)
        message = str(raised.value)
        assert "GatherV2" in message and str(bad) in message and str(VOCABULARY_SIZE) in message, message
    # the model still works after the error
    assert np.isfinite(model(**feeds)[OUTPUT]).all()


def test_saved_model_gives_the_frozen_graphs_outputs(frozen_model, tf_reference, assert_close, rng, tmp_path) -> None:
    from polytf.model_zoo.saved_models import SIGNATURE_OUTPUT, write_saved_model

    directory = write_saved_model("unet", tmp_path / "unet_saved_model")
    cache_dir = tmp_path / "cache"
    frozen = frozen_model("unet", 1)
    graphdef_model = polytf.load(frozen, cache_dir=cache_dir, fallback=False)
    feeds = _feeds(graphdef_model, rng)
    from_graphdef = graphdef_model(**feeds)
    from_saved_model = polytf.load(directory, cache_dir=cache_dir, fallback=False)(**feeds)
    assert list(from_saved_model) == [SIGNATURE_OUTPUT]
    np.testing.assert_array_equal(from_saved_model[SIGNATURE_OUTPUT], from_graphdef[OUTPUT])
    assert_close(from_graphdef[OUTPUT], tf_reference(frozen, feeds, [OUTPUT])[OUTPUT], "unet")


@pytest.mark.slow
@pytest.mark.parametrize("name", KERAS_APPLICATIONS)
def test_keras_application_matches_tensorflow(frozen_model, tf_reference, assert_close, rng, tmp_path, name) -> None:
    path = frozen_model(name, 1)
    _compare(path, 7, tf_reference, assert_close, cache_dir=tmp_path / "cache")
