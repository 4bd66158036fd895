"""A small video classifier with 3-D convolutions (the C3D pattern of Tran et al., "Learning
Spatiotemporal Features with 3D Convolutional Networks", ICCV 2015, at toy size), as Keras
freezes it: ``Conv3D``, ``MaxPool3D``, ``AvgPool3D``, a ``Conv3DTranspose`` (a decoder's
upsampling) and a global average pooling.

Input ``[batch, frames, side, side, 3]`` float32 (default 8 frames of 32 x 32); output
``[batch, classes]`` float32 class probabilities. Weights and batch-norm statistics from
:func:`polytf.model_zoo.modern_models.randomize_normalization_weights`.
"""

from __future__ import annotations

from typing import Any

from polytf.model_zoo.keras_models import DEFAULT_SEED, _import_keras
from polytf.model_zoo.modern_models import randomize_normalization_weights

__all__ = ["video_cnn"]


def video_cnn(batch: int = 1, seed: int = DEFAULT_SEED, frames: int = 8, side: int = 32, classes: int = 10) -> Any:
    """The video classifier of the module docstring as a Keras model.

    Raises:
        ValueError: ``frames`` or ``side`` not a positive multiple of 4, or ``batch``/``classes``
            below 1.
    """
    if frames < 4 or frames % 4 or side < 4 or side % 4:
        raise ValueError(f"frames and side must be positive multiples of 4 (two 2x2x2 poolings), not {frames} and {side}")
    if batch < 1 or classes < 1:
        raise ValueError("batch and classes must be at least 1")
    keras = _import_keras()
    layers = keras.layers
    inputs = keras.Input(shape=(frames, side, side, 3), batch_size=batch, name="input")
    x = layers.Conv3D(16, 3, padding="same", use_bias=False, name="conv1")(inputs)
    x = layers.ReLU(name="relu1")(layers.BatchNormalization(name="bn1")(x))
    x = layers.MaxPooling3D(2, name="pool1")(x)
    x = layers.Conv3D(32, 3, padding="same", activation="relu", name="conv2")(x)
    x = layers.AveragePooling3D(2, name="pool2")(x)
    x = layers.Conv3DTranspose(16, 3, strides=(1, 2, 2), padding="same", activation="relu", name="upsample")(x)
    x = layers.Conv3D(32, (1, 3, 3), strides=(1, 2, 2), padding="same", activation="relu", name="conv3")(x)
    x = layers.GlobalAveragePooling3D(name="pool3")(x)
    outputs = layers.Dense(classes, activation="softmax", name="classifier")(x)
    return randomize_normalization_weights(keras.Model(inputs, outputs, name="video_cnn"), seed)
