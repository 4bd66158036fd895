"""The memory plan: buffers never live at the same step share an arena without overlapping;
models give bit-identical results with shared and unshared buffers (concatenations placed in
place, residual connections, packed weights), concurrent calls stay correct, and a weight that
kernels read only packed is kept only in its packed form."""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st

from polytf.compiler.kernel_compilation import compile_steps
from polytf.compiler.preparation import PreparedModel
from polytf.graph import Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.plan.binding_plan import scratch_written_whole
from polytf.plan.bindings import CONSTANT, UNREAD, KernelPlan
from polytf.plan.buffer_placement import place_in_consumer_buffers
from polytf.plan.buffers import ALIGNMENT_BYTES
from polytf.plan.memory_plan import BufferLifetime, assign_offsets, buffer_lifetimes
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.schedules.recipe import CpuRecipe
from polytf.targets.cpu import CpuTarget

RNG = np.random.default_rng(11)


def _aligned(nbytes: int) -> int:
    return -(-max(nbytes, 1) // ALIGNMENT_BYTES) * ALIGNMENT_BYTES


def _check(plan, lifetimes):
    """The plan's invariants: aligned offsets, no overlap of buffers live together, an arena
    between the largest set of buffers live at one step and the sum of all of them."""
    assert set(plan.offsets) == {b.key for b in lifetimes}
    assert plan.arena_bytes % ALIGNMENT_BYTES == 0
    for buffer in lifetimes:
        start = plan.offsets[buffer.key]
        assert start % ALIGNMENT_BYTES == 0
        assert start + _aligned(buffer.nbytes) <= plan.arena_bytes
    for i, a in enumerate(lifetimes):
        for b in lifetimes[i + 1 :]:
            if a.overlaps(b):
                a_start, b_start = plan.offsets[a.key], plan.offsets[b.key]
                assert a_start + _aligned(a.nbytes) <= b_start or b_start + _aligned(b.nbytes) <= a_start, (a, b, plan.offsets)
    steps = range(min((b.first_step for b in lifetimes), default=0), max((b.last_step for b in lifetimes), default=-1) + 1)
    live_peak = max((sum(_aligned(b.nbytes) for b in lifetimes if b.first_step <= s <= b.last_step) for s in steps), default=0)
    assert live_peak <= plan.arena_bytes <= sum(_aligned(b.nbytes) for b in lifetimes)


@st.composite
def lifetimes(draw):
    count = draw(st.integers(0, 30))
    steps = draw(st.integers(1, 30))
    result = []
    for index in range(count):
        first = draw(st.integers(0, steps - 1))
        last = draw(st.integers(first, steps - 1))
        result.append(BufferLifetime(f"t{index}", draw(st.integers(0, 5000)), first, last))
    return result


@settings(max_examples=150, deadline=None)
@given(lifetimes())
def test_buffers_live_at_the_same_step_never_overlap(buffers):
    _check(assign_offsets(buffers), buffers)


def test_a_chain_of_layers_needs_two_buffers_not_one_per_layer():
    # t_k is written by step k and read by step k + 1: only neighbours are live together
    chain = [BufferLifetime(f"t{k}", 4096, k, k + 1) for k in range(10)]
    plan = assign_offsets(chain)
    _check(plan, chain)
    assert plan.arena_bytes == 2 * 4096
    assert plan.unshared_bytes == 10 * 4096


def test_a_small_buffer_goes_into_the_gap_a_large_one_left():
    buffers = [
        BufferLifetime("big", 1000 * 64, 0, 1),
        BufferLifetime("long", 100 * 64, 0, 4),
        BufferLifetime("after", 900 * 64, 2, 3),  # fits where "big" was
    ]
    plan = assign_offsets(buffers)
    _check(plan, buffers)
    assert plan.offsets["after"] == plan.offsets["big"]
    assert plan.arena_bytes == 1100 * 64


# -- models ----------------------------------------------------------------------------------


def _conv(name, source, kernel, channels_in, channels_out):
    return [
        const(f"{name}_f", RNG.standard_normal((kernel, kernel, channels_in, channels_out)).astype(np.float32)),
        Node(
            name,
            "Conv2D",
            (source, f"{name}_f:0"),
            attrs={"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)},
        ),
    ]


def densenet_block(layers=3, channels=8, growth=4):
    """Every layer concatenated onto the growing feature map (placed in one buffer), then a Pad
    (placed too) and a VALID convolution."""
    nodes = [placeholder("x", (1, 6, 6, 3)), *_conv("stem", "x:0", 3, 3, channels)]
    previous, width = "stem:0", channels
    for layer in range(layers):
        nodes.append(Node(f"pre{layer}", "Relu", (previous,)))
        nodes += _conv(f"conv{layer}", f"pre{layer}:0", 3, width, growth)
        nodes += [
            const(f"cat{layer}_axis", np.array(3, np.int32)),
            Node(f"cat{layer}", "ConcatV2", (previous, f"conv{layer}:0", f"cat{layer}_axis:0"), attrs={"N": 2}),
        ]
        previous, width = f"cat{layer}:0", width + growth
    nodes += [
        Node("post", "Relu", (previous,)),
        const("paddings", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)),
        Node("pad", "Pad", ("post:0", "paddings:0")),
        const("head_f", RNG.standard_normal((3, 3, width, 5)).astype(np.float32)),
        Node(
            "head",
            "Conv2D",
            ("pad:0", "head_f:0"),
            attrs={"strides": (1, 1, 1, 1), "padding": "VALID", "data_format": "NHWC", "dilations": (1, 1, 1, 1)},
        ),
    ]
    return build_graph(nodes, ["head:0"])


def residual_net(blocks=3, channels=6):
    """x -> conv -> (relu(conv(relu(conv(h)))) + h) x blocks: each block's input lives across it."""
    nodes = [placeholder("x", (1, 8, 8, 3)), *_conv("stem", "x:0", 3, 3, channels)]
    previous = "stem:0"
    for block in range(blocks):
        nodes += _conv(f"a{block}", previous, 3, channels, channels)
        nodes.append(Node(f"ra{block}", "Relu", (f"a{block}:0",)))
        nodes += _conv(f"b{block}", f"ra{block}:0", 1, channels, channels)
        nodes.append(Node(f"add{block}", "AddV2", (f"b{block}:0", previous)))
        nodes.append(Node(f"out{block}", "Relu", (f"add{block}:0",)))
        previous = f"out{block}:0"
    return build_graph(nodes, [previous])


def two_layer_mlp():
    rng = np.random.default_rng(3)
    return build_graph(
        [
            placeholder("x", (8, 24)),
            const("w1", rng.standard_normal((24, 40)).astype(np.float32)),
            const("w2", rng.standard_normal((40, 20)).astype(np.float32)),
            Node("mm1", "MatMul", ("x:0", "w1:0"), attrs={"transpose_a": False, "transpose_b": False}),
            Node("relu1", "Relu", ("mm1:0",)),
            Node("mm2", "MatMul", ("relu1:0", "w2:0"), attrs={"transpose_a": False, "transpose_b": False}),
        ],
        ["mm2:0"],
    )


#: packs both operands of each MatMul into register-tile panels (the weight ahead of time)
PACKED = CpuRecipe(tile_sizes=(4, 16), register_tile_sizes=(4, 8), pack=("A0", "A1"), parallel=True)


@functools.cache
def _models_of(name):
    return _models({"densenet_block": densenet_block, "residual_net": residual_net}[name]())


def _models(graph, recipe=None, place=True):
    """The same compiled steps as a model with shared buffers and one without."""
    groups = partition(graph)
    kernels = tuple(lower_group(graph, group) for group in groups)
    if place:
        groups, kernels = place_in_consumer_buffers(graph, groups, kernels)
    prepared = PreparedModel(graph, groups, kernels, ())
    recipes = {k.scop.name: recipe for k in kernels} if recipe else None
    steps, _ = compile_steps(prepared, recipes, CpuTarget(), 2)
    return CompiledModel(graph, steps, 2, share_buffers=True), CompiledModel(graph, steps, 2, share_buffers=False)


@pytest.mark.parametrize("name", ["densenet_block", "residual_net"])
def test_shared_buffers_give_identical_results_in_a_smaller_workspace(name):
    shared, unshared = _models_of(name)
    _check(shared.memory_plan, list(shared.memory_plan.lifetimes))
    assert shared.workspace_bytes < unshared.workspace_bytes
    with shared._contexts.acquire() as context:  # NaN bytes everywhere: no kernel reads a byte before writing it
        context.arena[...] = 0xFF
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal(tuple(shared.input_types["x"].shape)).astype(np.float32)
        expected, actual = unshared(x=x), shared(x=x)
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name])


def test_a_tensor_placed_in_a_concatenation_lives_as_long_as_the_concatenation():
    shared, _ = _models_of("densenet_block")
    plan = shared.memory_plan
    keys = {b.key for b in plan.lifetimes}
    assert not {"stem:0", "conv0:0", "conv1:0"} & keys  # placed: no buffer of their own
    buffer = next(b for b in plan.lifetimes if b.key == "cat1:0")  # holds stem, conv0 and conv1
    assert buffer.first_step == 0  # the stem kernel writes into it first


def test_concurrent_calls_on_shared_buffers_are_correct():
    shared, unshared = _models_of("residual_net")
    inputs = [np.random.default_rng(seed).standard_normal((1, 8, 8, 3)).astype(np.float32) for seed in range(4)]
    expected = [next(iter(unshared(x=x).values())) for x in inputs]
    results, errors = [], []
    barrier = threading.Barrier(3)

    def work(worker):
        try:
            barrier.wait()
            for call in range(6):
                index = (worker + call) % len(inputs)
                results.append((index, next(iter(shared(x=inputs[index]).values()))))
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    pool = [threading.Thread(target=work, args=(w,)) for w in range(3)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert not errors
    assert len(results) == 18
    for index, value in results:
        np.testing.assert_array_equal(value, expected[index])


def test_a_weight_read_only_packed_is_kept_only_packed():
    graph = two_layer_mlp()
    shared, unshared = _models(graph, PACKED, place=False)
    kernel_plans = [step for step in shared._steps if isinstance(step, KernelPlan)]
    unread = [binding for plan in kernel_plans for binding in plan.bindings if binding.kind == UNREAD]
    assert len(unread) == 2  # w1 and w2: each MatMul reads only its packed panels
    constants = {binding.key for plan in kernel_plans for binding in plan.bindings if binding.kind == CONSTANT}
    assert "w1:0" not in constants and "w2:0" not in constants
    assert "w1:0" not in shared._constants and "w2:0" not in shared._constants
    x = np.random.default_rng(5).standard_normal((8, 24)).astype(np.float32)
    w1, w2 = (np.asarray(graph.constants[name]) for name in ("w1:0", "w2:0"))
    reference = np.maximum(x @ w1, 0) @ w2
    got = shared(x=x)["mm2"]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5 * np.abs(reference).max() + 1e-6)
    np.testing.assert_array_equal(got, unshared(x=x)["mm2"])


def test_lifetimes_cover_every_step_that_binds_a_buffer():
    shared, _ = _models_of("residual_net")
    lifetimes = {b.key: b for b in buffer_lifetimes_of(shared)}
    for position, step in enumerate(shared._steps):
        for binding in getattr(step, "bindings", ()):
            if binding.kind == "intermediate":
                assert lifetimes[binding.key].first_step <= position <= lifetimes[binding.key].last_step


def buffer_lifetimes_of(model):
    from polytf.plan.binding_plan import ModelPlan

    return buffer_lifetimes(ModelPlan(tuple(model._steps), (), model._intermediate_types, (), (), (), {}))


@pytest.mark.parametrize(("rows", "whole"), [(8, True), (7, False)], ids=["full_panels", "partial_panel"])
def test_a_packed_activation_shares_the_arena_only_when_its_copy_writes_every_element(rows, whole):
    rng = np.random.default_rng(rows)
    graph = build_graph(
        [
            placeholder("x", (rows, 24)),
            const("w", rng.standard_normal((24, 40)).astype(np.float32)),
            Node("mm", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
            Node("relu", "Relu", ("mm:0",)),
        ],
        ["relu:0"],
    )
    shared, unshared = _models(graph, PACKED, place=False)
    (step,) = [step for step in shared._steps if isinstance(step, KernelPlan)]
    packed_input = [info.name for info in step.kernel.arrays if info.role == "scratch" and info.tensor.startswith("x:0")]
    assert len(packed_input) == 1  # x packed into panels of 4 rows, in the kernel, on every call
    assert (packed_input[0] in scratch_written_whole(step.kernel)) is whole
    planned = {key for key in shared.memory_plan.offsets if key.startswith("step 0/")}
    assert bool(planned) is whole
    with shared._contexts.acquire() as context:
        context.arena[...] = 0xFF
    x = rng.standard_normal((rows, 24)).astype(np.float32)
    np.testing.assert_array_equal(shared(x=x)["relu"], unshared(x=x)["relu"])
