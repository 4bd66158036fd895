"""A small U-Net (Ronneberger et al., "U-Net: Convolutional Networks for Biomedical Image
Segmentation", MICCAI 2015) with the decoder ops real segmentation exports carry.

Encoder: two 3x3 conv + batch-norm + ReLU stages with 2x2 max pooling; bottleneck 3x3 conv.
Decoder: a stride-2 ``Conv2DTranspose`` (freezes to ``Conv2DBackpropInput``) concatenated
with the second stage's features (``ConcatV2``), a 3x3 conv, then a bilinear 2x upsampling
(``UpSampling2D(interpolation="bilinear")`` freezes to ``ResizeBilinear`` with
``half_pixel_centers``), concatenated with the first stage, a 3x3 conv and a 1x1
classifier with a per-pixel softmax.

Input ``[batch, side, side, 3]`` float32 (side a multiple of 4; default 64); output
``[batch, side, side, classes]`` float32 class probabilities. Weights and batch-norm
statistics from :func:`polytf.model_zoo.modern_models.randomize_normalization_weights`.

:func:`transposed_unet` is the U-Net as segmentation tutorials build it: four encoder stages
(32, 64, 128, 256 filters; each two 3x3 conv + batch-norm + ReLU) around three 2x2 poolings,
and three decoder stages that each upsample with a ``Conv2DTranspose(3x3, stride 2, same,
ReLU)``, concatenate the encoder's features and apply two 3x3 conv blocks; input ``[batch,
side, side, 3]`` (side a multiple of 8; default 128).
"""

from __future__ import annotations

from typing import Any

from polytf.model_zoo.keras_models import DEFAULT_SEED, _import_keras
from polytf.model_zoo.modern_models import randomize_normalization_weights

__all__ = ["transposed_unet", "unet"]


def _check_sizes(batch: int, side: int, classes: int, poolings: int) -> None:
    """Raise ValueError unless ``side`` is a positive multiple of ``2**poolings`` (each 2x2
    pooling halves it) and ``batch``, ``classes`` are at least 1."""
    multiple = 2**poolings
    if side < multiple or side % multiple:
        raise ValueError(f"side must be a positive multiple of {multiple} ({poolings} 2x2 poolings), not {side}")
    if batch < 1 or classes < 1:
        raise ValueError("batch and classes must be at least 1")


def _conv_block(layers: Any, x: Any, filters: int, name: str) -> Any:
    """3x3 convolution (no bias) + batch norm + ReLU, the layers named ``{name}_conv``,
    ``{name}_bn`` and ``{name}_relu``."""
    x = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv")(x)
    x = layers.BatchNormalization(name=f"{name}_bn")(x)
    return layers.ReLU(name=f"{name}_relu")(x)


def unet(batch: int = 1, seed: int = DEFAULT_SEED, side: int = 64, classes: int = 4) -> Any:
    """The U-Net of the module docstring as a Keras model.

    Raises:
        ValueError: ``side`` not a positive multiple of 4, or ``batch``/``classes`` below 1.
    """
    _check_sizes(batch, side, classes, poolings=2)
    keras = _import_keras()
    layers = keras.layers

    def conv_block(x: Any, filters: int, name: str) -> Any:
        return _conv_block(layers, x, filters, name)

    inputs = keras.Input(shape=(side, side, 3), batch_size=batch, name="input")
    stage1 = conv_block(conv_block(inputs, 16, "enc1a"), 16, "enc1b")
    stage2 = conv_block(conv_block(layers.MaxPooling2D(2, name="pool1")(stage1), 32, "enc2a"), 32, "enc2b")
    bottleneck = conv_block(layers.MaxPooling2D(2, name="pool2")(stage2), 64, "bottleneck")
    up2 = layers.Conv2DTranspose(32, 3, strides=2, padding="same", activation="relu", name="up2")(bottleneck)
    decoded2 = conv_block(layers.Concatenate(name="skip2")([up2, stage2]), 32, "dec2")
    up1 = layers.UpSampling2D(2, interpolation="bilinear", name="up1")(decoded2)
    decoded1 = conv_block(layers.Concatenate(name="skip1")([up1, stage1]), 16, "dec1")
    outputs = layers.Conv2D(classes, 1, activation="softmax", name="classifier")(decoded1)
    return randomize_normalization_weights(keras.Model(inputs, outputs, name="unet"), seed)


def transposed_unet(batch: int = 1, seed: int = DEFAULT_SEED, side: int = 128, classes: int = 4) -> Any:
    """The U-Net with ``Conv2DTranspose`` decoders of the module docstring as a Keras model.

    Raises:
        ValueError: ``side`` not a positive multiple of 8, or ``batch``/``classes`` below 1.
    """
    _check_sizes(batch, side, classes, poolings=3)
    keras = _import_keras()
    layers = keras.layers

    def stage(x: Any, filters: int, name: str) -> Any:
        return _conv_block(layers, _conv_block(layers, x, filters, f"{name}a"), filters, f"{name}b")

    x = keras.Input(shape=(side, side, 3), batch_size=batch, name="input")
    inputs, skips = x, []
    for level, filters in enumerate((32, 64, 128)):
        x = stage(x, filters, f"enc{level + 1}")
        skips.append(x)
        x = layers.MaxPooling2D(2, name=f"pool{level + 1}")(x)
    x = stage(x, 256, "bottleneck")
    for level, filters in reversed(list(enumerate((32, 64, 128)))):
        x = layers.Conv2DTranspose(filters, 3, strides=2, padding="same", activation="relu", name=f"up{level + 1}")(x)
        x = stage(layers.Concatenate(name=f"skip{level + 1}")([x, skips[level]]), filters, f"dec{level + 1}")
    outputs = layers.Conv2D(classes, 1, activation="softmax", name="classifier")(x)
    return randomize_normalization_weights(keras.Model(inputs, outputs, name="transposed_unet"), seed)
