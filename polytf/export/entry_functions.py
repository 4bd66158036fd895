"""The C entry points of an exported model, as LLVM IR (llvmlite).

For a model exported as ``NAME`` (see :mod:`polytf.export.c_header` for the declarations)::

    int    NAME_run_with_workspace(const T *in0, ..., T *out0, ..., void *workspace, int threads);
    int    NAME_run(const T *in0, ..., T *out0, ..., int threads);
    size_t NAME_workspace_bytes(void);
    int    NAME_init(const char *weights_path);

``NAME_run_with_workspace`` checks its arguments, zero-fills the scratch arrays of a
workspace whose header does not hold the model's tag (a new one), checks the ids of every run-time gather, then calls
each kernel ``void k(i8** arrays, i64 threads)`` on a table of addresses laid out by
:mod:`polytf.export.model_layout`, and finally copies the outputs no kernel writes in
place. It returns :data:`STATUS_CODES` ``OK`` or the first error; no kernel has run when
an argument or an id is refused. ``NAME_run`` allocates a workspace (``posix_memalign``),
runs, and frees it. ``NAME_init`` reads an external weights file (written by
:mod:`polytf.export.weights`) once; with weights inside the object it does nothing.

The functions keep no state but the weights pointer that ``NAME_init`` sets: calls on
distinct workspaces may run at once from several threads (each kernel may itself start
``threads`` OpenMP threads).
"""

from __future__ import annotations

import llvmlite.ir as ir

from polytf.export.model_layout import (
    INPUT_POINTER,
    OUTPUT_POINTER,
    WEIGHTS,
    BufferAddress,
    ModelLayout,
)
from polytf.export.weights import WEIGHTS_FILE_HEADER_BYTES, WEIGHTS_FILE_MAGIC
from polytf.plan.buffers import ALIGNMENT_BYTES

__all__ = ["STATUS_CODES", "entry_module", "weights_symbol", "weights_pointer_symbol"]

#: Return values of the entry points (the header defines ``NAME_OK`` ... with these values).
STATUS_CODES = {
    "OK": 0,
    "ERROR_NULL_ARGUMENT": 1,
    "ERROR_INVALID_THREADS": 2,
    "ERROR_WORKSPACE_ALIGNMENT": 3,
    "ERROR_NOT_INITIALIZED": 4,
    "ERROR_INDEX_OUT_OF_RANGE": 5,
    "ERROR_OUT_OF_MEMORY": 6,
    "ERROR_WEIGHTS_FILE": 7,
}

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
I8_POINTER = I8.as_pointer()
KERNEL_TYPE = ir.FunctionType(ir.VoidType(), [I8_POINTER.as_pointer(), I64])
INDEX_TYPES = {"int32": I32, "int64": I64}


def weights_symbol(name: str) -> str:
    """The symbol of the weights embedded in the object."""
    return f"{name}_weights"


def weights_pointer_symbol(name: str) -> str:
    """The symbol of the pointer ``NAME_init`` sets to the weights read from a file."""
    return f"{name}_weights_pointer"


def _status(code: str) -> ir.Constant:
    return ir.Constant(I32, STATUS_CODES[code])


class _EntryBuilder:
    def __init__(self, layout: ModelLayout, name: str, external_weights: bool, triple: str, data_layout: str) -> None:
        self.layout = layout
        self.name = name
        self.external_weights = external_weights
        self.module = ir.Module(name=f"{name}_entry")
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.libc = {
            "memset": ir.Function(self.module, ir.FunctionType(I8_POINTER, [I8_POINTER, I32, I64]), name="memset"),
            "memcpy": ir.Function(self.module, ir.FunctionType(I8_POINTER, [I8_POINTER, I8_POINTER, I64]), name="memcpy"),
            "posix_memalign": ir.Function(self.module, ir.FunctionType(I32, [I8_POINTER.as_pointer(), I64, I64]), name="posix_memalign"),
            "free": ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8_POINTER]), name="free"),
            "fopen": ir.Function(self.module, ir.FunctionType(I8_POINTER, [I8_POINTER, I8_POINTER]), name="fopen"),
            "fread": ir.Function(self.module, ir.FunctionType(I64, [I8_POINTER, I64, I64, I8_POINTER]), name="fread"),
            "fclose": ir.Function(self.module, ir.FunctionType(I32, [I8_POINTER]), name="fclose"),
        }
        size = max(len(layout.weights), 1)
        if external_weights:
            self.weights_pointer = ir.GlobalVariable(self.module, I8_POINTER, name=weights_pointer_symbol(name))
            self.weights_pointer.initializer = ir.Constant(I8_POINTER, None)
            self.weights_pointer.linkage = "internal"
            self.weights_pointer.align = 8
        else:  # defined by the weights module the object links in
            self.weights = ir.GlobalVariable(self.module, ir.ArrayType(I8, size), name=weights_symbol(name))
            self.weights.global_constant = True
            self.weights.align = ALIGNMENT_BYTES
        self.kernels = {}
        for call in layout.calls:
            if call.kernel.symbol not in self.kernels:
                self.kernels[call.kernel.symbol] = ir.Function(self.module, KERNEL_TYPE, name=call.kernel.symbol)
        self.ports = len(layout.inputs) + len(layout.outputs)

    # -- helpers -----------------------------------------------------------------------------
    def _string(self, text: str, name: str) -> ir.GlobalVariable:
        data = bytearray(text.encode() + b"\0")
        variable = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(data)), name=name)
        variable.initializer = ir.Constant(ir.ArrayType(I8, len(data)), data)
        variable.global_constant = True
        variable.linkage = "internal"
        return variable

    @staticmethod
    def _fail_unless(builder: ir.IRBuilder, condition: ir.Value, code: str) -> None:
        """Return ``code`` from the function when ``condition`` is false."""
        with builder.if_then(builder.not_(condition), likely=False):
            builder.ret(_status(code))

    def _weights_base(self, builder: ir.IRBuilder) -> ir.Value:
        if self.external_weights:
            return builder.load(self.weights_pointer)
        return builder.bitcast(self.weights, I8_POINTER)

    # -- NAME_run_with_workspace ---------------------------------------------------------------
    def run_with_workspace(self) -> ir.Function:
        layout = self.layout
        function = ir.Function(self.module, ir.FunctionType(I32, [I8_POINTER] * self.ports + [I8_POINTER, I32]), name=f"{self.name}_run_with_workspace")
        arguments = list(function.args)
        for argument, port in zip(arguments, layout.inputs + layout.outputs):
            argument.name = port.parameter
        workspace, threads = arguments[-2], arguments[-1]
        workspace.name, threads.name = "workspace", "threads"
        inputs, outputs = arguments[: len(layout.inputs)], arguments[len(layout.inputs) : self.ports]
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        table_slots = max((len(call.arguments) for call in layout.calls), default=1)
        table = builder.alloca(ir.ArrayType(I8_POINTER, table_slots), name="arrays")
        null = ir.Constant(I8_POINTER, None)
        for pointer in [*inputs, *outputs, workspace]:
            self._fail_unless(builder, builder.icmp_unsigned("!=", pointer, null), "ERROR_NULL_ARGUMENT")
        self._fail_unless(builder, builder.icmp_signed(">", threads, ir.Constant(I32, 0)), "ERROR_INVALID_THREADS")
        misalignment = builder.and_(builder.ptrtoint(workspace, I64), ir.Constant(I64, ALIGNMENT_BYTES - 1))
        self._fail_unless(builder, builder.icmp_unsigned("==", misalignment, ir.Constant(I64, 0)), "ERROR_WORKSPACE_ALIGNMENT")
        weights = self._weights_base(builder)
        if self.external_weights:
            self._fail_unless(builder, builder.icmp_unsigned("!=", weights, null), "ERROR_NOT_INITIALIZED")
        # a workspace without this model's tag is new (or another model's): zero its scratch arrays first
        header = builder.bitcast(workspace, I64.as_pointer())
        fresh = builder.icmp_unsigned("!=", builder.load(header, align=8), ir.Constant(I64, layout.tag))
        with builder.if_then(fresh, likely=False):
            for offset, nbytes in layout.zeroed:
                start = builder.gep(workspace, [ir.Constant(I64, offset)], inbounds=True)
                builder.call(self.libc["memset"], [start, ir.Constant(I32, 0), ir.Constant(I64, nbytes)])
            builder.store(ir.Constant(I64, layout.tag), header, align=8)

        def address(location: BufferAddress) -> ir.Value:
            if location.base == INPUT_POINTER:
                return inputs[location.index]
            if location.base == OUTPUT_POINTER:
                return outputs[location.index]
            base = weights if location.base == WEIGHTS else workspace
            return builder.gep(base, [ir.Constant(I64, location.index)], inbounds=True)

        wide_threads = builder.sext(threads, I64)
        for call in layout.calls:
            for check in call.index_checks:
                self._index_check(builder, function, address(check.address), check.count, check.dtype, check.extent)
            for slot, location in enumerate(call.arguments):
                builder.store(address(location), builder.gep(table, [ir.Constant(I32, 0), ir.Constant(I32, slot)], inbounds=True))
            builder.call(self.kernels[call.kernel.symbol], [builder.gep(table, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True), wide_threads])
        for copy in layout.output_copies:
            builder.call(self.libc["memcpy"], [outputs[copy.output], address(copy.source), ir.Constant(I64, copy.nbytes)])
        builder.ret(_status("OK"))
        return function

    def _index_check(self, builder: ir.IRBuilder, function: ir.Function, indices: ir.Value, count: int, dtype: str, extent: int) -> None:
        """Return ERROR_INDEX_OUT_OF_RANGE unless every id of ``indices`` lies in ``[0, extent)``
        (one unsigned comparison per id: a negative id is a huge unsigned one)."""
        if count == 0:
            return
        element = INDEX_TYPES[dtype]
        typed = builder.bitcast(indices, element.as_pointer())
        before = builder.block
        loop = function.append_basic_block("index_check")
        latch = function.append_basic_block("index_next")
        bad = function.append_basic_block("index_out_of_range")
        done = function.append_basic_block("index_checked")
        builder.branch(loop)
        builder.position_at_end(loop)
        position = builder.phi(I64, name="position")
        position.add_incoming(ir.Constant(I64, 0), before)
        value = builder.load(builder.gep(typed, [position], inbounds=True))
        builder.cbranch(builder.icmp_unsigned("<", value, ir.Constant(element, extent)), latch, bad)
        builder.position_at_end(latch)
        following = builder.add(position, ir.Constant(I64, 1))
        position.add_incoming(following, latch)
        builder.cbranch(builder.icmp_unsigned("<", following, ir.Constant(I64, count)), loop, done)
        builder.position_at_end(bad)
        builder.ret(_status("ERROR_INDEX_OUT_OF_RANGE"))
        builder.position_at_end(done)

    # -- NAME_run ------------------------------------------------------------------------------
    def run(self, with_workspace: ir.Function) -> None:
        function = ir.Function(self.module, ir.FunctionType(I32, [I8_POINTER] * self.ports + [I32]), name=f"{self.name}_run")
        for argument, port in zip(function.args, self.layout.inputs + self.layout.outputs):
            argument.name = port.parameter
        function.args[-1].name = "threads"
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        slot = builder.alloca(I8_POINTER, name="workspace_slot")
        failed = builder.call(self.libc["posix_memalign"], [slot, ir.Constant(I64, ALIGNMENT_BYTES), ir.Constant(I64, self.layout.workspace_bytes)])
        self._fail_unless(builder, builder.icmp_signed("==", failed, ir.Constant(I32, 0)), "ERROR_OUT_OF_MEMORY")
        workspace = builder.load(slot)
        builder.store(ir.Constant(I64, 0), builder.bitcast(workspace, I64.as_pointer()), align=8)  # a new workspace
        status = builder.call(with_workspace, [*function.args[:-1], workspace, function.args[-1]])
        builder.call(self.libc["free"], [workspace])
        builder.ret(status)

    # -- NAME_workspace_bytes, NAME_init --------------------------------------------------------
    def workspace_bytes(self) -> None:
        function = ir.Function(self.module, ir.FunctionType(I64, []), name=f"{self.name}_workspace_bytes")
        ir.IRBuilder(function.append_basic_block("entry")).ret(ir.Constant(I64, self.layout.workspace_bytes))

    def init(self) -> None:
        function = ir.Function(self.module, ir.FunctionType(I32, [I8_POINTER]), name=f"{self.name}_init")
        path = function.args[0]
        path.name = "weights_path"
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        if not self.external_weights:
            builder.ret(_status("OK"))  # the weights are inside the object
            return
        null = ir.Constant(I8_POINTER, None)
        loaded = builder.icmp_unsigned("!=", builder.load(self.weights_pointer), null)
        with builder.if_then(loaded):
            builder.ret(_status("OK"))
        self._fail_unless(builder, builder.icmp_unsigned("!=", path, null), "ERROR_NULL_ARGUMENT")
        mode = builder.bitcast(self._string("rb", f"{self.name}_read_mode"), I8_POINTER)
        file = builder.call(self.libc["fopen"], [path, mode])
        self._fail_unless(builder, builder.icmp_unsigned("!=", file, null), "ERROR_WEIGHTS_FILE")
        header = builder.alloca(ir.ArrayType(I64, WEIGHTS_FILE_HEADER_BYTES // 8), name="header")
        header_bytes = builder.bitcast(header, I8_POINTER)
        got = builder.call(self.libc["fread"], [header_bytes, ir.Constant(I64, 1), ir.Constant(I64, WEIGHTS_FILE_HEADER_BYTES), file])

        def word(index: int) -> ir.Value:
            return builder.load(builder.gep(header, [ir.Constant(I32, 0), ir.Constant(I32, index)], inbounds=True))

        size = len(self.layout.weights)
        valid = builder.icmp_unsigned("==", got, ir.Constant(I64, WEIGHTS_FILE_HEADER_BYTES))
        with builder.if_then(builder.not_(valid), likely=False):
            builder.call(self.libc["fclose"], [file])
            builder.ret(_status("ERROR_WEIGHTS_FILE"))
        valid = builder.and_(builder.icmp_unsigned("==", word(0), ir.Constant(I64, int.from_bytes(WEIGHTS_FILE_MAGIC, "little"))), builder.icmp_unsigned("==", word(1), ir.Constant(I64, self.layout.tag)))
        valid = builder.and_(valid, builder.icmp_unsigned("==", word(2), ir.Constant(I64, size)))
        with builder.if_then(builder.not_(valid), likely=False):
            builder.call(self.libc["fclose"], [file])
            builder.ret(_status("ERROR_WEIGHTS_FILE"))
        slot = builder.alloca(I8_POINTER, name="weights_slot")
        failed = builder.call(self.libc["posix_memalign"], [slot, ir.Constant(I64, ALIGNMENT_BYTES), ir.Constant(I64, max(size, 1))])
        with builder.if_then(builder.icmp_signed("!=", failed, ir.Constant(I32, 0)), likely=False):
            builder.call(self.libc["fclose"], [file])
            builder.ret(_status("ERROR_OUT_OF_MEMORY"))
        weights = builder.load(slot)
        got = builder.call(self.libc["fread"], [weights, ir.Constant(I64, 1), ir.Constant(I64, size), file])
        builder.call(self.libc["fclose"], [file])
        with builder.if_then(builder.icmp_unsigned("!=", got, ir.Constant(I64, size)), likely=False):
            builder.call(self.libc["free"], [weights])
            builder.ret(_status("ERROR_WEIGHTS_FILE"))
        builder.store(weights, self.weights_pointer)
        builder.ret(_status("OK"))


def entry_module(layout: ModelLayout, name: str, external_weights: bool, triple: str, data_layout: str) -> str:
    """LLVM IR text of the entry points of model ``name`` (module docstring); the kernels and,
    when ``external_weights`` is False, the weights global are declared, to be linked in.

    Args:
        layout: the model's buffers (:func:`polytf.export.model_layout.layout_model`).
        name: the C prefix of every symbol (a C identifier).
        external_weights: the weights come from a file read by ``NAME_init``.
        triple, data_layout: the target's (as the kernels').
    """
    builder = _EntryBuilder(layout, name, external_weights, triple, data_layout)
    with_workspace = builder.run_with_workspace()
    builder.run(with_workspace)
    builder.workspace_bytes()
    builder.init()
    return str(builder.module)
