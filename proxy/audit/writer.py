"""The audit stream: JSON Lines of what the proxy decided and saw, in volume proportional to decisions.

Schema v2 (docs/audit-events.md, audit/schema-v2.json; names and builders in `insync_proxy.audit.events`): `produce_summary` per interval and key
(proxy/audit/summary.py), `isr_change` and `partition_readiness` when the proxy's view changes, and
`produce_decision` per request only with `detail = "every_request"`. Writing never blocks
or slows the produce path: events go through a bounded queue to a writer thread; when the queue is
full the event is dropped and counted (insync_proxy_audit_events_dropped_total), never waited for.
Files rotate by size; the oldest are deleted beyond the configured total (bounded disk).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from insync_proxy.audit.events import envelope
from insync_proxy.proxy.config.settings import AuditConfig
from insync_proxy.proxy.observability.logs import RateLimitedLog, error_text
from insync_proxy.proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy.audit")
#: A full disk fails every write again: one line, then a summary per interval (drops are counted).
_repeated = RateLimitedLog(log)

_STOP = object()


class AuditLog:
    """Bounded queue + writer thread + size-rotated JSON Lines files."""

    def __init__(self, config: AuditConfig, proxy_id: str, metrics: ProxyMetrics) -> None:
        self.config = config
        self.proxy_id = proxy_id
        self.metrics = metrics
        self.directory = Path(config.directory)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=config.queue_size)
        self._thread: threading.Thread | None = None
        self._file: Any = None
        self._file_path: Path | None = None
        self._file_bytes = 0
        self._written = metrics.audit_events_written_total.labels("file")
        self._dropped_full = metrics.audit_events_dropped_total.labels("queue_full")
        self._dropped_error = metrics.audit_events_dropped_total.labels("write_error")
        self.kafka_sink: Any = None  # KafkaAuditSink, when [audit] kafka_topic is set

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="insync-proxy-audit", daemon=True)
        self._thread.start()
        log.info("audit events go to %s (files up to %d bytes, %d bytes in all)", self.directory.resolve(),
                 self.config.max_file_bytes, self.config.max_total_bytes)

    def emit(self, event: dict[str, Any], at: float | None = None) -> None:
        """Queue one event stamped `at` (epoch seconds; default now); drops and counts when the queue is full."""
        event["_t"] = time.time() if at is None else at
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._dropped_full.inc()

    def emit_many(self, events: list[dict[str, Any]], at: float) -> None:
        """Queue several events stamped `at` as one item (a summary interval); drops and counts when full."""
        if not events:
            return
        for event in events:
            event["_t"] = at
        try:
            self._queue.put_nowait(events)
        except queue.Full:
            self._dropped_full.inc(len(events))

    def close(self, timeout: float = 5.0) -> None:
        if self._thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            batch = item if isinstance(item, list) else [item]
            while len(batch) < 1000:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(more, list):
                    batch.extend(more)
                else:
                    batch.append(more)
            stop = any(e is _STOP for e in batch)
            lines = []
            for event in batch:
                if event is _STOP:
                    continue
                lines.append(json.dumps(envelope(event, event.pop("_t"), self.proxy_id), separators=(",", ":")))
            if lines:
                self._write("\n".join(lines) + "\n", len(lines))
                if self.kafka_sink is not None:
                    self.kafka_sink.offer([line.encode() for line in lines])
            if stop:
                if self._file is not None:
                    self._file.close()
                return

    def _write(self, text: str, count: int) -> None:
        try:
            if self._file is None or self._file_bytes >= self.config.max_file_bytes:
                self._rotate()
            data = text.encode()
            self._file.write(data)
            self._file.flush()
            self._file_bytes += len(data)
            self._written.inc(count)
        except OSError as exc:
            self._dropped_error.inc(count)
            _repeated.error("audit_write", "cannot write audit events to %s: %s", self.directory,
                            error_text(exc))
            self._file = None

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        safe_id = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.proxy_id)
        self._file_path = self.directory / f"audit-{safe_id}-{stamp}.jsonl"
        self._file = open(self._file_path, "ab")  # noqa: SIM115 - kept open across writes
        self._file_bytes = 0
        self._enforce_total()

    def _enforce_total(self) -> None:
        files = sorted(self.directory.glob("audit-*.jsonl"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files)
        for path in files:
            if total <= self.config.max_total_bytes or path == self._file_path:
                break
            size = path.stat().st_size
            try:
                os.remove(path)
                total -= size
                log.info("audit: deleted %s to stay under %d bytes", path.name, self.config.max_total_bytes)
            except OSError:
                pass
