"""What LLVM makes of a kernel module is one copy of each loop nest: the body is not inlined
into each of the entry points that call it (the entry, its OpenMP worker, the slices entries),
and a vectorised loop gets no second, narrower vector loop for its remainder (LLVM's
epilogue vectorisation, off: :func:`polytf.targets.cpu._vectorised_epilogues_off`). Both
cost code-generation time for the same speed (:mod:`polytf.targets.llvm_codegen`)."""

from __future__ import annotations

import re

from hand_built_graphs import graph_broadcast_chain, graph_softmax, kernels_of

from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()


def _compiled(graph):
    (kernel,) = kernels_of(graph)
    recipe = TARGET.search_space(kernel.scop, 2).default_recipe()
    return TARGET.compile(kernel.scop, recipe)


def test_the_body_is_compiled_once_and_called_by_every_entry():
    kernel = _compiled(graph_broadcast_chain())  # a small elementwise body: LLVM inlined it wherever it was called
    body = re.escape(f"{kernel.symbol}_body")
    assert len(re.findall(rf'define internal [^@\n]*@"?{body}"?\(', kernel.llvm_ir)) == 1
    # the entry (or its worker) and the two slices entries (a block of runs per thread, all threads per run)
    assert len(re.findall(rf'call [^@\n]*@"?{body}"?\(', kernel.llvm_ir)) >= 3


def test_a_vectorised_loop_gets_no_vectorised_epilogue():
    kernel = _compiled(graph_softmax(rows=6, columns=37))  # rows of 37: a remainder at any vector width
    assert "vector.body" in kernel.llvm_ir  # the loops are vectorised ...
    assert "vec.epilog" not in kernel.llvm_ir  # ... with a scalar remainder only
