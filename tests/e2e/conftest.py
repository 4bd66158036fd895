"""Helpers for end-to-end tests: TensorFlow reference runs and the comparison tolerance."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

#: Relative tolerance of polytf against TensorFlow.
RTOL = 1e-4
#: Absolute tolerance factor: atol = ATOL_SCALE * max|reference| + ATOL_FLOOR. TensorFlow's own
#: kernels (oneDNN on/off) disagree by ~1e-4 x the output's scale on deep CNNs, so the absolute
#: part is relative to the output's magnitude rather than a fixed number.
ATOL_SCALE = 1e-5
ATOL_FLOOR = 1e-6


def assert_close_to_reference(actual: np.ndarray, reference: np.ndarray, what: str = "output") -> None:
    """|actual - reference| <= RTOL * |reference| + (ATOL_SCALE * max|reference| + ATOL_FLOOR)."""
    actual = np.asarray(actual)
    reference = np.asarray(reference)
    assert actual.shape == reference.shape, f"{what}: shape {actual.shape} != TensorFlow's {reference.shape}"
    assert actual.dtype == reference.dtype, f"{what}: dtype {actual.dtype} != TensorFlow's {reference.dtype}"
    atol = ATOL_SCALE * float(np.max(np.abs(reference), initial=0.0)) + ATOL_FLOOR
    np.testing.assert_allclose(actual, reference, rtol=RTOL, atol=atol, err_msg=f"{what} differs from TensorFlow")


@pytest.fixture
def assert_close() -> Callable[..., None]:
    """:func:`assert_close_to_reference` as a fixture (conftest modules are not imported by tests)."""
    return assert_close_to_reference


@pytest.fixture
def tf_reference() -> Callable[[Path, Mapping[str, np.ndarray], list[str]], dict[str, np.ndarray]]:
    """``tf_reference(path, feeds, outputs)``: run the frozen graph with TensorFlow itself."""
    pytest.importorskip("tensorflow")
    from polytf.model_zoo import run_graphdef_with_tensorflow

    return run_graphdef_with_tensorflow


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, so inputs are the same on every run."""
    return np.random.default_rng(20261122)
