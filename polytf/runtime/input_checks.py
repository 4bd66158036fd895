"""Checking a model call's inputs: every placeholder given once, each value of its
placeholder's shape and dtype, with errors that name the placeholder and say what to do.

Shared by the CPU runtime (:class:`~polytf.runtime.cpu.compiled_model.CompiledModel`), which
converts host values, and the CUDA runtime (:class:`~polytf.runtime.cuda.model.CudaModel`),
which also takes arrays already on the device.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polytf.errors import GraphError, ShapeError
from polytf.graph import TensorType

__all__ = ["check_input_names", "converted_input", "check_input_shape", "checked_input", "converted_inputs"]


def check_input_names(inputs: Mapping[str, object], input_types: Mapping[str, TensorType], source: str) -> None:
    """Every placeholder of ``input_types`` is given, and nothing else.

    Raises:
        GraphError: missing or unknown names (listed, with the model ``source``).
    """
    if inputs.keys() == input_types.keys():
        return
    unknown = sorted(set(inputs) - set(input_types))
    missing = sorted(set(input_types) - set(inputs))
    raise GraphError(
        f"model {source} takes inputs {sorted(input_types)}; "
        + (f"missing {missing}" if missing else "")
        + ("; " if missing and unknown else "")
        + (f"unknown {unknown}" if unknown else "")
    )


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


def check_input_shape(name: str, shape: tuple[int, ...], expected: TensorType) -> None:
    """``shape`` (of input ``name``) is the compiled one.

    Raises:
        ShapeError: another shape; the message says how to compile for it.
    """
    if tuple(shape) != tuple(expected.shape):
        raise ShapeError(
            f"input '{name}' has shape {tuple(shape)}, the model was compiled for {expected}; "
            f"compile for this shape with input_shapes={{'{name}': {tuple(shape)}}} (API) or --input {name}:{','.join(map(str, shape))} (CLI)"
        )


def checked_input(name: str, value: object, expected: TensorType) -> np.ndarray:
    """One input converted to a C-contiguous host array of its placeholder's dtype, with its
    shape checked.

    Raises:
        ShapeError: a value that cannot be converted, or has the wrong shape (names the input).
    """
    try:
        array = converted_input(value, np.dtype(expected.dtype))
    except (TypeError, ValueError, OverflowError) as error:
        raise ShapeError(f"input '{name}' cannot be converted to a {expected.dtype} array: {error}") from None
    check_input_shape(name, tuple(array.shape), expected)
    return array


def converted_inputs(inputs: Mapping[str, object], input_types: Mapping[str, TensorType], source: str) -> dict[str, np.ndarray]:
    """Each input converted once to a C-contiguous host array of its placeholder's dtype (the
    caller's own array when it already is one), with its shape checked.

    Raises:
        GraphError: missing or unknown names.
        ShapeError: a value that cannot be converted, or has the wrong shape.
    """
    check_input_names(inputs, input_types, source)
    return {name: checked_input(name, value, input_types[name]) for name, value in inputs.items()}
