"""End to end: the zoo's MLP-Mixer block (token mixing through two Transposes around a Dense
pair, channel mixing, exact GELU, LayerNorm; :func:`polytf.model_zoo.modern_models.mlp_mixer`)
compiled by polytf agrees with TensorFlow running the same GraphDef, within the e2e tolerance
of conftest.py (rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402

INPUT = "input"
OUTPUT = "Identity"


def test_mlp_mixer_block_matches_tensorflow(frozen_model, tf_reference, assert_close, rng, tmp_path) -> None:
    path = frozen_model("mlp_mixer", 1)
    x = rng.standard_normal((1, 196, 256)).astype(np.float32)
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    result = model(**{INPUT: x})
    reference = tf_reference(path, {INPUT: x}, [OUTPUT])[OUTPUT]
    assert result[OUTPUT].shape == (1, 196, 256)
    assert float(np.std(reference - x)) > 0.1, "the block should change its input"
    assert_close(result[OUTPUT], reference, f"{path.name} {OUTPUT}")
