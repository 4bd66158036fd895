"""``polytf bench``: polytf against its baselines on the same GraphDefs: numpy, TensorFlow and
XLA with the same threads on the CPU; cuBLAS and cuDNN on the GPU.

Modules: :mod:`~polytf.bench.runner` (the run, for every backend), :mod:`~polytf.bench.options`
(its settings), :mod:`~polytf.bench.bench_run` with :mod:`~polytf.bench.cpu_bench` and
:mod:`~polytf.bench.cuda_bench` (what each backend measures), :mod:`~polytf.bench.suite`
(entries and suites), :mod:`~polytf.bench.baselines` (numpy / TensorFlow / XLA timing in a
child process per thread count), :mod:`~polytf.bench.cuda_baselines` (the library calls on
the GPU), :mod:`~polytf.bench.machine` (what machine it ran on), :mod:`~polytf.bench.report`
with :mod:`~polytf.bench.cpu_report` and :mod:`~polytf.bench.cuda_report` (Markdown, JSON
and PNG). The GPU check (``python -m polytf.bench.gpu_check``: :mod:`~polytf.bench.gpu_check`
with its steps, rows, environment and report modules; models without TensorFlow in
:mod:`~polytf.bench.gpu_check_models`, :mod:`~polytf.bench.graphdef_writer` and
:mod:`~polytf.bench.torch_check_modules`) and the wheels a GPU machine lacks
(:mod:`~polytf.bench.gpu_wheels`). Nothing heavy is imported here.
"""

from __future__ import annotations

__all__ = ["run_bench", "BenchOptions"]


def __getattr__(name: str):
    if name == "run_bench":
        from polytf.bench.runner import run_bench

        return run_bench
    if name == "BenchOptions":
        from polytf.bench.options import BenchOptions

        return BenchOptions
    raise AttributeError(f"module 'polytf.bench' has no attribute {name!r}")
