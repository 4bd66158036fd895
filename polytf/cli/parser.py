"""The ``polytf`` command line: every command's arguments and their help.

One subparser per command; the arguments that name a model and how to build it are
declared once (:mod:`polytf.cli.model_options`). Parsing is all this module does: a
command's module (:mod:`polytf.cli.tune`, ...) is imported only to run it, so that
``polytf --help`` loads neither the compiler nor the tuner.
"""

from __future__ import annotations

import argparse
import math

from polytf.cli.model_options import (
    add_bucket_argument,
    add_model_arguments,
    add_output_argument,
    add_storage_argument,
    add_target_argument,
)
from polytf.config import VERIFY_TIME_LIMIT_S, TuningConfig
from polytf.durations import parse_duration
from polytf.errors import PolytfError
from polytf.version import __version__

__all__ = ["build_parser"]


def _duration_argument(text: str) -> float:
    """``--time-budget`` as seconds (:func:`polytf.durations.parse_duration`), or argparse's error."""
    try:
        return parse_duration(text)
    except PolytfError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _whole_number(minimum: int):
    """An argparse type: a whole number of at least ``minimum``, or argparse's error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def _quantity(unit: str, zero_allowed: bool = False):
    """An argparse type: a finite number of ``unit`` above 0 (0 or more with ``zero_allowed``),
    or argparse's error."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed):
            raise argparse.ArgumentTypeError(f"must be {'0 or more' if zero_allowed else 'a positive number of'} {unit}, not {text}")
        return value

    return parse


_positive_seconds = _quantity("seconds")
_megabytes = _quantity("MB", zero_allowed=True)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; ``command`` of the parsed arguments names the command's module."""
    parser = argparse.ArgumentParser(prog="polytf", description="Polyhedral compiler and autotuner for frozen TensorFlow graphs (GraphDef .pb / .pbtxt).")
    parser.add_argument("--version", action="version", version=f"polytf {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tune = commands.add_parser("tune", help="tune every kernel of a model and cache the winners", description="Compile a model, tune each kernel with an Optuna study (every candidate verified against numpy), and cache the best recipes.")
    add_model_arguments(tune)
    add_storage_argument(tune, reading_only=False)
    tune.add_argument("--trials", type=_whole_number(1), help=f"candidate schedules per kernel, at least 1 (default {TuningConfig.trials})")
    tune.add_argument(
        "--time-budget",
        type=_duration_argument,
        metavar="DURATION",
        help="tune for this much wall time (the whole command: reading the model, tuning, the final timing) instead of --trials per kernel, "
        "e.g. 600, 600s, 10m, 1h: trials go a few at a time to the "
        "kernels whose improvement lowers the model's latency most (Ansor's task scheduler); kernels differing only in shape "
        "warm-start from each other. Records are written as it goes and reused by the next run; with --retune every kernel "
        "starts afresh within the budget",
    )
    add_target_argument(
        tune,
        "cpu (default): native code for this CPU. cuda: GPU kernels (PTX) for the current NVIDIA GPU, each candidate verified "
        "and timed with CUDA events on it; needs CuPy (install cupy-cuda12x) and a GPU. Records are per target",
    )
    tune.add_argument("--retune", action="store_true", help="ignore cached records and tune again")
    add_bucket_argument(tune, "tune the model at (each combination is tuned as a model of its own; a call at these sizes uses its records)")
    add_output_argument(tune)
    tune.add_argument("--seed", type=int, default=0, help="seed of the sampler and of the random test inputs")
    tune.add_argument(
        "--candidate-timeout",
        type=_positive_seconds,
        metavar="S",
        help=f"wall-clock limit of one candidate (compile, verify, time) in its worker process; a candidate over it fails (default {TuningConfig.candidate_time_limit_s:g})",
    )

    run = commands.add_parser("run", help="run a model on inputs from .npy files", description="Run a model (tuned kernels from the cache, default recipes elsewhere) and write its outputs to an .npz file.")
    add_model_arguments(run, inputs=False)
    add_storage_argument(run)
    run.add_argument(
        "--input",
        action="append",
        metavar="NAME=FILE",
        required=True,
        help="an input array (repeatable): a .npy file, or a .npz archive (its array named NAME, else its only one); its shape fixes the placeholder's",
    )
    run.add_argument("--output", required=True, metavar="OUT.npz", help="the file to write the outputs to, as an .npz archive keyed by output node name (checked before the model is compiled)")
    add_output_argument(run, "--fetch", "output node to compute")
    add_target_argument(
        run,
        "cpu (default) or cuda: run on the current NVIDIA GPU (CuPy; install cupy-cuda12x), with the records of polytf tune --target cuda",
    )

    compile_ = commands.add_parser(
        "compile",
        help="compile a model ahead of time into an object file, a C header and a shared library",
        description="Write DIR/NAME.o (every kernel with its tuned recipe from the cache, else its default recipe, the weights, and "
        "an entry function NAME_run that runs the whole model), DIR/NAME.h (its C declarations, shapes and dtypes) and DIR/NAME.so "
        "when a C compiler for the target is installed. A program links NAME.o with -lgomp -lm and needs no Python, TensorFlow "
        "or polytf. A model with a None batch gets NAME_run(..., int64_t batch, int threads): one object for every batch "
        "(--input x:N=1..64,... bounds it; --input x:8,... fixes it). --target-triple aarch64-unknown-linux-gnu cross-compiles "
        "for 64-bit Arm (NEON).",
    )
    add_model_arguments(compile_)
    add_storage_argument(compile_)
    compile_.add_argument("-o", "--output-dir", required=True, metavar="DIR", help="where to write the files (created if needed)")
    compile_.add_argument("--name", help="C prefix of the symbols and stem of the files (default: from the model's file name)")
    compile_.add_argument(
        "--target-triple",
        metavar="TRIPLE",
        help="LLVM target triple (default: this machine), e.g. aarch64-unknown-linux-gnu (or aarch64) or x86_64-unknown-linux-gnu",
    )
    compile_.add_argument("--cpu", help="LLVM CPU name, e.g. neoverse-n1, znver4, generic (default: this CPU; generic for another triple)")
    compile_.add_argument("--features", help="LLVM feature string, e.g. +neon,+sve or +avx2,+fma (default: this CPU's; the CPU's own for another triple)")
    add_output_argument(compile_)
    compile_.add_argument(
        "--embed-weights-limit-mb",
        type=_megabytes,
        default=256.0,
        metavar="MB",
        help="weights up to this size go into the object's read-only data, larger ones to DIR/NAME.weights, read by NAME_init (default 256)",
    )
    compile_.add_argument("--no-shared-library", dest="shared_library", action="store_false", help="do not link DIR/NAME.so")

    bench = commands.add_parser(
        "bench",
        help="time polytf against numpy, TensorFlow, XLA, OpenVINO and ONNX Runtime; write OUT.md/.json/.png",
        description="For each entry and thread count: write the GraphDef, tune it, load it, verify it against numpy, then time polytf, "
        "numpy, TensorFlow, TensorFlow+XLA, OpenVINO (f32) and ONNX Runtime (through tf2onnx, opset 17) with the same threads "
        "(baselines in a child process per thread count; engines not installed are reported so: pip install 'polytf[bench]'). "
        "An entry is a zoo model spec (NAME or NAME:BATCH, matmul:MxKxN; models: mlp, cifar_cnn, odd_matmul, conv_bias_relu, "
        "conv3x3_bias_relu_56, matmul, mobilenet_v2, transformer_encoder, mlp_mixer, gpt2_block, resnet50, inception_v3, densenet121, efficientnet_b0; python -m polytf.model_zoo --help lists all) "
        "or a .pb/.pbtxt file. Without entries: the suite (default issue3). The report also gives the untuned model's time, "
        "GFLOP/s as a percentage of the measured float32 peak, polytf / best engine (the fastest of TensorFlow, XLA, OpenVINO and ONNX Runtime; below 1 polytf is faster), and a per-kernel profile of each model.",
    )
    bench.add_argument("entries", nargs="*", metavar="ENTRY", help="zoo model spec (e.g. matmul:1024x1024x1024, cifar_cnn:32) or GraphDef file")
    bench.add_argument(
        "--suite", help="run a named suite (issue3, issue4, models, engines, smoke, cuda); default issue3 when no ENTRY is given (cuda with --target cuda)"
    )
    add_target_argument(
        bench,
        "cpu (default): polytf against numpy, TensorFlow, XLA, OpenVINO and ONNX Runtime on this CPU. cuda: polytf's GPU kernels on the current NVIDIA GPU "
        "(CuPy; install cupy-cuda12x): ms, TFLOP/s and %% of the GPU's FP32 peak, against cuBLAS (cupy.matmul) for a MatMul and cuDNN "
        "(PyTorch, when installed) for a convolution, FP32 with TF32 off; outputs checked against TensorFlow on the CPU",
    )
    bench.add_argument("--threads", metavar="N[,N...]", help="thread counts for every entry, e.g. 1,2 (default: each entry's own, else 2)")
    bench.add_argument("--trials", type=_whole_number(0), help="trials per kernel (default 20; with --target cuda, 0 measures the default recipes untuned)")
    bench.add_argument("--rounds", type=_whole_number(1), default=5, help="timing rounds per system; the figure is the median of round medians (default 5)")
    bench.add_argument("--repeats", type=_whole_number(1), default=30, help="timed calls per round (default 30)")
    bench.add_argument(
        "--min-round-time",
        metavar="SECONDS",
        type=_quantity("seconds", zero_allowed=True),
        default=0.2,
        help="a model faster than SECONDS/REPEATS per call gets more calls per round, as many as fill SECONDS (at most 1000), "
        "every system of its row the same number, so a sub-millisecond row is not a median of a few noisy calls "
        "(default 0.2; 0: --repeats calls for every row; CPU only)",
    )
    bench.add_argument("--warmup", type=_whole_number(0), default=3, help="untimed calls before each round (default 3)")
    bench.add_argument(
        "--out", help="report path without suffix: writes OUT.md, OUT.json, OUT.png (default results/bench, results/bench_cuda with --target cuda)"
    )
    bench.add_argument("--cache-dir", help="tuning-record cache to use and reuse (default: a fresh temporary cache, so every kernel is tuned)")
    bench.add_argument(
        "--no-tensorflow",
        action="store_true",
        help="do not time TensorFlow, XLA, OpenVINO and ONNX Runtime (numpy only; with --target cuda: check polytf's outputs against numpy's references, not TensorFlow's)",
    )
    bench.add_argument("--seed", type=int, default=0, help="seed of the tuner and of the random inputs")
    bench.add_argument(
        "--time-budget", metavar="DURATION", help="wall-clock budget of tuning each model, e.g. 600, 600s, 10m, 1h (default: none)"
    )

    show = commands.add_parser(
        "show",
        help="show graph passes, kernels, schedule trees, loop ASTs and code",
        description="Without --kernel: the model's kernels. With --passes: what each graph pass (pruning, identity removal, constant folding, "
        "op expansion, loop rerolling, arithmetic simplification, batch-norm folding, 1x1 convolutions as matrix products, reshape sinking, common-subexpression elimination) changed, as node and edge counts before "
        "and after, round by round, with totals. With --kernel: its Scop, recipe, schedule tree and loop AST (add --llvm / --assembly). "
        "With --profile: each kernel's median time, FLOPs, GFLOP/s and % of the machine's measured float32 peak, and the whole call.",
    )
    add_model_arguments(show)
    add_bucket_argument(show, "show the model at")
    add_storage_argument(show)
    show.add_argument("--passes", action="store_true", help="print node and edge counts before and after each graph pass, and the totals")
    show.add_argument("--kernel", help="kernel name (as listed without --kernel)")
    show.add_argument("--recipe", help="JSON recipe file (default: the cached record, else the default recipe)")
    show.add_argument("--llvm", action="store_true", help="also print the optimised LLVM IR")
    show.add_argument("--assembly", action="store_true", help="also print the host assembly (PTX with --target cuda)")
    add_target_argument(
        show,
        "cpu (default) or cuda: the kernel's GPU schedule, launches, NVPTX IR and PTX (no GPU needed: PTX for --arch)",
    )
    show.add_argument("--arch", metavar="sm_XY", help="with --target cuda and no GPU: the compute capability to emit PTX for (default sm_80)")
    show.add_argument(
        "--profile",
        action="store_true",
        help="time each kernel of the model (cached recipes, seeded random inputs) and print its GFLOP/s and %% of the measured float32 peak",
    )
    show.add_argument("--repeats", type=_whole_number(1), default=10, help="timed calls per kernel and of the whole call with --profile (default 10)")

    cache = commands.add_parser(
        "cache",
        help="list, locate, clear or verify tuning records and compiled kernels",
        description="Tuning records and compiled kernels (the object code a load links instead of compiling): list them (invalid "
        "ones with the reason, kernels with their sizes; the default), print the cache directory, clear the records, the compiled "
        "kernels and the studies no running tuner uses, or verify them (recompile each record in a worker process and check it "
        "against the numpy reference; check each compiled kernel's file and link those of this CPU; exit status 1 if one fails).",
    )
    cache_directory_help = "cache directory (default: $POLYTF_CACHE_DIR or the user cache directory)"
    cache.add_argument("--cache-dir", help=cache_directory_help)
    actions = cache.add_subparsers(dest="action", metavar="ACTION")
    for name, text in (
        ("list", "list every record and compiled kernel (the default)"),
        ("path", "print the cache directory"),
        ("clear", "delete the records, compiled kernels and idle studies"),
    ):
        # SUPPRESS: an action's --cache-dir only overrides the one given before the action when it is given
        actions.add_parser(name, help=text).add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_directory_help)
    verify = actions.add_parser("verify", help="recompile every record in a worker process and check it against numpy; check and link every compiled kernel")
    verify.add_argument("models", nargs="*", metavar="MODEL", help="only the records tuned from these model files")
    verify.add_argument("--cache-dir", default=argparse.SUPPRESS, help=cache_directory_help)
    verify.add_argument(
        "--time-limit", type=_positive_seconds, default=VERIFY_TIME_LIMIT_S, metavar="S", help=f"seconds per record's worker process (default {VERIFY_TIME_LIMIT_S:g})"
    )

    ops = commands.add_parser(
        "ops",
        help="list the TensorFlow ops polytf supports, or how each op of a model runs",
        description="Without --model: every supported op (category, run-time dtypes, how it runs). With --model: each op of "
        "the model, its nodes in the file (and those the graph passes made), and how many are compiled, on the host, no code "
        "(input, constant, view), rewritten (by which pass), unsupported or not reached, and why; exit status 1 when some node "
        "is unsupported or not reached.",
    )
    ops.add_argument("--model", help="a frozen GraphDef or SavedModel directory to report on")
    ops.add_argument("--signature", metavar="NAME", help="SavedModel signature (default serving_default)")
    ops.add_argument(
        "--input",
        action="append",
        metavar="NAME:SHAPE",
        help="fix a placeholder's shape, or give an unsupported node's output shape (repeatable)",
    )
    ops.add_argument(
        "--no-fallback", dest="fallback", action="store_false", help="report the nodes that would run on the host as unsupported"
    )
    return parser
