"""MobileNetV2, a Transformer encoder block and an MLP-Mixer block, with deterministic non-trivial weights.

Both are the workloads of modern CNN and Transformer graphs: depthwise convolutions,
ReLU6, explicit padding, inference batch normalisation, global average pooling (MobileNetV2,
Sandler et al., CVPR 2018, as built by ``keras.applications.MobileNetV2``); multi-head
attention as Einsum, layer normalisation, softmax and a GELU feed-forward network
(Vaswani et al., NeurIPS 2017, with Keras' ``MultiHeadAttention``).

Keras initialises batch-norm statistics to mean 0 / variance 1, and biases to 0, so a
compiler that dropped a normalisation would still match on an untrained model. Every
builder here overwrites all weights from a seeded numpy generator: kernels Glorot-uniform,
biases and ``beta``/moving means normal (std 0.1), ``gamma`` and moving variances uniform
in [0.5, 1.5].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polytf.model_zoo.keras_models import DEFAULT_SEED, _glorot, _import_keras

__all__ = [
    "mobilenet_v2",
    "keras_application",
    "KERAS_APPLICATIONS",
    "transformer_encoder",
    "mlp_mixer",
    "randomize_normalization_weights",
]

_POSITIVE_WEIGHTS = ("gamma", "moving_variance")


def randomize_normalization_weights(model: Any, seed: int = DEFAULT_SEED) -> Any:
    """Overwrite every weight of ``model`` (see the module docstring); returns the model."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        for variable in layer.weights:
            shape = tuple(variable.shape)
            name = variable.path if hasattr(variable, "path") else variable.name
            if any(part in name for part in _POSITIVE_WEIGHTS):
                value = rng.uniform(0.5, 1.5, size=shape)
            elif len(shape) <= 1:
                value = rng.normal(0.0, 0.1, size=shape)
            else:
                value = _glorot(rng, shape)
            variable.assign(value.astype(np.float32))
    return model


def mobilenet_v2(batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """``keras.applications.MobileNetV2(weights=None)``, 224 x 224 x 3, 1000 classes.

    Frozen: placeholder ``"input"`` (float32 ``[batch, 224, 224, 3]``), output node
    ``"Identity"`` (float32 ``[batch, 1000]``, softmax probabilities).
    """
    keras = _import_keras()
    inputs = keras.Input(shape=(224, 224, 3), batch_size=batch, name="input")
    model = keras.applications.MobileNetV2(input_tensor=inputs, weights=None, classes=1000)
    return randomize_normalization_weights(model, seed)


#: zoo name -> (``keras.applications`` class name, input side in pixels)
KERAS_APPLICATIONS: dict[str, tuple[str, int]] = {
    "mobilenet_v2": ("MobileNetV2", 224),
    "resnet50": ("ResNet50", 224),
    "inception_v3": ("InceptionV3", 299),
    "densenet121": ("DenseNet121", 224),
    "efficientnet_b0": ("EfficientNetB0", 224),
    "xception": ("Xception", 299),
    "nasnet_mobile": ("NASNetMobile", 224),
}


def keras_application(name: str, batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """``keras.applications.<Class>(weights=None)`` for a zoo name of
    :data:`KERAS_APPLICATIONS` (ResNet50: He et al., CVPR 2016; InceptionV3: Szegedy et al.,
    CVPR 2016; DenseNet121: Huang et al., CVPR 2017; EfficientNetB0: Tan and Le, ICML 2019;
    Xception: Chollet, CVPR 2017; NASNetMobile: Zoph et al., CVPR 2018),
    input ``[batch, side, side, 3]`` (224, or 299 for InceptionV3), 1000 classes, every
    weight and batch-norm statistic from the seeded procedure of
    :func:`randomize_normalization_weights`.

    Frozen: placeholder ``"input"``, output node ``"Identity"`` (float32 ``[batch, 1000]``).

    Raises:
        ValueError: ``name`` is not in :data:`KERAS_APPLICATIONS`.
    """
    if name not in KERAS_APPLICATIONS:
        raise ValueError(f"unknown Keras application {name!r}; choose one of {', '.join(KERAS_APPLICATIONS)}")
    class_name, side = KERAS_APPLICATIONS[name]
    keras = _import_keras()
    inputs = keras.Input(shape=(side, side, 3), batch_size=batch, name="input")
    model = getattr(keras.applications, class_name)(input_tensor=inputs, weights=None, classes=1000)
    return randomize_normalization_weights(model, seed)


def transformer_encoder(
    batch: int = 1,
    seed: int = DEFAULT_SEED,
    sequence: int = 128,
    model_width: int = 256,
    heads: int = 4,
    feed_forward_width: int = 1024,
) -> Any:
    """One post-norm Transformer encoder block (Vaswani et al. 2017):
    ``y = LayerNorm(x + MHA(x, x))``, ``out = LayerNorm(y + W2 gelu(W1 y))``.

    Defaults: sequence 128, d_model 256, 4 heads of 64, FFN 1024 with exact (erf) GELU.
    Frozen: placeholder ``"input"`` (float32 ``[batch, sequence, model_width]``), output
    node ``"Identity"`` (same shape).
    """
    keras = _import_keras()
    layers = keras.layers
    inputs = keras.Input(shape=(sequence, model_width), batch_size=batch, name="input")
    attention = layers.MultiHeadAttention(num_heads=heads, key_dim=model_width // heads, name="attention")(inputs, inputs)
    x = layers.LayerNormalization(epsilon=1e-6, name="norm1")(layers.Add(name="residual1")([inputs, attention]))
    hidden = layers.Dense(feed_forward_width, activation="gelu", name="ffn1")(x)
    projected = layers.Dense(model_width, name="ffn2")(hidden)
    outputs = layers.LayerNormalization(epsilon=1e-6, name="norm2")(layers.Add(name="residual2")([x, projected]))
    return randomize_normalization_weights(keras.Model(inputs, outputs, name="transformer_encoder"), seed)


def mlp_mixer(
    batch: int = 1,
    seed: int = DEFAULT_SEED,
    tokens: int = 196,
    channels: int = 256,
    token_mixing_width: int = 128,
    channel_mixing_width: int = 1024,
) -> Any:
    """One MLP-Mixer block (Tolstikhin et al., "MLP-Mixer: An all-MLP Architecture for Vision",
    NeurIPS 2021): token mixing then channel mixing, each a pre-norm residual MLP::

        y   = x + transpose(W2 gelu(W1 transpose(LayerNorm(x))))     # mixes the tokens
        out = y + W4 gelu(W3 LayerNorm(y))                          # mixes the channels

    Defaults: 196 tokens (14x14 patches) of 256 channels, token MLP 128, channel MLP 1024,
    exact (erf) GELU. Frozen: placeholder ``"input"`` (float32 ``[batch, tokens, channels]``),
    output node ``"Identity"`` (same shape). The transposes freeze as Transpose nodes around
    the token-mixing Dense layers.
    """
    keras = _import_keras()
    layers = keras.layers
    inputs = keras.Input(shape=(tokens, channels), batch_size=batch, name="input")
    mixed = layers.LayerNormalization(epsilon=1e-6, name="token_norm")(inputs)
    mixed = layers.Permute((2, 1), name="to_channels_tokens")(mixed)
    mixed = layers.Dense(token_mixing_width, activation="gelu", name="token_mlp1")(mixed)
    mixed = layers.Dense(tokens, name="token_mlp2")(mixed)
    mixed = layers.Permute((2, 1), name="to_tokens_channels")(mixed)
    x = layers.Add(name="token_residual")([inputs, mixed])
    mixed = layers.LayerNormalization(epsilon=1e-6, name="channel_norm")(x)
    mixed = layers.Dense(channel_mixing_width, activation="gelu", name="channel_mlp1")(mixed)
    mixed = layers.Dense(channels, name="channel_mlp2")(mixed)
    outputs = layers.Add(name="channel_residual")([x, mixed])
    return randomize_normalization_weights(keras.Model(inputs, outputs, name="mlp_mixer"), seed)
