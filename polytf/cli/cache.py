"""``polytf cache``: list, locate, clear or verify the tuning records and compiled kernels
of a cache directory.

``list`` (the default) shows every record (an invalid one with the reason) and every
compiled kernel (:mod:`polytf.storage.object_cache`) with its size, ``path`` the
directory, ``clear`` removes the records, the compiled kernels and the studies no running
tuner uses (:meth:`polytf.storage.cache.KernelCache.clear`), ``verify`` recompiles each
record in a worker process and checks it against the numpy reference
(:func:`polytf.autotune.record_verification.verify_records`), then checks each compiled
kernel's file and links those of this machine
(:func:`polytf.compiler.code_cache.verify_objects`); exit status 1 if one fails.
"""

from __future__ import annotations

import argparse

from rich.table import Table

from polytf.cli.console import format_seconds, stdout
from polytf.errors import CacheError
from polytf.storage.cache import KernelCache
from polytf.storage.model_images import ModelImageCache
from polytf.storage.object_cache import ObjectCache

__all__ = ["execute", "list_compiled_kernels", "verify_cache", "verify_compiled_kernels"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf cache [list|path|clear|verify]``; returns the exit status.

    Raises:
        CacheError: the cache directory is a file, or cannot be read or written.
    """
    cache = KernelCache(arguments.cache_dir)
    objects = ObjectCache(arguments.cache_dir)
    if cache.directory.exists() and not cache.directory.is_dir():
        raise CacheError(f"cache directory {cache.directory} is a file, not a folder; give another with --cache-dir or POLYTF_CACHE_DIR")
    if arguments.action == "path":
        stdout.print(str(cache.directory))
    elif arguments.action == "clear":
        report = cache.clear()
        removed_objects = objects.clear()
        removed_models = ModelImageCache(arguments.cache_dir).clear()
        stdout.print(
            f"removed {report.records} records, {removed_objects} compiled kernels and default recipes, {removed_models} model entries "
            f"(prepared models, packed weights), and {report.studies_removed} studies from {cache.directory}"
        )
        if report.studies_kept:
            stdout.print(
                f"kept {report.studies_kept} studies a polytf tune running on this cache may be using; "
                "run `polytf cache clear` again when it has finished"
            )
    elif arguments.action == "verify":
        status = verify_cache(cache, arguments.models, arguments.time_limit)
        return max(status, verify_compiled_kernels(objects))
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
        list_compiled_kernels(objects)
        models = ModelImageCache(arguments.cache_dir).entries()
        if models:
            stdout.print(
                f"{len(models)} model entries (prepared models, packed weights, placeholder shapes, file hashes) in "
                f"{models[0][0].parent}, {sum(size for _, size in models) / 1e6:.2f} MB"
            )
    return 0


def list_compiled_kernels(objects: ObjectCache) -> None:
    """The table of compiled kernels of ``polytf cache list``: kernel, CPU, size, file."""
    entries = objects.entries()
    compiled = [entry for entry in entries if entry.kind == "object"]
    total_bytes = sum(entry.size_bytes for entry in entries)
    invalid = sum(entry.problem is not None for entry in entries)
    title = f"{len(compiled)} compiled kernels and {len(entries) - len(compiled)} default recipes in {objects.directory}, {total_bytes / 1e6:.2f} MB"
    table = Table(title=title + (f" ({invalid} invalid, never used)" if invalid else ""))
    for column in ("kernel", "cpu", "size", "file"):
        table.add_column(column)
    for entry in compiled:
        kernel = entry.kernel if entry.problem is None else f"invalid: {entry.problem}"
        table.add_row(kernel, entry.cpu, f"{entry.size_bytes / 1024:.1f} KiB", entry.path.name)
    stdout.print(table)


def verify_compiled_kernels(objects: ObjectCache) -> int:
    """The compiled kernels' part of ``polytf cache verify``: a line per file that is not ok, a
    summary; 1 if a file is corrupt or does not link."""
    from polytf.compiler.code_cache import verify_objects  # the compiler: not for list, path, clear
    from polytf.targets.cpu import CpuTarget

    checks = verify_objects(objects, CpuTarget())
    for check in checks:
        if check.status != "ok":
            stdout.print(f"{'FAILED' if check.status == 'failed' else check.status:7s} {check.entry.path.name}: {check.detail}", markup=False, highlight=False, soft_wrap=True)
    counts = {status: sum(check.status == status for check in checks) for status in ("ok", "failed", "skipped")}
    stdout.print(
        f"{len(checks)} compiled kernels and default recipes in {objects.directory}: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} for another CPU or version",
        markup=False, highlight=False, soft_wrap=True,
    )
    return 1 if counts["failed"] else 0


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
