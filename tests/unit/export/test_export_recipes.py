"""Property: for any search-space recipes, the exported model computes bit for bit what the
JIT-compiled model computes with the same recipes and thread count (the object's machine code
comes from the same optimised IR), and its buffers are laid out without overlap."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytf.compiler.build_options import BuildOptions
from polytf.compiler.kernel_compilation import compile_steps
from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import prepare_model
from polytf.config import CodegenConfig
from polytf.export import compile_model
from polytf.export.kernel_code import linkable_kernel
from polytf.export.model_layout import ALIGNMENT_BYTES, WORKSPACE_HEADER_BYTES, layout_model
from polytf.targets.cpu import CpuTarget

THREADS = 2


@pytest.fixture(scope="module")
def conv_model(frozen_model):
    path = frozen_model("conv_bias_relu")
    return path, prepare_model(path)


def draw_recipes(data, prepared, target):
    recipes = {}
    for kernel in prepared.kernels:
        space = target.search_space(kernel.scop, THREADS)
        recipes[kernel.scop.name] = space.recipe({name: data.draw(st.sampled_from(choices), label=f"{kernel.scop.name}.{name}") for name, choices in space.dimensions})
    return recipes


@pytest.mark.tensorflow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_exported_model_equals_jit_model_for_random_recipes(conv_model, tmp_path_factory, data):
    path, prepared = conv_model
    target = CpuTarget(CodegenConfig())
    recipes = draw_recipes(data, prepared, target)
    directory = tmp_path_factory.mktemp("export")
    exported = compile_model(path, directory, BuildOptions(threads=THREADS, cache_dir=directory / "cache"), recipes=recipes)
    assert exported.recipes == recipes
    jit = build_model(prepared, recipes, target=target, threads=THREADS)
    shape = exported.inputs[0].shape
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = jit(input=x)["Identity"]
    library = ctypes.CDLL(str(exported.shared_library_path))
    run = getattr(library, f"{exported.name}_run")
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    for threads in (1, THREADS):
        out = np.full(exported.outputs[0].shape, np.nan, np.float32)
        assert run(x.ctypes.data, out.ctypes.data, threads) == 0
        np.testing.assert_array_equal(out, expected)
    # a workspace full of NaN bytes gives the same outputs: no kernel reads a workspace byte before it (or the
    # entry function, which zeroes the scratch arrays of a new workspace) writes it
    with_workspace = getattr(library, f"{exported.name}_run_with_workspace")
    with_workspace.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    raw = np.full(exported.workspace_bytes + 64, 0xFF, np.uint8)
    workspace = raw[(-raw.ctypes.data) % 64 :]
    for _ in range(2):
        out = np.full(exported.outputs[0].shape, np.nan, np.float32)
        assert with_workspace(x.ctypes.data, out.ctypes.data, workspace.ctypes.data, THREADS) == 0
        np.testing.assert_array_equal(out, expected)


@pytest.mark.tensorflow
def test_layout_gives_every_buffer_its_own_aligned_bytes(frozen_model):
    path = frozen_model("cifar_cnn")
    prepared = prepare_model(path)
    target = CpuTarget()
    steps, _ = compile_steps(prepared, None, target, THREADS, compiler=linkable_kernel(target))
    layout = layout_model(prepared.graph, steps, path.name)
    regions = sorted((offset, offset + nbytes) for _, offset, nbytes in layout.workspace_entries)
    assert regions[0][0] >= WORKSPACE_HEADER_BYTES and regions[-1][1] <= layout.workspace_bytes
    assert all(start % ALIGNMENT_BYTES == 0 for start, _ in regions)
    # buffers share memory only when never live at the same step (the memory plan's arena); scratch has its own
    plan = layout.memory_plan
    lifetimes = {b.key: b for b in plan.lifetimes}
    entries = [(key, offset, offset + nbytes) for key, offset, nbytes in layout.workspace_entries]
    for i, (key, start, end) in enumerate(entries):
        for other, other_start, other_end in entries[i + 1 :]:
            if start < other_end and other_start < end:
                assert key in lifetimes and other in lifetimes and not lifetimes[key].overlaps(lifetimes[other]), (key, other)
    assert layout.arena_offset + plan.arena_bytes <= layout.workspace_bytes
    weights = sorted((offset, offset + nbytes) for _, offset, nbytes in layout.weight_entries)
    assert all(end <= start for (_, end), (start, _) in zip(weights, weights[1:])) and weights[-1][1] == len(layout.weights)
    constants = prepared.graph.constants
    for key, offset, nbytes in layout.weight_entries:
        assert offset % ALIGNMENT_BYTES == 0
        if key in constants:
            stored = np.frombuffer(layout.weights, np.uint8, nbytes, offset)
            assert stored.tobytes() == np.ascontiguousarray(constants[key], dtype=prepared.graph.types[key].dtype).tobytes()
    assert layout.tag % 2 == 1  # never 0: a zeroed header is a new workspace
