"""Size symbols: dimensions of a model's inputs that are known only at the call.

A frozen Keras model usually has a ``None`` batch dimension (``-1`` in the GraphDef's
placeholder shape), and a language model a ``None`` sequence length. Such a dimension is a
named :class:`SizeSymbol` (``N``, ``S``) with a range (``1 <= N``, or ``1 <= N <= 64`` when
the user bounds it), the way isl names a parameter of a set (``[N] -> { S[n] : 0 <= n < N }``,
isl manual, "Sets and Relations"). A :class:`SymbolicSignature` gives every placeholder a
shape whose entries are sizes or symbol names; :meth:`SymbolicSignature.bind` reads the
symbols' values off the arrays of one call and refuses, before anything runs, a size of
0, one outside its symbol's range, or two inputs that disagree on a symbol
(:class:`~polytf.errors.SizeError`, naming the input and the symbol).

Text forms (``--input x:N,224,224,3``, ``input_shapes={"x": ("N=1..64", 224, 224, 3)}``):
``N`` (a range of ``1..``, no upper bound), ``N=1..64``, ``N=..64`` (from 1) or ``N=8..``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from polytf.errors import ShapeError, SizeError
from polytf.graph.graph import split_tensor_name

__all__ = ["Dimension", "SizeSymbol", "SymbolicSignature", "default_symbol_name", "parse_dimension", "sizes_text"]

#: One dimension of a symbolic shape: a size, or the name of a :class:`SizeSymbol`.
Dimension = int | str

_SYMBOL_TEXT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*(\d*)\s*\.\.\s*(\d*)\s*)?$")
_SYMBOL_HELP = "a size symbol is a name, optionally with a range: N, N=1..64, N=..64 or N=8.."


@dataclass(frozen=True)
class SizeSymbol:
    """A dimension known only at the call, and the sizes it may take.

    Attributes:
        name: the symbol's name (an identifier: ``N``, ``batch``, ``S``).
        minimum: the smallest size a call may give, at least 1.
        maximum: the largest, or None for no bound.

    Raises:
        ShapeError: a name that is not an identifier, a minimum below 1, or a maximum below
            the minimum.
    """

    name: str
    minimum: int = 1
    maximum: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name):
            raise ShapeError(f"size symbol {self.name!r} is not a name; {_SYMBOL_HELP}")
        if self.minimum < 1:
            raise ShapeError(f"size symbol {self.name}: its range must start at 1 or more, not {self.minimum} (a call never has a size of 0)")
        if self.maximum is not None and self.maximum < self.minimum:
            raise ShapeError(f"size symbol {self.name}: range {self.minimum}..{self.maximum} is empty")

    @staticmethod
    def parse(text: str) -> SizeSymbol:
        """``"N"``, ``"N=1..64"``, ``"N=..64"`` or ``"N=8.."`` as a symbol.

        Raises:
            ShapeError: any other text (the message shows the accepted forms).
        """
        match = _SYMBOL_TEXT.match(text) if isinstance(text, str) else None
        if match is None:
            raise ShapeError(f"{text!r} is not a size or a size symbol; {_SYMBOL_HELP}")
        name, low, high = match.groups()
        return SizeSymbol(name, int(low) if low else 1, int(high) if high else None)

    @property
    def text(self) -> str:
        """How a shape names it: ``"N"`` with the default range (``1..``), else ``"N=1..64"``."""
        return self.name if self == SizeSymbol(self.name) else str(self)

    @property
    def range_text(self) -> str:
        """``"1..64"`` or ``"1.."``."""
        return f"{self.minimum}..{'' if self.maximum is None else self.maximum}"

    def contains(self, size: int) -> bool:
        """Whether a call may give ``size`` for this symbol."""
        return size >= self.minimum and (self.maximum is None or size <= self.maximum)

    def __str__(self) -> str:
        return f"{self.name}={self.range_text}"


def parse_dimension(value: object, where: str) -> Dimension | SizeSymbol:
    """One entry of a shape as given by a user: a non-negative int, or a symbol's text.

    Raises:
        ShapeError: a negative size, or text that is not a symbol (``where`` names the input).
    """
    if isinstance(value, str):
        try:
            return SizeSymbol.parse(value)
        except ShapeError as error:
            raise ShapeError(f"{where}: {error}") from None
    try:
        size = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ShapeError(f"{where}: dimension {value!r} is neither a size nor a size symbol; {_SYMBOL_HELP}") from None
    if size < 0:
        raise ShapeError(f"{where}: dimension {size} is negative")
    return size


def sizes_text(sizes: Mapping[str, int]) -> str:
    """``"N=8, S=64"``: the sizes of a model's symbols (a size bucket)."""
    return ", ".join(f"{name}={size}" for name, size in sizes.items())


def default_symbol_name(axis: int) -> str:
    """The symbol of an unknown placeholder dimension nobody named: ``N`` for axis 0 (the
    batch), ``S`` for axis 1 (a sequence), ``D2``, ``D3``, ... for the others. Inputs whose
    unknown dimensions sit on the same axis share the symbol (a language model's ids and
    mask: ``[N, S]`` both); name them apart to let them differ."""
    return {0: "N", 1: "S"}.get(axis, f"D{axis}")


@dataclass(frozen=True)
class SymbolicSignature:
    """The shapes of a model's placeholders, some of whose dimensions are size symbols.

    Attributes:
        shapes: placeholder name -> its shape, each entry a size or a symbol's name.
        symbols: symbol name -> the symbol, every symbol the shapes name (and no other).

    Raises:
        ShapeError: a shape names a symbol that ``symbols`` lacks, or ``symbols`` holds one
            that no shape names.
    """

    shapes: Mapping[str, tuple[Dimension, ...]]
    symbols: Mapping[str, SizeSymbol] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shapes", MappingProxyType({name: tuple(shape) for name, shape in self.shapes.items()}))
        object.__setattr__(self, "symbols", MappingProxyType(dict(self.symbols)))
        named = {size for shape in self.shapes.values() for size in shape if isinstance(size, str)}
        if named != set(self.symbols):
            raise ShapeError(f"symbolic signature: shapes name symbols {sorted(named)}, but symbols {sorted(self.symbols)} are given")

    @property
    def is_static(self) -> bool:
        """True when no dimension is a symbol."""
        return not self.symbols

    def describe(self, name: str) -> str:
        """``"[N, 224, 224, 3]"``: the shape of placeholder ``name``."""
        return "[" + ", ".join(str(size) for size in self.shapes[name]) + "]"

    def bind(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
        """The value of every symbol in the call whose arrays have ``shapes`` (placeholder name,
        ``x`` or its tensor ``x:0``, -> array shape; a placeholder left out binds nothing).

        Raises:
            SizeError: an array of another rank, a fixed dimension of another size, a symbol's
                size of 0 or outside its range, or two inputs that give a symbol different
                sizes; the message names the input, the axis and the symbol.
        """
        shapes = {split_tensor_name(name)[0]: shape for name, shape in shapes.items()}
        values: dict[str, int] = {}
        first: dict[str, str] = {}
        for name, expected in self.shapes.items():
            if name not in shapes:
                continue  # the model reports the missing placeholder
            given = tuple(int(size) for size in shapes[name])
            if len(given) != len(expected):
                raise SizeError(f"input '{name}' has shape {list(given)}, of rank {len(given)}; the model takes {self.describe(name)}", name, None)
            for axis, (want, got) in enumerate(zip(expected, given)):
                if isinstance(want, int):
                    if want != got:
                        raise SizeError(f"input '{name}' has shape {list(given)}; the model takes {self.describe(name)} (axis {axis} must be {want})", name, None)
                    continue
                symbol = self.symbols[want]
                if got == 0:
                    raise SizeError(f"input '{name}' has size 0 on axis {axis} (symbol {want}); a call needs {want} in {symbol.range_text}", name, want)
                if not symbol.contains(got):
                    raise SizeError(f"input '{name}' gives {want} = {got} on axis {axis}, outside its range {symbol.range_text}", name, want)
                if want in values and values[want] != got:
                    raise SizeError(
                        f"inputs '{first[want]}' and '{name}' disagree on {want}: {values[want]} and {got} "
                        f"(shapes {self.describe(first[want])} and {self.describe(name)})",
                        name,
                        want,
                    )
                values.setdefault(want, got)
                first.setdefault(want, name)
        return values

    def concrete_shapes(self, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """Every placeholder's shape with the symbols replaced by ``sizes``.

        Raises:
            SizeError: a symbol without a size, or a size outside its symbol's range.
        """
        self.check_sizes(sizes)
        return {name: tuple(size if isinstance(size, int) else int(sizes[size]) for size in shape) for name, shape in self.shapes.items()}

    def check_sizes(self, sizes: Mapping[str, int], what: str = "sizes") -> None:
        """Check that ``sizes`` gives every symbol a size in its range, and names no other.

        Raises:
            SizeError: naming the symbol (``what`` says where the sizes came from).
        """
        for name in sizes:
            if name not in self.symbols:
                raise SizeError(f"{what}: the model has no size symbol {name} (its symbols: {', '.join(self.symbols) or 'none'})", None, name)
        for name, symbol in self.symbols.items():
            if name not in sizes:
                raise SizeError(f"{what}: no size for symbol {name} ({symbol.range_text})", None, name)
            if not symbol.contains(int(sizes[name])):
                raise SizeError(f"{what}: {name} = {sizes[name]} is outside its range {symbol.range_text}", None, name)

    @property
    def batch_symbol(self) -> str | None:
        """The symbol that every input naming it has on axis 0 alone (a batch: ``N`` of
        ``[N, S]`` ids and ``[N, 224, 224, 3]`` images), or None."""
        for name in self.symbols:
            axes = {axis for shape in self.shapes.values() for axis, size in enumerate(shape) if size == name}
            if axes == {0}:
                return name
        return None

    def slicing_base(self, sizes: Mapping[str, int]) -> dict[str, int] | None:
        """The sizes whose kernels the model at ``sizes`` may run once per slice of samples
        (:mod:`polytf.poly.sample_slicing`): ``sizes`` with the batch symbol at its minimum,
        when ``sizes`` has it at a larger multiple of that; else None."""
        batch = self.batch_symbol
        if batch is None:
            return None
        smallest, size = self.symbols[batch].minimum, int(sizes[batch])
        if size == smallest or size % smallest:
            return None
        return {**sizes, batch: smallest}

    def smallest_sizes(self) -> dict[str, int]:
        """Every symbol at its minimum: the sizes a model is first built for."""
        return {name: symbol.minimum for name, symbol in self.symbols.items()}

    def size_grid(self, buckets: Mapping[str, Iterable[int]]) -> list[dict[str, int]]:
        """Every combination of the bucket sizes of ``buckets`` (symbol -> sizes), the symbols it
        leaves out at their minimum, in order.

        Raises:
            SizeError: an unknown symbol or a size outside its symbol's range.
        """
        grid: list[dict[str, int]] = [{}]
        for name, symbol in self.symbols.items():
            sizes = list(dict.fromkeys(int(size) for size in buckets.get(name, (symbol.minimum,))))
            grid = [{**combination, name: size} for combination in grid for size in sizes]
        for name in buckets:
            if name not in self.symbols:
                raise SizeError(f"buckets: the model has no size symbol {name} (its symbols: {', '.join(self.symbols) or 'none'})", None, name)
        for combination in grid:
            self.check_sizes(combination, "buckets")
        return grid
