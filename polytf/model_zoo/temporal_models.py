"""A temporal convolutional network (TCN: Bai, Kolter and Koltun, "An Empirical Evaluation of
Generic Convolutional and Recurrent Networks for Sequence Modeling", 2018; WaveNet's dilated
causal convolutions, van den Oord et al., 2016) with random, non-trivial weights.

Four residual blocks with dilations 1, 2, 4 and 8; each block is two ``Conv1D(channels, 3,
dilation_rate=d, padding=padding)`` with ReLU (after the first convolution and after the
residual sum); the first block's residual is a 1x1 ``Conv1D`` from the input features to
``channels`` (the TCN's "downsample"), the others are the identity. A final ``Dense(outputs)``
maps every time step's features to its outputs (a sequence-to-sequence model: each output
step depends on the input steps up to it when ``padding="causal"``).

TensorFlow writes each ``Conv1D`` with a dilation above 1 as ``SpaceToBatchND -> ExpandDims
-> Conv2D (VALID) -> Squeeze -> BatchToSpaceND`` (``causal``: after an explicit ``Pad`` of
``2*d`` steps in front; ``same``: the space-to-batch paddings hold the SAME padding), which
:mod:`polytf.passes.dilation_folding` folds back into one ``Conv2D`` with ``dilations``.

Input ``[batch, steps, features]`` float32 (default ``[batch, 128, 16]``); output
``[batch, steps, outputs]`` float32 (default 8 outputs). Weights from
:func:`polytf.model_zoo.keras_models.randomize_weights` (Glorot-uniform kernels, biases
normal with std 0.1).
"""

from __future__ import annotations

from typing import Any

from polytf.model_zoo.keras_models import DEFAULT_SEED, _import_keras, randomize_weights

__all__ = ["DILATIONS", "PADDINGS", "temporal_conv_net"]

#: the dilation of each residual block
DILATIONS = (1, 2, 4, 8)
#: the ``Conv1D`` paddings the model is built with
PADDINGS = ("causal", "same")


def temporal_conv_net(
    batch: int = 1,
    seed: int = DEFAULT_SEED,
    padding: str = "causal",
    steps: int = 128,
    features: int = 16,
    channels: int = 64,
    outputs: int = 8,
) -> Any:
    """The TCN of the module docstring as a Keras model.

    Args:
        batch: the static batch size.
        seed: seed of the random weights.
        padding: ``"causal"`` or ``"same"`` for every dilated convolution.
        steps: sequence length.
        features: input features per step.
        channels: channels of every convolution.
        outputs: outputs per step of the final ``Dense``.

    Raises:
        ValueError: an unknown padding, or a size below 1.
    """
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {', '.join(PADDINGS)}, not {padding!r}")
    if min(batch, steps, features, channels, outputs) < 1:
        raise ValueError("batch, steps, features, channels and outputs must be at least 1")
    keras = _import_keras()
    layers = keras.layers
    inputs = keras.Input(shape=(steps, features), batch_size=batch, name="input")
    x = inputs
    for block, dilation in enumerate(DILATIONS):
        name = f"block{block + 1}"
        h = layers.Conv1D(channels, 3, dilation_rate=dilation, padding=padding, activation="relu", name=f"{name}_conv1")(x)
        h = layers.Conv1D(channels, 3, dilation_rate=dilation, padding=padding, name=f"{name}_conv2")(h)
        residual = x if x.shape[-1] == channels else layers.Conv1D(channels, 1, name=f"{name}_downsample")(x)
        x = layers.ReLU(name=f"{name}_relu")(layers.Add(name=f"{name}_add")([h, residual]))
    outputs_tensor = layers.Dense(outputs, name="dense")(x)
    return randomize_weights(keras.Model(inputs, outputs_tensor, name=f"temporal_conv_net_{padding}"), seed)
