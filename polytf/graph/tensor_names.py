"""The node a tensor name belongs to, memoised: the graph passes ask for it once per edge per
pass, which on a graph of 10,000 nodes is millions of times.

A tensor is named ``"node:port"`` (:func:`polytf.graph.split_tensor_name`); strings are
immutable, so the answer for a name never changes and a bounded cache serves every pass of
every graph.
"""

from __future__ import annotations

from functools import lru_cache

from polytf.graph import split_tensor_name

#: entries of the cache (tensor names); about 20 MB at most
CACHE_SIZE = 1 << 17


@lru_cache(maxsize=CACHE_SIZE)
def producer_name(tensor: str) -> str:
    """``"dense/MatMul:1"`` -> ``"dense/MatMul"`` (a bare node name is its own producer)."""
    return split_tensor_name(tensor)[0]


__all__ = ["producer_name"]
