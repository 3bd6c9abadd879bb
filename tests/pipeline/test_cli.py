"""The report's command line as a user runs it: the README's command verbatim on the layout the proxy
writes, and a failing job reported in one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .events import readiness, summary, write_jsonl

README = Path(__file__).resolve().parents[2] / "README.md"
#: The console scripts installed with this interpreter come first (a virtualenv used without activating it).
ENV = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def _readme_report_command() -> str:
    """The README's `insync-proxy report ...` command, as printed there (without the optional master part)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    match = re.search(r"`(insync-proxy report --input '[^']+' --output \S+)", text)
    assert match, "the README no longer shows an `insync-proxy report --input ... --output ...` command"
    return match.group(1)


def test_readme_report_command_runs_verbatim_on_the_proxys_flat_audit_directory(spark: Any, tmp_path: Path) -> None:
    if shutil.which("insync-proxy", path=ENV["PATH"]) is None:
        pytest.fail("`insync-proxy` is not on PATH: install the project (pip install -e '.[pipeline]')")
    from insync_proxy.proxy.config.settings import AuditConfig

    command = _readme_report_command()
    default = AuditConfig().directory  # where the proxy writes by default, relative to where it runs
    assert command == f"insync-proxy report --input '{default}/**/*.jsonl' --output out/"
    # Given the directory layout the proxy writes: <audit.directory>/audit-<proxy_id>-<time>.jsonl, no subdirectory
    audit = tmp_path / default
    write_jsonl(audit / "audit-orders-pod-1-20261121T070000000000Z.jsonl",
                [summary(0, requests=7, records=14, record_bytes=700), readiness(3, False, 1), readiness(8, True, 3)])
    write_jsonl(audit / "audit-orders-pod-1-20261121T080000000000Z.jsonl",
                [summary(3600, requests=5, records=5, record_bytes=50)])
    # When the README's command runs in a shell in that directory
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**ENV, "TMPDIR": str(temp)})
    # Then it succeeds, prints the summary, writes the tables, and shows no Spark chatter
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "produce requests: 12 (19 records counted, 750 record bytes)" in proc.stdout
    assert "below-min-ISR intervals: 1" in proc.stdout
    traffic = spark.read.parquet(str(tmp_path / "out" / "partition_traffic")).collect()
    assert sum(r["requests"] for r in traffic) == 12
    progress = [line for line in proc.stderr.splitlines() if line.strip()]
    assert all(line.startswith("[") for line in progress), proc.stderr  # only the report's own progress lines
    # and the JVM's log file is gone with the process: a report run every hour leaves nothing behind
    assert not list(temp.glob("insync-spark-*.log"))


def test_a_failing_job_is_reported_in_one_line(spark: Any, tmp_path: Path) -> None:
    # Given an input on a file system Spark has no connector for
    proc = subprocess.run(
        ["insync-proxy", "report", "--quiet", "--master", "local[1]", "--input", "s3a://no-bucket/audit/x.jsonl",
         "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, env={**ENV, "TMPDIR": str(tmp_path)},
    )
    # Then the exit status is 1 and stderr is one line naming the cause, without a Java or Python trace
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: the report job failed: ") and "S3AFileSystem" in lines[0]
    assert "--verbose" in lines[0]
    # and the JVM's log file it names is kept
    named = re.search(r"Spark's log: (\S+);", lines[0])
    assert named, lines[0]
    log = Path(named.group(1))
    assert log.parent == tmp_path and log.is_file()
