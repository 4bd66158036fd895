"""The compiled-code cache: a warm load links cached object code (no isl, no LLVM) and gives
bit-identical outputs; identical kernels compile once; corrupt, truncated and foreign files
are one CacheWarning each and are recompiled; concurrent loads of one model succeed; worker
processes produce the same object code as this process."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from graphdef_builders import write_dense_chain_graphdef
from hand_built_graphs import (
    graph_broadcast_chain,
    graph_conv_bias_relu,
    graph_depthwise,
    graph_matmul_bias_relu,
    graph_maxpool,
    graph_softmax,
    kernels_of,
)

import polytf
from polytf.compiler import compile_workers
from polytf.compiler.code_cache import KernelCodeCache, verify_objects
from polytf.compiler.kernel_compilation import constant_arrays
from polytf.compiler.kernel_objects import CompileJob, kernel_object
from polytf.compiler.preparation import prepare_model
from polytf.errors import CacheWarning
from polytf.plan import binding_plan
from polytf.plan.bindings import UNREAD
from polytf.plan.constant_layout import ModelConstants
from polytf.schedules import builder
from polytf.schedules.recipe import CpuRecipe
from polytf.storage.object_cache import DEFAULT_RECIPE_SUFFIX, MAGIC, OBJECT_SUFFIX, ObjectCache
from polytf.targets.cpu import CpuTarget

#: 7 layers, 6 distinct kernels (the 32 -> 32 layer twice): enough to use the worker processes
WIDTHS = (16, 32, 32, 32, 24, 40, 8, 12)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """(model path, reference function) of a chain of MatMul+Relu layers."""
    path = tmp_path_factory.mktemp("chain") / "chain.pb"
    weights = write_dense_chain_graphdef(path, WIDTHS)

    def reference(x):
        for w in weights:
            x = np.maximum(x @ w, 0)
        return x

    return path, reference


def _input():
    return np.random.default_rng(1).standard_normal((3, WIDTHS[0])).astype(np.float32)


def _run(path, cache, **kwargs):
    model = polytf.load(path, cache_dir=cache, threads=1, **kwargs)
    return model(h0=_input())[f"h{len(WIDTHS) - 1}"]


def _object_files(cache: Path) -> list[Path]:
    return sorted((cache / "objects").glob(f"*{OBJECT_SUFFIX}"))


def test_a_warm_load_does_no_isl_and_no_llvm_work_and_gives_identical_outputs(chain, tmp_path, monkeypatch):
    path, reference = chain
    cold = _run(path, tmp_path)
    np.testing.assert_allclose(cold, reference(_input()), rtol=1e-5, atol=1e-5)
    assert len(_object_files(tmp_path)) == 6, "one object per distinct kernel"

    def forbidden(*args, **kwargs):
        raise AssertionError("a warm load must not schedule, analyse or compile")

    monkeypatch.setattr(CpuTarget, "compile", forbidden)
    monkeypatch.setattr(CpuTarget, "compile_object", forbidden)
    monkeypatch.setattr(CpuTarget, "search_space", forbidden)
    monkeypatch.setattr(builder, "schedule_scop", forbidden)
    warm = _run(path, tmp_path)
    assert warm.tobytes() == cold.tobytes()


def test_without_the_code_cache_nothing_is_kept_and_outputs_are_the_same(chain, tmp_path, monkeypatch):
    path, _ = chain
    cached = _run(path, tmp_path / "with")
    assert _run(path, tmp_path / "without", compile_cache=False).tobytes() == cached.tobytes()
    assert not (tmp_path / "without" / "objects").exists()
    monkeypatch.setenv("POLYTF_NO_CODE_CACHE", "1")
    assert _run(path, tmp_path / "environment").tobytes() == cached.tobytes()
    assert not (tmp_path / "environment" / "objects").exists()


def test_identical_kernels_compile_once(chain, tmp_path):
    path, _ = chain
    prepared = prepare_model(path)
    target = CpuTarget()
    code_cache = KernelCodeCache(target, 1, ObjectCache(tmp_path))
    kernels = [code_cache(k.scop, code_cache.default_recipe(k), constant_arrays(k)) for k in prepared.kernels]
    assert code_cache.compiled == 6 and code_cache.linked == 0
    second, third = kernels[1], kernels[2]  # the two 32 -> 32 layers
    assert second.function is third.function and second.scop.name != third.scop.name
    assert [a.tensor for a in third.arrays if a.role == "output"] != [a.tensor for a in second.arrays if a.role == "output"]


def _corrupt_first_object(cache: Path, edit) -> Path:
    path = _object_files(cache)[0]
    path.write_bytes(edit(path.read_bytes()))
    return path


def _warnings_of(function) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = function()
    return value, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _other_cpu(data: bytes) -> bytes:
    end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC) : end])
    header["key"]["target"]["cpu"] = "some-other-cpu"
    return MAGIC + json.dumps(header, sort_keys=True).encode() + data[end:]


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (_flip_last_byte, "do not match their SHA-256"),
        (lambda data: data[: len(data) // 2], "a truncated file"),
        (lambda data: b"garbage" + data, "wrong magic"),
        (_other_cpu, "target.cpu is 'some-other-cpu' in the file"),
    ],
    ids=["corrupt", "truncated", "not-an-object", "another-cpu"],
)
def test_an_unusable_object_is_one_warning_then_recompiled(chain, tmp_path, edit, reason):
    path, _ = chain
    expected = _run(path, tmp_path)
    broken = _corrupt_first_object(tmp_path, edit)
    output, messages = _warnings_of(lambda: _run(path, tmp_path))
    assert output.tobytes() == expected.tobytes()
    assert len(messages) == 1 and str(broken) in messages[0] and reason in messages[0], messages
    _, again = _warnings_of(lambda: _run(path, tmp_path))
    assert again == [], "the recompiled object replaced the unusable file"


def test_an_unusable_default_recipe_is_one_warning(chain, tmp_path):
    path, _ = chain
    expected = _run(path, tmp_path)
    memo = sorted((tmp_path / "objects").glob(f"*{DEFAULT_RECIPE_SUFFIX}"))[0]
    memo.write_text("{not json")
    output, messages = _warnings_of(lambda: _run(path, tmp_path))
    assert output.tobytes() == expected.tobytes()
    assert len(messages) == 1 and str(memo) in messages[0] and "not valid JSON" in messages[0]


def test_verify_reports_corrupt_and_foreign_objects(chain, tmp_path):
    path, _ = chain
    _run(path, tmp_path)
    objects = ObjectCache(tmp_path)
    assert {check.status for check in verify_objects(objects, CpuTarget())} == {"ok"}
    files = _object_files(tmp_path)
    files[0].write_bytes(_flip_last_byte(files[0].read_bytes()))
    files[1].write_bytes(_other_cpu(files[1].read_bytes()))
    statuses = {check.entry.path: check.status for check in verify_objects(objects, CpuTarget())}
    assert statuses[files[0]] == "failed" and statuses[files[1]] == "failed", "an edited key no longer matches its digest"
    assert objects.clear() == len(statuses) and not _object_files(tmp_path)


_LOAD_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np, polytf
    model = polytf.load(sys.argv[1], cache_dir=sys.argv[2], threads=1)
    x = np.random.default_rng(1).standard_normal((3, int(sys.argv[3]))).astype(np.float32)
    np.save(sys.argv[4], model(h0=x)[sys.argv[5]])
    """
)


def test_two_processes_loading_one_model_into_an_empty_cache_both_succeed(chain, tmp_path):
    path, reference = chain
    cache = tmp_path / "cache"
    output = f"h{len(WIDTHS) - 1}"
    processes = [
        subprocess.Popen([sys.executable, "-c", _LOAD_SCRIPT, str(path), str(cache), str(WIDTHS[0]), str(tmp_path / f"out{i}.npy"), output], stderr=subprocess.PIPE)
        for i in range(2)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr.decode()
        assert b"Warning" not in stderr, stderr.decode()
    first, second = (np.load(tmp_path / f"out{i}.npy") for i in range(2))
    assert first.tobytes() == second.tobytes()
    np.testing.assert_allclose(first, reference(_input()), rtol=1e-5, atol=1e-5)
    assert {check.status for check in verify_objects(ObjectCache(cache), CpuTarget())} == {"ok"}


def test_worker_processes_make_the_same_object_code_as_this_process(chain, monkeypatch):
    path, _ = chain
    prepared = prepare_model(path)
    target = CpuTarget()
    defaults = KernelCodeCache(target, 1, None)
    jobs = [CompileJob(k.scop, defaults.default_recipe(k), constant_arrays(k)) for k in prepared.kernels]
    monkeypatch.setattr(compile_workers, "worker_count", lambda jobs: 2)  # two workers even on one CPU
    results = list(compile_workers.compile_objects(target, jobs))
    assert sorted(jobs.index(job) for job, _ in results) == list(range(len(jobs))) and all(entry is not None for _, entry in results)
    for job, entry in results:
        here = kernel_object(target.compile(job.scop, job.recipe, job.constant_arrays))
        assert entry.object_code == here.object_code and pickle.loads(entry.facts) == pickle.loads(here.facts)


class _OrderRecordingTarget(CpuTarget):
    """Records the Scop of each kernel this process compiles, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def compile(self, scop, recipe, constant_arrays=frozenset()):
        self.order.append(scop.name)
        return super().compile(scop, recipe, constant_arrays)


def test_the_costliest_jobs_are_compiled_first(monkeypatch):
    """Longest processing time first: a rewriting algorithm first, then more statements first,
    the model's order among equals."""
    target = _OrderRecordingTarget()
    defaults = KernelCodeCache(target, 1, None)
    kernels = [kernels_of(graph)[0] for graph in (graph_broadcast_chain(), graph_softmax(), graph_conv_bias_relu(), graph_maxpool())]
    jobs = [CompileJob(k.scop, defaults.default_recipe(k), constant_arrays(k)) for k in kernels]
    monkeypatch.setattr(compile_workers, "worker_count", lambda jobs: 0)  # this process alone: the queue's order
    list(compile_workers.compile_objects(target, jobs))
    expected = sorted(jobs, key=lambda job: (job.recipe.algorithm != "direct", len(job.scop.statements)), reverse=True)
    assert target.order == [job.scop.name for job in expected]
    assert target.order != [job.scop.name for job in jobs]  # the model's order was not the costliest first


def test_ctrl_c_during_a_parallel_compile_keeps_what_was_compiled_and_stops_the_workers(chain, tmp_path, monkeypatch):
    path, _ = chain
    prepared = prepare_model(path)
    code_cache = KernelCodeCache(CpuTarget(), 1, ObjectCache(tmp_path))
    jobs = [CompileJob(k.scop, code_cache.default_recipe(k), constant_arrays(k)) for k in prepared.kernels]
    started = []
    original = compile_workers._Worker.__init__

    def remember(self, target):
        original(self, target)
        started.append(self.process)

    monkeypatch.setattr(compile_workers._Worker, "__init__", remember)
    monkeypatch.setattr(compile_workers, "worker_count", lambda jobs: 1)

    def interrupt(done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        code_cache.prefetch(code_cache.missing(jobs), interrupt)
    assert len(_object_files(tmp_path)) == 2, "each finished kernel is kept at once"
    assert started and all(process.poll() is not None for process in started), "the workers are stopped"


@pytest.mark.parametrize("with_digest", [True, False], ids=["edited entry", "older entry without a SHA-256"])
def test_a_default_recipe_invalid_for_its_kernel_is_one_warning(chain, tmp_path, with_digest):
    path, _ = chain
    expected = _run(path, tmp_path)
    for memo in (tmp_path / "objects").glob(f"*{DEFAULT_RECIPE_SUFFIX}"):
        value = json.loads(memo.read_text())
        assert len(value["sha256"]) == 64  # an entry checks itself
        value["recipe"]["register_tile_sizes"] = [7, 7, 7, 7, 7, 7]  # wrong length for every kernel
        if not with_digest:
            del value["sha256"]  # then the recipe is checked against its kernel
        memo.write_text(json.dumps(value))
    output, messages = _warnings_of(lambda: _run(path, tmp_path))
    assert output.tobytes() == expected.tobytes()
    reason = "its SHA-256 does not match its recipe" if with_digest else "its recipe cannot be used"
    assert len(messages) == 6 and all(reason in message for message in messages), messages


@pytest.mark.parametrize("graph", [graph_conv_bias_relu(), graph_maxpool(), graph_softmax(), graph_depthwise(), graph_broadcast_chain()], ids=["conv", "maxpool", "softmax", "depthwise", "broadcast"])
def test_a_remembered_default_recipe_gives_the_same_key(graph, tmp_path):
    # a later process reads the default recipe back: its object key must be the one the
    # first process stored the object under, or every warm load would compile again
    target = CpuTarget()
    for kernel in kernels_of(graph):
        first = KernelCodeCache(target, 2, ObjectCache(tmp_path))
        recipe = first.default_recipe(kernel)
        later = KernelCodeCache(target, 2, ObjectCache(tmp_path))
        remembered = later.default_recipe(kernel)
        assert remembered == recipe
        arrays = constant_arrays(kernel)
        assert later.key(kernel.scop, remembered, arrays).digest() == first.key(kernel.scop, recipe, arrays).digest()


def test_a_cache_that_cannot_be_written_is_one_warning(chain, tmp_path):
    path, reference = chain
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory should be")
    output, messages = _warnings_of(lambda: _run(path, blocked))
    np.testing.assert_allclose(output, reference(_input()), rtol=1e-5, atol=1e-5)
    assert len(messages) == 1 and "compiled kernels are not kept" in messages[0] and str(blocked) in messages[0], messages


@pytest.mark.parametrize(
    "graph, recipe",
    [
        (graph_matmul_bias_relu(13, 9, 21), CpuRecipe(tile_sizes=(12, 32), register_tile_sizes=(6, 16), pack=("A1",), parallel=True)),
        (graph_conv_bias_relu(8, 8, 3, 16, stride=1), CpuRecipe(tile_sizes=(1, 2, 8, 16), register_tile_sizes=(0, 0, 4, 16), pad=True, pack=("A1",), parallel=True)),
    ],
    ids=["packed-matmul", "padded-conv"],
)
def test_a_kernel_from_the_cache_brings_the_facts_its_model_plan_needs(graph, recipe, tmp_path, monkeypatch):
    (kernel,) = kernels_of(graph)
    target = CpuTarget()
    compiled = KernelCodeCache(target, 1, ObjectCache(tmp_path))(kernel.scop, recipe, constant_arrays(kernel))
    assert compiled.inputs_read_ahead_only is None and compiled.scratch_written_whole is None  # compiled here: worked out by the plan
    unread, whole = binding_plan.arrays_read_ahead_only(compiled), binding_plan.scratch_written_whole(compiled)
    assert "A1" in unread  # the weights: only their packing reads them
    cached = KernelCodeCache(target, 1, ObjectCache(tmp_path))(kernel.scop, recipe, constant_arrays(kernel))
    assert cached.inputs_read_ahead_only == unread and cached.scratch_written_whole == whole

    def forbidden(*args, **kwargs):
        raise AssertionError("the plan of cached kernels must not apply the data-layout transformations again")

    monkeypatch.setattr(binding_plan, "kernel_code_scop", forbidden)
    plan = binding_plan.plan_model(graph, [(kernel, cached)], "model.pb", ModelConstants(graph, "model.pb").packed)
    (step,) = plan.kernel_plans
    slots = {info.name: binding.kind for info, binding in zip(cached.arrays, step.bindings)}
    assert slots["A1"] == UNREAD
    assert plan.scratch_written_whole == {0: whole}
