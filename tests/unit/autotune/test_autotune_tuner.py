"""The tuner with a fake measurer and a seeded sampler, and with real measurements."""

from __future__ import annotations

import optuna
import pytest

from polytf.autotune.tuner import tune_kernel
from polytf.config import MeasurementConfig
from polytf.errors import TuningError
from polytf.runtime.cpu.kernel_bench import Measurement
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()


def fake_latency(recipe: ScheduleRecipe) -> float:
    """A made-up cost model: vectorising by 8 and tiling d1 by 4 are best."""
    cost = 10.0
    cost -= 3.0 if recipe.vector_width == 8 else 0.0
    cost -= 2.0 if recipe.tile_sizes and recipe.tile_sizes[-1] == 4 else 0.0
    cost -= 0.5 if recipe.point_order[-1:] == ("d1",) else 0.0
    return cost * 1e-6


def fake_evaluator(calls):
    def evaluate(recipe):
        calls.append(recipe)
        if recipe.unroll == 8:
            return "CompileError: pretend LLVM failed"
        return Measurement((fake_latency(recipe),) * 3)

    return evaluate


def test_finds_the_best_of_what_it_measured_and_counts_failures(small_kernels):
    kernel = small_kernels("matmul_bias_relu")[0]
    calls, trials = [], []
    result = tune_kernel(kernel, TARGET, trials=40, threads=2, seed=1, evaluator=fake_evaluator(calls), on_trial=lambda n, r, m, f, b: trials.append((r, f)))
    measured = [fake_latency(r) for r in calls if r.unroll != 8]
    assert result.best_latency_s == pytest.approx(min(measured))
    assert result.default_latency_s == pytest.approx(fake_latency(TARGET.search_space(kernel.scop, 2).default_recipe()))
    assert result.trials == 40
    failed = [r for r, f in trials if f is not None]
    assert len(failed) > 0 and all(r.unroll == 8 for r in failed)
    assert len(result.failures) == len(failed)
    assert all("pretend LLVM failed" in f for f in result.failures)
    assert result.best_latency_s < result.default_latency_s


def test_seeded_sampler_is_deterministic(small_kernels):
    kernel = small_kernels("matmul_bias_relu")[0]
    first, second = [], []
    tune_kernel(kernel, TARGET, trials=15, threads=2, seed=7, evaluator=fake_evaluator(first))
    tune_kernel(kernel, TARGET, trials=15, threads=2, seed=7, evaluator=fake_evaluator(second))
    assert first == second


def test_study_resumes_from_storage(small_kernels, tmp_path):
    kernel = small_kernels("matmul_bias_relu")[0]
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    calls = []
    tune_kernel(kernel, TARGET, trials=6, threads=2, seed=0, storage=storage, study_name="k", evaluator=fake_evaluator(calls))
    again = []
    result = tune_kernel(kernel, TARGET, trials=6, threads=2, seed=0, storage=storage, study_name="k", evaluator=fake_evaluator(again))
    assert len(again) == 1  # only the default baseline; no new trial
    assert result.trials == 6
    more = []
    result = tune_kernel(kernel, TARGET, trials=9, threads=2, seed=0, storage=storage, study_name="k", evaluator=fake_evaluator(more))
    assert result.trials == 9
    restarted = tune_kernel(kernel, TARGET, trials=4, threads=2, seed=0, storage=storage, study_name="k", restart=True, evaluator=fake_evaluator([]))
    assert restarted.trials == 4
    assert len(optuna.load_study(study_name="k", storage=storage).trials) == 4


def test_broken_default_is_a_tuning_error(small_kernels):
    kernel = small_kernels("softmax")[0]
    with pytest.raises(TuningError, match="default recipe fails"):
        tune_kernel(kernel, TARGET, trials=2, threads=1, evaluator=lambda recipe: "verification failed: pretend")


def test_real_tuning_verifies_and_improves(small_kernels):
    kernel = small_kernels("conv_same_stride2")[0]
    seen = []
    result = tune_kernel(
        kernel, TARGET, trials=6, threads=2, seed=0, measurement=MeasurementConfig(repeats=3, min_repeat_s=0.0), on_trial=lambda n, r, m, f, b: seen.append((n, m, f))
    )
    assert len(seen) == 6
    assert result.best_latency_s <= result.default_latency_s
    assert all(m is not None or f for _, m, f in seen)


def test_a_parameter_set_another_tuner_measured_is_not_timed_again(small_kernels, tmp_path):
    kernel = small_kernels("matmul_bias_relu")[0]
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    tune_kernel(kernel, TARGET, trials=5, threads=2, seed=0, storage=storage, study_name="k", evaluator=fake_evaluator([]))
    study = optuna.load_study(study_name="k", storage=storage)
    default = TARGET.search_space(kernel.scop, 2).default_recipe()
    measured = next(t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and ScheduleRecipe.from_dict(t.user_attrs["recipe"]) != default)
    study.enqueue_trial(measured.params)  # the next trial proposes the same parameters again
    calls = []  # a second tuner (its own process: nothing measured yet)
    result = tune_kernel(kernel, TARGET, trials=6, threads=2, seed=0, storage=storage, study_name="k", evaluator=fake_evaluator(calls))
    assert calls == [default], "only its own baseline is measured"
    repeated = optuna.load_study(study_name="k", storage=storage).trials[5]
    assert repeated.params == measured.params and repeated.value == measured.value
    assert repeated.user_attrs["measured_in"] == measured.number
    assert result.trials == 6
