"""islpy, imported the first time polytf uses it rather than when a module naming it loads.

A warm ``polytf.load`` links every kernel from the cache and maps its prepared model: it
calls nothing of isl, and importing islpy (28 ms on a Zen 5, most of it ``importlib.metadata``
reading islpy's version) would be a sixth of such a load of a small model. Modules that use
isl write ``from polytf.islpy_on_demand import isl`` and use ``isl.Set`` and friends as usual;
the first attribute read imports islpy, and from then on every name of islpy is an
attribute of :data:`isl` itself (read at the cost of any attribute).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

__all__ = ["isl", "islpy_version"]


class _IslOnDemand:
    """Stands for the islpy module; imports it at the first attribute read."""

    def __getattr__(self, name: str) -> Any:
        import islpy

        self.__dict__.update(vars(islpy))  # every later read is a plain attribute
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'islpy' has no attribute {name!r}") from None

    def __repr__(self) -> str:
        return "<islpy, imported on first use>"


#: islpy, imported on first use (module docstring)
isl: Any = _IslOnDemand()


@functools.cache
def islpy_version() -> str:
    """islpy's version, from its installed metadata's folder name when it can be found
    without importing islpy (``islpy-2025.2.5.dist-info``), else from islpy itself."""
    spec = importlib.util.find_spec("islpy")
    if spec is not None and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations))).parent
        found = sorted(folder.glob("islpy-*.dist-info"))
        if len(found) == 1:
            return found[0].name.removeprefix("islpy-").removesuffix(".dist-info")
    import islpy

    return islpy.__version__
