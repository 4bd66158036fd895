"""The bench's accuracy check: a polytf result that differs from its reference is never timed.

The tolerance is the tuner's and the end-to-end tests' (``tests/e2e/conftest.py``):
``|actual - expected| <= rtol·|expected| + atol_scale·max|expected| + 1e-6`` with
:class:`~polytf.config.MeasurementConfig`'s ``rtol`` (1e-4) and ``atol_scale`` (1e-5).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polytf.config import MeasurementConfig
from polytf.errors import PolytfError

__all__ = ["WrongResultError", "check_outputs"]


class WrongResultError(PolytfError):
    """polytf's output differs from the reference: the run stops (a wrong result is never timed)."""


def check_outputs(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], label: str, reference: str = "numpy") -> float:
    """Max abs error of polytf's outputs against the reference's (host arrays, by output name).

    Args:
        label: the row, for the message (e.g. ``"resnet50 b32 (cuda)"``).
        reference: what computed ``expected`` (``"numpy"``, ``"TensorFlow (CPU)"``).

    Raises:
        WrongResultError: a missing output, another shape, or an error beyond the tolerance.
    """
    config = MeasurementConfig()
    worst = 0.0
    for name, values in expected.items():
        if name not in actual or actual[name].shape != values.shape:
            raise WrongResultError(
                f"{label}: polytf returned {sorted(actual)} with shapes {[a.shape for a in actual.values()]}, {reference} {name} {values.shape}"
            )
        scale = float(np.max(np.abs(values), initial=0.0))
        atol = config.atol_scale * scale + 1e-6
        difference = np.abs(actual[name].astype(np.float64) - values.astype(np.float64))
        worst = max(worst, float(np.max(difference, initial=0.0)))
        if not np.allclose(actual[name], values, rtol=config.rtol, atol=atol):
            raise WrongResultError(
                f"{label}: polytf's output '{name}' differs from the {reference} reference: max abs error {worst:.3g} "
                f"beyond float32 tolerance (rtol {config.rtol}, atol {atol:.3g}); not timing a wrong result"
            )
    return worst
