"""End to end: small Transformer blocks (the zoo's Keras encoder block and GPT-2-style decoder
block at small sizes) compile into the fused kernels of issue 28 and agree with TensorFlow
running the same GraphDef.

The fusions checked: a ``Dense`` layer's bias and GELU (exact erf form in the Keras block, tanh
form in the GPT block) in its matmul's kernel (reshape sinking), each ``MultiHeadAttention``
projection's ``[H, D]`` bias in its matmul's kernel, the residual add in the output projection's
kernel, each LayerNorm (mean, variance, normalization, scale and shift) in one kernel, and the
causal mask's select in the softmax's kernel (normalization fusion in :mod:`polytf.passes.fusion`).
Tolerance (conftest.py): rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.model_zoo.freeze import freeze_to_graphdef  # noqa: E402
from polytf.model_zoo.language_models import gpt2_block, zoo_inputs  # noqa: E402
from polytf.model_zoo.modern_models import transformer_encoder  # noqa: E402

OUTPUT = "Identity"


def _kernel_ops(model) -> list[tuple[str, ...]]:
    return [tuple(op for _, op in kernel.scop.ops) for kernel in model.kernels]


def _write(graph_def, path):
    path.write_bytes(graph_def.SerializeToString(deterministic=True))
    return path


def _compare(path, tf_reference, assert_close, cache_dir):
    model = polytf.load(path, cache_dir=cache_dir, fallback=False, threads=2)
    feeds = zoo_inputs(model.input_types, seed=3)
    result = model(**feeds)[OUTPUT]
    reference = tf_reference(path, feeds, [OUTPUT])[OUTPUT]
    assert float(np.std(reference)) > 0.1
    assert_close(result, reference, f"{path.name} {OUTPUT}")
    return model


def _assert_layer_norms_fused(kernels, count):
    """Each LayerNorm is one kernel: mean, squared difference, variance, rsqrt, scale, shift."""
    normalizations = [ops for ops in kernels if "Mean" in ops]
    assert len(normalizations) == count, kernels
    for ops in normalizations:
        assert ops[0] == "Mean" and ops.count("Mean") == 2 and {"SquaredDifference", "Rsqrt"} <= set(ops), ops
        assert ops[-1] == "AddV2" and "MatMul" not in ops and "BatchMatMulV2" not in ops, ops


def test_small_transformer_encoder_block(tf_reference, assert_close, tmp_path):
    model = transformer_encoder(batch=1, sequence=16, model_width=32, heads=2, feed_forward_width=64)
    path = _write(freeze_to_graphdef(model, [("input", (1, 16, 32))]), tmp_path / "encoder.pb")
    kernels = _kernel_ops(_compare(path, tf_reference, assert_close, tmp_path / "cache"))
    (feed_forward,) = [ops for ops in kernels if "Erfc" in ops]
    assert feed_forward[:2] == ("MatMul", "BiasAdd"), kernels
    assert sum(ops[:2] == ("BatchMatMulV2", "AddV2") for ops in kernels) == 3, "the query, key and value biases"
    assert ("MatMul", "BiasAdd", "AddV2") in kernels, "the second dense layer with its bias and the residual add"
    _assert_layer_norms_fused(kernels, 2)
    assert len(kernels) <= 11, kernels


def test_small_gpt_block(tf_reference, assert_close, tmp_path):
    function = gpt2_block(batch=2, sequence=8, model_width=32, heads=2, feed_forward_width=64)
    path = _write(freeze_to_graphdef(function, function.input_specs), tmp_path / "gpt.pb")
    kernels = _kernel_ops(_compare(path, tf_reference, assert_close, tmp_path / "cache"))
    (feed_forward,) = [ops for ops in kernels if "Tanh" in ops]
    assert feed_forward[0] == "BatchMatMulV2" and feed_forward[-1] == "Mul", kernels
    assert ("SelectV2", "Softmax") in kernels, "the causal mask in the softmax's kernel"
    _assert_layer_norms_fused(kernels, 3)
