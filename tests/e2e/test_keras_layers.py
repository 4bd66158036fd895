"""The Keras layer sweep (:mod:`polytf.model_zoo.keras_layers`): every layer of
``keras.layers`` that computes something at inference, in one or more argument settings,
compiles with no host fallback and agrees with TensorFlow running the same frozen one-layer
model; the cases polytf does not compile yet are listed with why (``KNOWN_GAPS``: expected to
fail, strictly, so that a fixed gap is noticed). ``results/keras_layers.md`` is the report.

Tolerance (conftest.py): rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.model_zoo.keras_layers import CASES, IDENTITY_AT_INFERENCE, KNOWN_GAPS, NOT_SWEPT, case_inputs, freeze_case  # noqa: E402


def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[case.name])] if case.name in KNOWN_GAPS else []
        yield pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", _params())
def test_layer_compiles_and_matches_tensorflow(case, tmp_path, tf_reference, assert_close) -> None:
    path = freeze_case(case, tmp_path / "layer.pb")
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    x = case_inputs(case)
    reference = tf_reference(path, {"input": x}, ["Identity"])["Identity"]
    assert_close(model(input=x)["Identity"], reference, case.name)


def test_every_layer_of_keras_is_swept_or_listed() -> None:
    """Each class of ``keras.layers`` is a case, an alias of one, the identity at inference, or
    listed as not swept with why; the known gaps are cases."""
    import keras

    swept = {case.layer for case in CASES} | set(IDENTITY_AT_INFERENCE) | set(NOT_SWEPT)
    classes = {name: getattr(keras.layers, name) for name in dir(keras.layers) if name[:1].isupper()}
    covered = {classes[name] for name in swept if name in classes}
    missing = sorted(name for name, value in classes.items() if value not in covered)
    assert missing == []
    assert set(KNOWN_GAPS) <= {case.name for case in CASES}
    assert len({case.name for case in CASES}) == len(CASES)
    assert np.unique([case.layer for case in CASES]).size >= 80
