"""The Keras layer sweep: every layer of ``keras.layers`` that computes something at
inference, each in one or more argument settings, as a one-layer model frozen at a fixed
input shape (``tests/e2e/test_keras_layers.py`` compiles each with ``fallback=False`` and
compares it with TensorFlow; ``results/keras_layers.py`` writes ``results/keras_layers.md``).

A :class:`LayerCase` builds the function of one layer setting from ``keras.layers``; its
model is ``input -> function -> output`` with every weight drawn by
:func:`polytf.model_zoo.modern_models.randomize_normalization_weights` (variances and scales
positive). Merging layers take ``[x, relu(x)]``; attention layers attend from ``x`` to
itself; integer layers (``Embedding``, ``CategoryEncoding``) take int32 ids.

:data:`IDENTITY_AT_INFERENCE` lists the layers that compute nothing at inference (dropout,
noise, random augmentation: ``training=False`` makes them the identity) and
:data:`NOT_SWEPT` the layers that take strings or wrap another framework, each with why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polytf.model_zoo.keras_models import DEFAULT_SEED, _import_keras
from polytf.model_zoo.modern_models import randomize_normalization_weights

__all__ = ["CASES", "IDENTITY_AT_INFERENCE", "KNOWN_GAPS", "NOT_SWEPT", "LayerCase", "case_inputs", "freeze_case"]

#: Input shapes (batch 1): a sequence ``[1, steps, features]``, an image ``[1, H, W, C]``, a
#: volume ``[1, D, H, W, C]``, a feature vector ``[1, features]``.
SEQUENCE, IMAGE, VOLUME, VECTOR = (1, 10, 6), (1, 12, 12, 4), (1, 6, 8, 8, 3), (1, 12)


@dataclass(frozen=True)
class LayerCase:
    """One setting of one layer.

    Attributes:
        layer: the ``keras.layers`` class (the row group of the report).
        setting: the arguments, in words (``"strides=2, padding=same"``).
        build: ``build(keras.layers)`` -> the function ``x -> y`` of the one-layer model.
        shape: the input's shape, batch 1.
        dtype: the input's dtype; int32 ids lie in ``[0, high)``.
        high: the ids' bound of an int32 input.
    """

    layer: str
    setting: str
    build: Callable[[Any], Callable[[Any], Any]]
    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int = 0

    @property
    def name(self) -> str:
        """``Layer(setting)``: the case's name in tests and the report."""
        return f"{self.layer}({self.setting})"


def _layer(layer: str, setting: str, shape: tuple[int, ...], make: Callable[[Any], Any], **kwargs: Any) -> LayerCase:
    """A case whose function is one layer instance: ``make(keras.layers)(x)``."""
    return LayerCase(layer, setting, lambda layers: make(layers), shape, **kwargs)


def _merge(layer: str) -> LayerCase:
    return LayerCase(layer, "[x, relu(x)]", lambda layers: lambda x: getattr(layers, layer)()([x, layers.ReLU()(x)]), IMAGE)


def _attention(layer: str, setting: str, make: Callable[[Any], Any]) -> LayerCase:
    """Self-attention over a ``[1, 10, 16]`` sequence."""
    return LayerCase(layer, setting, lambda layers: (lambda x, attend=make(layers): attend(x, x)), (1, 10, 16))


def _pair_attention(layer: str, setting: str, make: Callable[[Any], Any]) -> LayerCase:
    """``Attention``/``AdditiveAttention`` over ``[query, value]`` of the same sequence."""
    return LayerCase(layer, setting, lambda layers: (lambda x, attend=make(layers): attend([x, x])), (1, 10, 16))


def _activation(name: str) -> LayerCase:
    return _layer("Activation", name, IMAGE, lambda layers: layers.Activation(name))


CASES: tuple[LayerCase, ...] = (
    # --- convolutions
    _layer("Conv1D", "8, 3", SEQUENCE, lambda layers: layers.Conv1D(8, 3)),
    _layer("Conv1D", "8, 3, strides=2, padding=same, relu", SEQUENCE, lambda layers: layers.Conv1D(8, 3, strides=2, padding="same", activation="relu")),
    _layer("Conv1D", "8, 3, padding=causal, dilation_rate=2", SEQUENCE, lambda layers: layers.Conv1D(8, 3, padding="causal", dilation_rate=2)),
    _layer("Conv2D", "8, 3, padding=same, relu", IMAGE, lambda layers: layers.Conv2D(8, 3, padding="same", activation="relu")),
    _layer("Conv2D", "8, 3, strides=2, use_bias=False", IMAGE, lambda layers: layers.Conv2D(8, 3, strides=2, use_bias=False)),
    _layer("Conv2D", "8, 3, dilation_rate=2", IMAGE, lambda layers: layers.Conv2D(8, 3, dilation_rate=2)),
    _layer("Conv2D", "8, 3, groups=2", IMAGE, lambda layers: layers.Conv2D(8, 3, groups=2)),
    _layer("Conv2D", "8, 3, data_format=channels_first", (1, 4, 12, 12), lambda layers: layers.Conv2D(8, 3, data_format="channels_first")),
    _layer("Conv3D", "8, 3, padding=same", VOLUME, lambda layers: layers.Conv3D(8, 3, padding="same")),
    _layer("Conv3D", "8, (1, 3, 3), strides=(1, 2, 2), relu", VOLUME, lambda layers: layers.Conv3D(8, (1, 3, 3), strides=(1, 2, 2), activation="relu")),
    _layer("Conv1DTranspose", "8, 3, strides=2, padding=same", SEQUENCE, lambda layers: layers.Conv1DTranspose(8, 3, strides=2, padding="same")),
    _layer("Conv2DTranspose", "8, 3, strides=2, padding=same, relu", IMAGE, lambda layers: layers.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")),
    _layer("Conv2DTranspose", "8, 2, strides=2", IMAGE, lambda layers: layers.Conv2DTranspose(8, 2, strides=2)),
    _layer("Conv2DTranspose", "8, 4, strides=2, padding=same, use_bias=False", IMAGE, lambda layers: layers.Conv2DTranspose(8, 4, strides=2, padding="same", use_bias=False)),
    _layer("Conv3DTranspose", "4, 3, strides=2, padding=same", VOLUME, lambda layers: layers.Conv3DTranspose(4, 3, strides=2, padding="same")),
    _layer("SeparableConv1D", "8, 3", SEQUENCE, lambda layers: layers.SeparableConv1D(8, 3)),
    _layer("SeparableConv2D", "8, 3, padding=same", IMAGE, lambda layers: layers.SeparableConv2D(8, 3, padding="same")),
    _layer("SeparableConv2D", "8, 3, strides=2, depth_multiplier=2", IMAGE, lambda layers: layers.SeparableConv2D(8, 3, strides=2, depth_multiplier=2)),
    _layer("DepthwiseConv1D", "3", SEQUENCE, lambda layers: layers.DepthwiseConv1D(3)),
    _layer("DepthwiseConv2D", "3, padding=same", IMAGE, lambda layers: layers.DepthwiseConv2D(3, padding="same")),
    _layer("DepthwiseConv2D", "3, strides=2, depth_multiplier=2", IMAGE, lambda layers: layers.DepthwiseConv2D(3, strides=2, depth_multiplier=2)),
    # --- pooling
    _layer("MaxPooling1D", "2", SEQUENCE, lambda layers: layers.MaxPooling1D(2)),
    _layer("AveragePooling1D", "3, strides=1, padding=same", SEQUENCE, lambda layers: layers.AveragePooling1D(3, strides=1, padding="same")),
    _layer("MaxPooling2D", "2", IMAGE, lambda layers: layers.MaxPooling2D(2)),
    _layer("MaxPooling2D", "3, strides=2, padding=same", IMAGE, lambda layers: layers.MaxPooling2D(3, strides=2, padding="same")),
    _layer("AveragePooling2D", "2", IMAGE, lambda layers: layers.AveragePooling2D(2)),
    _layer("AveragePooling2D", "3, strides=1, padding=same", IMAGE, lambda layers: layers.AveragePooling2D(3, strides=1, padding="same")),
    _layer("MaxPooling3D", "2", VOLUME, lambda layers: layers.MaxPooling3D(2)),
    _layer("AveragePooling3D", "(1, 2, 2)", VOLUME, lambda layers: layers.AveragePooling3D((1, 2, 2))),
    _layer("GlobalAveragePooling1D", "", SEQUENCE, lambda layers: layers.GlobalAveragePooling1D()),
    _layer("GlobalMaxPooling1D", "", SEQUENCE, lambda layers: layers.GlobalMaxPooling1D()),
    _layer("GlobalAveragePooling2D", "", IMAGE, lambda layers: layers.GlobalAveragePooling2D()),
    _layer("GlobalAveragePooling2D", "keepdims=True", IMAGE, lambda layers: layers.GlobalAveragePooling2D(keepdims=True)),
    _layer("GlobalMaxPooling2D", "", IMAGE, lambda layers: layers.GlobalMaxPooling2D()),
    _layer("GlobalAveragePooling3D", "", VOLUME, lambda layers: layers.GlobalAveragePooling3D()),
    _layer("GlobalMaxPooling3D", "", VOLUME, lambda layers: layers.GlobalMaxPooling3D()),
    _layer("AdaptiveAveragePooling2D", "(4, 4)", IMAGE, lambda layers: layers.AdaptiveAveragePooling2D((4, 4))),
    _layer("AdaptiveMaxPooling2D", "(3, 3)", IMAGE, lambda layers: layers.AdaptiveMaxPooling2D((3, 3))),
    _layer("AdaptiveAveragePooling1D", "5", SEQUENCE, lambda layers: layers.AdaptiveAveragePooling1D(5)),
    _layer("AdaptiveMaxPooling1D", "4", SEQUENCE, lambda layers: layers.AdaptiveMaxPooling1D(4)),
    _layer("AdaptiveAveragePooling3D", "(2, 3, 3)", VOLUME, lambda layers: layers.AdaptiveAveragePooling3D((2, 3, 3))),
    _layer("AdaptiveMaxPooling3D", "(3, 2, 2)", VOLUME, lambda layers: layers.AdaptiveMaxPooling3D((3, 2, 2))),
    # --- normalisation
    _layer("BatchNormalization", "", IMAGE, lambda layers: layers.BatchNormalization()),
    _layer("LayerNormalization", "", SEQUENCE, lambda layers: layers.LayerNormalization()),
    _layer("LayerNormalization", "axis=[1, 2, 3]", IMAGE, lambda layers: layers.LayerNormalization(axis=[1, 2, 3])),
    _layer("GroupNormalization", "groups=2", IMAGE, lambda layers: layers.GroupNormalization(groups=2)),
    _layer("UnitNormalization", "", SEQUENCE, lambda layers: layers.UnitNormalization()),
    _layer("RMSNormalization", "", SEQUENCE, lambda layers: layers.RMSNormalization()),
    _layer("Normalization", "mean=0.5, variance=2", IMAGE, lambda layers: layers.Normalization(mean=0.5, variance=2.0)),
    # --- attention
    _attention("MultiHeadAttention", "num_heads=2, key_dim=8", lambda layers: layers.MultiHeadAttention(num_heads=2, key_dim=8)),
    _attention("GroupQueryAttention", "head_dim=8, num_query_heads=4, num_key_value_heads=2", lambda layers: layers.GroupQueryAttention(8, 4, 2)),
    _pair_attention("Attention", "", lambda layers: layers.Attention()),
    _pair_attention("Attention", "use_scale=True, score_mode=concat", lambda layers: layers.Attention(use_scale=True, score_mode="concat")),
    _pair_attention("AdditiveAttention", "", lambda layers: layers.AdditiveAttention()),
    # --- recurrent
    _layer("SimpleRNN", "8", SEQUENCE, lambda layers: layers.SimpleRNN(8)),
    _layer("GRU", "8, return_sequences=True", SEQUENCE, lambda layers: layers.GRU(8, return_sequences=True)),
    _layer("LSTM", "8", SEQUENCE, lambda layers: layers.LSTM(8)),
    _layer("Bidirectional", "LSTM(8)", SEQUENCE, lambda layers: layers.Bidirectional(layers.LSTM(8))),
    _layer("ConvLSTM1D", "4, 3", (1, 5, 8, 3), lambda layers: layers.ConvLSTM1D(4, 3)),
    _layer("ConvLSTM2D", "4, 3, padding=same", (1, 4, 6, 6, 3), lambda layers: layers.ConvLSTM2D(4, 3, padding="same")),
    _layer("TimeDistributed", "Dense(8)", SEQUENCE, lambda layers: layers.TimeDistributed(layers.Dense(8))),
    # --- reshaping
    _layer("Cropping1D", "(1, 2)", SEQUENCE, lambda layers: layers.Cropping1D((1, 2))),
    _layer("Cropping2D", "((1, 2), (2, 1))", IMAGE, lambda layers: layers.Cropping2D(((1, 2), (2, 1)))),
    _layer("Cropping3D", "1", VOLUME, lambda layers: layers.Cropping3D(1)),
    _layer("UpSampling1D", "2", SEQUENCE, lambda layers: layers.UpSampling1D(2)),
    _layer("UpSampling2D", "2", IMAGE, lambda layers: layers.UpSampling2D(2)),
    _layer("UpSampling2D", "2, interpolation=bilinear", IMAGE, lambda layers: layers.UpSampling2D(2, interpolation="bilinear")),
    _layer("UpSampling3D", "2", VOLUME, lambda layers: layers.UpSampling3D(2)),
    _layer("ZeroPadding1D", "2", SEQUENCE, lambda layers: layers.ZeroPadding1D(2)),
    _layer("ZeroPadding2D", "((1, 2), (0, 1))", IMAGE, lambda layers: layers.ZeroPadding2D(((1, 2), (0, 1)))),
    _layer("ZeroPadding3D", "1", VOLUME, lambda layers: layers.ZeroPadding3D(1)),
    _layer("Permute", "(2, 1)", SEQUENCE, lambda layers: layers.Permute((2, 1))),
    _layer("RepeatVector", "3", VECTOR, lambda layers: layers.RepeatVector(3)),
    _layer("Flatten", "", IMAGE, lambda layers: layers.Flatten()),
    _layer("Reshape", "(16, 36)", IMAGE, lambda layers: layers.Reshape((16, 36))),
    # --- merging
    *(_merge(layer) for layer in ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate")),
    LayerCase("Dot", "axes=2, [x, relu(x)]", lambda layers: lambda x: layers.Dot(axes=2)([x, layers.ReLU()(x)]), SEQUENCE),
    # --- activations
    _layer("ReLU", "", IMAGE, lambda layers: layers.ReLU()),
    _layer("ReLU", "max_value=1, negative_slope=0.1, threshold=0.2", IMAGE, lambda layers: layers.ReLU(max_value=1.0, negative_slope=0.1, threshold=0.2)),
    _layer("LeakyReLU", "negative_slope=0.2", IMAGE, lambda layers: layers.LeakyReLU(negative_slope=0.2)),
    _layer("PReLU", "", IMAGE, lambda layers: layers.PReLU()),
    _layer("ELU", "", IMAGE, lambda layers: layers.ELU()),
    _layer("Softmax", "", IMAGE, lambda layers: layers.Softmax()),
    *(_activation(name) for name in ("gelu", "silu", "hard_sigmoid", "softplus", "selu", "mish", "tanh", "relu6", "log_softmax")),
    # --- core and preprocessing
    _layer("Dense", "8", SEQUENCE, lambda layers: layers.Dense(8)),
    _layer("Dense", "8, relu, use_bias=False", VECTOR, lambda layers: layers.Dense(8, activation="relu", use_bias=False)),
    _layer("EinsumDense", "abc,cd->abd", SEQUENCE, lambda layers: layers.EinsumDense("abc,cd->abd", output_shape=(None, 8), bias_axes="d")),
    _layer("Embedding", "50, 8", (1, 10), lambda layers: layers.Embedding(50, 8), dtype="int32", high=50),
    _layer("CategoryEncoding", "num_tokens=8, one_hot", (1, 1), lambda layers: layers.CategoryEncoding(num_tokens=8, output_mode="one_hot"), dtype="int32", high=8),
    _layer("CategoryEncoding", "num_tokens=8, multi_hot", (1, 5), lambda layers: layers.CategoryEncoding(num_tokens=8, output_mode="multi_hot"), dtype="int32", high=8),
    _layer("Discretization", "bin_boundaries=[-1, 0, 1]", IMAGE, lambda layers: layers.Discretization(bin_boundaries=[-1.0, 0.0, 1.0])),
    _layer("Rescaling", "1/255, offset=-1", IMAGE, lambda layers: layers.Rescaling(1 / 255, offset=-1.0)),
    _layer("Resizing", "16, 16", IMAGE, lambda layers: layers.Resizing(16, 16)),
    _layer("Resizing", "6, 9, interpolation=nearest", IMAGE, lambda layers: layers.Resizing(6, 9, interpolation="nearest")),
    _layer("CenterCrop", "8, 6", IMAGE, lambda layers: layers.CenterCrop(8, 6)),
    _layer("Masking", "mask_value=0", SEQUENCE, lambda layers: layers.Masking(0.0)),
    _layer("Identity", "", IMAGE, lambda layers: layers.Identity()),
    # --- second settings (data_format, strides, masks, options)
    _layer("AdaptiveAveragePooling1D", "3, data_format=channels_first", SEQUENCE, lambda layers: layers.AdaptiveAveragePooling1D(3, data_format="channels_first")),
    _layer("AdaptiveAveragePooling2D", "(5, 3)", IMAGE, lambda layers: layers.AdaptiveAveragePooling2D((5, 3))),
    _layer("AdaptiveAveragePooling3D", "(3, 4, 4)", VOLUME, lambda layers: layers.AdaptiveAveragePooling3D((3, 4, 4))),
    _layer("AdaptiveMaxPooling1D", "7", SEQUENCE, lambda layers: layers.AdaptiveMaxPooling1D(7)),
    _layer("AdaptiveMaxPooling2D", "(4, 5)", IMAGE, lambda layers: layers.AdaptiveMaxPooling2D((4, 5))),
    _layer("AdaptiveMaxPooling3D", "(2, 4, 4)", VOLUME, lambda layers: layers.AdaptiveMaxPooling3D((2, 4, 4))),
    LayerCase("Add", "[x, relu(x), x * 2]", lambda layers: lambda x: layers.Add()([x, layers.ReLU()(x), layers.Rescaling(2.0)(x)]), SEQUENCE),
    LayerCase("Subtract", "[relu(x), x]", lambda layers: lambda x: layers.Subtract()([layers.ReLU()(x), x]), SEQUENCE),
    LayerCase("Multiply", "[x, relu(x), x]", lambda layers: lambda x: layers.Multiply()([x, layers.ReLU()(x), x]), SEQUENCE),
    LayerCase("Average", "[x, relu(x), x]", lambda layers: lambda x: layers.Average()([x, layers.ReLU()(x), x]), SEQUENCE),
    LayerCase("Maximum", "[x, -x, relu(x)]", lambda layers: lambda x: layers.Maximum()([x, layers.Rescaling(-1.0)(x), layers.ReLU()(x)]), SEQUENCE),
    LayerCase("Minimum", "[x, -x]", lambda layers: lambda x: layers.Minimum()([x, layers.Rescaling(-1.0)(x)]), SEQUENCE),
    LayerCase("Concatenate", "axis=1, [x, relu(x)]", lambda layers: lambda x: layers.Concatenate(axis=1)([x, layers.ReLU()(x)]), IMAGE),
    LayerCase("Dot", "axes=(1, 1), normalize=True", lambda layers: lambda x: layers.Dot(axes=(1, 1), normalize=True)([x, layers.ReLU()(x)]), SEQUENCE),
    _pair_attention("AdditiveAttention", "use_scale=False", lambda layers: layers.AdditiveAttention(use_scale=False)),
    _layer("AveragePooling1D", "2, data_format=channels_first", SEQUENCE, lambda layers: layers.AveragePooling1D(2, data_format="channels_first")),
    _layer("AveragePooling3D", "3, strides=1, padding=same", VOLUME, lambda layers: layers.AveragePooling3D(3, strides=1, padding="same")),
    _layer("BatchNormalization", "axis=1, center=False", (1, 4, 6, 6), lambda layers: layers.BatchNormalization(axis=1, center=False)),
    _layer("Bidirectional", "GRU(8, return_sequences=True), merge_mode=sum", SEQUENCE, lambda layers: layers.Bidirectional(layers.GRU(8, return_sequences=True), merge_mode="sum")),
    _layer("CenterCrop", "12, 5", IMAGE, lambda layers: layers.CenterCrop(12, 5)),
    _layer("Conv1DTranspose", "8, 2, strides=2, relu", SEQUENCE, lambda layers: layers.Conv1DTranspose(8, 2, strides=2, activation="relu")),
    _layer("Conv3DTranspose", "4, (1, 3, 3), strides=(1, 2, 2), padding=same", VOLUME, lambda layers: layers.Conv3DTranspose(4, (1, 3, 3), strides=(1, 2, 2), padding="same")),
    _layer("ConvLSTM1D", "4, 3, padding=same, return_sequences=True", (1, 5, 8, 3), lambda layers: layers.ConvLSTM1D(4, 3, padding="same", return_sequences=True)),
    _layer("ConvLSTM2D", "4, 3, strides=2", (1, 4, 8, 8, 3), lambda layers: layers.ConvLSTM2D(4, 3, strides=2)),
    _layer("Cropping1D", "3", SEQUENCE, lambda layers: layers.Cropping1D(3)),
    _layer("Cropping2D", "1, data_format=channels_first", (1, 4, 12, 12), lambda layers: layers.Cropping2D(1, data_format="channels_first")),
    _layer("Cropping3D", "((0, 1), (2, 1), (1, 0))", VOLUME, lambda layers: layers.Cropping3D(((0, 1), (2, 1), (1, 0)))),
    _layer("DepthwiseConv1D", "3, strides=2, padding=same, depth_multiplier=2", SEQUENCE, lambda layers: layers.DepthwiseConv1D(3, strides=2, padding="same", depth_multiplier=2)),
    _layer("Discretization", "bin_boundaries=[0.5]", SEQUENCE, lambda layers: layers.Discretization(bin_boundaries=[0.5])),
    _layer("ELU", "alpha=0.5", IMAGE, lambda layers: layers.ELU(alpha=0.5)),
    _layer("EinsumDense", "abc,cde->abde", SEQUENCE, lambda layers: layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 4), bias_axes="de")),
    _layer("Embedding", "50, 8, mask_zero=True", (1, 10), lambda layers: layers.Embedding(50, 8, mask_zero=True), dtype="int32", high=50),
    _layer("Flatten", "data_format=channels_first", IMAGE, lambda layers: layers.Flatten(data_format="channels_first")),
    _layer("GRU", "8, reset_after=False", SEQUENCE, lambda layers: layers.GRU(8, reset_after=False)),
    _layer("GlobalAveragePooling1D", "data_format=channels_first", SEQUENCE, lambda layers: layers.GlobalAveragePooling1D(data_format="channels_first")),
    _layer("GlobalAveragePooling3D", "keepdims=True", VOLUME, lambda layers: layers.GlobalAveragePooling3D(keepdims=True)),
    _layer("GlobalMaxPooling1D", "keepdims=True", SEQUENCE, lambda layers: layers.GlobalMaxPooling1D(keepdims=True)),
    _layer("GlobalMaxPooling2D", "data_format=channels_first", IMAGE, lambda layers: layers.GlobalMaxPooling2D(data_format="channels_first")),
    _layer("GlobalMaxPooling3D", "keepdims=True", VOLUME, lambda layers: layers.GlobalMaxPooling3D(keepdims=True)),
    _layer("GroupNormalization", "groups=1, center=False", IMAGE, lambda layers: layers.GroupNormalization(groups=1, center=False)),
    _attention("GroupQueryAttention", "head_dim=4, num_query_heads=2, num_key_value_heads=1", lambda layers: layers.GroupQueryAttention(4, 2, 1)),
    _layer("Identity", "on a sequence", SEQUENCE, lambda layers: layers.Identity()),
    _layer("LSTM", "8, return_sequences=True, go_backwards=True", SEQUENCE, lambda layers: layers.LSTM(8, return_sequences=True, go_backwards=True)),
    _layer("LeakyReLU", "negative_slope=0.01", SEQUENCE, lambda layers: layers.LeakyReLU(negative_slope=0.01)),
    _layer("Masking", "mask_value=1", SEQUENCE, lambda layers: layers.Masking(1.0)),
    _layer("MaxPooling1D", "3, strides=2, padding=same", SEQUENCE, lambda layers: layers.MaxPooling1D(3, strides=2, padding="same")),
    _layer("MaxPooling3D", "(1, 2, 2), padding=same", VOLUME, lambda layers: layers.MaxPooling3D((1, 2, 2), padding="same")),
    LayerCase("MultiHeadAttention", "num_heads=4, key_dim=4, use_causal_mask=True", lambda layers: (lambda x, attend=layers.MultiHeadAttention(num_heads=4, key_dim=4): attend(x, x, use_causal_mask=True)), (1, 10, 16)),
    _layer("Normalization", "mean=[per channel], variance=[per channel]", IMAGE, lambda layers: layers.Normalization(mean=[0.1, 0.2, 0.3, 0.4], variance=[1.0, 2.0, 0.5, 4.0])),
    _layer("PReLU", "shared_axes=[1, 2]", IMAGE, lambda layers: layers.PReLU(shared_axes=[1, 2])),
    _layer("Permute", "(3, 1, 2)", IMAGE, lambda layers: layers.Permute((3, 1, 2))),
    _layer("RMSNormalization", "axis=-1, epsilon=1e-3", IMAGE, lambda layers: layers.RMSNormalization(epsilon=1e-3)),
    _layer("RepeatVector", "1", VECTOR, lambda layers: layers.RepeatVector(1)),
    _layer("Rescaling", "scale=2", SEQUENCE, lambda layers: layers.Rescaling(2.0)),
    _layer("Reshape", "(-1, 4)", IMAGE, lambda layers: layers.Reshape((-1, 4))),
    _layer("SeparableConv1D", "8, 3, strides=2, padding=same, relu", SEQUENCE, lambda layers: layers.SeparableConv1D(8, 3, strides=2, padding="same", activation="relu")),
    _layer("SimpleRNN", "8, return_sequences=True, activation=relu", SEQUENCE, lambda layers: layers.SimpleRNN(8, return_sequences=True, activation="relu")),
    _layer("Softmax", "axis=1", SEQUENCE, lambda layers: layers.Softmax(axis=1)),
    _layer("TimeDistributed", "Conv2D(4, 3)", (1, 3, 8, 8, 2), lambda layers: layers.TimeDistributed(layers.Conv2D(4, 3))),
    _layer("UnitNormalization", "axis=[1, 2]", SEQUENCE, lambda layers: layers.UnitNormalization(axis=[1, 2])),
    _layer("UpSampling1D", "3", SEQUENCE, lambda layers: layers.UpSampling1D(3)),
    _layer("UpSampling3D", "(1, 2, 2)", VOLUME, lambda layers: layers.UpSampling3D((1, 2, 2))),
    _layer("ZeroPadding1D", "(0, 3)", SEQUENCE, lambda layers: layers.ZeroPadding1D((0, 3))),
    _layer("ZeroPadding2D", "1, data_format=channels_first", (1, 4, 12, 12), lambda layers: layers.ZeroPadding2D(1, data_format="channels_first")),
    _layer("ZeroPadding3D", "((0, 1), (1, 0), (2, 2))", VOLUME, lambda layers: layers.ZeroPadding3D(((0, 1), (1, 0), (2, 2)))),
    _layer("MelSpectrogram", "fft_length=64, sequence_stride=32, num_mel_bins=16", (1, 256), lambda layers: layers.MelSpectrogram(fft_length=64, sequence_stride=32, num_mel_bins=16, sampling_rate=8000)),
)

#: Cases polytf does not compile yet (refused: some of their ops have neither a lowering nor a
#: numpy reference to run on the host), with why.
KNOWN_GAPS = {
    "CategoryEncoding(num_tokens=8, multi_hot)": "DenseBincount has no lowering (and its size, min(maxlength, max(minlength, max(ids) + 1)), "
    "is computed at run time: polytf does not fold the clamp to the constant it always is)",
    "MelSpectrogram(fft_length=64, sequence_stride=32, num_mel_bins=16)": "RFFT and complex numbers (Real, Imag, ComplexAbs) have no lowering",
}

#: Layers that compute nothing at inference: ``training=False`` makes each the identity.
IDENTITY_AT_INFERENCE = (
    "ActivityRegularization", "AlphaDropout", "Dropout", "GaussianDropout", "GaussianNoise", "SpatialDropout1D", "SpatialDropout2D",
    "SpatialDropout3D", "AugMix", "AutoContrast", "CutMix", "Equalization", "MixUp", "RandAugment", "RandomBrightness",
    "RandomColorDegeneration", "RandomColorJitter", "RandomContrast", "RandomCrop", "RandomElasticTransform", "RandomErasing",
    "RandomFlip", "RandomGaussianBlur", "RandomGrayscale", "RandomHue", "RandomInvert", "RandomPerspective", "RandomPosterization",
    "RandomRotation", "RandomSaturation", "RandomSharpness", "RandomShear", "RandomTranslation", "RandomZoom", "Solarization",
)

#: Layers left out of the sweep, with why.
NOT_SWEPT = {
    "StringLookup": "takes strings", "TextVectorization": "takes strings", "Hashing": "hashes strings or ints with FarmHash",
    "HashedCrossing": "hashes feature crosses", "IntegerLookup": "a vocabulary table lookup (a hash table op)",
    "FlaxLayer": "wraps a JAX/Flax module", "JaxLayer": "wraps a JAX function", "TorchModuleWrapper": "wraps a PyTorch module",
    "TFSMLayer": "wraps a SavedModel (load the SavedModel itself)", "MaxNumBoundingBoxes": "pads bounding-box dictionaries",
    "ContrastLimitedAdaptiveHistogramEqualization": "image preprocessing on uint8 histograms",
    "Pipeline": "a sequence of other layers", "Lambda": "an arbitrary function", "RNN": "the base of the recurrent layers (swept as SimpleRNN, GRU, LSTM)",
    "ConvLSTM3D": "swept as ConvLSTM1D/2D", "ReversibleEmbedding": "swept as Embedding", "SpectralNormalization": "a training-time weight wrapper",
    "STFTSpectrogram": "needs scipy to build its window; TensorFlow lowers it to RFFT, like MelSpectrogram", "Wrapper": "a base class", "Layer": "a base class", "InputLayer": "no computation", "Input": "no computation", "InputSpec": "not a layer",
    "GRUCell": "swept as GRU", "LSTMCell": "swept as LSTM", "SimpleRNNCell": "swept as SimpleRNN", "StackedRNNCells": "swept through its cells",
}


def case_inputs(case: LayerCase, seed: int = 0) -> np.ndarray:
    """The case's input: standard normal float32, or int32 ids in ``[0, high)``."""
    rng = np.random.default_rng(seed)
    if case.dtype == "int32":
        return rng.integers(0, case.high, size=case.shape).astype(np.int32)
    return rng.standard_normal(case.shape).astype(np.float32)


def freeze_case(case: LayerCase, path: str | Path, seed: int = DEFAULT_SEED) -> Path:
    """Write the one-layer model of ``case`` as a frozen GraphDef (placeholder ``"input"``,
    output node ``"Identity"``) to ``path``."""
    from polytf.model_zoo.freeze import freeze_to_graphdef

    keras = _import_keras()
    inputs = keras.Input(batch_shape=case.shape, dtype=case.dtype, name="input")
    model = randomize_normalization_weights(keras.Model(inputs, case.build(keras.layers)(inputs)), seed)
    graph = freeze_to_graphdef(model, [("input", case.shape, case.dtype)])
    path = Path(path)
    path.write_bytes(graph.SerializeToString())
    return path
