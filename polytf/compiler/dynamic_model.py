"""A model whose inputs have size symbols (a ``None`` batch, a sequence length), callable at
any size in their ranges.

``polytf.load`` returns a :class:`DynamicModel` when a placeholder dimension is unknown in
the GraphDef and not fixed by ``input_shapes``, or is given as a symbol (``("N", 224, 224,
3)``). A call reads the symbols' values off its arrays
(:meth:`SymbolicSignature.bind <polytf.graph.size_symbols.SymbolicSignature.bind>`: a size of
0, one outside its range or two inputs that disagree are a
:class:`~polytf.errors.SizeError` before anything runs) and runs the model built for those
sizes::

    call(**arrays) ─► bind sizes ─► built for these sizes? ─► yes: run it
                      N = 3         (kept in memory, the       no: build it (tuning records and
                                    last few sizes called)         compiled code of the cache),
                                                                   keep it, run it

Each size is built as a static model: its kernels, tuning records and compiled objects are
the static model's at that size (``polytf tune --buckets N=1,8`` tunes the sizes it names),
so a call at a size built before, in any process, links cached code and does no isl or LLVM
work. A batch size ``N`` that is a multiple of the batch symbol's smallest size ``b`` is built
on the model at ``b``: each of its kernels without a tuning record at ``N`` that computes
each slice of ``b`` samples alone runs as the kernel at ``b``, once per slice
(:mod:`polytf.compiler.sliced_kernels`), so a new batch size reads its graph and compiles
only the kernels that mix samples. Other size symbols (a sequence length) compile their
kernels at each size the first time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from polytf.config import SizeSymbolConfig
from polytf.errors import GraphError
from polytf.graph.size_symbols import SizeSymbol, SymbolicSignature
from polytf.runtime.model import Model

__all__ = ["DynamicModel"]


class DynamicModel:
    """A callable model with size symbols: ``model(**{placeholder: array}) -> {output: array}``
    for arrays of any sizes in the symbols' ranges (module docstring).

    Attributes:
        source: the model's file, for messages.
        signature: every placeholder's shape, with its size symbols.

    Thread-safe: calls at sizes already built run at once; a size being built makes the
    other calls that need a build wait.
    """

    def __init__(
        self,
        source: str,
        signature: SymbolicSignature,
        build: Callable[[dict[str, int], Model | None], Model],
        config: SizeSymbolConfig | None = None,
    ) -> None:
        """``build(sizes, base)`` builds the static model of ``sizes`` (symbol -> size), raising
        what :func:`polytf.load` raises; ``base`` is the model at
        :meth:`SymbolicSignature.slicing_base <polytf.graph.size_symbols.SymbolicSignature.slicing_base>`
        of ``sizes`` (None when there is none), whose kernels it may run slice by slice."""
        self.source = source
        self.signature = signature
        self._build = build
        self._sizes_kept = (config or SizeSymbolConfig.from_environment()).sizes_kept
        self._built: OrderedDict[tuple[int, ...], Model] = OrderedDict()
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()

    @property
    def symbols(self) -> Mapping[str, SizeSymbol]:
        """Symbol name -> its range."""
        return self.signature.symbols

    @property
    def input_shapes(self) -> dict[str, tuple[int | str, ...]]:
        """Placeholder name -> shape, a symbol's name where the size is the call's."""
        return dict(self.signature.shapes)

    @property
    def built_sizes(self) -> list[dict[str, int]]:
        """The sizes built and kept now, least recently called first."""
        with self._lock:
            keys = list(self._built)
        return [dict(zip(self.signature.symbols, key)) for key in keys]

    def at_sizes(self, **sizes: int) -> Model:
        """The static model of ``sizes`` (symbol -> size), built now unless it is kept:
        a :class:`~polytf.runtime.model.Model` with its kernels, recipes and host nodes.

        Raises:
            SizeError: a symbol without a size, an unknown symbol, or a size out of range.
            PolytfError: what :func:`polytf.load` raises for the model at these sizes.
        """
        self.signature.check_sizes(sizes, f"model {self.source}")
        key = tuple(int(sizes[name]) for name in self.signature.symbols)
        with self._lock:
            model = self._kept(key)
        if model is not None:
            return model
        sizes = dict(zip(self.signature.symbols, key))
        base_sizes = self.signature.slicing_base(sizes)
        base = self.at_sizes(**base_sizes) if base_sizes is not None else None  # built first, by itself
        with self._build_lock:  # one build at a time: a build already uses every CPU
            with self._lock:
                model = self._kept(key)
            if model is None:
                model = self._build(sizes, base)
                with self._lock:
                    self._built[key] = model
                    while len(self._built) > self._sizes_kept:
                        self._built.popitem(last=False)
        return model

    def at_sizes_of(self, inputs: Mapping[str, Any]) -> Model:
        """The static model of the sizes that ``inputs`` (placeholder name -> array) give
        (:meth:`at_sizes`).

        Raises:
            SizeError: the arrays' sizes do not fit the symbols (names the input and symbol).
            GraphError: no array gives a symbol its size (the inputs that would are missing).
        """
        sizes = self.signature.bind({name: np.shape(value) for name, value in inputs.items()})
        unbound = [name for name in self.signature.symbols if name not in sizes]
        if unbound:
            takers = sorted(name for name, shape in self.signature.shapes.items() if unbound[0] in shape)
            raise GraphError(f"model {self.source} takes inputs {sorted(self.signature.shapes)}; missing {takers} (they give size symbol {unbound[0]})")
        return self.at_sizes(**sizes)

    def __call__(self, **inputs: Any) -> dict[str, Any]:
        """Run the model once on one array per placeholder, by name (``x`` or ``x:0``); a fresh
        array per output.

        Raises:
            SizeError: the arrays' sizes do not fit the symbols: a size of 0, one outside its
                range, two inputs that disagree on a symbol, or a fixed dimension of another
                size (the message names the input and the symbol).
            GraphError: a placeholder is missing or an unknown name is given.
            ShapeError: an input cannot be converted.
        """
        return self.at_sizes_of(inputs)(**inputs)

    def latency_s(self, inputs: Mapping[str, Any], repeats: int = 20, warmup: int = 3) -> list[float]:
        """:meth:`Model.latency_s <polytf.runtime.model.Model.latency_s>` of the model built
        for the sizes of ``inputs``."""
        return self.at_sizes_of(inputs).latency_s(inputs, repeats, warmup)

    def pack_constants(self) -> None:
        """Pack the weights of every size built so far (see :meth:`Model.pack_constants`)."""
        with self._lock:
            models = list(self._built.values())
        for model in models:
            model.pack_constants()

    def _kept(self, key: tuple[int, ...]) -> Model | None:
        """The model kept for ``key``, now the most recently used (call with the lock held)."""
        model = self._built.get(key)
        if model is not None:
            self._built.move_to_end(key)
        return model

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}: {self.signature.describe(name)}" for name in self.signature.shapes)
        symbols = ", ".join(str(symbol) for symbol in self.signature.symbols.values())
        return f"DynamicModel({self.source}; inputs {shapes}; symbols {symbols})"
