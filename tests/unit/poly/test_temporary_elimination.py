"""Temporary elimination (polytf.poly.temporary_elimination): fewer arrays, same results.

Each case lowers a hand-built graph twice, with and without the rewrite, runs both Scops
with the reference interpreter on the same inputs and compares every output bit for bit
(the rewrite reorders no arithmetic: an inlined body is the same float32 operations).
"""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, kernels_of, placeholder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polytf.lowering.lowered_kernel as lowering
from polytf.graph import Node
from polytf.poly.interpreter import interpret
from polytf.poly.temporary_elimination import eliminate_temporaries


def _kernel_pair(monkeypatch, graph):
    """(kernel lowered as the compiler does, the same group's Scop before the rewrite)."""
    (kernel,) = kernels_of(graph)
    with monkeypatch.context() as patch:
        patch.setattr(lowering, "eliminate_temporaries", lambda scop: scop)
        (plain,) = kernels_of(graph)
    return kernel, plain.scop


def _run_both(kernel, original, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {}
    for info in original.arrays:
        if info.role == "input":
            inputs[info.name] = kernel.constant_values.get(info.name, rng.standard_normal(info.shape).astype(np.float32))
    after, before = interpret(kernel.scop, inputs), interpret(original, inputs)
    for info in original.arrays:
        if info.role == "output":
            assert np.array_equal(after[info.name], before[info.name]), info.tensor
            assert np.isfinite(after[info.name]).all()
    return after


def _temporaries(scop):
    return [a.name for a in scop.arrays if a.role == "temporary"]


def test_conv_bias_residual_relu_keeps_no_temporary(monkeypatch):
    rng = np.random.default_rng(3)
    graph = build_graph(
        [
            placeholder("x", (1, 6, 5, 4)),
            placeholder("residual", (1, 6, 5, 8)),
            const("f", rng.standard_normal((3, 3, 4, 8)).astype(np.float32)),
            const("b", rng.standard_normal(8).astype(np.float32)),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs={"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}),
            Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("add", "AddV2", ("residual:0", "bias:0")),
            Node("relu", "Relu", ("add:0",)),
        ],
        ["relu:0"],
    )
    kernel, original = _kernel_pair(monkeypatch, graph)
    assert len(_temporaries(original)) == 3
    assert _temporaries(kernel.scop) == []
    (output,) = kernel.output_arrays
    # init, contraction and one in-place epilogue, all writing the output
    assert [s.write.array for s in kernel.scop.statements] == [output.name] * 3
    assert kernel.scop.statements[-1].is_reduction is True  # reads the element it rewrites
    _run_both(kernel, original)


def _matmul_bias_then(rng, *nodes):
    return [
        placeholder("x", (5, 7)),
        const("w", rng.standard_normal((7, 6)).astype(np.float32)),
        const("b", rng.standard_normal(6).astype(np.float32)),
        Node("mm", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
        Node("bias", "BiasAdd", ("mm:0", "b:0"), attrs={"data_format": "NHWC"}),
        *nodes,
    ]


def test_cheap_temporary_read_twice_is_inlined(monkeypatch):
    """x * sigmoid(x) (swish) reads the BiasAdd twice: an addition evaluated twice costs less
    than a tensor written and read back, so no temporary is left."""
    rng = np.random.default_rng(4)
    graph = build_graph(
        _matmul_bias_then(rng, Node("gate", "Sigmoid", ("bias:0",)), Node("swish", "Mul", ("bias:0", "gate:0"))),
        ["swish:0"],
    )
    kernel, original = _kernel_pair(monkeypatch, graph)
    assert len(_temporaries(original)) == 3
    assert _temporaries(kernel.scop) == []
    (output,) = kernel.output_arrays
    assert [s.write.array for s in kernel.scop.statements] == [output.name] * 3  # init, MatMul, epilogue
    _run_both(kernel, original)


def test_expensive_temporary_read_twice_is_kept(monkeypatch):
    """tanh(x) * tanh(x): a tanh read twice keeps its temporary (it would be computed twice)."""
    rng = np.random.default_rng(4)
    graph = build_graph(
        _matmul_bias_then(rng, Node("t", "Tanh", ("bias:0",)), Node("square", "Mul", ("t:0", "t:0"))),
        ["square:0"],
    )
    kernel, original = _kernel_pair(monkeypatch, graph)
    writers = [s for s in kernel.scop.statements if s.write.array in _temporaries(kernel.scop)]
    assert any("tanh" in str(s.value) for s in writers)  # the tanh writes its temporary once
    assert sum(str(s.value).count("tanh") for s in kernel.scop.statements) == 1
    _run_both(kernel, original)


def test_nothing_to_eliminate_returns_the_same_scop(monkeypatch):
    graph = build_graph(
        [placeholder("x", (2, 3)), placeholder("y", (2, 3)), Node("sum", "AddV2", ("x:0", "y:0"))], ["sum:0"]
    )
    kernel, original = _kernel_pair(monkeypatch, graph)
    assert eliminate_temporaries(original) is original
    assert kernel.scop == original


_UNARY = ("Relu", "Sigmoid", "Tanh", "Neg", "Relu6")
_BINARY = ("AddV2", "Mul", "Sub")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chain=st.lists(st.one_of(st.sampled_from(_UNARY), st.tuples(st.sampled_from(_BINARY), st.sampled_from(("side", "bias", "self")))), min_size=1, max_size=5),
    reduce_first=st.booleans(),
)
def test_random_pointwise_chains_keep_their_results(monkeypatch, chain, reduce_first):
    """Random chains of element-wise nodes after a MatMul (or on a placeholder): the
    rewrite never changes an output, and leaves no temporary that only one point-wise
    statement reads at its own index."""
    rng = np.random.default_rng(5)
    nodes = [placeholder("x", (4, 6)), placeholder("side", (4, 6)), const("b", rng.standard_normal(6).astype(np.float32))]
    if reduce_first:
        nodes += [const("w", rng.standard_normal((6, 6)).astype(np.float32)), Node("n0", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False})]
    else:
        nodes += [Node("n0", "Relu", ("x:0",))]
    previous = "n0:0"
    for position, link in enumerate(chain, start=1):
        name = f"n{position}"
        if isinstance(link, str):
            nodes.append(Node(name, link, (previous,)))
        else:
            op, other = link
            if other == "bias":
                nodes.append(Node(name, "BiasAdd", (previous, "b:0"), attrs={"data_format": "NHWC"}))
            else:
                nodes.append(Node(name, op, (previous, "side:0" if other == "side" else previous)))
        previous = f"{name}:0"
    graph = build_graph(nodes, [previous])
    kernels = kernels_of(graph)
    with monkeypatch.context() as patch:
        patch.setattr(lowering, "eliminate_temporaries", lambda scop: scop)
        plain = kernels_of(graph)
    for kernel, original in zip(kernels, plain):
        _run_both(kernel, original.scop)
        for info in kernel.scop.arrays:
            if info.role != "temporary":
                continue
            readers = [s for s in kernel.scop.statements if any(a.array == info.name for a in s.reads)]
            loads = [a for s in readers for a in s.reads if a.array == info.name]
            writers = [s for s in kernel.scop.statements if s.write.array == info.name]
            assert len(readers) > 1 or len(loads) > 1 or len(writers) > 1 or writers[0].is_reduction, (info, str(kernel.scop.statements))


@pytest.mark.parametrize("batch", [1, 2])
def test_compiled_kernel_matches_the_reference(monkeypatch, batch):
    """The rewritten Conv2D + BiasAdd + Relu6 kernel, compiled with its default recipe."""
    from polytf.config import MeasurementConfig
    from polytf.runtime.cpu.kernel_bench import KernelBench
    from polytf.schedules.search_space import SearchSpace
    from polytf.targets.cpu import CpuTarget

    rng = np.random.default_rng(6)
    graph = build_graph(
        [
            placeholder("x", (batch, 9, 8, 16)),
            const("f", rng.standard_normal((3, 3, 16, 40)).astype(np.float32)),
            const("b", rng.standard_normal(40).astype(np.float32)),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs={"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}),
            Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu", "Relu6", ("bias:0",)),
        ],
        ["relu:0"],
    )
    (kernel,) = kernels_of(graph)
    assert _temporaries(kernel.scop) == []
    target = CpuTarget()
    recipe = SearchSpace.for_scop(kernel.scop, 2).default_recipe()
    compiled = target.compile(kernel.scop, recipe, frozenset(kernel.constant_values))
    bench = KernelBench(kernel, seed=1)
    error, _ = bench.verify(compiled, 2, MeasurementConfig(rtol=1e-4, atol_scale=1e-5))
    assert error is None, error
