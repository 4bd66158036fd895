"""The steps of the GPU check after its bootstrap (:mod:`polytf.bench.gpu_check`): environment,
GPU tests, bench rows; each recorded in the report, which is rewritten after every step.

A step that fails is recorded with its reason; the next one still runs, except after a
failed environment step (no GPU, an llvmlite too old for the GPU's PTX, a missing package),
where nothing after it could give an answer.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

from polytf.bench.gpu_check_report import write_report

__all__ = ["CheckRun", "test_outcomes"]

#: Seconds the GPU tests may take at most, and at least, of what is left of the time limit.
_TESTS_TIME_S = (240.0, 30.0)
#: A row does not start with less than this left of the time limit.
_ROW_RESERVE_S = 15.0


def test_outcomes(junit_xml: Path) -> list[dict[str, Any]]:
    """Each test case of a JUnit XML file (pytest ``--junitxml``): its id, outcome
    (``passed``, ``failed``, ``error``, ``skipped``), seconds and message."""
    outcomes = []
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = child.get("message") or (child.text or "")
        test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        outcomes.append({"test": test, "outcome": outcome, "seconds": float(case.get("time") or 0), "message": message})
    return outcomes


class CheckRun:
    """One run of the check: its report, and the steps that fill it.

    Args:
        args: the parsed command line (:func:`polytf.bench.gpu_check.main`).
        bootstrap: ``started`` (epoch seconds) and the bootstrap's ``steps``.
        command: the command as the report shows it.
    """

    def __init__(self, args: argparse.Namespace, bootstrap: dict[str, Any], command: str) -> None:
        from polytf.bench.machine import describe_machine

        self.args = args
        self.started = float(bootstrap["started"])
        host = describe_machine()
        self.report: dict[str, Any] = {
            "command": command,
            "dry_run": bool(args.dry_run),
            "started": datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": host.get("commit"),
            "host": host,
            "time_limit_s": float(args.time_limit),
            "elapsed_s": 0.0,
            "finished": False,
            "stopped": None,
            "steps": list(bootstrap.get("steps", [])),
            "device": {},
            "versions": {},
            "tests": {},
            "rows": [],
            "planned_rows": [],
        }
        self._running: tuple[dict[str, Any], float] = ({"status": "done"}, self.started)  # the step under way, and its start

    def elapsed_s(self) -> float:
        return time.time() - self.started

    def progress(self, message: str) -> None:
        print(f"[{self.elapsed_s():6.1f} s] {message}", flush=True)

    def save(self) -> None:
        self.report["elapsed_s"] = self.elapsed_s()
        write_report(self.report, self.args.out)

    def _step(self, name: str, body: Callable[[], str]) -> bool:
        """Run ``body`` (returns its detail) as the step ``name``; record and save its outcome."""
        self.progress(f"step {name}")
        started = time.time()
        record = {"step": name, "status": "running", "seconds": 0.0, "detail": ""}
        self._running = (record, started)
        self.report["steps"].append(record)
        self.save()
        try:
            record.update(status="ok", detail=body())
        except Exception as error:  # noqa: BLE001 - a failed step is recorded and reported, never a traceback
            record.update(status="failed", detail=f"{type(error).__name__}: {error}")
        record["seconds"] = time.time() - started
        self.progress(f"step {name}: {record['status']}: {record['detail']}")
        self.save()
        return record["status"] == "ok"

    def execute(self) -> int:
        """All steps; the exit status: 0 when every step, test and row passed, 130 when
        interrupted, else 1."""
        try:
            if self._step("environment", self.environment):
                if not self.args.skip_tests:
                    self._step("tests", self.tests)
                self._step("bench", self.bench)
            else:
                self.report["stopped"] = "the environment step failed"
            self.report["finished"] = self.report["stopped"] is None
        except KeyboardInterrupt:
            self.report["stopped"] = "interrupted (Ctrl-C or SIGTERM)"
            record, started = self._running
            if record["status"] == "running":
                record.update(status="interrupted", seconds=time.time() - started)
            self.progress("interrupted: the report keeps what finished")
            return 130
        finally:
            self.save()
            self.progress(f"report: {self.args.out}/gpu_check.md")
        steps_ok = all(step["status"] == "ok" for step in self.report["steps"])
        rows_ok = all(row["status"] == "ok" for row in self.report["rows"])
        tests_ok = all(test["outcome"] in ("passed", "skipped", "collected") for test in self.report["tests"].get("outcomes", []))
        return 0 if steps_ok and rows_ok and tests_ok and self.report["finished"] else 1

    def environment(self) -> str:
        from polytf.bench.gpu_check_environment import describe_emulated_device, describe_gpu, llvmlite_too_old, package_versions

        versions = self.report["versions"] = package_versions()
        missing = [name for name in ("islpy", "optuna", "platformdirs") if versions.get(name) is None]
        if missing:
            raise RuntimeError(f"{', '.join(missing)} not installed: bring the wheels (python -m polytf.bench.gpu_wheels) and pass --wheels .whl")
        if llvmlite_too_old(versions.get("llvmlite")):
            raise RuntimeError(
                f"llvmlite {versions.get('llvmlite')} cannot emit PTX this GPU takes (polytf needs 0.45 or newer): bring its wheel "
                "(python -m polytf.bench.gpu_wheels --also llvmlite; about 57 MiB)"
            )
        if self.args.dry_run:
            device = self.report["device"] = describe_emulated_device()
        else:
            from polytf.compiler.backends import cuda_unavailable_reason

            reason = cuda_unavailable_reason()
            if reason is not None:
                raise RuntimeError(f"no GPU to check: {reason} (--dry-run checks everything but the GPU)")
            device = self.report["device"] = describe_gpu()
        listed = ", ".join(f"{name} {version}" for name, version in versions.items() if version)
        memory = f", {device['memory_gib']:.0f} GiB" if device.get("memory_gib") else ""
        return f"{device['name']} ({device['compute_capability']}, {device['multiprocessors']} SMs{memory}, driver {device['driver_version']}); {listed}"

    def tests(self) -> str:
        remaining = self.args.time_limit - self.elapsed_s()
        limit_s = max(_TESTS_TIME_S[1], min(_TESTS_TIME_S[0], remaining / 2))
        with tempfile.TemporaryDirectory(prefix="polytf-gpu-tests-") as folder:
            junit = Path(folder) / "tests.xml"
            isolated = ["-P"] if sys.version_info >= (3, 11) else []  # never the source tree's polytf from the cwd
            command = [sys.executable, *isolated, "-m", "pytest", str(self.args.tests), "-q", "-p", "no:cacheprovider"]
            command += ["--collect-only"] if self.args.dry_run else [f"--junitxml={junit}"]
            shown = f"pytest {self.args.tests} -q" + (" --collect-only" if self.args.dry_run else "")
            returncode, lines = self._stream(command, limit_s)
            tests: dict[str, Any] = {"command": shown, "returncode": returncode, "summary": next((ln for ln in reversed(lines) if ln.strip()), "")}
            if self.args.dry_run:
                tests["outcomes"] = [{"test": ln.strip(), "outcome": "collected", "seconds": 0.0, "message": ""} for ln in lines if "::" in ln]
            elif junit.exists():
                tests["outcomes"] = test_outcomes(junit)
            self.report["tests"] = tests
        if returncode is None:
            raise RuntimeError(f"the GPU tests ran past {limit_s:.0f} s and were stopped: {tests['summary']}")
        if returncode not in (0, 5) or not tests.get("outcomes"):  # 5: nothing collected
            raise RuntimeError(f"{shown} exited with {returncode}: {tests['summary']}")
        return tests["summary"]

    def _stream(self, command: list[str], limit_s: float) -> tuple[int | None, list[str]]:
        """Run ``command``, echoing its output as it comes; its exit status (None when it was
        stopped after ``limit_s`` seconds) and its lines."""
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            process.kill()

        timer = threading.Timer(limit_s, stop)
        timer.start()
        lines = []
        try:
            for line in process.stdout:
                lines.append(line.rstrip("\n"))
                print(f"    {line}", end="", flush=True)
            process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:
                process.kill()
        return (None if stopped.is_set() else process.returncode), lines

    def bench(self) -> str:
        from polytf.bench.gpu_check_rows import DRY_RUN_SIZES, FULL_SIZES, check_rows, measure_row

        sizes = DRY_RUN_SIZES if self.args.dry_run else FULL_SIZES
        rows = check_rows(sizes)
        if self.args.rows:
            words = [word.strip() for word in self.args.rows.split(",") if word.strip()]
            rows = [row for row in rows if any(word in row.label for word in words)]
        self.report["planned_rows"] = [row.label for row in rows]
        backend = self._backend()
        with tempfile.TemporaryDirectory(prefix="polytf-gpu-rows-") as folder:
            for number, row in enumerate(rows, 1):
                if self.args.time_limit - self.elapsed_s() < _ROW_RESERVE_S:
                    self.report["stopped"] = f"the time limit ({self.args.time_limit:.0f} s) left out {len(rows) - number + 1} rows"
                    break
                self.progress(f"row {number}/{len(rows)}: {row.label}")
                try:
                    record = measure_row(row, backend, Path(folder), sizes, not self.args.dry_run, lambda text: self.progress(f"  {text}"))
                except Exception as error:  # noqa: BLE001 - a failed row is data: its reason is reported
                    lines = traceback.format_exception(type(error), error, error.__traceback__)
                    record = {"row": row.label, "status": "failed", "error": f"{type(error).__name__}: {error}", "traceback": "".join(lines[-6:])}
                self.report["rows"].append(record)
                self._summarise(record)
                self.save()
                _release_device_memory()
        done = self.report["rows"]
        return f"{sum(r['status'] == 'ok' for r in done)} of {len(rows)} rows correct and timed" + (f"; {self.report['stopped']}" if self.report["stopped"] else "")

    def _backend(self):
        from polytf.compiler.backends import CudaBackend, select_backend
        from polytf.runtime.cuda.emulation import EmulatedDevice
        from polytf.targets.cuda import CudaTarget

        if self.args.dry_run:
            return CudaBackend(CudaTarget(compute_capability="sm_90"), 1, EmulatedDevice())
        return select_backend("cuda")

    def _summarise(self, record: dict[str, Any]) -> None:
        if record["status"] != "ok":
            self.progress(f"  {record['row']}: {record['status'].upper()}: {record.get('error', '')[:300]}")
            return
        baseline = record.get("baseline", {})
        versus = f", {baseline['system']} {baseline['median_s'] * 1e3:.3f} ms (baseline / polytf {record['baseline_over_polytf']:.2f})" if baseline.get("median_s") else ""
        self.progress(f"  {record['row']}: polytf {record['polytf_s'] * 1e3:.3f} ms{versus}, max abs error {record['max_abs_error']:.2e}")


def _release_device_memory() -> None:
    """Give the memory pools' free blocks back to the device between rows (CuPy's, PyTorch's)."""
    for name in ("cupy", "torch"):
        module = sys.modules.get(name)
        if module is None:
            continue
        try:
            if name == "cupy":
                module.get_default_memory_pool().free_all_blocks()
            elif module.cuda.is_available():
                module.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - only housekeeping
            pass
