"""A CompiledModel called from many threads at once: bit-for-bit the single-threaded
results, one execution context per call in flight, and the caller's arrays converted
exactly once."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, graph_conv_bias_relu, placeholder

from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.errors import ShapeError
from polytf.graph import Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.schedules.recipe import CpuRecipe


def two_layer_mlp():
    """x[8, 24] -> MatMul(24x40) + BiasAdd + Relu -> MatMul(40x20) + BiasAdd: two kernels with
    an intermediate tensor between them."""
    rng = np.random.default_rng(3)
    return build_graph(
        [
            placeholder("x", (8, 24)),
            const("w1", rng.standard_normal((24, 40)).astype(np.float32)),
            const("b1", rng.standard_normal(40).astype(np.float32)),
            const("w2", rng.standard_normal((40, 20)).astype(np.float32)),
            const("b2", rng.standard_normal(20).astype(np.float32)),
            Node("mm1", "MatMul", ("x:0", "w1:0"), attrs={"transpose_a": False, "transpose_b": False}),
            Node("bias1", "BiasAdd", ("mm1:0", "b1:0"), attrs={"data_format": "NHWC"}),
            Node("relu1", "Relu", ("bias1:0",)),
            Node("mm2", "MatMul", ("relu1:0", "w2:0"), attrs={"transpose_a": False, "transpose_b": False}),
            Node("bias2", "BiasAdd", ("mm2:0", "b2:0"), attrs={"data_format": "NHWC"}),
        ],
        ["bias2:0"],
    )


def compile_with(graph, recipe_for, threads=2):
    groups = partition(graph)
    kernels = tuple(lower_group(graph, g) for g in groups)
    prepared = PreparedModel(graph, groups, kernels, ())
    return build_model(prepared, {k.scop.name: recipe_for(k) for k in kernels}, threads=threads)


#: packs both operands into register-tile panels: every kernel has scratch arrays
PACKED = CpuRecipe(tile_sizes=(4, 16), register_tile_sizes=(4, 8), pack=("A0", "A1"), parallel=True)


def hammer(model, inputs, threads: int, calls: int):
    """Call ``model`` ``calls`` times from each of ``threads`` threads; returns
    {(thread, call): output} and the exceptions raised."""
    results, errors = {}, []
    barrier = threading.Barrier(threads)

    def work(worker: int) -> None:
        try:
            barrier.wait()
            for call in range(calls):
                x = inputs[(worker + call) % len(inputs)]
                results[(worker, call)] = (worker + call) % len(inputs), next(iter(model(x=x).values()))
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    pool = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return results, errors


@pytest.mark.parametrize("packed", [False, True], ids=["default", "packed"])
def test_concurrent_calls_are_bit_identical_to_single_threaded_calls(packed):
    graph = two_layer_mlp()
    model = compile_with(graph, (lambda k: PACKED) if packed else (lambda k: CpuRecipe(parallel=True)))
    if packed:
        assert all(kernel.scratch_arrays for kernel in model.kernels)
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((8, 24)).astype(np.float32) for _ in range(5)]
    expected = [next(iter(model(x=x).values())) for x in inputs]
    reference = np.maximum(inputs[0] @ graph.constants["w1:0"] + graph.constants["b1:0"], 0) @ graph.constants["w2:0"] + graph.constants["b2:0"]
    np.testing.assert_allclose(expected[0], reference, rtol=1e-4, atol=1e-4)
    results, errors = hammer(model, inputs, threads=4, calls=60)
    assert not errors
    assert len(results) == 240
    differing = [key for key, (index, out) in results.items() if not np.array_equal(out, expected[index])]
    assert differing == []
    assert 1 <= model.context_count <= 4


def test_padded_convolution_is_reentrant():
    graph = graph_conv_bias_relu(h=9, w=7, c=3, o=8, stride=1)
    model = compile_with(graph, lambda k: CpuRecipe(pad=True, parallel=True) if k.scop.ops[0][1] == "Conv2D" else CpuRecipe())
    assert any(kernel.scratch_arrays for kernel in model.kernels)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((1, 9, 7, 3)).astype(np.float32) for _ in range(3)]
    expected = [next(iter(model(x=x).values())) for x in inputs]
    results, errors = hammer(model, inputs, threads=3, calls=30)
    assert not errors
    assert all(np.array_equal(out, expected[index]) for index, out in results.values())


class ShapeShifter:
    """An array-like whose ``__array__`` answers a different shape on every call."""

    def __init__(self, shapes):
        self.shapes = list(shapes)
        self.calls = 0

    def __array__(self, dtype=None, copy=None):
        shape = self.shapes[min(self.calls, len(self.shapes) - 1)]
        self.calls += 1
        return np.ones(shape, dtype=dtype or np.float32)


def test_inputs_are_converted_once_and_the_checked_array_is_the_one_read():
    graph = two_layer_mlp()
    model = compile_with(graph, lambda k: CpuRecipe())
    honest_first = ShapeShifter([(8, 24), (1, 1)])
    out = next(iter(model(x=honest_first).values()))
    assert honest_first.calls == 1
    np.testing.assert_array_equal(out, next(iter(model(x=np.ones((8, 24), np.float32)).values())))
    tiny_first = ShapeShifter([(1, 1), (8, 24)])
    with pytest.raises(ShapeError, match="input 'x' has shape \\(1, 1\\)"):
        model(x=tiny_first)
    with pytest.raises(ShapeError, match="input 'x' cannot be converted"):
        model(x=[[1.0, 2.0], [3.0]])
