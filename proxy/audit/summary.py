"""Audit schema v2's `produce_summary`: per-interval accumulators, so audit volume follows decisions.

Every Produce partition the proxy handles adds a few integers to the accumulator of its key
(listener, client id, topic, partition, acks requested, acks sent, decision, error code) and one to a
latency bucket (audit/buckets.py). Every `interval_seconds` the event loop swaps the
accumulators out and hands one event per key that saw traffic to the audit writer, which formats
them off the request path. Accumulated and drained on the event loop only: exact, no locks.
"""

from __future__ import annotations

import time
from typing import Any, Final

from insync_proxy.audit.buckets import BOUNDS_MS, LAST_BOUNDED, OVERFLOW, bucket_index
from insync_proxy.audit.events import format_ts, produce_summary_event

#: (listener, client_id, topic, partition, acks_requested, acks_sent, decision, error_code)
SummaryKey = tuple[str, str | None, str, int, int, int | None, str, int | None]

#: The bucket `_Accumulator.add` is given for a request without a measured latency.
NO_LATENCY: Final = -1


class _Accumulator:
    __slots__ = ("acks_requested", "acks_sent", "buckets", "client_id", "decision", "error_code", "latency_count",
                 "latency_max", "latency_min", "latency_sum", "listener", "record_bytes", "records", "requests")

    def __init__(self, listener: str, client_id: str | None, acks_requested: int, acks_sent: int | None,
                 decision: str, error_code: int | None) -> None:
        #: The key's fields beside its topic and partition (`ProduceSummaries._by_partition` finds it by those).
        self.listener = listener
        self.client_id = client_id
        self.acks_requested = acks_requested
        self.acks_sent = acks_sent
        self.decision = decision
        self.error_code = error_code
        self.requests = 0
        self.records = 0
        self.record_bytes = 0
        self.latency_count = 0
        self.latency_sum = 0.0
        self.latency_min = float("inf")
        self.latency_max = 0.0
        #: Requests per latency bucket, by bucket index (a list: one indexed add per request, no hashing).
        self.buckets = [0] * (OVERFLOW + 1)

    def add(self, records: int, record_bytes: int, latency_ms: float, bucket: int) -> None:
        """One partition of one request; `bucket` < 0 (`NO_LATENCY`): no latency measured (acks=0, an answer of the
        proxy's own), and `latency_ms` is then not read. Native numbers, not optional ones: nothing boxed per call."""
        self.requests += 1
        self.records += records
        self.record_bytes += record_bytes
        if bucket >= 0:
            self.latency_count += 1
            self.latency_sum += latency_ms
            if latency_ms < self.latency_min:
                self.latency_min = latency_ms
            if latency_ms > self.latency_max:
                self.latency_max = latency_ms
            self.buckets[bucket] += 1


class ProduceSummaries:
    """The accumulators of the current interval."""

    def __init__(self, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        self._current: dict[SummaryKey, _Accumulator] = {}
        #: The same accumulators by topic, then partition: a key other than the last one (connections and
        #: partitions taking turns) is found without building its tuple of eight and hashing it (measured with
        #: callgrind at 2,000 requests/s: the accumulator's 1,220 instructions a request -> 640).
        self._by_partition: dict[str, dict[int, list[_Accumulator]]] = {}
        self._started = time.time()
        #: The key `accumulator` gave last, field by field, and its accumulator: a producer's requests come in runs of
        #: one key, and a run costs its first request the key's tuple, hash and lookup, the others eight compares.
        self._last_accumulator: _Accumulator | None = None
        self._last_listener = self._last_topic = self._last_decision = ""
        self._last_client_id: str | None = None
        self._last_partition = self._last_acks_requested = 0
        self._last_acks_sent: int | None = None
        self._last_error_code: int | None = None
        #: The latency bucket `latency_bucket` gave last and its range (`_bucket_low`, `_bucket_high`] in ms: a steady
        #: workload's latencies stay in a few neighbouring buckets, and one in the same bucket costs two compares.
        self._bucket = 0
        self._bucket_low = 0.0
        self._bucket_high = -1.0  # an empty range: the first latency is placed by `bucket_index`

    def latency_bucket(self, latency_ms: float) -> int:
        """`bucket_index(latency_ms)`, the last one's range checked first."""
        if self._bucket_low < latency_ms <= self._bucket_high:
            return self._bucket
        i = bucket_index(latency_ms)
        self._bucket = i
        # Bucket 0 holds everything at or below its bound, the overflow bucket everything above the last one: their
        # ranges here reach as far as a literal does (a value beyond is placed by `bucket_index`, in the same bucket).
        self._bucket_low = BOUNDS_MS[i - 1] if i > 0 else -1e300
        self._bucket_high = BOUNDS_MS[i] if i <= LAST_BOUNDED else 1e300
        return i

    def add(self, key: SummaryKey, records: int, record_bytes: int, latency_ms: float | None,
            bucket: int | None) -> None:
        """One partition of one request; `bucket` is `bucket_index(latency_ms)`, computed once per request (both
        None: no latency measured)."""
        if latency_ms is None or bucket is None:
            latency_ms, bucket = 0.0, NO_LATENCY
        self.accumulator(*key).add(records, record_bytes, latency_ms, bucket)

    def accumulator(self, listener: str, client_id: str | None, topic: str, partition: int, acks_requested: int,
                    acks_sent: int | None, decision: str, error_code: int | None) -> _Accumulator:
        """The accumulator of a key (its fields one by one: the same key as the last call's builds no tuple)."""
        acc = self._last_accumulator
        # Compared by identity, but the topic: the same values come as the same objects (a connection's client id,
        # small ints, the decisions' names); equal ones that are not only take the lookup.
        if (acc is None or partition != self._last_partition or topic != self._last_topic
                or acks_requested != self._last_acks_requested or acks_sent is not self._last_acks_sent
                or error_code is not self._last_error_code or decision is not self._last_decision
                or client_id is not self._last_client_id or listener is not self._last_listener):
            acc = self._find(listener, client_id, topic, partition, acks_requested, acks_sent, decision, error_code)
            self._last_accumulator = acc
            self._last_listener, self._last_client_id, self._last_topic = listener, client_id, topic
            self._last_partition, self._last_acks_requested, self._last_acks_sent = partition, acks_requested, acks_sent
            self._last_decision, self._last_error_code = decision, error_code
        return acc

    def _find(self, listener: str, client_id: str | None, topic: str, partition: int, acks_requested: int,
              acks_sent: int | None, decision: str, error_code: int | None) -> _Accumulator:
        by_partition = self._by_partition.get(topic)
        if by_partition is None:
            by_partition = self._by_partition[topic] = {}
        accumulators = by_partition.get(partition)
        if accumulators is None:
            accumulators = by_partition[partition] = []
        for acc in accumulators:  # the strings by value: each connection decodes its own client id
            if (acc.acks_requested == acks_requested
                    and (acc.acks_sent is acks_sent or acc.acks_sent == acks_sent)
                    and (acc.error_code is error_code or acc.error_code == error_code)
                    and acc.decision == decision and acc.client_id == client_id and acc.listener == listener):
                return acc
        key = (listener, client_id, topic, partition, acks_requested, acks_sent, decision, error_code)
        found = self._current.get(key)
        if found is None:
            found = self._current[key] = _Accumulator(listener, client_id, acks_requested, acks_sent, decision,
                                                      error_code)
            accumulators.append(found)
        return found

    def __len__(self) -> int:
        return len(self._current)

    def drain(self, now: float | None = None) -> tuple[float, list[dict[str, Any]]]:
        """End the interval: (its end time, one `produce_summary` event per key that saw traffic)."""
        end = time.time() if now is None else now
        current, self._current = self._current, {}
        self._by_partition = {}
        self._last_accumulator = None  # the next interval's accumulators are new
        start, self._started = self._started, end
        start_text = format_ts(start)
        events = []
        for (listener, client_id, topic, partition, acks_requested, acks_sent, decision, error_code), acc in \
                current.items():
            measured = acc.latency_count > 0
            events.append(produce_summary_event(
                interval_start=start_text, interval_seconds=round(end - start, 6), listener=listener,
                client_id=client_id, topic=topic, partition=partition, acks_requested=acks_requested,
                acks_sent=acks_sent, decision=decision, error_code=error_code, requests=acc.requests,
                records=acc.records, record_bytes=acc.record_bytes, latency_count=acc.latency_count,
                latency_sum_ms=round(acc.latency_sum, 6),
                latency_min_ms=round(acc.latency_min, 6) if measured else None,
                latency_max_ms=round(acc.latency_max, 6) if measured else None,
                latency_buckets=[[i, c] for i, c in enumerate(acc.buckets) if c]))
        return end, events
