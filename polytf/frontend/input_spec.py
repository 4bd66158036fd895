"""Parsing of the CLI's input specifications.

* ``--input NAME:SHAPE`` (:func:`parse_input_spec`): ``"x:1,784"`` -> ``("x", (1, 784))``. The
  LAST ``':'`` separates the name from the shape, so a tensor name like ``"x:0:1,784"`` works;
  an empty SHAPE (``"x:"``) means a scalar. Brackets and spaces are tolerated (``"x:[1, 784]"``).
  A dimension may be a size symbol, known only at the call (:mod:`polytf.graph.size_symbols`):
  ``"x:N,784"`` -> ``("x", ("N", 784))``, with a range ``"x:N=1..64,784"``.
* ``--input-file NAME=PATH`` (:func:`parse_input_file_spec`): ``"x=data.npy"`` ->
  ``("x", Path("data.npy"))``; the FIRST ``'='`` splits, so the path may contain ``'='``.
"""

from __future__ import annotations

from pathlib import Path

from polytf.errors import ShapeError
from polytf.graph.size_symbols import SizeSymbol

__all__ = ["parse_bucket_spec", "parse_input_spec", "parse_input_file_spec"]

_SPEC_HELP = (
    "expected NAME:SHAPE with SHAPE a comma-separated list of sizes or size symbols, e.g. 'x:1,784', 'input:1,32,32,3', "
    "'x:N,784' or 'x:N=1..64,784' (N known at the call) ('x:' is a scalar)"
)
_FILE_HELP = "expected NAME=PATH, e.g. 'x=inputs.npy'"


def parse_input_spec(text: str) -> tuple[str, tuple[int | str, ...]]:
    """Parse ``NAME:SHAPE`` into ``(name, shape)``, each dimension a size or a size symbol's
    text (``"N"``, ``"N=1..64"``).

    Raises:
        ValueError: with an example of the expected form, for a missing ':' or name, or a
            dimension that is neither a non-negative integer nor a size symbol.
    """
    if not isinstance(text, str):
        raise ValueError(f"input spec {text!r} is not a string; {_SPEC_HELP}")
    name, sep, shape_text = text.strip().rpartition(":")
    name = name.strip()
    if not sep:
        raise ValueError(f"input spec {text!r} has no ':'; {_SPEC_HELP}")
    if not name:
        raise ValueError(f"input spec {text!r} has no name before ':'; {_SPEC_HELP}")
    body = shape_text.strip()
    if body[:1] in "[(" and body[-1:] in "])" and body:
        body = body[1:-1].strip()
    if not body:
        return name, ()
    dims: list[int | str] = []
    parts = [p.strip() for p in body.split(",")]
    if len(parts) > 1 and not parts[-1]:  # tolerate a trailing comma: "x:1,784,"
        parts.pop()
    for part in parts:
        if not part:
            raise ValueError(f"input spec {text!r} has an empty dimension; {_SPEC_HELP}")
        try:
            size = int(part)
        except ValueError:
            try:
                dims.append(SizeSymbol.parse(part).text)
                continue
            except ShapeError as error:
                if part[:1].isalpha() or part[:1] == "_":
                    raise ValueError(f"input spec {text!r}: {error}; {_SPEC_HELP}") from None
            raise ValueError(f"input spec {text!r}: dimension {part!r} is neither an integer nor a size symbol; {_SPEC_HELP}") from None
        if size < 0:
            raise ValueError(f"input spec {text!r}: dimension {size} is negative; give every size explicitly ({_SPEC_HELP})")
        dims.append(size)
    return name, tuple(dims)


def parse_bucket_spec(text: str) -> tuple[str, tuple[int, ...]]:
    """Parse ``SYMBOL=SIZES`` (``--buckets N=1,8,32``: the sizes of size symbol ``N`` to tune
    and build) into ``("N", (1, 8, 32))``.

    Raises:
        ValueError: a missing '=' or symbol, or a size that is not a whole number of at least 1.
    """
    example = "expected SYMBOL=SIZES, e.g. 'N=1,8,32' (the sizes of size symbol N to tune)"
    name, sep, body = str(text).partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(example)
    sizes = []
    for part in (p.strip() for p in body.split(",")):
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"size {part!r} is not a whole number of at least 1; {example}")
        sizes.append(int(part))
    return name, tuple(dict.fromkeys(sizes))


def parse_input_file_spec(text: str) -> tuple[str, Path]:
    """Parse ``NAME=PATH`` (a ``.npy`` file for an input) into ``(name, Path(path))``.

    Raises:
        ValueError: for a missing '=', name or path.
    """
    if not isinstance(text, str):
        raise ValueError(f"input file spec {text!r} is not a string; {_FILE_HELP}")
    name, sep, path = text.strip().partition("=")
    name, path = name.strip(), path.strip()
    if not sep:
        raise ValueError(f"input file spec {text!r} has no '='; {_FILE_HELP}")
    if not name:
        raise ValueError(f"input file spec {text!r} has no name before '='; {_FILE_HELP}")
    if not path:
        raise ValueError(f"input file spec {text!r} has no path after '='; {_FILE_HELP}")
    return name, Path(path)
