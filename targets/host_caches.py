"""The host's per-core data cache sizes, read from Linux sysfs.

``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`` describe each cache of
CPU 0 (Linux ABI, ``Documentation/ABI/testing/sysfs-devices-system-cpu``); sizes are
written like ``48K`` or ``2048K``. Where sysfs is missing or unreadable (another OS, a
container without it) the conservative defaults of
:class:`~polytf.schedules.analytic_recipe.CacheSizes` are used.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from polytf.schedules.analytic_recipe import CacheSizes

__all__ = ["host_cache_sizes", "parse_cache_size"]

_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
_UNITS = {"K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024}


def parse_cache_size(text: str) -> int | None:
    """Bytes of a sysfs cache size (``"48K"`` -> 49152, ``"2048K"``, ``"32M"``, ``"512"``),
    or None when it cannot be read."""
    text = text.strip().upper()
    if not text:
        return None
    scale = _UNITS.get(text[-1], 1)
    digits = text[:-1] if text[-1] in _UNITS else text
    return int(digits) * scale if digits.isdigit() else None


@lru_cache(maxsize=1)
def host_cache_sizes(root: Path = _SYSFS) -> CacheSizes:
    """L1 data, L2 and L3 sizes of the host's first CPU in bytes (defaults where unknown)."""
    found: dict[int, int] = {}
    try:
        for index in sorted(root.glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            size = parse_cache_size((index / "size").read_text())
            if size:
                found[level] = size
    except (OSError, ValueError):
        found = {}
    default = CacheSizes()
    return CacheSizes(found.get(1, default.l1_bytes), found.get(2, default.l2_bytes), found.get(3, default.l3_bytes))
