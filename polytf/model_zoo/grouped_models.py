"""Models built on grouped convolutions (Keras ``Conv2D(groups=G)``), with deterministic
non-trivial weights.

- ``regnetx_200mf``: RegNetX-200MF (Radosavovic et al., "Designing Network Design Spaces",
  CVPR 2020), written out here because Keras 3 has no ``keras.applications.RegNetX002``:
  a 3x3 stride-2 stem of 32 channels, then four stages of X blocks of depths 1, 1, 4, 7 and
  widths 24, 56, 152, 368; an X block is 1x1 conv, BN, ReLU -> 3x3 grouped conv (group width 8,
  the stage's stride in its first block), BN, ReLU -> 1x1 conv, BN, plus the shortcut (a 1x1
  strided conv and BN where the shape changes), ReLU; global average pooling and a 1000-way
  softmax. The layers and their order follow Keras 2's ``keras.applications.regnet``
  (``RegNetX002``) without its preprocessing.
- ``convnext_tiny``: ``keras.applications.ConvNeXtTiny(weights=None)`` (Liu et al., "A ConvNet
  for the 2020s", CVPR 2022) without its preprocessing layers: its 7x7 depthwise convolutions
  are ``Conv2D(groups=C)``, then layer normalisation, a GELU MLP and a layer scale.

Keras freezes a grouped ``Conv2D`` as a ``StatefulPartitionedCall`` of a library function
marked ``_XlaMustCompile`` that holds one ``Conv2D`` whose filter has ``C / G`` input channels
(the frontend inlines it). Every weight, batch-norm statistic and layer scale is drawn by
:func:`~polytf.model_zoo.modern_models.randomize_normalization_weights`, so a dropped bias,
normalisation or scale would be caught.
"""

from __future__ import annotations

from typing import Any

from polytf.model_zoo.keras_models import DEFAULT_SEED, _import_keras
from polytf.model_zoo.modern_models import randomize_normalization_weights

__all__ = ["regnetx_200mf", "convnext_tiny", "REGNETX_200MF_STAGES", "GROUP_WIDTH"]

#: RegNetX-200MF's stages: ``(depth, width)`` (Radosavovic et al. 2020, table of RegNetX models).
REGNETX_200MF_STAGES = ((1, 24), (1, 56), (4, 152), (7, 368))
#: Channels per group of RegNetX-200MF's grouped 3x3 convolutions.
GROUP_WIDTH = 8
#: Stem width of every RegNet.
_STEM_WIDTH = 32
#: Keras' batch-norm epsilon in RegNet.
_EPSILON = 1e-5


def _x_block(layers: Any, x: Any, width: int, stride: int, name: str) -> Any:
    """One RegNet X block of ``width`` output channels (bottleneck ratio 1, group width 8)."""
    shortcut = x
    if stride != 1 or x.shape[-1] != width:
        shortcut = layers.Conv2D(width, 1, strides=stride, use_bias=False, name=f"{name}_skip_conv")(x)
        shortcut = layers.BatchNormalization(epsilon=_EPSILON, name=f"{name}_skip_bn")(shortcut)
    y = layers.Conv2D(width, 1, use_bias=False, name=f"{name}_conv_1x1_1")(x)
    y = layers.BatchNormalization(epsilon=_EPSILON, name=f"{name}_bn_1")(y)
    y = layers.ReLU(name=f"{name}_relu_1")(y)
    y = layers.Conv2D(
        width, 3, strides=stride, padding="same", groups=width // GROUP_WIDTH, use_bias=False, name=f"{name}_conv_3x3"
    )(y)
    y = layers.BatchNormalization(epsilon=_EPSILON, name=f"{name}_bn_2")(y)
    y = layers.ReLU(name=f"{name}_relu_2")(y)
    y = layers.Conv2D(width, 1, use_bias=False, name=f"{name}_conv_1x1_2")(y)
    y = layers.BatchNormalization(epsilon=_EPSILON, name=f"{name}_bn_3")(y)
    return layers.ReLU(name=f"{name}_relu_3")(layers.Add(name=f"{name}_add")([y, shortcut]))


def regnetx_200mf(batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """RegNetX-200MF (module docstring), 224 x 224 x 3, 1000 classes, random weights and
    batch-norm statistics.

    Frozen: placeholder ``"input"`` (float32 ``[batch, 224, 224, 3]``), output node
    ``"Identity"`` (float32 ``[batch, 1000]``, softmax probabilities).
    """
    keras = _import_keras()
    layers = keras.layers
    inputs = keras.Input(shape=(224, 224, 3), batch_size=batch, name="input")
    x = layers.Conv2D(_STEM_WIDTH, 3, strides=2, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = layers.BatchNormalization(epsilon=_EPSILON, name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    for stage, (depth, width) in enumerate(REGNETX_200MF_STAGES):
        for block in range(depth):
            x = _x_block(layers, x, width, 2 if block == 0 else 1, f"stage{stage}_block{block}")
    x = layers.GlobalAveragePooling2D(name="head_gap")(x)
    outputs = layers.Dense(1000, activation="softmax", name="predictions")(x)
    return randomize_normalization_weights(keras.Model(inputs, outputs, name="regnetx_200mf"), seed)


def convnext_tiny(batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """``keras.applications.ConvNeXtTiny(weights=None, include_preprocessing=False)``,
    224 x 224 x 3, 1000 classes, random weights, layer-norm parameters and layer scales.

    Frozen: placeholder ``"input"`` (float32 ``[batch, 224, 224, 3]``), output node
    ``"Identity"`` (float32 ``[batch, 1000]``, softmax probabilities).
    """
    keras = _import_keras()
    inputs = keras.Input(shape=(224, 224, 3), batch_size=batch, name="input")
    model = keras.applications.ConvNeXtTiny(input_tensor=inputs, weights=None, include_preprocessing=False, classes=1000)
    return randomize_normalization_weights(model, seed)
