"""``polytf cache``: list, locate, clear or verify the tuning records of a cache directory.

``list`` (the default) shows every record (an invalid one with the reason), ``path`` the
directory, ``clear`` removes the records and the studies no running tuner uses
(:meth:`polytf.storage.cache.KernelCache.clear`), ``verify`` recompiles each record in a
worker process and checks it against the numpy reference
(:func:`polytf.autotune.record_verification.verify_records`; exit status 1 if one fails).
"""

from __future__ import annotations

import argparse

from rich.table import Table

from polytf.cli.console import format_seconds, stdout
from polytf.storage.cache import KernelCache

__all__ = ["execute", "verify_cache"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf cache [list|path|clear|verify]``; returns the exit status."""
    cache = KernelCache(arguments.cache_dir)
    if arguments.action == "path":
        stdout.print(str(cache.directory))
    elif arguments.action == "clear":
        report = cache.clear()
        stdout.print(f"removed {report.records} records and {report.studies_removed} studies from {cache.directory}")
        if report.studies_kept:
            stdout.print(f"kept {report.studies_kept} studies a running tuner is using; run `polytf cache clear` again when it has finished")
    elif arguments.action == "verify":
        return verify_cache(cache, arguments.models, arguments.time_limit)
    else:
        entries = cache.entries()
        invalid = sum(entry.record is None for entry in entries)
        table = Table(title=f"{len(entries)} tuning records in {cache.directory}" + (f" ({invalid} invalid, never used)" if invalid else ""))
        for column in ("kernel", "ops", "default", "tuned", "speedup", "trials", "complete"):
            table.add_column(column)
        for entry in entries:
            record = entry.record
            if record is None:
                table.add_row(entry.path.name, f"invalid: {entry.problem}", "", "", "", "", "")
                continue
            table.add_row(
                record.kernel, "+".join(record.ops), format_seconds(record.default_latency_s), format_seconds(record.best_latency_s),
                f"{record.speedup:.2f}x", str(record.trials), str(record.complete),
            )
        stdout.print(table)
    return 0


def verify_cache(cache: KernelCache, models: list[str], time_limit_s: float) -> int:
    """``polytf cache verify``: one line per record, a summary; 1 if any record failed."""
    from polytf.autotune.record_verification import FAILED, verify_records  # the compiler: not for list, path, clear

    def show(check) -> None:
        where = f"{check.path.name} ({check.kernel} of {check.model})" if check.kernel else check.path.name
        stdout.print(f"{'FAILED' if check.status == FAILED else check.status:7s} {where}: {check.detail}", markup=False, highlight=False, soft_wrap=True)

    checks = verify_records(cache, models, time_limit_s=time_limit_s, on_check=show)
    counts = {status: sum(check.status == status for check in checks) for status in ("ok", "failed", "skipped")}
    stdout.print(f"{len(checks)} records in {cache.directory}: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped", markup=False, highlight=False, soft_wrap=True)
    return 1 if counts["failed"] else 0
