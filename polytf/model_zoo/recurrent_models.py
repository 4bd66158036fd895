"""Recurrent layers as users bring them: Keras ``LSTM``, ``GRU`` and a bidirectional ``LSTM``.

Each is a Keras 3 layer with its default ``unroll=False``: frozen, it is a ``while`` loop over
the time steps with ``TensorList`` ops for the per-step inputs and outputs (the TF1 dataflow
form with ``lower_control_flow=True``, the default of ``convert_variables_to_constants_v2``;
a functional ``While`` node with ``False``), which polytf unrolls
(:mod:`polytf.frontend.while_loops`). Semantics: Hochreiter and Schmidhuber, Neural
Computation 1997 (LSTM, Keras' gate order i, f, c, o); Cho et al., EMNLP 2014 (GRU, Keras'
``reset_after=True`` default); Schuster and Paliwal, IEEE TSP 1997 (bidirectional, the two
final states concatenated).

Every weight is random (kernels and recurrent kernels Glorot-uniform, biases normal with std
0.1: :func:`~polytf.model_zoo.keras_models.randomize_weights`), so a dropped bias or a
swapped gate does not match TensorFlow by accident.

Frozen: placeholder ``"input"`` (float32 ``[batch, steps, features]``), output node
``"Identity"`` (float32 ``[batch, units]``; ``[batch, 2 * units]`` for the bidirectional
layer): the last step's hidden state.
"""

from __future__ import annotations

from typing import Any

from polytf.model_zoo.keras_models import DEFAULT_SEED, _import_keras, randomize_weights

__all__ = ["lstm", "gru", "bidirectional_lstm", "RECURRENT_MODELS"]


def _recurrent_model(layer: Any, steps: int, features: int, batch: int, seed: int) -> Any:
    keras = _import_keras()
    inputs = keras.Input(shape=(steps, features), batch_size=batch, name="input")
    model = keras.Model(inputs, layer(inputs))
    return randomize_weights(model, seed)


def lstm(steps: int = 20, units: int = 64, features: int = 32, batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """``keras.layers.LSTM(units)`` over ``steps`` steps: ``[batch, steps, features] -> [batch, units]``."""
    keras = _import_keras()
    return _recurrent_model(keras.layers.LSTM(units), steps, features, batch, seed)


def gru(steps: int = 20, units: int = 64, features: int = 32, batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """``keras.layers.GRU(units)`` over ``steps`` steps: ``[batch, steps, features] -> [batch, units]``."""
    keras = _import_keras()
    return _recurrent_model(keras.layers.GRU(units), steps, features, batch, seed)


def bidirectional_lstm(steps: int = 20, units: int = 64, features: int = 32, batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """``keras.layers.Bidirectional(LSTM(units))``: two sibling loops, the backward one over the
    reversed sequence; ``[batch, steps, features] -> [batch, 2 * units]``."""
    keras = _import_keras()
    return _recurrent_model(keras.layers.Bidirectional(keras.layers.LSTM(units)), steps, features, batch, seed)


#: zoo name -> (builder, steps); every one has 64 units and 32 features
RECURRENT_MODELS: dict[str, tuple[Any, int]] = {
    "lstm20": (lstm, 20),
    "lstm200": (lstm, 200),
    "gru20": (gru, 20),
    "gru200": (gru, 200),
    "bilstm20": (bidirectional_lstm, 20),
}
