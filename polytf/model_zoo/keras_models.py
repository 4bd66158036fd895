"""Test models with deterministic random weights AND random non-zero biases.

Keras initialises biases to zero, so a compiler that dropped a bias would still match
TensorFlow on an untrained model: every builder here overwrites all weights (kernels
Glorot-uniform, biases normal with std 0.1) from a seeded numpy generator, so models are
identical from run to run and version to version.

TensorFlow and Keras are imported lazily; without them the builders raise
:class:`~polytf.errors.DependencyMissingError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polytf.errors import DependencyMissingError
from polytf.frontend.tensorflow_import import import_tensorflow as _import_tensorflow

__all__ = [
    "mlp",
    "cifar_cnn",
    "odd_matmul",
    "matmul",
    "conv_bias_relu",
    "conv3x3_bias_relu_56",
    "randomize_weights",
    "import_tensorflow",
]

DEFAULT_SEED = 0


def import_tensorflow() -> Any:
    """Import and return ``tensorflow`` (quietly), or raise DependencyMissingError."""
    return _import_tensorflow("the model zoo and for running graphs with TensorFlow")


def _import_keras() -> Any:
    import_tensorflow()
    try:
        import keras
    except ImportError:
        raise DependencyMissingError("Keras is needed for the model zoo: pip install 'polytf[tensorflow]'") from None
    return keras


def _glorot(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    if len(shape) >= 2:
        receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
        fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    else:
        fan_in = fan_out = max(1, int(np.prod(shape)))
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def randomize_weights(model: Any, seed: int = DEFAULT_SEED) -> Any:
    """Overwrite every weight of a Keras model: kernels Glorot-uniform, biases (and any other
    1-D weight) normal with std 0.1, all from ``numpy.random.default_rng(seed)``. Returns the model."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if not weights:
            continue
        new = []
        for w in weights:
            if w.ndim <= 1:
                new.append(rng.normal(0.0, 0.1, size=w.shape).astype(w.dtype))
            else:
                new.append(_glorot(rng, tuple(w.shape)).astype(w.dtype))
        layer.set_weights(new)
    return model


def mlp(batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """MNIST-style MLP: Input(784) -> Dense 512 relu -> Dense 512 relu -> Dense 10 softmax.

    Frozen with :func:`polytf.model_zoo.freeze.write_model`: placeholder ``"input"``
    (float32 ``[batch, 784]``), output node ``"Identity"`` (float32 ``[batch, 10]``).
    """
    keras = _import_keras()
    inputs = keras.Input(shape=(784,), batch_size=batch, name="input")
    x = keras.layers.Dense(512, activation="relu", name="dense_1")(inputs)
    x = keras.layers.Dense(512, activation="relu", name="dense_2")(x)
    outputs = keras.layers.Dense(10, activation="softmax", name="logits")(x)
    return randomize_weights(keras.Model(inputs, outputs, name="mlp"), seed)


def cifar_cnn(batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """The classic Keras CIFAR-10 CNN (without dropout).

    Input(32,32,3) -> Conv2D(32,3,same) relu -> Conv2D(32,3,valid) relu -> MaxPool(2) ->
    Conv2D(64,3,same) relu -> Conv2D(64,3,valid) relu -> MaxPool(2) -> Flatten ->
    Dense(512) relu -> Dense(10) softmax.

    Frozen: placeholder ``"input"`` (float32 ``[batch, 32, 32, 3]``), output node
    ``"Identity"`` (float32 ``[batch, 10]``).
    """
    keras = _import_keras()
    layers = keras.layers
    inputs = keras.Input(shape=(32, 32, 3), batch_size=batch, name="input")
    x = layers.Conv2D(32, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = layers.Conv2D(32, 3, activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(2, name="pool1")(x)
    x = layers.Conv2D(64, 3, padding="same", activation="relu", name="conv3")(x)
    x = layers.Conv2D(64, 3, activation="relu", name="conv4")(x)
    x = layers.MaxPooling2D(2, name="pool2")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(512, activation="relu", name="dense")(x)
    outputs = layers.Dense(10, activation="softmax", name="logits")(x)
    return randomize_weights(keras.Model(inputs, outputs, name="cifar_cnn"), seed)


def odd_matmul(m: int = 37, k: int = 53, n: int = 29, seed: int = DEFAULT_SEED) -> Any:
    """A single ``MatMul`` of a float32 placeholder ``[m, k]`` by a constant ``[k, n]`` (odd sizes
    exercise partial tiles). Returns a ``tf.function``; its input shape is ``fn.input_shape``.

    Frozen: placeholder ``"input"`` (``[m, k]``), nodes ``"Const"`` (the weight) and ``"MatMul"``,
    output node ``"Identity"`` (``[m, n]``).
    """
    tf = import_tensorflow()
    rng = np.random.default_rng(seed)
    weight = rng.normal(0.0, 1.0 / np.sqrt(k), size=(k, n)).astype(np.float32)

    def fn(x: Any) -> Any:
        return tf.linalg.matmul(x, tf.constant(weight), name="MatMul")

    function = tf.function(fn)
    function.input_shape = (m, k)  # type: ignore[attr-defined]
    return function


def matmul(m: int = 256, k: int = 256, n: int = 256) -> Any:
    """A single ``MatMul`` of two float32 placeholders: ``a: [m, k], b: [k, n] -> [m, n]``.

    Returns a ``tf.function``; its inputs are ``fn.input_specs`` = ``(("a", (m, k)), ("b", (k, n)))``.
    Frozen: placeholders ``"a"`` and ``"b"``, node ``"MatMul"``, output node ``"Identity"``. No weights:
    both operands are inputs, so nothing of the product can be folded at compile time.
    """
    tf = import_tensorflow()
    for label, size in (("m", m), ("k", k), ("n", n)):
        if int(size) < 1:
            raise ValueError(f"matmul size {label} must be at least 1, not {size}")

    def fn(a: Any, b: Any) -> Any:
        return tf.linalg.matmul(a, b, name="MatMul")

    function = tf.function(fn)
    function.input_specs = (("a", (int(m), int(k))), ("b", (int(k), int(n))))  # type: ignore[attr-defined]
    return function


def conv_bias_relu(
    batch: int = 1,
    h: int = 17,
    w: int = 19,
    c: int = 5,
    filters: int = 7,
    stride: int = 1,
    padding: str = "SAME",
    seed: int = DEFAULT_SEED,
) -> Any:
    """``Conv2D`` (3x3, NHWC, ``stride``, ``padding``) + ``BiasAdd`` + ``Relu`` as raw TF ops.

    Returns a ``tf.function``; its input shape is ``fn.input_shape`` = ``(batch, h, w, c)``.
    Frozen: placeholder ``"input"``, nodes ``"Conv2D"``, ``"BiasAdd"``, ``"Relu"`` (filter and
    bias as Const nodes ``"Const"`` and ``"Const_1"``), output node ``"Identity"``.
    """
    tf = import_tensorflow()
    padding = padding.upper()
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'SAME' or 'VALID', not {padding!r}")
    rng = np.random.default_rng(seed)
    kernel = _glorot(rng, (3, 3, c, filters))
    bias = rng.normal(0.0, 0.1, size=(filters,)).astype(np.float32)

    def fn(x: Any) -> Any:
        y = tf.nn.conv2d(x, tf.constant(kernel), strides=[1, stride, stride, 1], padding=padding, name="Conv2D")
        y = tf.nn.bias_add(y, tf.constant(bias), name="BiasAdd")
        return tf.nn.relu(y, name="Relu")

    function = tf.function(fn)
    function.input_shape = (batch, h, w, c)  # type: ignore[attr-defined]
    return function


def conv3x3_bias_relu_56(batch: int = 1, seed: int = DEFAULT_SEED) -> Any:
    """A ResNet-style layer: :func:`conv_bias_relu` with input ``[batch, 56, 56, 64]`` (NHWC),
    a 3x3 64 -> 64 filter, stride 1, SAME padding: output ``[batch, 56, 56, 64]``.

    2 * batch * 56 * 56 * 64 * 3 * 3 * 64 = batch * 231.2 MFLOP for the convolution.
    """
    return conv_bias_relu(batch, h=56, w=56, c=64, filters=64, stride=1, padding="SAME", seed=seed)
