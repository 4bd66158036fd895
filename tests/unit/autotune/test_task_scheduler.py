"""The task scheduler's allocation, fed fake tasks (latency curves) on a fake clock."""

from __future__ import annotations

import math

import pytest

from polytf.autotune.task_scheduler import Task, TaskScheduler


def steady(start_s: float, rate: float):
    """Best latency after t trials: improves by ``rate`` (a fraction) every trial."""
    return lambda trials: start_s * (1 - rate) ** trials


def converged(start_s: float):
    """Nothing beats the default recipe."""
    return lambda trials: start_s


def simulate(tasks, curves, trial_s, budget_s, seed=0, **options):
    """Run the scheduler against ``curves`` (trials -> best latency) where a trial of task i
    takes ``trial_s[i]`` seconds (the baseline slice twice as long: worker start-up);
    returns (scheduler, slices handed out, seconds used)."""
    scheduler = TaskScheduler(tasks, seed=seed, **options)
    clock, slices, trials = 0.0, [], [0] * len(tasks)
    while (chosen := scheduler.next_slice(budget_s - clock)) is not None:
        index = chosen.task
        trials[index] += chosen.trials
        seconds = chosen.trials * trial_s[index] * (2 if chosen.baseline else 1)
        clock += seconds
        slices.append(chosen)
        scheduler.observe(
            index,
            trials=trials[index],
            trials_run=chosen.trials,
            seconds=seconds,
            best_latency_s=curves[index](trials[index]),
            default_latency_s=curves[index](0) if chosen.baseline else None,
        )
    return scheduler, slices, clock


def test_every_task_gets_its_baseline_first_in_order():
    tasks = [Task(f"k{i}") for i in range(4)]
    curves = [steady(1e-3, 0.02), converged(1e-4), steady(5e-4, 0.05), converged(2e-3)]
    scheduler, slices, _ = simulate(tasks, curves, [0.1] * 4, budget_s=20.0)
    assert [(s.task, s.baseline, s.trials) for s in slices[:4]] == [(i, True, 1) for i in range(4)]
    assert not any(s.baseline for s in slices[4:])
    assert all(p.trials >= 1 and p.default_latency_s > 0 for p in scheduler.progress)


def test_a_big_task_with_steady_gains_gets_more_trials():
    tasks = [Task("small"), Task("big", count=4)]
    curves = [steady(1e-3, 0.03), steady(1e-3, 0.03)]
    scheduler, _, _ = simulate(tasks, curves, [0.1, 0.1], budget_s=8.0)
    small, big = scheduler.progress
    assert big.trials > 2 * small.trials
    assert small.trials > 1  # still explored


def test_a_converged_task_gets_fewer_trials():
    tasks = [Task("converged"), Task("improving")]
    curves = [converged(1e-3), steady(1e-3, 0.01)]
    scheduler, _, _ = simulate(tasks, curves, [0.1, 0.1], budget_s=30.0)
    stuck, improving = scheduler.progress
    assert improving.trials > stuck.trials
    assert stuck.trials > 1  # explored before it is found converged


def test_the_budget_is_respected_with_uneven_trial_costs():
    tasks = [Task("cheap"), Task("dear", count=3), Task("middle")]
    curves = [steady(1e-4, 0.02), steady(1e-3, 0.02), steady(5e-4, 0.01)]
    trial_s = [0.05, 1.3, 0.4]
    for budget_s in (0.5, 3.0, 17.0, 60.0):
        scheduler, slices, used = simulate(tasks, curves, trial_s, budget_s)
        # every slice was expected to fit; only a first baseline of unknown cost may overrun
        # (the tuner then stops its candidate at the budget's end)
        clock = 0.0
        for chosen in slices:
            assert chosen.expected_s <= budget_s - clock
            actual = chosen.trials * trial_s[chosen.task] * (2 if chosen.baseline else 1)
            if not chosen.baseline:  # known costs: exact, or overestimated from the baseline slice
                assert actual <= chosen.expected_s + 1e-9
            clock += actual
        assert used <= budget_s + 2 * max(trial_s)
        assert scheduler.next_slice(budget_s - used) is None
        # it stopped because nothing fits, not early
        left = budget_s - used
        assert all(scheduler.trial_s(i) * (1 if math.isnan(p.best_latency_s) else 3) > left for i, p in enumerate(scheduler.progress) if not p.retired)


def test_the_budget_is_met_exactly_when_costs_are_known():
    tasks = [Task(f"k{i}", count=i + 1) for i in range(3)]
    curves = [steady(1e-3, 0.02)] * 3
    for budget_s in (0.05, 1.0, 7.3, 30.0):
        _, _, used = simulate(tasks, curves, [0.1] * 3, budget_s)
        assert used <= budget_s + 0.2  # the first baseline (0.2 s) is the only unknown


def test_a_spent_budget_starts_nothing():
    scheduler = TaskScheduler([Task("k")])
    assert scheduler.next_slice(0.0) is None
    assert scheduler.next_slice(-1.0) is None


def test_a_task_stops_at_the_size_of_its_space():
    tasks = [Task("tiny", count=10, max_trials=5), Task("other")]
    curves = [steady(1e-3, 0.1), steady(1e-4, 0.01)]
    scheduler, slices, _ = simulate(tasks, curves, [0.1, 0.1], budget_s=10.0)
    assert scheduler.progress[0].trials == 5 and scheduler.progress[0].retired
    assert sum(s.trials for s in slices if s.task == 0) == 5


def test_retired_tasks_get_no_slices():
    scheduler = TaskScheduler([Task("a"), Task("b")])
    scheduler.retire(0)
    chosen = scheduler.next_slice(10.0)
    assert chosen.task == 1
    scheduler.retire(1)
    assert scheduler.next_slice(10.0) is None


def test_seeded_choices_are_deterministic_and_epsilon_explores():
    tasks = [Task("a", count=5), Task("b"), Task("c")]
    curves = [steady(1e-3, 0.02), converged(1e-4), converged(1e-4)]
    first = simulate(tasks, curves, [0.1] * 3, budget_s=40.0, seed=3, epsilon=0.3)[1]
    second = simulate(tasks, curves, [0.1] * 3, budget_s=40.0, seed=3, epsilon=0.3)[1]
    assert first == second
    greedy = simulate(tasks, curves, [0.1] * 3, budget_s=40.0, seed=3, epsilon=0.0)[1]
    exploring = [s.task for s in first[3:]]
    assert [s.task for s in greedy[3:]] != exploring and exploring.count(1) + exploring.count(2) > 0


def test_the_gain_is_the_weight_times_a_rate():
    scheduler = TaskScheduler([Task("a", count=3)], window_trials=3)
    assert scheduler.gain(0) == math.inf  # no baseline yet
    scheduler.observe(0, trials=1, trials_run=1, seconds=1.0, best_latency_s=1e-3, default_latency_s=1e-3)
    assert scheduler.weight(0) == pytest.approx(3e-3)
    assert scheduler.backward_rate(0) == 0.0
    scheduler.observe(0, trials=4, trials_run=3, seconds=0.3, best_latency_s=0.7e-3)
    assert scheduler.backward_rate(0) == pytest.approx(0.3e-3 / 3)  # from trial 1 to trial 4
    assert scheduler.trial_s(0) == pytest.approx(0.1)  # the slices after the baseline
    expected = 3 * (0.2 * 0.1e-3 + 0.8 * scheduler.forward_rate(0))
    assert scheduler.gain(0) == pytest.approx(expected)


def test_a_similar_faster_task_makes_a_slow_one_look_promising():
    tasks = [Task("fast", family="conv", work=1000.0), Task("slow", family="conv", work=1000.0), Task("alone", work=1000.0)]
    scheduler = TaskScheduler(tasks, beta=1.0)
    for index, latency_s in enumerate((1e-4, 1e-3, 1e-3)):
        scheduler.observe(index, trials=30, trials_run=30, seconds=3.0, best_latency_s=latency_s, default_latency_s=latency_s)
    # the similar task's throughput says "slow" could be 10x faster; "alone" has no such hint
    assert scheduler.forward_rate(1) > 10 * scheduler.forward_rate(2)
