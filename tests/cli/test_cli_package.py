"""The command line as a package: parsing loads no compiler, every command has its module,
and the model and build arguments become one ModelSource and one BuildOptions, checked once."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from polytf.cli import build_parser, main
from polytf.cli.model_options import build_options, model_source
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.model_source import ModelSource


def test_parsing_loads_neither_the_compiler_nor_the_tuner():
    code = (
        "import sys; from polytf.cli import build_parser; build_parser().parse_args(['tune', 'm.pb', '--threads', '2']); "
        "loaded = [m for m in ('polytf.compiler.model_builder', 'polytf.autotune.model_tuner', 'islpy', 'llvmlite', 'numpy') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_command_has_a_module_that_executes_it():
    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    assert set(commands) == {"tune", "run", "compile", "bench", "show", "cache", "ops"}
    for command in commands:
        assert callable(importlib.import_module(f"polytf.cli.{command}").execute), command


def test_the_model_and_build_arguments_become_two_values():
    arguments = build_parser().parse_args(
        ["tune", "m.pb", "--input", "x:1,784", "--output", "y", "--threads", "3", "--target", "cuda", "--no-fallback", "--cache-dir", "c", "--storage", ""]
    )
    assert model_source(arguments, outputs=arguments.output) == ModelSource("m.pb", None, {"x": (1, 784)}, ("y",))
    assert build_options(arguments) == BuildOptions(fallback=False, threads=3, target="cuda", cache_dir="c", storage="")
    compile_arguments = build_parser().parse_args(["compile", "m.pb", "-o", "out"])
    assert build_options(compile_arguments) == BuildOptions()  # compile has no --target: the CPU


@pytest.mark.parametrize("command", [["show", "m.pb"], ["tune", "m.pb"], ["compile", "m.pb", "-o", "out"]])
@pytest.mark.parametrize("threads", ["0", "-3", "two"])
def test_an_invalid_thread_count_is_a_usage_error(command, threads, capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--threads", threads, "--cache-dir", str(tmp_path)])
    assert exited.value.code == 2  # argparse's status for a usage error, before anything runs
    message = " ".join(capsys.readouterr().err.split())
    assert "error: argument --threads:" in message and "Traceback" not in message
    assert ("at least 1" in message and message.endswith(f"not {threads}")) or "is not a thread count" in message
    assert not list(tmp_path.iterdir())  # nothing written


def test_auto_threads_is_the_default_thread_count():
    arguments = build_parser().parse_args(["tune", "m.pb", "--threads", "auto"])
    assert arguments.threads is None and build_options(arguments) == BuildOptions()
    assert BuildOptions(threads="auto") == BuildOptions()
