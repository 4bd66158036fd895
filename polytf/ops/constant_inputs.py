"""Compile-time constant inputs of a node, as its lowering sees them.

Some ops have inputs that shape the loop nest rather than feed it data: Pad's
``paddings``, Transpose's ``perm``, ConcatV2's ``axis``. Shape inference reads them from
``input_constants``; the lowering reads them from the ``constants`` mapping of its
:class:`~polytf.ops.lowering_context.LoweringContext` (tensor name -> numpy value, the
``graph.constants`` of the graph being lowered), which the lowering driver sets.
:func:`axis_of` reads an ``axis`` input (ConcatV2, Split, Cumsum) for both.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError

#: Largest tensor (elements) a ``foldable`` op is evaluated on at compile time (shape
#: inference folds shape arithmetic, never weights).
FOLD_MAX_ELEMENTS = 4096


def constant_input(node, context, index: int, what: str) -> np.ndarray:
    """The compile-time value of input ``index`` of ``node``.

    Args:
        node: the node being lowered.
        context: its lowering context; ``context.constants`` maps tensor names to values.
        index: input position.
        what: the input's name in the op definition (for the message), e.g. ``"paddings"``.

    Raises:
        ShapeError: the input is missing or its value is not known at compile time.
    """
    if index >= len(node.inputs):
        raise ShapeError(f"{node.op} node '{node.name}' has no {what} input (input {index})")
    tensor = node.inputs[index]
    constants = getattr(context, "constants", None)
    value = None if constants is None else constants.get(tensor)
    if value is None:
        raise ShapeError(
            f"{node.op} node '{node.name}': lowering needs the compile-time value of its {what} input '{tensor}', "
            "but the lowering context has none (the lowering driver must set LoweringContext.constants to the graph's constants)"
        )
    return np.asarray(value)


def constant_scalar(node, value, what: str = "axis") -> int:
    """The compile-time value of a scalar int input (an ``axis``, MatrixBandPart's
    ``num_lower``): one int32/int64 value.

    Args:
        what: the input's name in the op definition (for the message).

    Raises:
        ShapeError: unknown at compile time, or not one integer.
    """
    if value is None:
        raise ShapeError(f"{node.op} node '{node.name}': its {what} input must be a compile-time constant")
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.size != 1:
        raise ShapeError(f"{node.op} node '{node.name}': {what} must be an int32/int64 scalar, got {value!r}")
    return int(value.reshape(-1)[0])


def axis_of(node, rank: int, value) -> int:
    """The ``axis`` input normalized to ``[0, rank)``.

    Raises:
        ShapeError: not a compile-time int scalar in ``[-rank, rank)``.
    """
    axis = constant_scalar(node, value)
    if not -rank <= axis < rank:
        raise ShapeError(f"{node.op} node '{node.name}': axis {axis} is out of range for an input of rank {rank} (allowed: [{-rank}, {rank}))")
    return axis % rank
