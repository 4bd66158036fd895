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
