"""The settings of one ``polytf bench`` run, from the command line or a caller."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polytf.bench.suite import parse_threads
from polytf.durations import parse_duration

__all__ = ["BenchOptions", "options_from_arguments"]


@dataclass(frozen=True)
class BenchOptions:
    """Settings of one ``polytf bench`` run.

    Attributes:
        target: ``"cpu"`` (polytf against numpy, TensorFlow and XLA on this CPU) or
            ``"cuda"`` (polytf's GPU kernels against cuBLAS and cuDNN on one GPU).
        entries: entry specs (see :mod:`polytf.bench.suite`); empty: the suite.
        suite: suite name (default: the target's, ``issue3`` or ``cuda``, when there are no
            entries).
        threads: thread counts overriding every entry's own; ``None``: the entries' own
            (ignored on the GPU).
        trials: trials per kernel (``None``: polytf's default, 20; on the GPU 0 is allowed:
            no tuning, the default recipes are measured as "tuned" too).
        rounds: timing rounds per system.
        repeats: timed calls per round (at least; see ``min_round_s``).
        min_round_s: on the CPU, a row whose tuned model takes less than ``min_round_s /
            repeats`` per call gets more calls per round, as many as fill ``min_round_s``
            seconds of its calls (at most :data:`polytf.bench.cpu_bench.MAX_CALLS_PER_ROUND`),
            every system of the row the same number; 0: ``repeats`` calls for every row.
        warmup: untimed calls before each round.
        out: report path without suffix (``OUT.md``, ``OUT.json``, ``OUT.png``); ``None``:
            the target's, ``results/bench`` or ``results/bench_cuda``.
        cache_dir: tuning-record cache to use and reuse; ``None``: a fresh temporary one, so
            every kernel is tuned in this run and the tuning time is real.
        tensorflow: time TensorFlow and XLA too (when TensorFlow is installed), and beside
            them the engines OpenVINO and ONNX Runtime (when installed: ``polytf[bench]``); on
            the GPU, the reference outputs are TensorFlow's (else numpy's references).
        seed: seed of the tuner and of the random inputs.
        time_budget_s: wall-clock budget of tuning one model, seconds (``--time-budget``);
            ``None``: no budget (the trials alone bound it).
    """

    target: str = "cpu"
    entries: tuple[str, ...] = ()
    suite: str | None = None
    threads: tuple[int, ...] | None = None
    trials: int | None = None
    rounds: int = 5
    repeats: int = 30
    min_round_s: float = 0.0
    warmup: int = 3
    out: Path | None = None
    cache_dir: Path | None = None
    tensorflow: bool = True
    seed: int = 0
    time_budget_s: float | None = None


def options_from_arguments(args: Any) -> BenchOptions:
    """:class:`BenchOptions` from the ``polytf bench`` command line (see :mod:`polytf.cli`)."""
    return BenchOptions(
        target=getattr(args, "target", None) or "cpu",
        entries=tuple(args.entries or ()),
        suite=args.suite,
        threads=parse_threads(args.threads) if args.threads else None,
        trials=args.trials,
        rounds=args.rounds,
        repeats=args.repeats,
        min_round_s=getattr(args, "min_round_time", 0.0) or 0.0,
        warmup=args.warmup,
        out=Path(args.out) if args.out else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        tensorflow=not args.no_tensorflow,
        seed=args.seed,
        time_budget_s=parse_duration(args.time_budget) if getattr(args, "time_budget", None) else None,
    )
