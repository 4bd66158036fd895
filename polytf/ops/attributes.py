"""Typed access to a node's attributes, with TensorFlow's required/optional rules.

An attribute an op definition declares without a default (``Attr("padding: {'SAME',
'VALID'}")`` in tensorflow/core/ops/nn_ops.cc) is required: a node without it is
malformed, never silently given a value. An attribute of the wrong kind (a string where
an int list belongs, bytes that are not UTF-8) is an error naming the node, the
attribute and what it must be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from polytf.errors import ShapeError
from polytf.graph import Node

#: marks an attribute without a default: it is required
REQUIRED: Any = object()


def _problem(node: Node, key: str, what: str, value: Any) -> ShapeError:
    shown = "missing" if value is REQUIRED else f"{value!r}"
    return ShapeError(f"node '{node.name}' ({node.op}) needs attribute '{key}' to be {what}; it is {shown}")


def _get(node: Node, key: str, default: Any, what: str) -> Any:
    value = node.attrs.get(key, default)
    if value is REQUIRED or value is None and default is REQUIRED:
        raise _problem(node, key, what, REQUIRED)
    return value


def attr_string(node: Node, key: str, default: Any = REQUIRED, allowed: Sequence[str] | None = None) -> str:
    """A string attribute (UTF-8 text), one of ``allowed`` when given.

    Raises:
        ShapeError: missing (and required), not text, or not one of ``allowed``.
    """
    what = "one of " + ", ".join(repr(a) for a in allowed) if allowed else "a string"
    value = _get(node, key, default, what)
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise _problem(node, key, what + " (UTF-8 text)", value) from None
    if not isinstance(value, str) or (allowed is not None and value not in allowed):
        raise _problem(node, key, what, value)
    return value


def _checked(node: Node, key: str, default: Any, what: str, accepts: Callable[[Any], bool]) -> Any:
    value = _get(node, key, default, what)
    if not accepts(value):
        raise _problem(node, key, what, value)
    return value


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def attr_bool(node: Node, key: str, default: Any = REQUIRED) -> bool:
    """A boolean attribute.

    Raises:
        ShapeError: missing (and required) or not a boolean.
    """
    return _checked(node, key, default, "a boolean", lambda value: isinstance(value, bool))


def attr_int(node: Node, key: str, default: Any = REQUIRED) -> int:
    """An integer attribute.

    Raises:
        ShapeError: missing (and required) or not an integer.
    """
    return _checked(node, key, default, "an integer", _is_integer)


def attr_float(node: Node, key: str, default: Any = REQUIRED) -> float:
    """A float attribute (an integer is taken as a float).

    Raises:
        ShapeError: missing (and required) or not a number.
    """
    return float(_checked(node, key, default, "a number", lambda value: _is_integer(value) or isinstance(value, float)))


def attr_ints(node: Node, key: str, default: Any = REQUIRED, length: int | None = None) -> tuple[int, ...]:
    """A list-of-integers attribute, of ``length`` entries when given.

    Raises:
        ShapeError: missing (and required), not a list of integers, or of another length.
    """
    what = f"a list of {length} integers" if length is not None else "a list of integers"
    value = _get(node, key, default, what)
    if not isinstance(value, (tuple, list)) or not all(_is_integer(v) for v in value):
        raise _problem(node, key, what, value)
    if length is not None and len(value) != length:
        raise _problem(node, key, what, tuple(value))
    return tuple(value)


def is_channels_last(node: Node) -> bool:
    """Whether ``node``'s ``data_format`` attribute (TensorFlow's default ``"NHWC"``; a 3-D
    op's ``"NDHWC"``) puts channels on the last axis. Never raises: a malformed value is not
    channels-last (the op's shape rule reports it)."""
    value = node.attrs.get("data_format", "NHWC")
    return (value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)) in ("NHWC", "NDHWC")


__all__ = ["REQUIRED", "attr_string", "attr_bool", "attr_int", "attr_float", "attr_ints", "is_channels_last"]
