"""A Swin Transformer block (Liu et al., "Swin Transformer: Hierarchical Vision Transformer
using Shifted Windows", ICCV 2021; the reference code's ``SwinTransformerBlock``), written
with raw TensorFlow ops so that the frozen graph carries what a Swin export carries: the
cyclic shift as ``Roll``, window partition and reverse as ``Reshape``/``Transpose``,
windowed multi-head self-attention with a relative position bias and the shifted windows'
attention mask, and an erf-GELU MLP.

:func:`swin_block`: float32 ``[batch, side, side, width]`` -> ``x + attention(LayerNorm(x))``
over ``window x window`` windows of the feature map rolled by ``-shift`` along height and
width (then rolled back), then ``x + MLP(LayerNorm(x))``; the same shape out. Weights from a
seeded numpy generator as in :mod:`polytf.model_zoo.language_models`; the relative position
bias is a random ``[(2w - 1)^2, heads]`` table gathered by the reference code's constant
index (so a constant ``[heads, w^2, w^2]`` once frozen).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from polytf.model_zoo.keras_models import DEFAULT_SEED, import_tensorflow
from polytf.model_zoo.language_models import SeededWeights, dense, layer_norm

__all__ = ["swin_block"]


def relative_position_index(window: int) -> np.ndarray:
    """``[w^2, w^2]`` indices into the ``[(2w - 1)^2]`` bias table: the reference code's
    ``relative_position_index`` (the pair's row offset and column offset, each shifted into
    ``[0, 2w - 1)``)."""
    rows, columns = np.meshgrid(np.arange(window), np.arange(window), indexing="ij")
    coordinates = np.stack([rows.reshape(-1), columns.reshape(-1)])
    relative = coordinates[:, :, None] - coordinates[:, None, :] + (window - 1)
    return relative[0] * (2 * window - 1) + relative[1]


def shifted_window_mask(side: int, window: int, shift: int) -> np.ndarray:
    """``[windows, w^2, w^2]``: 0 where two tokens of a window come from the same region of
    the unshifted map, -100 elsewhere (the reference code's ``attn_mask``)."""
    regions = np.zeros((side, side), np.float32)
    bounds = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    for label, (rows, columns) in enumerate((r, c) for r in bounds for c in bounds):
        regions[rows, columns] = label
    count = side // window
    windows = regions.reshape(count, window, count, window).transpose(0, 2, 1, 3).reshape(count * count, window * window)
    return np.where(windows[:, None, :] != windows[:, :, None], np.float32(-100.0), np.float32(0.0))


def swin_block(batch: int = 1, seed: int = DEFAULT_SEED, side: int = 28, width: int = 96, heads: int = 3, window: int = 7, shift: int = 3) -> Any:
    """The Swin block of the module docstring as a ``tf.function`` with ``input_specs``.

    Input ``"input"``: float32 ``[batch, side, side, width]``; output the same shape (node
    ``"Identity"`` once frozen).

    Raises:
        ValueError: ``side`` not a multiple of ``window``, ``width`` not of ``heads``, or a
            shift outside ``[1, window)``.
    """
    if side % window or width % heads or not 0 < shift < window or min(batch, side, width, heads) < 1:
        raise ValueError(f"need side % window == 0, width % heads == 0 and 0 < shift < window; got side {side}, window {window}, width {width}, heads {heads}, shift {shift}")
    tf = import_tensorflow()
    weights = SeededWeights(seed)
    norm1 = (weights.gamma(width), weights.bias(width))
    query_key_value = (weights.matrix(width, 3 * width), weights.bias(3 * width))
    projection = (weights.matrix(width, width), weights.bias(width))
    norm2 = (weights.gamma(width), weights.bias(width))
    expand = (weights.matrix(width, 4 * width), weights.bias(4 * width))
    contract = (weights.matrix(4 * width, width), weights.bias(width))
    bias_table = weights.embedding((2 * window - 1) ** 2, heads)
    index = relative_position_index(window)
    mask = shifted_window_mask(side, window, shift)
    count, tokens, head_width = side // window, window * window, width // heads

    def attention(x: Any) -> Any:
        h = tf.roll(layer_norm(tf, x, *norm1, epsilon=1e-5), shift=(-shift, -shift), axis=(1, 2))
        windows = tf.reshape(tf.transpose(tf.reshape(h, (batch, count, window, count, window, width)), (0, 1, 3, 2, 4, 5)), (batch * count * count, tokens, width))
        qkv = tf.transpose(tf.reshape(dense(tf, windows, *query_key_value), (batch * count * count, tokens, 3, heads, head_width)), (2, 0, 3, 1, 4))
        q, k, v = qkv[0] * (1.0 / math.sqrt(head_width)), qkv[1], qkv[2]
        bias = tf.transpose(tf.reshape(tf.gather(tf.constant(bias_table), tf.constant(index.reshape(-1))), (tokens, tokens, heads)), (2, 0, 1))
        scores = tf.linalg.matmul(q, k, transpose_b=True) + bias
        scores = tf.reshape(scores, (batch, count * count, heads, tokens, tokens)) + tf.constant(mask)[None, :, None]
        weighted = tf.linalg.matmul(tf.nn.softmax(tf.reshape(scores, (batch * count * count, heads, tokens, tokens)), axis=-1), v)
        merged = dense(tf, tf.reshape(tf.transpose(weighted, (0, 2, 1, 3)), (batch * count * count, tokens, width)), *projection)
        restored = tf.reshape(tf.transpose(tf.reshape(merged, (batch, count, count, window, window, width)), (0, 1, 3, 2, 4, 5)), (batch, side, side, width))
        return tf.roll(restored, shift=(shift, shift), axis=(1, 2))

    def fn(x: Any) -> Any:
        x = x + attention(x)
        hidden = tf.nn.gelu(dense(tf, layer_norm(tf, x, *norm2, epsilon=1e-5), *expand), approximate=False)
        return x + dense(tf, hidden, *contract)

    function = tf.function(fn)
    function.input_specs = (("input", (batch, side, side, width), "float32"),)  # type: ignore[attr-defined]
    return function
