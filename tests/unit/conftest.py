"""Fixtures over the hand-built graphs of :mod:`hand_built_graphs`."""

from __future__ import annotations

import pytest
from hand_built_graphs import GRAPHS, kernels_of


@pytest.fixture(scope="session")
def small_kernels():
    """``small_kernels(name)`` -> the lowered kernels of one of :data:`GRAPHS`."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = kernels_of(GRAPHS[name]())
        return cache[name]

    return get
