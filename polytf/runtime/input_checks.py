"""Checking a model call's inputs: every placeholder given once, each value of its
placeholder's shape and dtype, with errors that name the placeholder and say what to do.

A placeholder may be named as its node (``x``) or as its tensor (``x:0``, as TensorFlow and
polytf's own sidecar files name it); an unknown name gets the nearest placeholder names
(``difflib``). A shape the compiled model does not take is answered with how to compile for
it, unless the GraphDef's placeholder fixes the dimension that differs: then compiling for it
cannot work, and the message says so.

Shared by the CPU runtime (:class:`~polytf.runtime.cpu.compiled_model.CompiledModel`), which
converts host values, and the CUDA runtime (:class:`~polytf.runtime.cuda.model.CudaModel`),
which also takes arrays already on the device.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

import numpy as np

from polytf.errors import GraphError, ShapeError
from polytf.graph import TensorType, split_tensor_name

__all__ = ["converted_input", "check_input_shape", "checked_input", "converted_inputs", "named_inputs"]


def placeholder_name(name: str, input_types: Mapping[str, TensorType]) -> str:
    """The placeholder ``name`` stands for: itself, or ``x`` for the tensor name ``x:0`` of
    placeholder ``x`` (a placeholder has one output, ``:0``); ``name`` unchanged otherwise."""
    node, port = split_tensor_name(name)
    return node if name not in input_types and port == 0 and node in input_types else name


def named_inputs(inputs: Mapping[str, object], input_types: Mapping[str, TensorType], source: str) -> dict[str, object]:
    """``inputs`` keyed by placeholder name (``x:0`` becomes ``x``), every placeholder of
    ``input_types`` given once, and nothing else.

    Raises:
        GraphError: missing, unknown or repeated names (listed, with the nearest placeholder
            names of an unknown one, and the model ``source``).
    """
    named: dict[str, object] = {}
    repeated = []
    for key, value in inputs.items():
        name = placeholder_name(key, input_types)
        if name in named:
            repeated.append(key)
        named[name] = value
    if named.keys() == input_types.keys() and not repeated:
        return named
    unknown = sorted(set(named) - set(input_types))
    missing = sorted(set(input_types) - set(named))
    problems = [f"missing {missing}" if missing else "", f"unknown {unknown}" if unknown else "", f"given twice (as x and x:0) {repeated}" if repeated else ""]
    guesses = sorted({guess for name in unknown for guess in difflib.get_close_matches(name, list(input_types), n=2, cutoff=0.6)})
    hint = f" (did you mean {', '.join(repr(g) for g in guesses)}?)" if guesses else ""
    raise GraphError(f"model {source} takes inputs {sorted(input_types)}; " + "; ".join(p for p in problems if p) + hint)


def converted_input(value: object, dtype: np.dtype) -> np.ndarray:
    """``value`` as a C-contiguous host array of ``dtype``; integer and bool inputs only when
    no value changes (an int64 token id beyond int32's range, or a float id, is refused).

    Raises:
        ValueError: the conversion would change a value.
    """
    array = np.asarray(value)
    if dtype.kind in "iub" and array.dtype != dtype:
        if array.dtype.kind not in "iub":
            raise ValueError(f"{array.dtype} values would be truncated; pass {dtype} values")
        if dtype.kind != "b" and array.size and (array.min() < np.iinfo(dtype).min or array.max() > np.iinfo(dtype).max):
            raise ValueError(f"values from {array.min()} to {array.max()} do not fit {dtype}")
    return np.ascontiguousarray(array, dtype=dtype)


def check_input_shape(name: str, shape: tuple[int, ...], expected: TensorType, declared: Sequence[int | None] | None = None) -> None:
    """``shape`` (of input ``name``) is the compiled one.

    Args:
        declared: the placeholder's shape in the GraphDef (None for a free dimension; None for
            an unknown rank), when known: a dimension it fixes cannot be compiled otherwise.

    Raises:
        ShapeError: another shape; the message says how to compile for it, or, where the
            GraphDef fixes a dimension that differs (or the rank), that only the compiled
            shape can be given.
    """
    shape = tuple(shape)
    if shape == tuple(expected.shape):
        return
    if declared is not None:
        fixed = [axis for axis, (want, got) in enumerate(zip(declared, shape)) if want is not None and want != got]
        if len(declared) != len(shape) or fixed:
            where = (
                f"the GraphDef declares it with rank {len(declared)}"
                if len(declared) != len(shape)
                else f"the GraphDef fixes dimension {fixed[0]} to {declared[fixed[0]]}"
            )
            raise ShapeError(
                f"input '{name}' has shape {shape}, the model takes {expected}: {where}, so no other shape can be "
                f"compiled; pass a {list(expected.shape)} array (or export the model with that dimension free, None)"
            )
    raise ShapeError(
        f"input '{name}' has shape {shape}, the model was compiled for {expected}; "
        f"compile for this shape with input_shapes={{'{name}': {shape}}} (API) or --input {name}:{','.join(map(str, shape))} (CLI)"
    )


def checked_input(name: str, value: object, expected: TensorType, declared: Sequence[int | None] | None = None) -> np.ndarray:
    """One input converted to a C-contiguous host array of its placeholder's dtype, with its
    shape checked (``declared``: as :func:`check_input_shape`).

    Raises:
        ShapeError: a value that cannot be converted, or has the wrong shape (names the input).
    """
    try:
        array = converted_input(value, np.dtype(expected.dtype))
    except (TypeError, ValueError, OverflowError) as error:
        raise ShapeError(f"input '{name}' cannot be converted to a {expected.dtype} array: {error}") from None
    check_input_shape(name, tuple(array.shape), expected, declared)
    return array


def converted_inputs(
    inputs: Mapping[str, object],
    input_types: Mapping[str, TensorType],
    source: str,
    declared: Mapping[str, Sequence[int | None] | None] | None = None,
) -> dict[str, np.ndarray]:
    """Each input, by placeholder name (``x:0`` given as ``x``), converted once to a
    C-contiguous host array of its placeholder's dtype (the caller's own array when it already
    is one), with its shape checked (``declared``: the GraphDef's placeholder shapes).

    Raises:
        GraphError: missing, unknown or repeated names.
        ShapeError: a value that cannot be converted, or has the wrong shape.
    """
    declared = declared or {}
    named = named_inputs(inputs, input_types, source)
    return {name: checked_input(name, value, input_types[name], declared.get(name)) for name, value in named.items()}
