"""``polytf bench``: polytf against numpy, TensorFlow and XLA on the same GraphDefs, same threads.

Modules: :mod:`~polytf.bench.suite` (entries and suites), :mod:`~polytf.bench.baselines`
(numpy / TensorFlow / XLA timing in a child process per thread count),
:mod:`~polytf.bench.machine` (what machine it ran on), :mod:`~polytf.bench.report` (Markdown,
JSON and PNG), :mod:`~polytf.bench.runner` (the run). Nothing heavy is imported here.
"""

from __future__ import annotations

__all__ = ["run_bench", "BenchOptions"]


def __getattr__(name: str):
    if name in __all__:
        from polytf.bench import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'polytf.bench' has no attribute {name!r}")
