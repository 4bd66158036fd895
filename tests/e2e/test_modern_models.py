"""End to end: a Keras MobileNetV2 and a Keras Transformer encoder block, frozen from
TensorFlow, compiled by polytf, agree with TensorFlow running the same GraphDef.

Both models carry non-trivial weights (random batch-norm statistics, gammas, biases; see
:mod:`polytf.model_zoo.modern_models`), so a dropped or mis-folded normalisation fails.
Tolerance (conftest.py): rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6, on the model's
output and on the pre-softmax logits of MobileNetV2 (softmax over 1000 classes compresses
errors).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.compiler.preparation import prepare_model  # noqa: E402

INPUT = "input"
OUTPUT = "Identity"


def _logits_tensor(path) -> str:
    """The tensor feeding MobileNetV2's final Softmax."""
    from polytf.frontend import load_graph

    graph = load_graph(path)
    (softmax,) = [n for n in graph.nodes.values() if n.op == "Softmax"]
    return softmax.inputs[0].split(":")[0]


def test_mobilenet_v2_matches_tensorflow(frozen_model, tf_reference, assert_close, rng, tmp_path) -> None:
    path = frozen_model("mobilenet_v2", 1)
    logits = _logits_tensor(path)
    x = rng.standard_normal((1, 224, 224, 3)).astype(np.float32)
    model = polytf.load(path, cache_dir=tmp_path / "cache", outputs=[OUTPUT, logits])
    result = model(**{INPUT: x})
    reference = tf_reference(path, {INPUT: x}, [OUTPUT, logits])
    assert result[OUTPUT].shape == (1, 1000)
    assert float(np.std(reference[logits])) > 0.1, "the test model's logits should not be flat"
    assert_close(result[logits], reference[logits], f"{path.name} logits")
    assert_close(result[OUTPUT], reference[OUTPUT], f"{path.name} {OUTPUT}")


def test_mobilenet_v2_graph_passes_remove_at_least_half_of_the_nodes(frozen_model) -> None:
    prepared = prepare_model(frozen_model("mobilenet_v2", 1))
    first, last = prepared.passes[0], prepared.passes[-1]
    assert first.nodes_before > 1000
    assert last.nodes_after <= first.nodes_before // 2, [str(p) for p in prepared.passes]
    ops = {node.op for node in prepared.graph.nodes.values()}
    assert not ops & {"Identity", "Rsqrt", "Sub", "FusedBatchNormV3"}, "batch norms should be folded into the convolutions"


def test_transformer_encoder_matches_tensorflow(frozen_model, tf_reference, assert_close, rng, tmp_path) -> None:
    path = frozen_model("transformer_encoder", 1)
    x = rng.standard_normal((1, 128, 256)).astype(np.float32)
    model = polytf.load(path, cache_dir=tmp_path / "cache")
    result = model(**{INPUT: x})
    reference = tf_reference(path, {INPUT: x}, [OUTPUT])[OUTPUT]
    assert result[OUTPUT].shape == (1, 128, 256)
    assert_close(result[OUTPUT], reference, f"{path.name} {OUTPUT}")
