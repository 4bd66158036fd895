"""Where the ``polytf`` commands print: results on stdout, progress, warnings and errors on stderr.

Results go through :data:`stdout` (rich tables, 160 columns wide when stdout is a file or
a pipe, where rich would assume 80); progress, warnings and errors through :data:`console`
(stderr). A :class:`~polytf.errors.PolytfWarning` (an ignored tuning record, say) prints as
one ``warning: <message>`` line while :func:`warnings_as_lines` is active.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterable, Iterator

from rich.console import Console
from rich.markup import escape

from polytf.durations import format_seconds
from polytf.errors import PolytfWarning

__all__ = ["console", "format_seconds", "print_host_nodes", "stdout", "warnings_as_lines"]

#: Progress, warnings and errors (stderr).
console = Console(stderr=True)
#: Results. Wide tables when writing to a file or a pipe (rich assumes 80 columns there).
stdout = Console(width=None if sys.stdout.isatty() else 160)


def print_host_nodes(host_nodes: Iterable) -> None:
    """One line per node that runs on the host through its numpy reference, with the reason
    (:class:`~polytf.lowering.host_fallback.HostNode`)."""
    for node in host_nodes:
        stdout.print(f"runs on the host: node '{node.name}' ({node.op}): {node.reason}", markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """While active, a PolytfWarning (e.g. an ignored tuning record) prints as one
    ``warning: <message>`` line on stderr instead of Python's file:line format."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, PolytfWarning):
            console.print(f"[bold yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
