"""A year in five minutes: the scenario runner (`python -m benchmarks.scenario`) with its short schedule (every
event type once, small rates) against a cluster of its own, and every invariant of its table held. Marked `scenario`: ./scripts/test
leaves it out, ./scripts/test-scenario runs it (CI's step after the suite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.compiled_build import compiled_extensions
from harness.scratch import scratch_directory

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.scenario
@pytest.mark.own_cluster("year")
@pytest.mark.timeout(1500)
def test_a_year_in_five_minutes_keeps_every_invariant(exclusive_cluster_slot: None) -> None:
    # Given the scenario runner's cluster (Kafka 3.9.2, SASL_SSL with SCRAM) and the proxy in front of it
    work = scratch_directory("insync-year-")
    # When five minutes of overlapping events run under the producers (kill, pause, rolling restart, reloads,
    # hostile clients, a silent network, a consumer group's rebalances, certificates rotated on both legs and a CA
    # change, slow consumers, the rolling upgrade to 4.3.1 and its metadata.version bump, a share group), on the
    # compiled build when this checkout has one (the suite does not compile: the runner alone would)
    found, _stale = compiled_extensions()
    build = [] if found else ["--interpreted"]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.scenario", "--minutes", "5", "--rate", "20",
         "--latency-rate", "20", "--out", str(work), *build],
        capture_output=True, text=True, timeout=1400, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    print(result.stdout[-6000:])
    summary = json.loads((work / "summary.json").read_text())
    # Then every invariant of the table held (the added latency is reported, not asserted: 2 shared cores)
    failed = [row for row in summary["invariants"] if not row["ok"] and not row["invariant"].startswith("added latency")]
    assert not failed, f"{failed}\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    assert summary["ok"] and result.returncode == 0
    assert summary["kafka"] == "3.9.2 -> 4.3.1" and summary["metadata_version_bump"].startswith("metadata.version 4.3")
    assert {e["name"] for e in summary["events"]} >= {
        "kill+restart", "pause 30s", "rolling restart", "SIGHUP reload", "POST /reload", "hostile+storm",
        "silent network 60s", "rolling upgrade", "group rebalance", "cert rotation", "CA change", "slow consumers",
        "share group"}
