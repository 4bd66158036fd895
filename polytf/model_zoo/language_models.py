"""Language-model blocks with token-id inputs: a GPT-2-style decoder block and a BERT-style
encoder, written with raw TensorFlow ops so that the frozen graphs carry the ops real
exports carry.

* :func:`gpt2_block` (Radford et al., "Language Models are Unsupervised Multitask
  Learners", 2019; pre-norm decoder block of the GPT-2 reference code): int32 token ids
  ``[batch, sequence]`` -> token embedding (``GatherV2`` on a run-time index) + learned
  position embedding -> ``x + attention(LayerNorm(x))`` with a causal mask built from
  ``Fill`` + ``MatrixBandPart`` + ``SelectV2`` -> ``x + MLP(LayerNorm(x))`` with the
  tanh approximation of GELU (``Pow(x, 3)``) -> final LayerNorm -> float32
  ``[batch, sequence, model_width]``.
* :func:`bert_encoder` (Devlin et al., "BERT", NAACL 2019; post-norm encoder layer):
  int32 ``input_ids`` and ``attention_mask`` ``[batch, sequence]`` -> token + position
  embeddings -> LayerNorm -> self-attention whose scores get ``(1 - mask) * -10000`` on
  padded keys -> ``LayerNorm(x + attention)`` -> ``LayerNorm(y + W2 gelu(W1 y))`` (erf
  GELU) -> float32 ``[batch, sequence, model_width]``.

Weights are drawn from a seeded numpy generator (Glorot-uniform matrices, embeddings
normal with std 0.02 as GPT-2 initialises them, LayerNorm gammas uniform in [0.5, 1.5],
betas and biases normal with std 0.1) and frozen as ``Const`` nodes. Each builder
returns a ``tf.function`` with ``input_specs`` = ``((name, shape, dtype), ...)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from polytf.model_zoo.keras_models import DEFAULT_SEED, _glorot, import_tensorflow

__all__ = ["gpt2_block", "bert_encoder", "VOCABULARY_SIZE", "SeededWeights", "dense", "layer_norm", "zoo_inputs"]

#: Token ids of both models lie in ``[0, VOCABULARY_SIZE)``.
VOCABULARY_SIZE = 1000


def zoo_inputs(input_types, seed: int = 0) -> dict:
    """Inputs for a zoo model, by placeholder: token ids uniform over the vocabulary, an
    ``attention_mask`` that pads the last quarter of the keys, standard-normal floats.

    Args:
        input_types: placeholder name -> TensorType (``CompiledModel.input_types``).
        seed: seed of the generator.
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, tensor_type in input_types.items():
        shape, dtype = tuple(int(d) for d in tensor_type.shape), tensor_type.dtype
        if name == "attention_mask":
            feeds[name] = (np.arange(shape[-1]) < 3 * shape[-1] // 4).astype(dtype)[None].repeat(shape[0], 0)
        elif dtype.startswith("int"):
            feeds[name] = rng.integers(0, VOCABULARY_SIZE, size=shape).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


class SeededWeights:
    """Seeded weights of one model, by name."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def matrix(self, rows: int, columns: int) -> np.ndarray:
        return _glorot(self._rng, (rows, columns))

    def embedding(self, rows: int, columns: int) -> np.ndarray:
        return self._rng.normal(0.0, 0.02, size=(rows, columns)).astype(np.float32)

    def bias(self, size: int) -> np.ndarray:
        return self._rng.normal(0.0, 0.1, size=(size,)).astype(np.float32)

    def gamma(self, size: int) -> np.ndarray:
        return self._rng.uniform(0.5, 1.5, size=(size,)).astype(np.float32)


def layer_norm(tf: Any, x: Any, gamma: np.ndarray, beta: np.ndarray, epsilon: float) -> Any:
    """``(x - mean) / sqrt(variance + epsilon) * gamma + beta`` over the last axis."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + epsilon) * tf.constant(gamma) + tf.constant(beta)


def dense(tf: Any, x: Any, kernel: np.ndarray, bias: np.ndarray) -> Any:
    """``x @ kernel + bias`` for ``x: [B, S, D]`` (a rank-3 by rank-2 product, as Keras freezes Dense)."""
    return tf.linalg.matmul(x, tf.constant(kernel)) + tf.constant(bias)


def _split_heads(tf: Any, x: Any, batch: int, sequence: int, heads: int) -> Any:
    """``[B, S, H * Dh] -> [B, H, S, Dh]``."""
    return tf.transpose(tf.reshape(x, (batch, sequence, heads, -1)), (0, 2, 1, 3))


def _merge_heads(tf: Any, x: Any, batch: int, sequence: int) -> Any:
    """``[B, H, S, Dh] -> [B, S, H * Dh]``."""
    return tf.reshape(tf.transpose(x, (0, 2, 1, 3)), (batch, sequence, -1))


def _check_sizes(model_width: int, heads: int, sequence: int, batch: int) -> None:
    if min(model_width, heads, sequence, batch) < 1:
        raise ValueError("batch, sequence, model_width and heads must be positive")
    if model_width % heads:
        raise ValueError(f"model_width {model_width} is not a multiple of heads {heads}")


def gpt2_block(
    batch: int = 1,
    seed: int = DEFAULT_SEED,
    sequence: int = 64,
    model_width: int = 128,
    heads: int = 4,
    feed_forward_width: int = 512,
) -> Any:
    """A GPT-2-style decoder block on token ids (see the module docstring).

    Input ``"input"``: int32 ``[batch, sequence]`` token ids in ``[0, VOCABULARY_SIZE)``.
    Output: float32 ``[batch, sequence, model_width]`` (node ``"Identity"`` once frozen).

    Raises:
        ValueError: non-positive sizes, or ``model_width`` not a multiple of ``heads``.
    """
    tf = import_tensorflow()
    _check_sizes(model_width, heads, sequence, batch)
    weights = SeededWeights(seed)
    token_table = weights.embedding(VOCABULARY_SIZE, model_width)
    position_table = weights.embedding(sequence, model_width)
    norm1 = (weights.gamma(model_width), weights.bias(model_width))
    query_key_value = (weights.matrix(model_width, 3 * model_width), weights.bias(3 * model_width))
    projection = (weights.matrix(model_width, model_width), weights.bias(model_width))
    norm2 = (weights.gamma(model_width), weights.bias(model_width))
    expand = (weights.matrix(model_width, feed_forward_width), weights.bias(feed_forward_width))
    contract = (weights.matrix(feed_forward_width, model_width), weights.bias(model_width))
    final_norm = (weights.gamma(model_width), weights.bias(model_width))
    head_width = model_width // heads

    def gelu_tanh(x: Any) -> Any:
        # GPT-2's gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3.0))))

    def fn(token_ids: Any) -> Any:
        x = tf.gather(tf.constant(token_table), token_ids) + tf.constant(position_table)
        h = layer_norm(tf, x, *norm1, epsilon=1e-5)
        qkv = dense(tf, h, *query_key_value)
        q, k, v = (_split_heads(tf, part, batch, sequence, heads) for part in tf.split(qkv, 3, axis=-1))
        scores = tf.linalg.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(head_width))
        causal = tf.linalg.band_part(tf.ones((sequence, sequence), dtype=tf.float32), -1, 0)
        masked = tf.where(causal > 0.5, scores, tf.fill((batch, heads, sequence, sequence), -1e9))
        attention = _merge_heads(tf, tf.linalg.matmul(tf.nn.softmax(masked, axis=-1), v), batch, sequence)
        x = x + dense(tf, attention, *projection)
        h = layer_norm(tf, x, *norm2, epsilon=1e-5)
        x = x + dense(tf, gelu_tanh(dense(tf, h, *expand)), *contract)
        return layer_norm(tf, x, *final_norm, epsilon=1e-5)

    function = tf.function(fn)
    function.input_specs = (("input", (batch, sequence), "int32"),)  # type: ignore[attr-defined]
    return function


def bert_encoder(
    batch: int | None = 1,
    seed: int = DEFAULT_SEED,
    sequence: int | None = 64,
    model_width: int = 128,
    heads: int = 4,
    feed_forward_width: int = 512,
    max_sequence: int = 128,
) -> Any:
    """A BERT-style encoder layer on token ids with an attention mask (see the module docstring).

    Inputs: ``"input"`` int32 ``[batch, sequence]`` token ids in ``[0, VOCABULARY_SIZE)``,
    ``"attention_mask"`` int32 ``[batch, sequence]`` (1: attend to this key, 0: padding).
    Output: float32 ``[batch, sequence, model_width]``. A ``None`` batch or sequence is
    unknown until the call, as a BERT export has it: the graph then reads it with ``Shape`` and
    ``StridedSlice`` and builds its reshapes with ``Pack``, and the position table has
    ``max_sequence`` rows, sliced to the call's sequence.

    Raises:
        ValueError: non-positive sizes, or ``model_width`` not a multiple of ``heads``.
    """
    tf = import_tensorflow()
    _check_sizes(model_width, heads, sequence or max_sequence, batch or 1)
    weights = SeededWeights(seed)
    token_table = weights.embedding(VOCABULARY_SIZE, model_width)
    position_table = weights.embedding(sequence or max_sequence, model_width)
    embedding_norm = (weights.gamma(model_width), weights.bias(model_width))
    query, key, value = ((weights.matrix(model_width, model_width), weights.bias(model_width)) for _ in range(3))
    projection = (weights.matrix(model_width, model_width), weights.bias(model_width))
    norm1 = (weights.gamma(model_width), weights.bias(model_width))
    expand = (weights.matrix(model_width, feed_forward_width), weights.bias(feed_forward_width))
    contract = (weights.matrix(feed_forward_width, model_width), weights.bias(model_width))
    norm2 = (weights.gamma(model_width), weights.bias(model_width))
    head_width = model_width // heads

    def fn(token_ids: Any, attention_mask: Any) -> Any:
        b = batch if batch is not None else tf.shape(token_ids)[0]
        s = sequence if sequence is not None else tf.shape(token_ids)[1]
        positions = tf.constant(position_table) if sequence is not None else tf.constant(position_table)[:s]
        x = tf.gather(tf.constant(token_table), token_ids) + positions
        x = layer_norm(tf, x, *embedding_norm, epsilon=1e-12)
        q, k, v = (_split_heads(tf, dense(tf, x, *w), b, s, heads) for w in (query, key, value))
        scores = tf.linalg.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(head_width))
        padding = (1.0 - tf.cast(attention_mask, tf.float32)) * -10000.0
        scores = scores + tf.reshape(padding, (b, 1, 1, s))
        attention = _merge_heads(tf, tf.linalg.matmul(tf.nn.softmax(scores, axis=-1), v), b, s)
        y = layer_norm(tf, x + dense(tf, attention, *projection), *norm1, epsilon=1e-12)
        hidden = tf.nn.gelu(dense(tf, y, *expand), approximate=False)
        return layer_norm(tf, y + dense(tf, hidden, *contract), *norm2, epsilon=1e-12)

    function = tf.function(fn)
    function.input_specs = (  # type: ignore[attr-defined]
        ("input", (batch, sequence), "int32"),
        ("attention_mask", (batch, sequence), "int32"),
    )
    return function
