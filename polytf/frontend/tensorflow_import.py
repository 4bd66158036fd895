"""TensorFlow, imported late and quietly: an optional dependency (the model zoo, SavedModel
input, TensorFlow as a baseline), never needed to compile a frozen GraphDef."""

from __future__ import annotations

import os
from typing import Any

from polytf.errors import DependencyMissingError

__all__ = ["import_tensorflow"]


def import_tensorflow(purpose: str = "the model zoo and for running graphs with TensorFlow") -> Any:
    """Import and return ``tensorflow`` with its C++ logging quieted.

    Args:
        purpose: what needs it, for the message (``"TensorFlow is needed for <purpose>"``).

    Raises:
        DependencyMissingError: TensorFlow is not installed (the message says what to install).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        raise DependencyMissingError(f"TensorFlow is needed for {purpose}: pip install 'polytf[tensorflow]'") from None
    return tf
