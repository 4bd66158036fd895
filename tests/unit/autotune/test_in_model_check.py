"""The tuner's final choice timed inside the model: fake models and in-model timings for the
decision rule, one real tune + load with injected in-model timings for the records."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polytf
from polytf.autotune import in_model_check, model_tuner
from polytf.autotune.in_model_check import ModelTimings, alternating_timings, check_in_model, kernel_verdicts
from polytf.autotune.tuner import KernelTuningResult
from polytf.targets.cpu import CpuTarget


@dataclass
class FakeModel:
    """A model whose kernels take made-up times: ``kernel_s`` name -> seconds per call."""

    kept: frozenset
    kernel_s: dict
    overhead_s: float = 0.0


def fake_timer(calls: int = 5):
    """Timings of the fake models (no noise), and the pairs timed."""
    timed = []

    def timer(default: FakeModel, tuned: FakeModel) -> ModelTimings:
        timed.append((default.kept, tuned.kept))
        per_call = {
            model_id: sum(model.kernel_s.values()) + model.overhead_s for model_id, model in (("d", default), ("t", tuned))
        }
        return ModelTimings(
            (per_call["d"],) * calls,
            (per_call["t"],) * calls,
            {name: (s,) * calls for name, s in default.kernel_s.items()},
            {name: (s,) * calls for name, s in tuned.kernel_s.items()},
        )

    timer.timed = timed
    return timer


def fake_build(groups: dict, default_s: dict, tuned_s: dict, overhead_s: float = 0.0):
    """``build(kept)``: kernels of kept groups take ``tuned_s``, the others ``default_s``; the
    models built (remembered, as the tuner does)."""
    built = {}

    def build(kept: frozenset) -> FakeModel:
        if kept not in built:
            times = {name: (tuned_s if group in kept else default_s)[name] for group, names in groups.items() for name in names}
            extra = overhead_s.get(kept, 0.0) if isinstance(overhead_s, dict) else (overhead_s if kept else 0.0)
            built[kept] = FakeModel(kept, times, extra)
        return built[kept]

    build.built = built
    return build


def test_a_recipe_that_wins_alone_but_loses_inside_the_model_is_rejected():
    groups = {"a": ["k0", "k2"], "b": ["k1"]}  # k0 and k2 identical: one record
    default_s = {"k0": 2e-3, "k1": 2e-3, "k2": 2e-3}
    tuned_s = {"k0": 1e-3, "k1": 3e-3, "k2": 1.5e-3}  # b won alone (in the tuner) but loses here
    build, timer = fake_build(groups, default_s, tuned_s), fake_timer()
    decision = check_in_model(groups, build, timer, build(frozenset()))
    assert decision.kept == {"a"} and decision.rejected == {"b"}
    assert decision.group_latency_s["a"] == pytest.approx((4e-3, 2.5e-3))
    assert decision.group_latency_s["b"] == pytest.approx((2e-3, 3e-3))
    # every recipe, those that won kernel by kernel, then those again (the confirmation)
    assert timer.timed == [(frozenset(), frozenset({"a", "b"})), (frozenset(), frozenset({"a"})), (frozenset(), frozenset({"a"}))]
    assert decision.all_tuned_latency_s == pytest.approx(5.5e-3)
    assert decision.tuned_latency_s == pytest.approx(4.5e-3) and decision.default_latency_s == pytest.approx(6e-3)
    assert not decision.rejected_as_a_whole and decision.calls == 15


def test_recipes_that_win_kernel_by_kernel_but_not_as_a_whole_are_all_rejected():
    groups = {"a": ["k0"], "b": ["k1"]}
    default_s, tuned_s = {"k0": 2e-3, "k1": 2e-3}, {"k0": 1.9e-3, "k1": 1.9e-3}
    build = fake_build(groups, default_s, tuned_s, overhead_s=1e-3)  # e.g. a tuned model's time between its kernels
    decision = check_in_model(groups, build, fake_timer(), build(frozenset()))
    assert decision.rejected_as_a_whole
    assert decision.kept == frozenset() and decision.rejected == {"a", "b"}
    assert decision.tuned_latency_s == decision.default_latency_s == pytest.approx(4e-3)  # the model kept is the default one


def test_of_the_sets_timed_the_one_that_beats_the_default_model_by_the_most_is_kept():
    """Kernel by kernel ``b`` loses, but the model with every tuned recipe is the fastest as a
    whole (its kernels' times do not add up to its calls: here an overhead of the model with
    ``a`` alone): every recipe is kept."""
    groups = {"a": ["k0"], "b": ["k1"]}
    build = fake_build(groups, {"k0": 2e-3, "k1": 2e-3}, {"k0": 1e-3, "k1": 2.1e-3}, overhead_s={frozenset({"a"}): 2e-3})
    timer = fake_timer()
    decision = check_in_model(groups, build, timer, build(frozenset()))
    # every recipe, those that won kernel by kernel, then every recipe again (the confirmation)
    assert timer.timed == [(frozenset(), frozenset({"a", "b"})), (frozenset(), frozenset({"a"})), (frozenset(), frozenset({"a", "b"}))]
    assert decision.kept == {"a", "b"} and decision.rejected == frozenset()
    assert decision.tuned_latency_s == pytest.approx(3.1e-3) and decision.default_latency_s == pytest.approx(4e-3)


def test_a_model_that_cannot_time_its_kernels_is_judged_as_a_whole():
    groups = {"a": ["k0"], "b": ["k1"]}
    build = fake_build(groups, {"k0": 2e-3, "k1": 2e-3}, {"k0": 1e-3, "k1": 2.5e-3})

    def whole_calls_only(default, tuned):
        timings = fake_timer()(default, tuned)
        return ModelTimings(timings.default_call_s, timings.tuned_call_s)

    decision = check_in_model(groups, build, whole_calls_only, build(frozenset()))
    assert decision.kept == {"a", "b"} and decision.group_latency_s == {}  # 3.5 ms < 4 ms as a whole


def test_kernels_outside_the_groups_keep_their_recipe_and_the_default_model_is_timed_apart():
    groups = {"a": ["k0"]}
    build = fake_build(groups, {"k0": 2e-3}, {"k0": 3e-3})
    default_model = FakeModel(frozenset({"all default"}), {"k0": 2e-3, "k9": 1e-3})  # not build(frozenset())
    decision = check_in_model(groups, build, fake_timer(), default_model)
    assert decision.rejected == {"a"}
    # the model kept (build(frozenset())) is not the default model: its own figure is reported
    assert decision.tuned_latency_s == pytest.approx(2e-3) and decision.default_latency_s == pytest.approx(3e-3)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from("abcdef"),
        st.tuples(st.floats(1e-6, 1e-2), st.floats(1e-6, 1e-2), st.integers(1, 3)),
        min_size=0,
        max_size=6,
    ),
    st.floats(0.0, 1e-2),
)
def test_the_model_kept_is_never_slower_than_the_default_one(costs, overhead_s):
    """Whatever the in-model times, the kept groups are those that win there, and the model
    kept is never slower than the default model on the timings the decision saw."""
    groups = {group: [f"{group}{index}" for index in range(count)] for group, (_, _, count) in costs.items()}
    default_s = {name: costs[group][0] for group, names in groups.items() for name in names}
    tuned_s = {name: costs[group][1] for group, names in groups.items() for name in names}
    build = fake_build(groups, default_s, tuned_s, overhead_s)
    decision = check_in_model(groups, build, fake_timer(), build(frozenset()))
    assert decision.tuned_latency_s <= decision.default_latency_s
    assert decision.kept | decision.rejected == set(groups) and not decision.kept & decision.rejected
    winners = {group for group, (default, tuned, _) in costs.items() if tuned < default}
    assert decision.kept in (winners, set(groups), frozenset())
    if decision.kept:
        assert decision.tuned_latency_s < decision.default_latency_s
        # every group kept: only where the groups that lose kernel by kernel cost nothing as a whole
        assert decision.kept == winners or all(costs[group][1] <= costs[group][0] for group in groups)
    else:
        assert decision.tuned_latency_s == decision.default_latency_s


@dataclass
class CountingModel:
    """A model for :func:`alternating_timings`: kernels ``k0`` (a host step between) ``k1``."""

    name: str
    log: list
    call_s: float = 1e-3
    step_kinds: tuple = ("kernel", "host", "kernel")
    kernels: tuple = field(
        default_factory=lambda: tuple(type("K", (), {"scop": type("S", (), {"name": n})})() for n in ("k0", "k1"))
    )

    def latency_s(self, inputs, repeats=20, warmup=3):
        return [self.call_s] * repeats

    def timed_calls(self, inputs, repeats=10, warmup=2):
        self.log.append((self.name, repeats, warmup))
        timing = type("CallTiming", (), {"call_s": self.call_s, "step_s": (self.call_s / 2, 0.0, self.call_s / 4)})
        return [timing] * repeats


def test_alternating_blocks_swap_their_order_and_time_every_kernel():
    log = []
    timings = alternating_timings(CountingModel("default", log), CountingModel("tuned", log, call_s=5e-4), {}, blocks=4, calls=10)
    assert [name for name, _, _ in log] == ["default", "tuned", "tuned", "default"] * 2
    assert all(repeats == 20 and warmup == 1 for _, repeats, warmup in log)  # 20 calls of 1 ms fill MINIMUM_BLOCK_S
    assert len(timings.default_call_s) == len(timings.tuned_call_s) == 4 * 20
    assert timings.default_s == 1e-3 and timings.tuned_s == 5e-4
    assert set(timings.tuned_kernel_s) == {"k0", "k1"} and statistics.median(timings.tuned_kernel_s["k1"]) == pytest.approx(
        1.25e-4
    )
    assert kernel_verdicts(timings, {"g": ["k0", "k1"], "missing": ["k7"]}) == {"g": pytest.approx((7.5e-4, 3.75e-4))}


def test_slow_models_get_the_protocols_calls_per_block():
    log = []
    alternating_timings(
        CountingModel("default", log, call_s=0.05), CountingModel("tuned", log, call_s=0.05), {}, blocks=2, calls=10
    )
    assert [repeats for _, repeats, _ in log] == [10] * 4


@pytest.mark.parametrize(
    "one_call_s, shape",
    [(1e-3, (12, 20)), (1e-6, (12, 1000)), (0.07, (12, 10)), (0.5, (6, 3)), (5.0, (4, 3)), (0.0, (12, 1000))],
)
def test_a_round_of_a_slow_model_is_cut_short(one_call_s, shape):
    """ResNet50 at 70 ms keeps the protocol (12 blocks of 10 calls, 17 s); at 0.5 s a call the
    round is cut to about 20 s, never below 4 blocks of 3 calls."""
    assert in_model_check.block_shape(one_call_s, 12, 10) == shape


# relu(relu(a @ b) @ c): two MatMul+Relu kernels of different shapes (as in tests/cli/test_time_budget.py)
TWO_MATMULS_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 5 } dim { size: 24 } } } } }
node { name: "c" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 24 } dim { size: 9 } } } } }
node { name: "mm1" op: "MatMul" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "r1" op: "Relu" input: "mm1" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "mm2" op: "MatMul" input: "r1" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm2" attr { key: "T" value { type: DT_FLOAT } } }
"""


def test_a_rejected_recipe_is_not_what_polytf_load_runs(tmp_path, monkeypatch):
    """Tune (a fake tuner that "finds" a non-default recipe for each kernel), inject in-model
    timings in which the second kernel's recipe loses: its record then holds the default recipe,
    ``polytf.load`` runs the default recipe there and the tuned one on the first kernel, and the
    report says so."""
    model = tmp_path / "two_matmuls.pbtxt"
    model.write_text(TWO_MATMULS_PBTXT)
    cache = tmp_path / "cache"
    target, threads = CpuTarget(), 1

    def other_recipe(kernel):
        space = target.search_space(kernel.scop, threads)
        default = space.default_recipe()
        return next(recipe for recipe in [space.plain_recipe(), *space.heuristic_recipes()] if recipe != default)

    tuned = {}

    def fake_tune_kernel(kernel, target, trials, **settings):
        tuned[kernel.scop.name] = other_recipe(kernel)
        return KernelTuningResult(tuned[kernel.scop.name], 1e-6, 2e-6, trials, trials_here=trials)

    def fake_timings(default, tuned_model, inputs, blocks=in_model_check.BLOCKS, calls=in_model_check.CALLS_PER_BLOCK, round_s=in_model_check.ROUND_S):
        """The second kernel's tuned recipe loses inside the model, the first one's wins."""

        def seconds(model):
            second = {name: index for index, name in enumerate(sorted(model.recipes))}
            return {
                name: (1.0 if model.recipes[name] == default.recipes[name] else (0.5 if second[name] == 0 else 1.5)) * 1e-3
                for name in model.recipes
            }

        default_s, tuned_s = seconds(default), seconds(tuned_model)
        return ModelTimings(
            (sum(default_s.values()),) * 3,
            (sum(tuned_s.values()),) * 3,
            {k: (s,) * 3 for k, s in default_s.items()},
            {k: (s,) * 3 for k, s in tuned_s.items()},
        )

    monkeypatch.setattr(model_tuner, "tune_kernel", fake_tune_kernel)
    monkeypatch.setattr(model_tuner, "alternating_timings", fake_timings)
    report = polytf.tune(model, trials=2, cache_dir=cache, threads=threads)
    first, second = sorted(tuned)
    rows = {row.kernel: row for row in report.kernels}
    assert rows[first].in_model == "kept" and rows[second].in_model == "rejected"
    assert rows[first].in_model_default_s == pytest.approx(1e-3) and rows[first].in_model_tuned_s == pytest.approx(0.5e-3)
    assert report.rejected_in_model == (second,) and not report.rejected_as_a_whole
    assert report.model_default_latency_s == pytest.approx(2e-3) and report.model_tuned_latency_s == pytest.approx(1.5e-3)
    assert report.model_all_tuned_latency_s == pytest.approx(2e-3)

    loaded = polytf.load(model, cache_dir=cache, threads=threads)
    defaults = {
        name: target.search_space(kernel.scop, threads).default_recipe()
        for name, kernel in ((k.scop.name, k) for k in loaded.kernels)
    }
    assert loaded.recipes[first] == tuned[first] != defaults[first]
    assert loaded.recipes[second] == defaults[second] != tuned[second]

    again = polytf.tune(model, trials=2, cache_dir=cache, threads=threads)  # the records are complete: reused, not judged again
    assert {row.status for row in again.kernels} == {"cached"} and not any(row.in_model for row in again.kernels)


def test_the_ratio_pairs_each_tuned_block_with_the_default_block_beside_it():
    """The machine slows down for the last blocks (and once during a tuned block): block by
    block the tuned model stays 5% faster, where the medians of all calls would say 2.9x slower."""
    timings = ModelTimings((1.0, 1.0, 1.0, 3.0, 3.0), (0.95, 0.95, 2.9, 2.85, 2.85), calls_per_block=1)
    assert timings.tuned_s / timings.default_s == pytest.approx(2.85)
    assert timings.ratio == pytest.approx(0.95)
    two_calls = ModelTimings((1.0, 1.2, 3.0, 3.2), (0.9, 1.1, 2.9, 3.1), calls_per_block=2)
    assert two_calls.ratio == pytest.approx(statistics.median([1.0 / 1.1, 3.0 / 3.1]))


def test_a_gain_within_the_noise_of_the_measurement_is_not_kept():
    groups = {"a": ["k0"]}
    slight = fake_build(groups, {"k0": 1e-3}, {"k0": (1 - in_model_check.MINIMUM_GAIN / 2) * 1e-3})
    assert check_in_model(groups, slight, fake_timer(), slight(frozenset())).kept == frozenset()
    clear = fake_build(groups, {"k0": 1e-3}, {"k0": (1 - 2 * in_model_check.MINIMUM_GAIN) * 1e-3})
    assert check_in_model(groups, clear, fake_timer(), clear(frozenset())).kept == {"a"}


def test_polytf_tune_prints_the_verdicts_and_the_in_model_latencies(capsys):
    from polytf.autotune.model_tuner import KernelReport, TuneReport
    from polytf.cli.tune import print_tune_report

    kept = KernelReport(
        "k0_conv",
        ("Conv2D",),
        2e-3,
        1e-3,
        8,
        0,
        "tuned",
        "tiles 8x8",
        in_model="kept",
        in_model_default_s=1.5e-3,
        in_model_tuned_s=1.2e-3,
    )
    rejected = KernelReport(
        "k1_conv",
        ("Conv2D",),
        2e-3,
        2e-3,
        8,
        0,
        "tuned",
        "default",
        in_model="rejected",
        in_model_default_s=1e-3,
        in_model_tuned_s=1.3e-3,
    )
    report = TuneReport(
        "m.pb", [kept, rejected], model_default_latency_s=3e-3, model_tuned_latency_s=2.5e-3, model_all_tuned_latency_s=2.9e-3
    )
    report.rejected_in_model, report.model_timing_calls, report.model_timing_s = ("k1_conv",), 120, 4.2
    print_tune_report(report)
    out = capsys.readouterr().out
    assert "in the model" in out and "kept (1.50 ms -> 1.20 ms)" in out and "rejected (1.00 ms -> 1.30 ms)" in out
    assert "model latency: default 3.00 ms -> tuned 2.50 ms (1.20x) (timed inside the model; 120 calls of each" in out
    assert "rejected inside the model: 1 kernel (k1_conv): their tuned recipe lost to the default one there" in out


def test_a_gain_that_the_confirmation_round_does_not_see_again_is_not_kept():
    """The first round of every tuned recipe shows a 5% gain (a quiet spell during the tuned
    blocks), the confirmation round none: nothing is kept, and the default model's figure is
    reported for both; where the confirmation sees the gain again, the set is kept with the
    confirmation's figures."""
    groups = {"a": ["k0"]}
    build = fake_build(groups, {"k0": 1e-3}, {"k0": 0.95e-3})
    for second_tuned_s, kept in ((1e-3, frozenset()), (0.96e-3, frozenset({"a"}))):
        noise_free = fake_timer()
        seen = []

        def timer(default, tuned):
            timings = noise_free(default, tuned)
            seen.append(tuned.kept)
            if len(seen) == 2:  # the confirmation: what the tuned model really takes
                return ModelTimings(timings.default_call_s, (second_tuned_s,) * len(timings.tuned_call_s))
            return timings

        decision = check_in_model(groups, build, timer, build(frozenset()))
        assert seen == [frozenset({"a"}), frozenset({"a"})]
        assert decision.kept == kept
        if kept:
            assert decision.tuned_latency_s == pytest.approx(second_tuned_s)
        else:
            assert decision.tuned_latency_s == decision.default_latency_s and decision.rejected == {"a"}
