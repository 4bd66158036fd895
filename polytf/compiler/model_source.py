"""What model to compile: a :class:`ModelSource` (file, signature, input shapes, outputs).

``polytf.load``, ``polytf.tune``, ``polytf.compile`` and the ``polytf`` commands take the
same four facts about the model they read; they make one ``ModelSource`` of them, checked
once here, and hand it down to :func:`polytf.compiler.preparation.prepare_model` (which
reads the file: :func:`polytf.frontend.load_graph`, then
:func:`polytf.lowering.shape_inference.infer_types` with the input shapes). How the model is
built (fallback, threads, target, cache, storage) is a
:class:`~polytf.compiler.build_options.BuildOptions` beside it.

This module imports nothing heavy: ``import polytf`` and ``polytf --help`` load it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from polytf.errors import GraphError, PolytfError, ShapeError

__all__ = ["ModelSource"]


@dataclass(frozen=True)
class ModelSource:
    """A model file and what to read of it. Immutable and checked when made.

    Attributes:
        path: a frozen GraphDef, binary ``.pb`` or text ``.pbtxt``, or a SavedModel
            directory (read with TensorFlow; inputs and outputs then carry the signature's
            names). Kept as given (messages and reports name it so); not opened here.
        signature: the SavedModel signature to read (None: ``serving_default``); only for a
            SavedModel directory.
        input_shapes: placeholder name (``name`` or ``name:0``) -> shape, fixing unknown
            dimensions; each dimension a non-negative int or a size symbol known only at
            the call (``"N"``, ``"N=1..64"``: :mod:`polytf.graph.size_symbols`). Read-only;
            the shapes are tuples. A placeholder dimension that is unknown in the graph and
            not given here is a symbol too (:mod:`polytf.compiler.symbolic_inputs`).
        outputs: output node or tensor names (``name`` or ``name:port``), or None for the
            graph's sinks (:func:`polytf.frontend.default_outputs`).

    Raises:
        PolytfError: a path that is not a string or path, or an empty one; a signature that
            is not a string.
        ShapeError: an input shape that is not a sequence of non-negative ints and size
            symbols (the message names the placeholder).
        GraphError: outputs that are not names, or an empty list of them.
    """

    path: str | os.PathLike
    signature: str | None = None
    input_shapes: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    outputs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, (str, os.PathLike)) or not os.fspath(self.path):
            raise PolytfError(f"the model path must be a file or directory name, not {self.path!r}")
        if self.signature is not None and not isinstance(self.signature, str):
            raise PolytfError(f"the SavedModel signature must be a name (a string), not {self.signature!r}")
        object.__setattr__(self, "input_shapes", MappingProxyType(_checked_shapes(self.input_shapes)))
        object.__setattr__(self, "outputs", _checked_outputs(self.outputs, self.path))

    def __hash__(self) -> int:
        return hash((os.fspath(self.path), self.signature, tuple(sorted(self.input_shapes.items())), self.outputs))

    @classmethod
    def of(
        cls,
        model: ModelSource | str | os.PathLike,
        signature: str | None = None,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        outputs: Sequence[str] | None = None,
    ) -> ModelSource:
        """``model`` itself when it is a ModelSource, else the ModelSource of that path with
        the other arguments (as ``polytf.load(path, signature=..., input_shapes=...,
        outputs=...)`` takes them).

        Raises:
            PolytfError: a ModelSource together with any of the other arguments (each fact
                is given once), or an invalid argument (see the class).
        """
        if isinstance(model, ModelSource):
            given = [name for name, value in (("signature", signature), ("input_shapes", input_shapes), ("outputs", outputs)) if value is not None]
            if given:
                raise PolytfError(f"{', '.join(given)} given beside a ModelSource: give them in the ModelSource ({model.path})")
            return model
        return cls(model, signature, input_shapes or {}, outputs)

    def with_shapes(self, input_shapes: Mapping[str, Sequence[int]]) -> ModelSource:
        """This source with ``input_shapes`` instead of its own (a dynamic model's source at
        the sizes of one call)."""
        return replace(self, input_shapes=dict(input_shapes))

    @property
    def output_names(self) -> list[str] | None:
        """The outputs as :func:`polytf.frontend.load_graph` takes them (None: the sinks)."""
        return None if self.outputs is None else list(self.outputs)


def _checked_shapes(input_shapes: Mapping[str, Sequence[int | str]] | None) -> dict[str, tuple[int | str, ...]]:
    """``input_shapes`` with tuple shapes, each size symbol as its text (``"N=1..64"``; the
    placeholders themselves are checked against the graph by shape inference).

    Raises:
        ShapeError: not a mapping, or a shape that is not a sequence of non-negative ints and
            size symbols.
    """
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise ShapeError(f"input shapes must map placeholder names to shapes, not {input_shapes!r}")
    result = {}
    for name, shape in input_shapes.items():
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            raise ShapeError(f"input shape for '{name}' must be a sequence of sizes (ints) and size symbols, got {shape!r}")
        fixed = tuple(_dimension(size, str(name)) for size in shape)
        result[str(name)] = fixed
    return result


def _dimension(size: object, name: str) -> int | str:
    """One dimension of ``input_shapes``: a non-negative int, or a size symbol's text.

    Raises:
        ShapeError: anything else, naming the placeholder.
    """
    from polytf.graph.size_symbols import SizeSymbol, parse_dimension  # no numpy: cheap

    parsed = parse_dimension(size, f"input shape for '{name}'")
    return parsed.text if isinstance(parsed, SizeSymbol) else parsed


def _checked_outputs(outputs: Sequence[str] | str | None, path: str | os.PathLike) -> tuple[str, ...] | None:
    """``outputs`` as a tuple (one name given as a string is a list of one).

    Raises:
        GraphError: a name that is not a non-empty string, or no names at all.
    """
    if outputs is None:
        return None
    names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    for name in names:
        if not isinstance(name, str) or not name:
            raise GraphError(f"output names must be node or tensor names, not {name!r}")
    if not names:
        raise GraphError(f"no outputs requested for the graph in '{os.fspath(path)}'.")
    return names
