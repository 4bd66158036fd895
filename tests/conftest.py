"""Session-wide fixtures: zoo models frozen once per test session.

``frozen_model(name, batch=1)`` returns the path of a binary frozen GraphDef written by
:func:`polytf.model_zoo.write_model` (placeholder ``"input"``, output node ``"Identity"``),
building each (name, batch) at most once per session; tests using it are skipped when
TensorFlow is not installed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by the whole session for frozen zoo models."""
    return tmp_path_factory.mktemp("zoo_models")


@pytest.fixture(scope="session")
def frozen_model(model_dir: Path) -> Callable[..., Path]:
    """Factory ``frozen_model(name, batch=1) -> Path`` writing zoo models once per session."""
    written: dict[tuple[str, int | None], Path] = {}

    def make(name: str, batch: int | None = 1) -> Path:
        pytest.importorskip("tensorflow")
        key = (name, batch)
        if key not in written:
            from polytf.model_zoo import write_model

            path = model_dir / f"{name}_b{batch}.pb"
            written[key] = write_model(name, path, batch=batch)
        return written[key]

    return make
