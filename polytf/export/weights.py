"""The weights of an exported model: inside the object's read-only data, or in a file.

The weights are one blob (:attr:`polytf.export.model_layout.ModelLayout.weights`: every
graph constant and packed weight the kernels read, 64-byte aligned). Up to a size threshold
(:data:`DEFAULT_EMBED_LIMIT_BYTES`) the blob is a constant global of the object, in its
read-only data section (``.rodata``), so a program needs nothing but the object. Past it,
the blob goes to ``NAME.weights``, which ``NAME_init(path)`` reads once; its header::

    bytes 0-7    magic "POLYTFW" + format version 1
    bytes 8-15   the export's tag (little-endian u64): a weights file of another export is refused
    bytes 16-23  payload bytes (little-endian u64)
    bytes 24-63  zero
    bytes 64-    the blob
"""

from __future__ import annotations

import struct

from polytf.plan.buffers import ALIGNMENT_BYTES

__all__ = ["DEFAULT_EMBED_LIMIT_BYTES", "WEIGHTS_FILE_HEADER_BYTES", "WEIGHTS_FILE_MAGIC", "weights_file_header", "weights_module"]

#: Weights up to this many bytes go into the object; more go to ``NAME.weights`` (256 MiB:
#: objects that large link slowly, and a ``.rodata`` past 2 GiB needs a larger code model).
DEFAULT_EMBED_LIMIT_BYTES = 256 * 1024 * 1024
WEIGHTS_FILE_HEADER_BYTES = 64
WEIGHTS_FILE_MAGIC = b"POLYTFW\x01"


def weights_module(blob: bytes, symbol: str, triple: str, data_layout: str) -> str:
    """LLVM IR text of a module defining ``@symbol``: ``blob`` as a constant aligned as the runtime's buffers
    ``[N x i8]`` (N at least 1), to be linked with the entry points and made internal.

    The string is written with one escape per byte (``\\XX``), built by ``bytes.hex`` rather
    than a Python loop, so tens of megabytes take a fraction of a second.
    """
    data = blob or b"\0"
    escaped = "\\" + data.hex("\\").upper()
    return (
        f'target triple = "{triple}"\ntarget datalayout = "{data_layout}"\n'
        f'@{symbol} = constant [{len(data)} x i8] c"{escaped}", align {ALIGNMENT_BYTES}\n'
    )


def weights_file_header(tag: int, payload_bytes: int) -> bytes:
    """The :data:`WEIGHTS_FILE_HEADER_BYTES` bytes before the blob in ``NAME.weights``
    (module docstring)."""
    header = WEIGHTS_FILE_MAGIC + struct.pack("<QQ", tag, payload_bytes)
    return header + b"\0" * (WEIGHTS_FILE_HEADER_BYTES - len(header))
