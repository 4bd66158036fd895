"""A seeded mutation fuzzer over small GraphDefs: the front half of polytf (read, shape
inference, graph passes, partition, lowering) either succeeds or raises a PolytfError
for every case: no traceback, no crash, no hang. The fuzzer runs in a subprocess, so a
crash fails this test instead of killing pytest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).with_name("fuzz_runner.py")


def test_mutated_graphdefs_give_a_result_or_a_polytf_error():
    result = subprocess.run([sys.executable, str(RUNNER), "--cases", "300", "--seed", "20261122", "--time-limit", "60", "--json"], capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 300, result.stderr[-2000:]
    bad = [f"case {r['seed']} ({r['description']}): {r['outcome']}: {r['detail']}" for r in rows if r["outcome"] not in ("ok", "error")]
    assert bad == []
    outcomes = {r["outcome"] for r in rows}
    assert outcomes == {"ok", "error"}  # the mutations reach both branches
    assert max(r["peak_rss_mb"] for r in rows) < 1024


def test_the_generator_is_deterministic():
    sys.path.insert(0, str(RUNNER.parent))
    from graphdef_mutations import case

    assert case(7) == case(7) and case(7) != case(8)
