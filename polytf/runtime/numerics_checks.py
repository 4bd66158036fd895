"""Run-time numerics checks: a CheckNumerics node's status is read after its kernel ran."""

from __future__ import annotations

import numpy as np

from polytf.errors import InvalidArgumentError
from polytf.ops.float_checks import failure
from polytf.poly.numerics_checks import STATUS_INFINITY, STATUS_NAN


def check_numerics(status: np.ndarray, node: str, message: str) -> None:
    """Raise InvalidArgumentError when a CheckNumerics node's status (bool ``[2]``,
    :mod:`polytf.poly.numerics_checks`) says its tensor held NaN or ±inf, with TensorFlow's
    text (tensorflow/core/kernels/check_numerics_op.cc: ``"<message> : Tensor had NaN
    values"``) and the node named."""
    text = failure(bool(status[STATUS_NAN]), bool(status[STATUS_INFINITY]), node, message)
    if text is not None:
        raise InvalidArgumentError(text)


__all__ = ["check_numerics"]
