"""Models frozen with their ``None`` dimensions, as users export them, load with no
``input_shapes`` and match TensorFlow run at each size: Keras CNNs at batch 1, 3, 8 and 17, a
BERT-style encoder (``[None, None]`` int ids and mask) at several batch and sequence sizes."""

from __future__ import annotations

import numpy as np
import pytest

import polytf
from polytf.compiler.dynamic_model import DynamicModel

pytestmark = pytest.mark.tensorflow

BATCHES = (1, 3, 8, 17)
#: (batch, sequence) calls of the BERT-style encoder (sequences up to its 128 positions)
BERT_SIZES = ((1, 7), (3, 64), (8, 128), (17, 5))


def _feeds(name: str, sizes: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    from polytf.model_zoo.dynamic_models import dynamic_model_inputs

    feeds = {}
    for input_name, declared, dtype in dynamic_model_inputs(name):
        given = iter(sizes)
        shape = tuple(next(given) if size is None else size for size in declared)
        if input_name == "attention_mask":  # the last quarter of the keys padded
            feeds[input_name] = (np.arange(shape[1]) < max(1, 3 * shape[1] // 4)).astype(dtype)[None].repeat(shape[0], 0)
        elif dtype == "int32":
            feeds[input_name] = rng.integers(0, 1000, size=shape).astype(dtype)
        else:
            feeds[input_name] = rng.standard_normal(shape).astype(dtype)
    return feeds


@pytest.mark.parametrize(
    ("name", "calls"),
    [
        ("cifar_cnn", [(batch,) for batch in BATCHES]),
        ("transformer_encoder", [(1,), (3,), (8,)]),
        ("bert_encoder", list(BERT_SIZES)),
        pytest.param("mobilenet_v2", [(batch,) for batch in BATCHES], marks=pytest.mark.slow),
        pytest.param("resnet50", [(batch,) for batch in BATCHES], marks=pytest.mark.slow),
    ],
)
def test_a_model_with_none_dimensions_matches_tensorflow_at_each_size(name, calls, tmp_path, tf_reference, assert_close, rng):
    from polytf.model_zoo.dynamic_models import write_dynamic_model

    path = write_dynamic_model(name, tmp_path / f"{name}.pb")
    model = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    assert isinstance(model, DynamicModel)
    assert all(shape[0] == "N" for shape in model.input_shapes.values())
    for sizes in calls:
        feeds = _feeds(name, sizes, rng)
        outputs = model(**feeds)
        reference = tf_reference(path, feeds, list(outputs))
        for output, value in outputs.items():
            assert value.shape[0] == sizes[0]
            assert_close(value, reference[output], f"{name} at sizes {sizes}, output {output}")
