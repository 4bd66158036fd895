"""The tuning worker chooses its backend once, by the target's name, and never asks which
device it runs on: a fake backend drives it (a fake target, a fake measurement, a device
that breaks on a foreign error)."""

from __future__ import annotations

import multiprocessing
import signal
from dataclasses import dataclass
from typing import ClassVar

from polytf.autotune import worker
from polytf.compiler.backends import Backend
from polytf.config import CodegenConfig, MeasurementConfig
from polytf.poly.scop import Scop
from polytf.runtime.cpu.kernel_bench import Measurement
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe

SCOP = Scop("k_fake", (), ())


class FakeTarget:
    """Compiles a recipe into the recipe itself."""

    def compile(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str]) -> tuple:
        if recipe.unroll == 3:
            raise RuntimeError("the device fell over")
        return (scop.name, recipe, constant_arrays)


@dataclass(frozen=True)
class FakeBackend(Backend):
    """A backend of no real device: its measurement times nothing."""

    name: ClassVar[str] = "fake"
    restarts_after_foreign_error: ClassVar[bool] = True

    def build_model(self, prepared, recipes=None, progress=None, cached=None):
        raise AssertionError("a tuning worker builds no model")

    def kernel_measurer(self, scop, inputs, expected):
        def measure(kernel, config, cutoff_s, timed):
            assert kernel[0] == scop.name and kernel[2] == frozenset({"A1"}) and config.repeats == 4
            return Measurement((1e-3 * self.threads,) if timed else (), None, 0.5)

        return measure


def serve_messages(monkeypatch, messages: list[tuple]) -> list[tuple]:
    """Run the worker's loop in this process on ``messages``; returns its answers."""
    chosen = []

    def select_backend(name, codegen, threads):
        chosen.append((name, threads))
        return FakeBackend(FakeTarget(), threads)

    monkeypatch.setattr(worker, "select_backend", select_backend)
    monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the worker's own SIGINT setting, not this process's
    parent, child = multiprocessing.Pipe()
    for message in messages:
        parent.send(message)
    worker.serve(child)
    answers = []
    while parent.poll():
        answers.append(parent.recv())
    assert chosen == [("fake", 3)]  # chosen once, by name
    return answers


def test_the_worker_measures_through_the_backend_it_chose(monkeypatch):
    kernel = ("kernel", SCOP, {}, {}, 3, MeasurementConfig(repeats=4), CodegenConfig(), frozenset({"A1"}), "fake")
    recipe = CpuRecipe(tile_sizes=(4,)).to_dict()
    answers = serve_messages(monkeypatch, [kernel, ("candidate", recipe, 1.0, False, None), ("candidate", recipe, 1.0, True, None), ("exit",)])
    assert answers == [("ready",), ("measurement", Measurement((3e-3,), None, 0.5)), ("measurement", Measurement((), None, 0.5))]


def test_a_foreign_error_on_a_backend_that_breaks_ends_the_worker(monkeypatch):
    kernel = ("kernel", SCOP, {}, {}, 3, MeasurementConfig(repeats=4), CodegenConfig(), frozenset({"A1"}), "fake")
    broken = CpuRecipe(unroll=3).to_dict()
    answers = serve_messages(monkeypatch, [kernel, ("candidate", broken, 1.0, False, None), ("candidate", broken, 1.0, False, None)])
    (ready, (failure, cause, restart)) = answers  # the second candidate is left to a fresh worker
    assert ready == ("ready",) and failure == "failure" and restart is True
    assert cause.startswith("internal error: RuntimeError: the device fell over")


def test_a_recipe_that_does_not_parse_is_a_failed_candidate(monkeypatch):
    kernel = ("kernel", SCOP, {}, {}, 3, MeasurementConfig(repeats=4), CodegenConfig(), frozenset({"A1"}), "fake")
    answers = serve_messages(monkeypatch, [kernel, ("candidate", {"kind": "tpu", "unroll": 2}, 1.0, False, None), ("exit",)])
    assert answers[1] == ("failure", "ScheduleError: unknown recipe kind 'tpu'; known kinds: cpu, gpu")
