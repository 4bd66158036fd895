"""The ``polytf`` command line: tune, run, compile, bench, show, cache, ops.

:func:`main` parses the arguments (:func:`polytf.cli.parser.build_parser`) and runs the
command's module, ``polytf.cli.<command>``, whose ``execute(arguments)`` calls the library
and prints: :mod:`~polytf.cli.tune`, :mod:`~polytf.cli.run`, :mod:`~polytf.cli.compile`,
:mod:`~polytf.cli.bench`, :mod:`~polytf.cli.show`, :mod:`~polytf.cli.cache`,
:mod:`~polytf.cli.ops`. A command's module is imported when it runs, so that ``polytf
--help`` and ``polytf cache path`` load neither the compiler nor the tuner.

Every failure polytf anticipates prints ``error: <message>`` (naming the file, node
or op and what to do) and exits with status 1; Ctrl-C exits with 130 after saving
finished work. A :class:`~polytf.errors.PolytfWarning` prints as one ``warning:`` line.
"""

from __future__ import annotations

import importlib

from polytf.cli.console import console, warnings_as_lines
from polytf.cli.parser import build_parser
from polytf.errors import PolytfError

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command of ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    arguments = build_parser().parse_args(argv)
    try:
        with warnings_as_lines():
            command = importlib.import_module(f"{__name__}.{arguments.command}")
            return command.execute(arguments)
    except PolytfError as error:
        console.print(f"[bold red]error:[/] {error}", markup=True, highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130
