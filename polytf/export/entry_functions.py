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

A model exported with its batch as an argument (a ``None`` batch:
:mod:`polytf.export.batch_layout`) takes ``int64_t batch`` before ``threads`` in
``NAME_run_with_workspace`` and ``NAME_run``, and as the one argument of
``NAME_workspace_bytes`` (0 for a batch it does not take); a batch outside the symbol's range
or not a multiple of the kernels' batch is ``ERROR_INVALID_BATCH``. Each kernel is then called
once through its slices entry ``<kernel>_slices(arrays, threads, count, strides,
thread_strides)`` with ``count = batch / multiple``.

The functions keep no state but the weights pointer that ``NAME_init`` sets: calls on
distinct workspaces may run at once from several threads (each kernel may itself start
``threads`` OpenMP threads).
"""

from __future__ import annotations

import llvmlite.ir as ir

from polytf.export.batch_layout import ExportedBatch, SlicedCall
from polytf.export.model_layout import (
    INPUT_POINTER,
    OUTPUT_POINTER,
    WEIGHTS,
    BufferAddress,
    ModelLayout,
)
from polytf.export.weights import WEIGHTS_FILE_HEADER_BYTES, WEIGHTS_FILE_MAGIC
from polytf.plan.buffers import ALIGNMENT_BYTES
from polytf.targets.cpu import SLICES_SUFFIX

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
    "ERROR_INVALID_BATCH": 8,
}

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
I8_POINTER = I8.as_pointer()
KERNEL_TYPE = ir.FunctionType(ir.VoidType(), [I8_POINTER.as_pointer(), I64])
#: ``void <kernel>_slices(i8** arrays, i64 threads, i64 count, i64* strides, i64* thread_strides)``
SLICES_TYPE = ir.FunctionType(ir.VoidType(), [I8_POINTER.as_pointer(), I64, I64, I64.as_pointer(), I64.as_pointer()])
#: mixed into the workspace's tag with a call's slice count (a workspace laid out for another
#: batch has its scratch arrays elsewhere: it is zeroed again)
BATCH_TAG_FACTOR = 0x9E3779B97F4A7C15
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
    def __init__(
        self,
        layout: ModelLayout,
        name: str,
        external_weights: bool,
        triple: str,
        data_layout: str,
        batch: ExportedBatch | None = None,
        sliced: tuple[SlicedCall, ...] = (),
    ) -> None:
        self.layout = layout
        self.name = name
        self.batch = batch
        self.sliced = sliced
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
                if batch is None:
                    self.kernels[call.kernel.symbol] = ir.Function(self.module, KERNEL_TYPE, name=call.kernel.symbol)
                else:
                    self.kernels[call.kernel.symbol] = ir.Function(self.module, SLICES_TYPE, name=call.kernel.symbol + SLICES_SUFFIX)
        self.ports = len(layout.inputs) + len(layout.outputs)
        #: the batch parameter's type, after the ports (none without a batch)
        self.batch_parameters = [I64] if batch is not None else []

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
        function = ir.Function(self.module, ir.FunctionType(I32, [I8_POINTER] * self.ports + [I8_POINTER, *self.batch_parameters, I32]), name=f"{self.name}_run_with_workspace")
        arguments = list(function.args)
        for argument, port in zip(arguments, layout.inputs + layout.outputs):
            argument.name = port.parameter
        workspace, threads = arguments[self.ports], arguments[-1]
        workspace.name, threads.name = "workspace", "threads"
        inputs, outputs = arguments[: len(layout.inputs)], arguments[len(layout.inputs) : self.ports]
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        count = ir.Constant(I64, 1)
        if self.batch is not None:
            batch = arguments[self.ports + 1]
            batch.name = "batch"
            self._fail_unless(builder, self._batch_valid(builder, batch), "ERROR_INVALID_BATCH")
            count = builder.sdiv(batch, ir.Constant(I64, self.batch.multiple))
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
        tag = ir.Constant(I64, layout.tag)
        if self.batch is not None:
            tag = builder.xor(tag, builder.mul(count, ir.Constant(I64, BATCH_TAG_FACTOR)))
        fresh = builder.icmp_unsigned("!=", builder.load(header, align=8), tag)
        with builder.if_then(fresh, likely=False):
            for offset, nbytes in layout.zeroed:
                start = builder.gep(workspace, [self._workspace_offset(builder, offset, count)], inbounds=True)
                builder.call(self.libc["memset"], [start, ir.Constant(I32, 0), ir.Constant(I64, nbytes)])
            builder.store(tag, header, align=8)

        def address(location: BufferAddress) -> ir.Value:
            if location.base == INPUT_POINTER:
                return inputs[location.index]
            if location.base == OUTPUT_POINTER:
                return outputs[location.index]
            if location.base == WEIGHTS:
                return builder.gep(weights, [ir.Constant(I64, location.index)], inbounds=True)
            return builder.gep(workspace, [self._workspace_offset(builder, location.index, count)], inbounds=True)

        wide_threads = builder.sext(threads, I64)
        for position, call in enumerate(layout.calls):
            sliced = self.sliced[position] if self.batch is not None else None
            for check in call.index_checks:
                ids = ir.Constant(I64, check.count)
                if sliced is not None and sliced.strides[call.arguments.index(check.address)]:
                    ids = builder.mul(ids, count)  # the ids of every slice
                self._index_check(builder, function, address(check.address), ids, check.dtype, check.extent)
            for slot, location in enumerate(call.arguments):
                builder.store(address(location), builder.gep(table, [ir.Constant(I32, 0), ir.Constant(I32, slot)], inbounds=True))
            arrays = builder.gep(table, [ir.Constant(I32, 0), ir.Constant(I32, 0)], inbounds=True)
            if sliced is None:
                builder.call(self.kernels[call.kernel.symbol], [arrays, wide_threads])
                continue
            runs_threads = wide_threads
            if sliced.copies:  # no more threads than copies of its scratch arrays
                limit = ir.Constant(I64, sliced.copies)
                runs_threads = builder.select(builder.icmp_signed("<", wide_threads, limit), wide_threads, limit)
            strides = self._constant_array(sliced.strides, f"{call.kernel.symbol}_strides_{position}")
            thread_strides = self._constant_array(sliced.thread_strides, f"{call.kernel.symbol}_thread_strides_{position}")
            builder.call(self.kernels[call.kernel.symbol], [arrays, runs_threads, count, strides, thread_strides])
        for copy in layout.output_copies:
            nbytes = ir.Constant(I64, copy.nbytes)
            if self.batch is not None and copy.source.base in (INPUT_POINTER, OUTPUT_POINTER):
                nbytes = builder.mul(nbytes, count)  # a batch-sized tensor passed through
            builder.call(self.libc["memcpy"], [outputs[copy.output], address(copy.source), nbytes])
        builder.ret(_status("OK"))
        return function

    def _batch_valid(self, builder: ir.IRBuilder, batch: ir.Value) -> ir.Value:
        """Whether ``batch`` is in the batch symbol's range and a multiple of the kernels' batch."""
        assert self.batch is not None
        valid = builder.icmp_signed(">=", batch, ir.Constant(I64, self.batch.minimum))
        if self.batch.maximum is not None:
            valid = builder.and_(valid, builder.icmp_signed("<=", batch, ir.Constant(I64, self.batch.maximum)))
        remainder = builder.srem(batch, ir.Constant(I64, self.batch.multiple))
        return builder.and_(valid, builder.icmp_signed("==", remainder, ir.Constant(I64, 0)))

    def _workspace_offset(self, builder: ir.IRBuilder, offset: int, count: ir.Value) -> ir.Value:
        """Where the workspace buffer the layout puts at ``offset`` (laid out for one slice)
        lives in a call of ``count`` slices (:mod:`polytf.export.batch_layout`): the arena
        stretched by ``count``, what follows it moved on by ``count - 1`` arenas."""
        if self.batch is None:
            return ir.Constant(I64, offset)
        arena, size = self.layout.arena_offset, self.layout.memory_plan.arena_bytes if self.layout.memory_plan else 0
        if offset < arena:
            return ir.Constant(I64, offset)
        if offset < arena + size:
            return builder.add(ir.Constant(I64, arena), builder.mul(count, ir.Constant(I64, offset - arena)))
        return builder.add(ir.Constant(I64, offset), builder.mul(builder.sub(count, ir.Constant(I64, 1)), ir.Constant(I64, size)))

    def _constant_array(self, values: tuple[int, ...], name: str) -> ir.Value:
        """A pointer to a read-only global ``i64`` array of ``values``."""
        kind = ir.ArrayType(I64, max(len(values), 1))
        variable = ir.GlobalVariable(self.module, kind, name=name)
        variable.initializer = ir.Constant(kind, list(values) or [0])
        variable.global_constant = True
        variable.linkage = "internal"
        return variable.gep([ir.Constant(I32, 0), ir.Constant(I32, 0)])

    def _index_check(self, builder: ir.IRBuilder, function: ir.Function, indices: ir.Value, count: ir.Value, dtype: str, extent: int) -> None:
        """Return ERROR_INDEX_OUT_OF_RANGE unless every id of ``indices`` (``count`` of them, an
        ``i64`` value) lies in ``[0, extent)`` (one unsigned comparison per id: a negative id
        is a huge unsigned one)."""
        if isinstance(count, ir.Constant) and count.constant == 0:
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
        builder.cbranch(builder.icmp_unsigned("<", following, count), loop, done)
        builder.position_at_end(bad)
        builder.ret(_status("ERROR_INDEX_OUT_OF_RANGE"))
        builder.position_at_end(done)

    # -- NAME_run ------------------------------------------------------------------------------
    def run(self, with_workspace: ir.Function) -> None:
        function = ir.Function(self.module, ir.FunctionType(I32, [I8_POINTER] * self.ports + [*self.batch_parameters, I32]), name=f"{self.name}_run")
        for argument, port in zip(function.args, self.layout.inputs + self.layout.outputs):
            argument.name = port.parameter
        function.args[-1].name = "threads"
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        size = ir.Constant(I64, self.layout.workspace_bytes)
        batch = []
        if self.batch is not None:
            function.args[self.ports].name = "batch"
            batch = [function.args[self.ports]]
            self._fail_unless(builder, self._batch_valid(builder, batch[0]), "ERROR_INVALID_BATCH")
            size = self._workspace_size(builder, builder.sdiv(batch[0], ir.Constant(I64, self.batch.multiple)))
        slot = builder.alloca(I8_POINTER, name="workspace_slot")
        failed = builder.call(self.libc["posix_memalign"], [slot, ir.Constant(I64, ALIGNMENT_BYTES), size])
        self._fail_unless(builder, builder.icmp_signed("==", failed, ir.Constant(I32, 0)), "ERROR_OUT_OF_MEMORY")
        workspace = builder.load(slot)
        builder.store(ir.Constant(I64, 0), builder.bitcast(workspace, I64.as_pointer()), align=8)  # a new workspace
        status = builder.call(with_workspace, [*function.args[: self.ports], workspace, *batch, function.args[-1]])
        builder.call(self.libc["free"], [workspace])
        builder.ret(status)

    # -- NAME_workspace_bytes, NAME_init --------------------------------------------------------
    def workspace_bytes(self) -> None:
        function = ir.Function(self.module, ir.FunctionType(I64, self.batch_parameters), name=f"{self.name}_workspace_bytes")
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        if self.batch is None:
            builder.ret(ir.Constant(I64, self.layout.workspace_bytes))
            return
        batch = function.args[0]
        batch.name = "batch"
        with builder.if_then(builder.not_(self._batch_valid(builder, batch)), likely=False):
            builder.ret(ir.Constant(I64, 0))  # no such batch
        builder.ret(self._workspace_size(builder, builder.sdiv(batch, ir.Constant(I64, self.batch.multiple))))

    def _workspace_size(self, builder: ir.IRBuilder, count: ir.Value) -> ir.Value:
        """Bytes of the workspace of a call of ``count`` slices: the arena ``count`` times."""
        arena = self.layout.memory_plan.arena_bytes if self.layout.memory_plan else 0
        return builder.add(ir.Constant(I64, self.layout.workspace_bytes), builder.mul(builder.sub(count, ir.Constant(I64, 1)), ir.Constant(I64, arena)))

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


def entry_module(
    layout: ModelLayout,
    name: str,
    external_weights: bool,
    triple: str,
    data_layout: str,
    batch: ExportedBatch | None = None,
    sliced: tuple[SlicedCall, ...] = (),
) -> str:
    """LLVM IR text of the entry points of model ``name`` (module docstring); the kernels and,
    when ``external_weights`` is False, the weights global are declared, to be linked in.

    Args:
        layout: the model's buffers (:func:`polytf.export.model_layout.layout_model`).
        name: the C prefix of every symbol (a C identifier).
        external_weights: the weights come from a file read by ``NAME_init``.
        triple, data_layout: the target's (as the kernels').
        batch: the batch argument, when the model takes one (``NAME_run(..., int64_t batch,
            int threads)``, ``NAME_workspace_bytes(int64_t batch)``): ``layout`` is then the
            model's at ``batch.multiple`` and every kernel runs on slices
            (:mod:`polytf.export.batch_layout`), as ``sliced`` (one per call) says.
    """
    builder = _EntryBuilder(layout, name, external_weights, triple, data_layout, batch, sliced)
    with_workspace = builder.run_with_workspace()
    builder.run(with_workspace)
    builder.workspace_bytes()
    builder.init()
    return str(builder.module)
