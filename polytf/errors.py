"""The one exception hierarchy of polytf.

Every error a user can see derives from :class:`PolytfError`. Each stage adds its
context (the node, op or file it was working on) so that a message says what went
wrong and what to do, never a traceback from deep inside protobuf, isl or LLVM.
"""

from __future__ import annotations


class PolytfError(Exception):
    """Base class of every error polytf raises on purpose."""

    def with_context(self, context: str) -> PolytfError:
        """Return an error of the same class whose message starts with ``context``.

        Args:
            context: what the caller was doing, e.g. ``"while lowering node 'dense/MatMul' (MatMul)"``.
        """
        error = type(self).__new__(type(self))
        Exception.__init__(error, f"{context}: {self}")
        error.__dict__.update(self.__dict__)
        return error


class GraphError(PolytfError):
    """A GraphDef that cannot be read or is inconsistent (missing inputs, cycles, bad file)."""


class ShapeError(GraphError):
    """Shapes or dtypes that an op does not accept, or an unknown dimension left unfixed."""


class SizeError(ShapeError):
    """The sizes of a call do not fit a model's size symbols
    (:mod:`polytf.graph.size_symbols`): a size of 0, one outside its symbol's range, two
    inputs that disagree on a symbol, or a fixed dimension of another size.

    Attributes:
        input_name: the placeholder whose array does not fit (None: sizes given by name).
        symbol: the size symbol concerned (None: a fixed dimension or the rank).
    """

    def __init__(self, message: str, input_name: str | None = None, symbol: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name
        self.symbol = symbol


class UnsupportedOpError(GraphError):
    """A model uses ops polytf cannot compile.

    Attributes:
        nodes: ``(node_name, op_type)`` for every unsupported node of the model.
    """

    def __init__(self, nodes: list[tuple[str, str]]):
        self.nodes = list(nodes)
        ops = sorted({op for _, op in self.nodes})
        listing = "\n".join(f"  - node '{name}' (op {op})" for name, op in self.nodes)
        super().__init__(
            f"{len(self.nodes)} node(s) use ops polytf does not support ({', '.join(ops)}):\n"
            f"{listing}\n"
            "Run `polytf ops` for the supported ops, or export the model without these ops."
        )


class ArgumentError(PolytfError, ValueError):
    """An argument of a polytf function or command is out of its range (``trials=0``,
    ``threads=-3``) or names a path that cannot be used (an output folder that is a file);
    the message names the argument and what it takes. Raised before any work is done; also
    a ``ValueError``."""


class IndexOutOfRangeError(PolytfError):
    """A run-time index (a token id of an embedding lookup) lies outside its table; raised
    before the kernel that would read it runs, naming the node, the index and the range."""


class InvalidArgumentError(PolytfError):
    """A tensor's values are invalid at run time, as TensorFlow's ``InvalidArgumentError``: a
    ``CheckNumerics`` node found NaN or ±inf (``"<message> : Tensor had NaN values"``, naming
    the node); raised from the model's call after the kernel that checked the tensor."""


class PolyhedralError(PolytfError):
    """isl rejected a set or map polytf built; the message carries the isl text."""


class ScheduleError(PolytfError):
    """A schedule recipe is malformed or would violate a dependence of the Scop."""


class CodegenError(PolytfError):
    """An isl AST could not be translated to LLVM IR."""


class CompileError(PolytfError):
    """LLVM could not verify or compile a generated module."""


class ForeignCpuError(CompileError):
    """Code generated for another CPU was asked to run here: another architecture (a cross
    target), or a CPU with features this one lacks (``POLYTF_CPU=avx512`` on an AVX2 machine)."""


class TuningError(PolytfError):
    """The tuner could not find any correct candidate, or its study storage failed."""


class CacheError(PolytfError):
    """A tuning-record cache could not be read or written."""


class DependencyMissingError(PolytfError):
    """An optional dependency (TensorFlow, CuPy) is needed for this feature and is not installed."""


class PolytfWarning(UserWarning):
    """Base class of every warning polytf emits on purpose (the CLI prints them as ``warning: ...``)."""


class CacheWarning(PolytfWarning):
    """A tuning record was ignored (corrupt, foreign or illegal); the kernel falls back to its default recipe."""


class BusyMachineWarning(PolytfWarning):
    """Other processes kept cores busy while polytf was about to time kernels: its timings (and
    the recipes a tuner picks from them) are unreliable until they stop
    (:mod:`polytf.runtime.machine_load`)."""
