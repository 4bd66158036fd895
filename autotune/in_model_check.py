"""The tuner's final choice timed inside the model: a tuned recipe is kept only where it wins there.

A kernel is tuned alone, in a worker process, its arrays flushed from the caches before each
timed call. Inside the model it runs after its producer, which left its input hot in the
caches and evicted its weights, on threads that the kernels before it just used: a recipe that
wins alone can lose there (and the other way round), and the sum of the kernels' gains is not
the model's. So after the tuning, the model with the default recipes and the model with
the tuned ones — both built from the tuning records exactly as ``polytf.load`` builds them —
are timed against each other, and a tuned recipe is kept only where it wins inside the model:

1. whole calls of the two models alternate in blocks (:func:`alternating_timings`: ``blocks``
   blocks of ``calls`` calls each, the order of the two models swapped every block, so that
   drift of the machine falls on both alike), with the time of every kernel inside each call
   (:meth:`~polytf.runtime.cpu.compiled_model.CompiledModel.timed_calls`: each kernel finds
   the caches as the kernels before it left them);
2. each group of identical kernels (one tuning record) keeps its tuned recipe only where the
   median of its kernels' in-model time beats the default recipe's (:func:`kernel_verdicts`);
3. the model with only those recipes is timed against the default model in a round of its own;
   of the two sets timed (every tuned recipe, and those that won kernel by kernel) the one whose
   model beats the default model by the larger ratio (:attr:`ModelTimings.ratio`: block by
   block, each tuned block against the default block next to it, median over the blocks) is
   kept, and if neither beats it by :data:`MINIMUM_GAIN`, no tuned recipe is kept
   (:func:`check_in_model`): a tuned model is never slower than its untuned one by what this
   measurement can see;
4. the set kept is timed against the default model once more, in a round of its own, and
   stays kept only if it beats it there too, by :data:`CONFIRMATION_GAIN`: the set was chosen
   because its round was the best, so that round's gain is biased upwards (the winner's curse);
   a second round is not. The figures reported are the second round's.

The medians over all calls of a model are the "default -> tuned" latencies ``polytf tune``
prints. A model that cannot time its kernels inside a call (one without ``timed_calls``) is
judged as a whole only: all its tuned recipes kept, or none.

The measurement protocol is that of issue 28's fresh-process check (untuned and tuned models
alternating in blocks of 10 calls, 12 blocks, medians). The idea is that of cuDNN's algorithm
search (time the candidates on the problem they will run) applied to the final choice of the
whole model rather than to each kernel alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polytf.runtime.model import Model

__all__ = [
    "BLOCKS",
    "CALLS_PER_BLOCK",
    "CONFIRMATION_GAIN",
    "MINIMUM_GAIN",
    "MINIMUM_BLOCK_S",
    "ModelTimings",
    "InModelDecision",
    "alternating_timings",
    "block_shape",
    "kernel_verdicts",
    "check_in_model",
]

#: Blocks of calls each model gets (issue 28's protocol: 12).
BLOCKS = 12
#: Calls of a model in one block, at least (issue 28's protocol: 10).
CALLS_PER_BLOCK = 10
#: A block of one model lasts at least this long (more calls for a fast model), seconds.
MINIMUM_BLOCK_S = 0.02
#: A block never has more calls than this.
MAXIMUM_CALLS_PER_BLOCK = 1000
#: A set of tuned recipes is kept only if its model beats the default model by this fraction
#: at least (block-paired ratio below ``1 - MINIMUM_GAIN``): a gain smaller than the noise
#: of a measurement is not worth the risk of a slower model. 3%: with 1%, the engines bench
#: at 2e893cb (60 s tuning, issue 28) found 6 of 16 tuned models 2-11% slower than untuned in
#: a fresh process, their in-model gains within the block-to-block spread of a shared machine.
MINIMUM_GAIN = 0.03
#: ... and beats it again by this fraction in a round of its own (step 4 of the module
#: docstring). At 00839d1, without this round, EfficientNetB0 b1's tuned recipes won by the
#: first rule (3.169 -> 3.116 ms, over 3% block by block) and ran 1.3% slower than its untuned
#: model in the engines bench's rounds (2 min tuning, znver5).
CONFIRMATION_GAIN = MINIMUM_GAIN / 2
#: A slow model's round (both models, all blocks) is cut to about this long, seconds: fewer
#: calls per block first, then fewer blocks, down to :data:`MINIMUM_CALLS_PER_BLOCK` calls in
#: :data:`MINIMUM_BLOCKS` blocks.
ROUND_S = 20.0
MINIMUM_CALLS_PER_BLOCK = 3
MINIMUM_BLOCKS = 4

#: ``timer(default_model, tuned_model) -> ModelTimings``
Timer = Callable[[Model, Model], "ModelTimings"]


@dataclass(frozen=True)
class ModelTimings:
    """Two models timed in alternating blocks (:func:`alternating_timings`).

    Attributes:
        default_call_s / tuned_call_s: seconds of each whole call of the default / tuned model.
        default_kernel_s / tuned_kernel_s: kernel name -> seconds of it inside each call of
            the default / tuned model; empty when the model cannot time its kernels.
        calls_per_block: calls of a model in one block (0: unknown, the calls are one block).
    """

    default_call_s: tuple[float, ...]
    tuned_call_s: tuple[float, ...]
    default_kernel_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    tuned_kernel_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    calls_per_block: int = 0

    @property
    def default_s(self) -> float:
        """Median seconds of a call of the default model."""
        return statistics.median(self.default_call_s)

    @property
    def tuned_s(self) -> float:
        """Median seconds of a call of the tuned model."""
        return statistics.median(self.tuned_call_s)

    @property
    def ratio(self) -> float:
        """Tuned / default latency, paired block by block: the median over the blocks of the
        tuned block's median / the default block's median (each pair ran next to each other,
        so a slow spell of the machine falls on both); infinite without a default figure."""
        size = self.calls_per_block or max(len(self.default_call_s), 1)
        ratios = []
        for start in range(0, min(len(self.default_call_s), len(self.tuned_call_s)), size):
            default_s = statistics.median(self.default_call_s[start : start + size])
            tuned_s = statistics.median(self.tuned_call_s[start : start + size])
            ratios.append(tuned_s / default_s if default_s > 0 else math.inf)
        return statistics.median(ratios) if ratios else math.inf

    @property
    def has_kernel_times(self) -> bool:
        """Whether both models timed their kernels inside the calls."""
        return bool(self.default_kernel_s) and bool(self.tuned_kernel_s)


@dataclass(frozen=True)
class InModelDecision:
    """What :func:`check_in_model` measured and decided.

    Attributes:
        default_latency_s: median seconds of a call of the model with the default recipes.
        tuned_latency_s: median seconds of a call of the model with the recipes kept (the
            default model's figure when none is kept: it is that model).
        all_tuned_latency_s: median seconds of a call of the model with every tuned recipe,
            before any was rejected.
        kept / rejected: the groups whose tuned recipe is kept / falls back to the default.
        group_latency_s: group -> (seconds of its kernels inside a call of the default model,
            inside a call of the tuned one): medians, summed over the group's kernels (absent
            when the model cannot time its kernels).
        rejected_as_a_whole: the recipes that won kernel by kernel made a model no faster
            than the default one, so none was kept.
        calls: calls of each model timed (all rounds).
    """

    default_latency_s: float
    tuned_latency_s: float
    all_tuned_latency_s: float
    kept: frozenset[str]
    rejected: frozenset[str]
    group_latency_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    rejected_as_a_whole: bool = False
    calls: int = 0

    @property
    def speedup(self) -> float:
        """Default latency / tuned latency, both inside the model (NaN without a tuned one)."""
        return self.default_latency_s / self.tuned_latency_s if self.tuned_latency_s > 0 else math.nan


def block_shape(one_call_s: float, blocks: int, calls: int, round_s: float = ROUND_S) -> tuple[int, int]:
    """``(blocks, calls per block)`` for a model whose call takes ``one_call_s`` seconds: at
    least ``calls`` calls, enough for a block of :data:`MINIMUM_BLOCK_S`; for a slow model,
    a round of about ``round_s`` (default :data:`ROUND_S`) at most (fewer calls, then fewer blocks, down to
    :data:`MINIMUM_CALLS_PER_BLOCK` calls and :data:`MINIMUM_BLOCKS` blocks)."""
    if not one_call_s > 0:
        return blocks, MAXIMUM_CALLS_PER_BLOCK
    calls = max(calls, min(math.ceil(MINIMUM_BLOCK_S / one_call_s), MAXIMUM_CALLS_PER_BLOCK))
    if 2 * blocks * calls * one_call_s > round_s:
        calls = min(calls, max(MINIMUM_CALLS_PER_BLOCK, math.floor(round_s / (2 * blocks * one_call_s))))
        blocks = min(blocks, max(MINIMUM_BLOCKS, math.floor(round_s / (2 * calls * one_call_s))))
    return blocks, calls


def _timed_block(
    model: Model, inputs: Mapping[str, Any], calls: int, call_s: list[float], kernel_s: dict[str, list[float]]
) -> None:
    """One block of ``calls`` whole calls of ``model`` (after one untimed call: the other model
    just ran); appends each call's seconds to ``call_s`` and each kernel's to ``kernel_s``."""
    timed_calls = getattr(model, "timed_calls", None)
    if timed_calls is None:  # a model that cannot time its kernels: whole calls only
        call_s.extend(model.latency_s(inputs, repeats=calls, warmup=1))
        return
    kernel_steps = [index for index, kind in enumerate(model.step_kinds) if kind == "kernel"]
    names = [kernel.scop.name for kernel in model.kernels]
    for timing in timed_calls(inputs, repeats=calls, warmup=1):
        call_s.append(timing.call_s)
        for name, index in zip(names, kernel_steps):
            kernel_s.setdefault(name, []).append(timing.step_s[index])


def alternating_timings(
    default_model: Model,
    tuned_model: Model,
    inputs: Mapping[str, Any],
    blocks: int = BLOCKS,
    calls: int = CALLS_PER_BLOCK,
    round_s: float = ROUND_S,
) -> ModelTimings:
    """Time ``default_model`` against ``tuned_model`` (same graph, same inputs): ``blocks`` blocks
    of whole calls of each, alternating, the first model of a block swapped every block; a block
    has ``calls`` calls, or more for a fast model (a block lasts at least
    :data:`MINIMUM_BLOCK_S`), fewer calls and blocks for a slow one (:func:`block_shape`; one
    call of the default model timed first).

    Args:
        default_model, tuned_model: the two models (``inputs`` by placeholder name fits both).
        blocks: blocks of each model (at least 1).
        calls: calls in a block, at least (at least 1).
        round_s: about the longest the round may take for a slow model, seconds (a time
            budget's remainder; :func:`block_shape`).

    Returns:
        Every call's seconds, and each kernel's seconds inside each call where the models
        can time their kernels.
    """
    one_call_s = min(default_model.latency_s(inputs, repeats=1, warmup=1))
    blocks, per_block = block_shape(one_call_s, max(1, int(blocks)), max(1, int(calls)), round_s)
    call_s: dict[str, list[float]] = {"default": [], "tuned": []}
    kernel_s: dict[str, dict[str, list[float]]] = {"default": {}, "tuned": {}}
    models = {"default": default_model, "tuned": tuned_model}
    for block in range(blocks):
        for which in ("default", "tuned") if block % 2 == 0 else ("tuned", "default"):
            _timed_block(models[which], inputs, per_block, call_s[which], kernel_s[which])
    return ModelTimings(
        tuple(call_s["default"]),
        tuple(call_s["tuned"]),
        {name: tuple(seconds) for name, seconds in kernel_s["default"].items()},
        {name: tuple(seconds) for name, seconds in kernel_s["tuned"].items()},
        per_block,
    )


def kernel_verdicts(timings: ModelTimings, groups: Mapping[str, Sequence[str]]) -> dict[str, tuple[float, float]]:
    """Each group (its kernels' names) -> (seconds of its kernels inside a call of the default
    model, of the tuned model): per kernel the median over the calls, summed over the group.
    A group with a kernel that either model did not time is left out."""
    verdicts = {}
    for group, names in groups.items():
        if names and all(name in timings.default_kernel_s and name in timings.tuned_kernel_s for name in names):
            default_s = sum(statistics.median(timings.default_kernel_s[name]) for name in names)
            tuned_s = sum(statistics.median(timings.tuned_kernel_s[name]) for name in names)
            verdicts[group] = (default_s, tuned_s)
    return verdicts


def check_in_model(
    groups: Mapping[str, Sequence[str]], build: Callable[[frozenset[str]], Model], timer: Timer, default_model: Model
) -> InModelDecision:
    """Decide which groups keep their tuned recipe (module docstring).

    Args:
        groups: group (a tuning record's key digest) -> names of its kernels in the model; the
            groups whose tuned recipe differs from the default one.
        build: ``build(kept)`` is the model whose groups in ``kept`` run their tuned recipe,
            the other groups their default recipe, and the kernels outside the groups whatever
            recipe their record gives them (the caller remembers what it built: ``build`` is
            called with all the groups, and at most three times more).
        timer: ``timer(default_model, tuned_model)`` times the two models against each other
            (:func:`alternating_timings` on sample inputs, under the measurement lock).
        default_model: the model with every kernel on its default recipe (``build(frozenset())``
            itself when no kernel outside the groups has a tuned recipe).

    Returns:
        The groups kept and rejected, and the in-model latencies.
    """
    every = frozenset(groups)
    first = timer(default_model, build(every))
    rounds = {every: first}
    verdicts = kernel_verdicts(first, groups) if first.has_kernel_times else {}
    winners = frozenset(group for group in every if group not in verdicts or verdicts[group][1] < verdicts[group][0])
    if winners and winners != every:
        rounds[winners] = timer(default_model, build(winners))
    calls = sum(len(timings.tuned_call_s) for timings in rounds.values())
    # of the sets timed against the default model (each in its own round), the one that beats it by the most
    kept, final = min(rounds.items(), key=lambda item: item[1].ratio)
    confirmed = final.ratio < 1.0 - MINIMUM_GAIN
    if confirmed and kept:
        final = timer(default_model, build(kept))  # the confirmation (module docstring, step 4)
        calls += len(final.tuned_call_s)
        confirmed = final.ratio < 1.0 - CONFIRMATION_GAIN
    if not confirmed:
        kept = frozenset()
        if build(kept) is default_model:  # nothing kept: the tuned model is the default one
            return InModelDecision(first.default_s, first.default_s, first.tuned_s, kept, every, verdicts, bool(winners), calls)
        final = timer(default_model, build(kept))
        calls += len(final.tuned_call_s)
    return InModelDecision(
        final.default_s, final.tuned_s, first.tuned_s, kept, every - kept, verdicts, bool(winners) and not kept, calls
    )
