"""The CPU bench's timing rounds: tuned, untuned, kernels-only and baseline rounds alternate;
a tuned model that is the untuned one (no tuned recipe kept) is timed once per round for both."""

from __future__ import annotations

import pytest

from polytf.bench import cpu_bench
from polytf.bench.cpu_bench import CpuBenchRun
from polytf.bench.options import BenchOptions


class CountingModel:
    """A model whose calls are counted; each call of a model takes its own fixed time."""

    def __init__(self, name: str, calls: list[str]):
        self.name, self.calls = name, calls

    def __call__(self, **inputs):
        self.calls.append(self.name)

    def latency_s(self, inputs, repeats, warmup):
        return [1e-3] * repeats


class FakeWorker:
    def request(self, message):
        assert message["op"] == "round"
        return {"median_s": {"numpy": 2e-3}}


class QuietDisplay:
    def advance(self):
        pass


@pytest.fixture
def timed_rounds(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_bench, "SETTLE_S", 0.0)
    run = CpuBenchRun(BenchOptions(rounds=3, repeats=4, warmup=1), backend=None, workdir=tmp_path)

    def rounds(model, untuned):
        return run.time_rounds(model, untuned, {}, FakeWorker(), ["numpy"], QuietDisplay())

    return rounds


def test_a_tuned_model_distinct_from_the_untuned_one_gets_rounds_of_its_own(timed_rounds):
    calls: list[str] = []
    rounds = timed_rounds(CountingModel("tuned", calls), CountingModel("untuned", calls))
    assert calls.count("tuned") == calls.count("untuned") == 3 * (4 + 1)
    assert len(rounds["polytf"]) == len(rounds["polytf_untuned"]) == len(rounds["numpy"]) == 3
    assert rounds["numpy"] == [2e-3] * 3 and rounds["polytf_kernels"] == [1e-3] * 3


def test_the_untuned_model_itself_as_the_tuned_one_is_timed_once_for_both(timed_rounds):
    calls: list[str] = []
    model = CountingModel("same", calls)
    rounds = timed_rounds(model, model)
    assert len(calls) == 3 * (4 + 1)  # one polytf round per round, not two
    assert rounds["polytf_untuned"] == rounds["polytf"] and len(rounds["polytf"]) == 3


def test_a_round_given_more_calls_times_that_many_of_every_system(timed_rounds, tmp_path, monkeypatch):
    calls: list[str] = []
    requests: list[dict] = []

    class RecordingWorker(FakeWorker):
        def request(self, message):
            requests.append(message)
            return super().request(message)

    run = CpuBenchRun(BenchOptions(rounds=2, repeats=4, warmup=1), backend=None, workdir=tmp_path)
    run.time_rounds(CountingModel("tuned", calls), CountingModel("untuned", calls), {}, RecordingWorker(), ["numpy"], QuietDisplay(), 25)
    assert calls.count("tuned") == calls.count("untuned") == 2 * (25 + 1)
    assert [r["repeats"] for r in requests] == [25, 25]


@pytest.mark.parametrize(
    ("latency_s", "repeats", "min_round_s", "expected"),
    [
        (16e-3, 10, 0.2, 13),  # a 16 ms model: 13 calls fill 0.2 s, more than 10
        (0.13, 10, 0.2, 10),  # a slow model keeps --repeats
        (0.6e-3, 10, 0.2, 334),  # a sub-millisecond model: a few hundred calls
        (1e-7, 10, 0.2, cpu_bench.MAX_CALLS_PER_ROUND),  # capped
        (0.6e-3, 10, 0.0, 10),  # 0: --repeats only
        (float("nan"), 10, 0.2, 10),  # no usable probe: --repeats
    ],
)
def test_calls_per_round_fill_the_minimum_round_time(latency_s, repeats, min_round_s, expected):
    assert cpu_bench.calls_per_round(latency_s, repeats, min_round_s) == expected
