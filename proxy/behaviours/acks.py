"""Acks policy for Produce requests: KIP-926 acks=-2, KIP-1 validation, fast_fail and acks_floor.

- acks -1, 0, 1: forwarded unchanged, record bytes untouched (acks=0: no response is awaited).
- acks -2 ("acks = min.insync.replicas"): per partition, ISR size vs effective min ISR in the proxy's
  view. Below: answered NOT_ENOUGH_REPLICAS (19) by the proxy, never forwarded. Otherwise, or when
  the view does not know (never guess): forwarded with acks=-1. One merged response, partitions in
  request order, the client's correlation id.
- Any other value on Produce v1+: INVALID_REQUIRED_ACKS (21) on every partition, nothing forwarded
  (KIP-1). Produce v0 keeps the old behaviour: forwarded as is.
- Per topic pattern: `fast_fail` runs the acks=-2 precheck for acks=-1 too; `acks_floor` raises
  acks=1 to -1 or -2.
"""

from __future__ import annotations

import functools
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final

from insync_proxy.protocol import (
    ApiKey,
    ErrorCode,
    ProduceResponseScan,
    ProtocolError,
    build_forward_request_chunks,
    build_produce_error_response,
    index_produce_request,
    merge_produce_responses,
    produce_acks_offset,
    produce_response_error_codes,
)
from insync_proxy.protocol.produce import (
    PartitionKey,
    PartitionSpan,
    ProduceRequestIndex,
    count_records,
    produce_partition_records,
    produce_response_errors,
)
from insync_proxy.proxy.audit.summary import ProduceSummaries, latency_bucket
from insync_proxy.proxy.config import AcksPolicyConfig
from insync_proxy.proxy.context import BehaviourContext
from insync_proxy.proxy.exchange import BehaviourBase, Exchange, Frame
from insync_proxy.proxy.metrics import TopicCounterChild

log: Final = logging.getLogger("insync_proxy.acks")

ACKS_MIN_INSYNC: Final = -2
_BELOW_MIN_ISR_ERRORS: Final = frozenset({ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND})
_STALE_LEADER_ERRORS: Final = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
})
#: The name metrics and audit use for a topic id the proxy could not name (never the id itself).
UNKNOWN_TOPIC_ID: Final = "__unknown_topic_id__"
VALID_ACKS: Final = frozenset({-2, -1, 0, 1})
_I16: Final = struct.Struct(">h")

FORWARDED: Final = "forwarded"
RAISED_BY_FLOOR: Final = "raised_by_floor"
ANSWERED_NOT_ENOUGH_REPLICAS: Final = "answered_not_enough_replicas"
ANSWERED_INVALID_REQUIRED_ACKS: Final = "answered_invalid_required_acks"

#: The produce_partitions, produce_records and produce_record_bytes children of one combination.
_Counters = tuple[TopicCounterChild, TopicCounterChild, TopicCounterChild]


class _Decision:
    """One partition's outcome, kept until the response is written (for audit and metrics)."""

    __slots__ = ("acks_sent", "decision", "error_code", "isr_size", "min_isr", "partition", "record_bytes", "records",
                 "topic")

    def __init__(self, topic: str, partition: int, span: PartitionSpan, frame: memoryview, isr_size: int | None,
                 min_isr: int | None, decision: str, acks_sent: int | None, error_code: int | None) -> None:
        self.topic = topic
        self.partition = partition
        self.record_bytes = max(span.records_size, 0)
        self.records = count_records(frame, span.records_start, span.records_size) if span.records_size > 0 else 0
        self.isr_size = isr_size
        self.min_isr = min_isr
        self.decision = decision
        self.acks_sent = acks_sent
        self.error_code = error_code


class _Walked:
    """A Produce request's (acks, partitions) from `produce_partition_records`, kept for the audit (a plain
    class: built per request, see `SlottedRecord`)."""

    __slots__ = ("acks", "partitions")

    def __init__(self, walk: tuple[int, list[tuple[str | uuid.UUID, int, int, int]]]) -> None:
        self.acks, self.partitions = walk


class ProduceDecisions:
    """AcksPolicy's state of one Produce exchange: what it decided, until the response is written (a plain
    class: built per decided request, see `SlottedRecord`)."""

    __slots__ = ("acks", "decisions", "index", "proxy_errors")

    def __init__(self, acks: int, decisions: list[_Decision], index: ProduceRequestIndex) -> None:
        self.acks = acks
        self.decisions = decisions
        self.index = index
        #: Partitions the proxy answered itself when the rest was forwarded (merged into the answer).
        self.proxy_errors: dict[PartitionKey, int] | None = None


class AcksPolicy(BehaviourBase):
    """Reads every Produce request's acks in place and decides, per partition, what goes upstream."""

    request_keys = frozenset({ApiKey.PRODUCE})
    complete_keys = frozenset({ApiKey.PRODUCE})

    def __init__(
        self,
        context: BehaviourContext,
        policies: Sequence[AcksPolicyConfig],
        summaries: ProduceSummaries | None = None,
        every_request: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context = context
        #: When a failed precheck last re-read a topic's ISR (a parameter: tests step it by hand).
        self._clock = clock
        self.policies = list(policies)
        self.has_floor = any(p.acks_floor is not None for p in self.policies)
        self.has_fast_fail = any(p.fast_fail for p in self.policies)
        #: Audit v2 accumulators: every Produce partition counts, decided or plainly forwarded.
        self.summaries = summaries
        #: audit.detail = "every_request": one produce_decision event per partition per request (debugging).
        self.every_request = every_request and context.audit is not None
        self._policy_cache: dict[str, AcksPolicyConfig | None] = {}
        self._last_isr_refresh: dict[str, float] = {}
        self._decision_counters: dict[tuple[str, int, int | None, str], _Counters] = {}

    # ------------------------------------------------------------------ request path
    def on_request(self, exchange: Exchange) -> Awaitable[None] | None:
        if exchange.api_version >= 13:
            # Produce v13 names topics by id: policies, the precheck, metrics and audit need the name.
            unknown = self._unknown_topic_ids(exchange)
            if unknown:
                return self._after_resolving(exchange, unknown)
        self._on_request(exchange)
        return None

    def _unknown_topic_ids(self, exchange: Exchange) -> list[uuid.UUID]:
        known = self.context.cluster_view.topic_ids
        try:
            walked = _Walked(produce_partition_records(exchange.request_frame))
        except ProtocolError:
            return []  # the broker judges the request; on_complete walks it again and says why
        exchange.put(walked)  # the accounting reuses this walk when the response is written
        return [t for t in dict.fromkeys(p[0] for p in walked.partitions)
                if isinstance(t, uuid.UUID) and t not in known]

    async def _after_resolving(self, exchange: Exchange, topic_ids: list[uuid.UUID]) -> None:
        await self.context.resolve_topic_ids(topic_ids)
        self._on_request(exchange)

    def _on_request(self, exchange: Exchange) -> None:
        frame = exchange.request_frame
        offset = produce_acks_offset(frame)
        acks: int = _I16.unpack_from(frame, offset)[0]
        if acks == 0:
            exchange.expects_response = False
        valid = -2 <= acks <= 1  # VALID_ACKS, without a set lookup (hash(-1) == hash(-2): a collision)
        special = (
            acks == ACKS_MIN_INSYNC
            or not valid
            or (self.has_floor and acks == 1)
            or (self.has_fast_fail and acks == -1)
        )
        if not special or (not valid and exchange.api_version == 0):
            # The hot path (and Produce v0's old behaviour for any acks): forwarded as is. Its partitions are
            # read now, while the frame is fresh in the CPU's caches (measured: a fifth of the cost of the
            # same walk when the response comes back); on_complete counts them (metrics, and the audit's
            # summaries when the audit is on) and learns from the leader's answer.
            if exchange.get(_Walked) is None:
                try:
                    exchange.put(_Walked(produce_partition_records(frame, offset)))
                except ProtocolError:
                    pass  # the broker judges the request; on_complete walks it again and says why
            return
        index = index_produce_request(frame)
        if not valid:
            self._reject_invalid_acks(exchange, index, acks)
            return
        self._decide(exchange, index, acks)

    def _policy(self, topic: str) -> AcksPolicyConfig | None:
        """The first policy whose pattern matches the topic (cached per topic)."""
        try:
            return self._policy_cache[topic]
        except KeyError:
            policy = self._policy_cache[topic] = next((p for p in self.policies if p.matches(topic)), None)
            return policy

    def _decide(self, exchange: Exchange, index: ProduceRequestIndex, acks: int) -> None:
        view = self.context.cluster_view
        metrics = self.context.metrics
        # acks is per request: a floor on any of its topics raises the whole request.
        acks_sent = acks
        floor_topics: set[str] = set()
        if acks == 1 and self.has_floor:
            for t in index.topics:
                name = view.topic_name(t.topic) or UNKNOWN_TOPIC_ID
                policy = self._policy(name)
                if policy is not None and policy.acks_floor is not None:
                    floor_topics.add(name)
                    # The strongest floor of the request's topics wins, whatever their order: -2 (checked
                    # and sent as -1) over -1.
                    if acks_sent == 1 or policy.acks_floor == ACKS_MIN_INSYNC:
                        acks_sent = policy.acks_floor
        decisions: list[_Decision] = []
        errors: dict[PartitionKey, int] = {}
        for span in index.partitions():
            name = view.topic_name(span.topic) or UNKNOWN_TOPIC_ID
            precheck = acks_sent == ACKS_MIN_INSYNC or (
                acks_sent == -1 and self.has_fast_fail and (p := self._policy(name)) is not None and p.fast_fail
            )
            isr_size, min_isr = self._isr(name, span.partition)
            decision = RAISED_BY_FLOOR if name in floor_topics else FORWARDED
            if precheck:
                label = metrics.topic(name)
                if isr_size is None or min_isr is None:
                    metrics.precheck_total.labels(label, "unknown").inc()
                elif isr_size < min_isr:
                    metrics.precheck_total.labels(label, "failed").inc()
                    errors[span.key] = ErrorCode.NOT_ENOUGH_REPLICAS
                    decision = ANSWERED_NOT_ENOUGH_REPLICAS
                    self._refresh_isr_soon(name)
                else:
                    metrics.precheck_total.labels(label, "passed").inc()
            if name in floor_topics:
                metrics.acks_floor_applied_total.labels(metrics.topic(name)).inc()
            upstream_acks = -1 if acks_sent == ACKS_MIN_INSYNC else acks_sent
            decisions.append(_Decision(
                name, span.partition, span, index.frame, isr_size, min_isr, decision,
                None if span.key in errors else upstream_acks,
                int(ErrorCode.NOT_ENOUGH_REPLICAS) if span.key in errors else None,
            ))
        state = ProduceDecisions(acks, decisions, index)
        exchange.put(state)
        upstream_acks = -1 if acks_sent == ACKS_MIN_INSYNC else acks_sent
        total = len(decisions)
        if errors and len(errors) == total:
            exchange.answer_locally(build_produce_error_response(index, errors))
            return
        if errors:
            keep = {span.key for span in index.partitions() if span.key not in errors}
            exchange.upstream_frame = list(build_forward_request_chunks(index, keep, acks=upstream_acks)[1:])
            state.proxy_errors = errors
            exchange.response_hooks.append(functools.partial(_merge, state))
        elif upstream_acks != acks:
            frame = index.frame
            a = index.acks_offset
            exchange.upstream_frame = [frame[:a], _I16.pack(upstream_acks), frame[a + 2:]]
        if upstream_acks == 0:
            exchange.expects_response = False
        elif acks == 0:
            exchange.expects_response = True

    def _isr(self, topic: str, partition: int) -> tuple[int | None, int | None]:
        readiness = self.context.cluster_view.readiness(topic, partition, self.context.min_insync.peek(topic))
        return readiness.isr_size, readiness.min_isr

    def _refresh_isr_soon(self, topic: str) -> None:
        """A failed precheck re-reads the topic's ISR (at most once a second) so a retry sees recovery."""
        now = self._clock()
        if now - self._last_isr_refresh.get(topic, 0.0) < 1.0:
            return
        self._last_isr_refresh[topic] = now
        self.context.refresh_topics([topic])

    def _reject_invalid_acks(self, exchange: Exchange, index: ProduceRequestIndex, acks: int) -> None:
        errors = {span.key: int(ErrorCode.INVALID_REQUIRED_ACKS) for span in index.partitions()}
        exchange.answer_locally(build_produce_error_response(index, errors))
        exchange.put(ProduceDecisions(acks, [
            self._plain_decision(span, ANSWERED_INVALID_REQUIRED_ACKS, None, int(ErrorCode.INVALID_REQUIRED_ACKS),
                                 index.frame)
            for span in index.partitions()
        ], index))

    def _plain_decision(self, span: PartitionSpan, decision: str, acks_sent: int | None,
                        error_code: int | None, frame: memoryview) -> _Decision:
        name = self.context.cluster_view.topic_name(span.topic) or UNKNOWN_TOPIC_ID
        isr_size, min_isr = self._isr(name, span.partition)
        return _Decision(name, span.partition, span, frame, isr_size, min_isr, decision, acks_sent, error_code)

    # ------------------------------------------------------------------ completion
    def on_complete(self, exchange: Exchange, latency_seconds: float | None) -> None:
        """After the response was written (or forwarded, for acks=0): metrics and audit per partition."""
        state = exchange.get(ProduceDecisions)
        if state is None:
            self._account_forwarded(exchange, latency_seconds)
            return
        acks, decisions = state.acks, state.decisions
        metrics = self.context.metrics
        response = exchange.response
        codes: dict[tuple[str, int], int] = {}
        if response is not None and any(d.error_code is None and d.acks_sent != 0 for d in decisions):
            codes = _response_error_codes(response, exchange.api_version, self.context)
            # Only the broker's own answers teach the view (the merged answer also holds the proxy's).
            forwarded = {(d.topic, d.partition) for d in decisions if d.error_code is None}
            self._learn_from_answer((key, code) for key, code in codes.items() if key in forwarded)
        listener = exchange.listener.label
        latency_ms, bucket = latency_bucket(latency_seconds)
        summaries = self.summaries
        for d in decisions:
            error_code = d.error_code if d.error_code is not None else codes.get((d.topic, d.partition))
            if d.decision in (ANSWERED_NOT_ENOUGH_REPLICAS, ANSWERED_INVALID_REQUIRED_ACKS):
                metrics.proxy_answered_errors_total.labels(metrics.topic(d.topic), str(error_code)).inc()
            if summaries is None:
                self._count(d.topic, acks, d.acks_sent, d.decision, d.records, d.record_bytes)
                continue
            acc = summaries.add((listener, exchange.client_id, d.topic, d.partition, acks, d.acks_sent, d.decision,
                                 error_code), d.records, d.record_bytes, latency_ms, bucket)
            counters: _Counters | None = acc.counters
            if counters is None:
                counters = acc.counters = self._counters(d.topic, acks, d.acks_sent, d.decision)
            counters[0].value += 1
            counters[1].value += d.records
            counters[2].value += d.record_bytes
        if self.every_request:
            self._emit_decisions(exchange, state, codes, latency_ms)

    def _account_forwarded(self, exchange: Exchange, latency_seconds: float | None) -> None:
        """A plainly forwarded request (no decision): counters, and with the audit on the summary
        accumulators (which hold the counters), per partition; the leader's errors teach the view.

        The common case costs two lean walks (request and response) and, per partition, one counter and
        one accumulator update: every partition acknowledged without error needs no lookup of its code.
        The audit's own share is the accumulator update: metrics and learning happen with it off too.
        """
        walked = exchange.get(_Walked)  # Produce v13: walked once already, to name its topic ids
        if walked is not None:
            acks, partitions = walked.acks, walked.partitions
        else:
            try:
                acks, partitions = produce_partition_records(exchange.request_frame)
            except ProtocolError as exc:  # the broker answered it, so this is the proxy's bug: count, don't fail
                log.debug("cannot account a Produce v%d request: %s", exchange.api_version, exc)
                return
        response = exchange.response
        codes: dict[tuple[str | uuid.UUID, int], int] | None = None  # None: no response (acks=0)
        all_ok = False
        if response is not None:
            try:
                scan = exchange.get(ProduceResponseScan)  # the address rewrite's walk (v10+), if it ran
                answered, failed = (produce_response_errors(response, exchange.api_version) if scan is None
                                    else (scan.answered, scan.failed))
            except ProtocolError:
                answered, failed = 0, []
            all_ok = answered == len(partitions) and not failed
            if not all_ok:
                # Every partition the broker answered has a code: 0 unless it failed.
                codes = dict.fromkeys(((t, p) for t, p, _, _ in partitions), 0) if answered == len(partitions) else {}
                codes.update(((t, p), c) for t, p, c in failed)
        view = self.context.cluster_view
        listener = exchange.listener.label
        client_id = exchange.client_id
        summaries = self.summaries
        if summaries is None:
            self._count_forwarded(partitions, acks, all_ok, codes)
            return
        latency_ms, bucket = latency_bucket(latency_seconds)
        for topic, partition, record_bytes, records in partitions:
            name = view.topic_name(topic) or UNKNOWN_TOPIC_ID
            if all_ok:
                error_code: int | None = 0
            elif codes is None:
                error_code = None
            else:
                error_code = codes.get((topic, partition))
                if error_code:
                    self._learn_from_answer((((name, partition), error_code),))
            acc = summaries.add((listener, client_id, name, partition, acks, acks, FORWARDED, error_code),
                                records, record_bytes, latency_ms, bucket)
            counters: _Counters | None = acc.counters
            if counters is None:
                counters = acc.counters = self._counters(name, acks, acks, FORWARDED)
            counters[0].value += 1
            counters[1].value += records
            counters[2].value += record_bytes
        if self.every_request:
            index = index_produce_request(exchange.request_frame)
            decisions = [self._plain_decision(span, FORWARDED, acks, None, index.frame) for span in index.partitions()]
            named = {(view.topic_name(t) or UNKNOWN_TOPIC_ID, p): c for (t, p), c in (codes or {}).items()}
            if all_ok:
                named = {(d.topic, d.partition): 0 for d in decisions}
            self._emit_decisions(exchange, ProduceDecisions(acks, decisions, index), named, latency_ms)

    def _count_forwarded(self, partitions: list[tuple[str | uuid.UUID, int, int, int]], acks: int, all_ok: bool,
                         codes: dict[tuple[str | uuid.UUID, int], int] | None) -> None:
        """The audit off: a forwarded request's partitions in the metrics, and the leader's errors learnt."""
        view = self.context.cluster_view
        for topic, partition, record_bytes, records in partitions:
            name = view.topic_name(topic) or UNKNOWN_TOPIC_ID
            if not all_ok and codes:
                error_code = codes.get((topic, partition))
                if error_code:
                    self._learn_from_answer((((name, partition), error_code),))
            counters = self._counters(name, acks, acks, FORWARDED)
            counters[0].value += 1
            counters[1].value += records
            counters[2].value += record_bytes

    def _learn_from_answer(self, codes: Iterable[tuple[tuple[str, int], int]]) -> None:
        """The leader's own answer teaches the view at once: NOT_ENOUGH_REPLICAS marks the partition below
        its min ISR (the next acks=-2 request is answered by the proxy); leadership errors re-read it."""
        for (topic, partition), code in codes:
            if code in _BELOW_MIN_ISR_ERRORS:
                self.context.cluster_view.broker_said_below_min_isr(topic, partition)
                self._refresh_isr_soon(topic)
            elif code in _STALE_LEADER_ERRORS:
                self._refresh_isr_soon(topic)

    def _count(self, topic: str, acks: int, acks_sent: int | None, decision: str, records: int,
               record_bytes: int) -> None:
        """Counters of one partition, without the audit (with it, the summary's accumulator keeps them)."""
        partitions, records_total, bytes_total = self._counters(topic, acks, acks_sent, decision)
        partitions.value += 1
        records_total.value += records
        bytes_total.value += record_bytes

    def _counters(self, topic: str, acks: int, acks_sent: int | None, decision: str) -> _Counters:
        """The produce_partitions, produce_records and produce_record_bytes children of one combination."""
        key = (topic, acks, acks_sent, decision)
        children = self._decision_counters.get(key)
        if children is None:  # labels() costs microseconds: one lookup per combination, not per partition
            if len(self._decision_counters) > 10_000:
                self._decision_counters.clear()
            metrics = self.context.metrics
            label = metrics.topic(topic)
            children = self._decision_counters[key] = (
                metrics.produce_partitions_total.labels(
                    label, str(acks), "none" if acks_sent is None else str(acks_sent), decision),
                metrics.produce_records_total.labels(label),
                metrics.produce_record_bytes_total.labels(label),
            )
        return children

    def _emit_decisions(self, exchange: Exchange, state: ProduceDecisions, codes: dict[tuple[str, int], int],
                        latency_ms: float | None) -> None:
        """audit.detail = "every_request": one produce_decision event per partition (debugging only)."""
        audit = self.context.audit
        assert audit is not None
        # Stamped when the decision was taken (the request arrived), as isr_size/min_isr describe that moment.
        decided_at = time.time() - (time.perf_counter() - exchange.received_at)
        for d in state.decisions:
            audit.emit({
                "event": "produce_decision",
                "listener": exchange.listener.label,
                "client_id": exchange.client_id,
                "topic": d.topic,
                "partition": d.partition,
                "acks_requested": state.acks,
                "acks_sent": d.acks_sent,
                "isr_size": d.isr_size,
                "min_isr": d.min_isr,
                "decision": d.decision,
                "error_code": d.error_code if d.error_code is not None else codes.get((d.topic, d.partition)),
                "latency_ms": None if latency_ms is None else round(latency_ms, 3),
                "record_bytes": d.record_bytes,
                "records": d.records,
                "api_version": exchange.api_version,
                "correlation_id": exchange.correlation_id,
            }, at=decided_at)


def _merge(state: ProduceDecisions, exchange: Exchange, frame: Frame) -> Frame:
    """The broker's answer for the forwarded partitions plus the proxy's own, in request order."""
    assert state.proxy_errors is not None
    return merge_produce_responses(state.index, frame, state.proxy_errors)


def _response_error_codes(response: Frame, version: int, context: BehaviourContext) -> dict[tuple[str, int], int]:
    try:
        scanned = produce_response_error_codes(response, version)
    except ProtocolError:
        return {}
    view = context.cluster_view
    return {(view.topic_name(topic) or UNKNOWN_TOPIC_ID, partition): code for topic, partition, code in scanned}
