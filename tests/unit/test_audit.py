"""The audit sink: never blocks, drops and counts when full, rotates, keeps disk bounded."""

from __future__ import annotations

import json
from pathlib import Path

from harness.waiting import wait_until
from insync_proxy.proxy.audit.writer import AuditLog
from insync_proxy.proxy.config.settings import AuditConfig
from insync_proxy.proxy.observability.metrics import ProxyMetrics


def _value(metrics: ProxyMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


def test_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    metrics = ProxyMetrics()
    audit = AuditLog(AuditConfig(directory=str(tmp_path), queue_size=10), "p", metrics)
    for i in range(25):  # the writer thread is not started: nothing drains the queue
        audit.emit({"event": "produce_decision", "topic": "t", "partition": i})
    assert _value(metrics, "insync_proxy_audit_events_dropped_total", reason="queue_full") == 15


def test_files_rotate_and_total_size_stays_bounded(tmp_path: Path) -> None:
    metrics = ProxyMetrics()
    audit = AuditLog(AuditConfig(directory=str(tmp_path), max_file_bytes=2000, max_total_bytes=6000), "p", metrics)
    audit.start()
    for batch in range(40):
        for i in range(10):
            audit.emit({"event": "produce_decision", "topic": "t", "partition": i, "n": batch})
        wait_until(lambda b=batch: _value(metrics, "insync_proxy_audit_events_written_total", sink="file")
                   >= (b + 1) * 10, 10, interval=0.005, what="events written")
    audit.close()
    files = sorted(tmp_path.glob("audit-p-*.jsonl"))
    assert len(files) >= 3
    assert sum(f.stat().st_size for f in files) <= 6000 + 2500  # the bound, plus the file being written
    record = json.loads(files[-1].read_text().splitlines()[-1])
    assert record["schema_version"] == 2 and record["proxy_id"] == "p" and record["ts"].endswith("Z")
