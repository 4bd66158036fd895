""""A tuning record's recipe, else the default one" is one function
(:func:`compile_with_record`): ``polytf.load``, ``run``, ``compile`` and ``show`` all take it.
A usable record is compiled; an unusable one warns once, naming the record, and the kernel
gets its default recipe; an explicit recipe comes before any record."""

from __future__ import annotations

import warnings

import pytest
from graphdef_builders import write_matmul_graphdef

from polytf.compiler.kernel_compilation import (
    KernelCompilation,
    compile_steps,
    compile_with_record,
    constant_arrays,
    default_recipe,
)
from polytf.compiler.preparation import prepare_model
from polytf.compiler.recorded_recipes import CachedRecipe
from polytf.errors import CacheWarning, PolytfError
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.compile_driver import EmittedKernel, emit_kernel
from polytf.targets.cpu import CpuTarget

THREADS = 2
#: legal for the MatMul kernel [6, 32] x [32, 96]
TUNED = ScheduleRecipe.from_dict({"tile_sizes": [3, 32], "vector_width": 8})
#: schema-valid, but not for a two-loop kernel
ILLEGAL = ScheduleRecipe.from_dict({"tile_sizes": [3, 32, 4]})
TARGET = CpuTarget()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "matmul.pb"
    write_matmul_graphdef(path, 6, 32, 96)
    return prepare_model(path)


def compiled_with_warnings(kernel, cached, rejected=None, compiler=None) -> tuple[KernelCompilation, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compilation = compile_with_record(kernel, cached, TARGET, THREADS, compiler, rejected)
    return compilation, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def test_without_a_record_the_default_recipe(prepared):
    (kernel,) = prepared.kernels
    compilation, caught = compiled_with_warnings(kernel, None)
    assert caught == [] and not compilation.from_record
    assert compilation.recipe == default_recipe(kernel, THREADS, TARGET)
    assert compilation.code.recipe == compilation.recipe


def test_a_usable_record_is_compiled(prepared):
    (kernel,) = prepared.kernels
    compilation, caught = compiled_with_warnings(kernel, CachedRecipe(TUNED, "record.json"))
    assert caught == [] and compilation.from_record and compilation.recipe == TUNED


def test_an_unusable_record_warns_once_and_gives_the_default_recipe(prepared):
    (kernel,) = prepared.kernels
    rejected: set = set()
    compilation, caught = compiled_with_warnings(kernel, CachedRecipe(ILLEGAL, "bad.json"), rejected)
    assert not compilation.from_record and compilation.recipe == default_recipe(kernel, THREADS, TARGET)
    (message,) = caught
    assert "bad.json" in message and "its recipe cannot be used" in message and kernel.scop.name in message
    assert rejected == {"bad.json"}
    again, caught = compiled_with_warnings(kernel, CachedRecipe(ILLEGAL, "bad.json"), rejected)  # a kernel sharing the record
    assert caught == [] and not again.from_record


def test_the_kernel_compiler_is_a_parameter(prepared):
    """``polytf show`` emits (schedule, AST, code) instead of compiling, with the same choice."""
    (kernel,) = prepared.kernels

    def emit(scop, recipe, constants):
        assert constants == constant_arrays(kernel)
        return emit_kernel(scop, recipe, TARGET, constants)

    compilation, _ = compiled_with_warnings(kernel, CachedRecipe(TUNED, "record.json"), compiler=emit)
    assert isinstance(compilation.code, EmittedKernel) and compilation.recipe == TUNED


def test_a_failing_default_recipe_is_an_error_naming_the_kernel(prepared):
    (kernel,) = prepared.kernels

    def fail(scop, recipe, constants):
        raise PolytfError("no code today")

    with pytest.raises(PolytfError, match=f"while compiling kernel {kernel.scop.name} \\(MatMul\\): no code today"):
        compile_with_record(kernel, None, TARGET, THREADS, fail)


def test_compile_steps_takes_an_explicit_recipe_before_the_record(prepared):
    (kernel,) = prepared.kernels
    name = kernel.scop.name
    cached = {name: CachedRecipe(TUNED, "record.json")}
    steps, tuned = compile_steps(prepared, None, TARGET, THREADS, cached=cached)
    assert tuned == (name,) and steps[0][1].recipe == TUNED
    explicit = default_recipe(kernel, THREADS, TARGET)
    steps, tuned = compile_steps(prepared, {name: explicit}, TARGET, THREADS, cached=cached)
    assert tuned == () and steps[0][1].recipe == explicit
