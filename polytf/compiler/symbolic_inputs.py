"""Which dimensions of a model's inputs are size symbols: the model's :class:`SymbolicSignature`.

A placeholder's dimension is a symbol when the user gives it as one (``--input x:N,784``,
``input_shapes={"x": ("N=1..64", 784)}``) or when the graph declares it unknown (``-1``, a
Keras ``None``) and the user gives no size for it. Such an unnamed dimension takes the name
:func:`~polytf.graph.size_symbols.default_symbol_name` gives its axis (``N`` for the batch,
``S`` for a sequence), so that the batch of every input is one symbol; a symbol the user
named with a range keeps that range wherever the name appears.

Steps of :func:`symbolic_signature`::

    placeholders' declared shapes ─► input_shapes override ─► unknown dims named ─► signature
    (None: unknown dimension)        (sizes and symbols)       by axis
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from polytf.compiler.model_source import ModelSource
from polytf.errors import ShapeError
from polytf.graph import Graph, split_tensor_name
from polytf.graph.size_symbols import Dimension, SizeSymbol, SymbolicSignature, default_symbol_name, parse_dimension
from polytf.ops.sources import placeholder_shape

__all__ = ["declared_shapes", "sized_sources", "slicing_base_source", "source_signature", "symbolic_signature"]


def declared_shapes(graph: Graph) -> dict[str, tuple[int | None, ...] | None]:
    """Placeholder name -> its shape as the GraphDef declares it (None: an unknown dimension;
    None for an unknown rank), in node order."""
    return {node.name: placeholder_shape(node) for node in graph.placeholders}


def symbolic_signature(
    declared: Mapping[str, tuple[int | None, ...] | None], input_shapes: Mapping[str, tuple[int | str, ...]], call_shapes: Mapping[str, Sequence[int]] | None = None
) -> SymbolicSignature:
    """The shapes of the placeholders (``declared``: :func:`declared_shapes`) with their size
    symbols (module docstring).

    ``input_shapes`` are a :class:`~polytf.compiler.model_source.ModelSource`'s, keyed by
    ``name`` or ``name:0``. A placeholder of unknown rank that ``input_shapes`` does not give
    takes its shape from ``call_shapes`` (the arrays of a first call, as ``polytf run`` has
    them), else is left out (shape inference then asks for its shape).

    Raises:
        ShapeError: one symbol given two different ranges, or a dimension that is neither a
            size nor a symbol (the message names the placeholder).
    """
    given = {split_tensor_name(key)[0]: shape for key, shape in input_shapes.items()}
    called = {split_tensor_name(key)[0]: tuple(shape) for key, shape in (call_shapes or {}).items()}
    symbols: dict[str, SizeSymbol] = {}
    shapes: dict[str, tuple[Dimension, ...]] = {}
    unnamed: list[tuple[str, int]] = []
    for placeholder, declared_shape in declared.items():
        shape = given.get(placeholder)
        if shape is None:
            if declared_shape is None:
                if placeholder in called:
                    shapes[placeholder] = tuple(int(size) for size in called[placeholder])
                continue
            shapes[placeholder] = tuple(size if size is not None else "" for size in declared_shape)
            unnamed += [(placeholder, axis) for axis, size in enumerate(declared_shape) if size is None]
            continue
        dimensions: list[Dimension] = []
        for size in shape:
            parsed = parse_dimension(size, f"input shape for '{placeholder}'")
            if isinstance(parsed, SizeSymbol):
                _add(symbols, parsed, placeholder)
                dimensions.append(parsed.name)
            else:
                dimensions.append(parsed)
        shapes[placeholder] = tuple(dimensions)
    for name, axis in unnamed:
        symbol = symbols.get(default_symbol_name(axis)) or SizeSymbol(default_symbol_name(axis))
        symbols[symbol.name] = symbol
        shape = list(shapes[name])
        shape[axis] = symbol.name
        shapes[name] = tuple(shape)
    return SymbolicSignature(shapes, symbols)


def _add(symbols: dict[str, SizeSymbol], symbol: SizeSymbol, placeholder: str) -> None:
    """Record ``symbol``; one name with a range and without one is the ranged symbol.

    Raises:
        ShapeError: the same name given two different ranges.
    """
    known = symbols.get(symbol.name)
    if known is None or known == SizeSymbol(symbol.name):
        symbols[symbol.name] = symbol
    elif symbol != SizeSymbol(symbol.name) and symbol != known:
        raise ShapeError(f"input shape for '{placeholder}': size symbol {symbol.name} is given the range {symbol.range_text} here and {known.range_text} before")


def source_signature(source: ModelSource) -> SymbolicSignature:
    """The symbolic signature of ``source``: its placeholders' declared shapes (read from the
    model file) with ``source.input_shapes`` (:func:`symbolic_signature`).

    Raises:
        GraphError: the file cannot be read.
        ShapeError: ``input_shapes`` give one symbol two ranges.
    """
    from polytf.compiler.preparation import read_graph  # the frontend

    return symbolic_signature(declared_shapes(read_graph(source)), source.input_shapes)


def sized_sources(
    source: ModelSource, buckets: Mapping[str, Sequence[int]] | None = None, signature: SymbolicSignature | None = None
) -> list[tuple[dict[str, int], ModelSource]]:
    """``source`` at every combination of ``buckets`` (symbol -> sizes; a symbol left out:
    its smallest size), each with every size given: ``[(sizes, static source), ...]``. A
    model without size symbols is ``[({}, source)]`` (then ``buckets`` must be empty).

    ``signature``: :func:`source_signature` of ``source``, when known (else the model file is
    read for it).

    Raises:
        SizeError: a bucket of an unknown symbol, or a size outside its symbol's range.
        GraphError: the file cannot be read.
    """
    signature = signature or source_signature(source)
    if signature.is_static and not buckets:
        return [({}, source)]
    return [(sizes, source.with_shapes(signature.concrete_shapes(sizes))) for sizes in signature.size_grid(buckets or {})]


def slicing_base_source(source: ModelSource, sizes: Mapping[str, int], signature: SymbolicSignature) -> tuple[dict[str, int], ModelSource] | None:
    """The sizes, and ``source`` at them, whose kernels a dynamic model at ``sizes`` runs on
    slices (:meth:`SymbolicSignature.slicing_base <polytf.graph.size_symbols.SymbolicSignature.slicing_base>`
    of ``signature``, :func:`source_signature` of ``source``), or None.
    """
    if signature.is_static or not sizes:
        return None
    base = signature.slicing_base(sizes)
    return None if base is None else (base, source.with_shapes(signature.concrete_shapes(base)))
