"""The acks decision for Produce requests: KIP-926 acks=-2, KIP-1 validation, fast_fail and acks_floor.

- acks -1, 0, 1: forwarded unchanged, record bytes untouched (acks=0: no response is awaited).
- acks -2 ("acks = min.insync.replicas"): per partition, ISR size vs effective min ISR in the proxy's
  view. Below: answered NOT_ENOUGH_REPLICAS (19) by the proxy, never forwarded. Otherwise, or when
  the view does not know (never guess): forwarded with acks=-1. One merged response, partitions in
  request order, the client's correlation id.
- Any other value on Produce v1+: INVALID_REQUIRED_ACKS (21) on every partition, nothing forwarded
  (KIP-1). Produce v0 keeps the old behaviour: forwarded as is.
- Per topic pattern: `fast_fail` runs the acks=-2 precheck for acks=-1 too; `acks_floor` raises
  acks=1 to -1 or -2.

It decides and does nothing else: topic ids are named before it (topic_ids.py); what it decided
(`ProduceDecisions`) is counted by the accounting and the broker's answer taught to the ISR view after it
(produce_exchange.py says in which order, and what they share).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Final

from insync_proxy.protocol import (
    ApiKey,
    ErrorCode,
    build_forward_request_chunks,
    build_produce_error_response,
    merge_produce_responses,
)
from insync_proxy.protocol.produce import PartitionKey, ProduceRequestIndex
from insync_proxy.proxy.behaviours.isr_learning import IsrRereads
from insync_proxy.proxy.behaviours.produce_exchange import (
    UNKNOWN_TOPIC_ID,
    PartitionRecords,
    ProduceDecisions,
    ProduceExchange,
    produce_exchange,
)
from insync_proxy.proxy.config.settings import AcksPolicyConfig
from insync_proxy.proxy.controlplane.context import BehaviourContext
from insync_proxy.proxy.datapath.cluster_view import Readiness
from insync_proxy.proxy.datapath.exchange import (
    FORWARD,
    FORWARD_WITHOUT_RESPONSE,
    BehaviourBase,
    Exchange,
    Frame,
    RequestResult,
    forward,
    respond,
)

ACKS_MIN_INSYNC: Final = -2
_NOT_ENOUGH_REPLICAS: Final = int(ErrorCode.NOT_ENOUGH_REPLICAS)
_INVALID_REQUIRED_ACKS: Final = int(ErrorCode.INVALID_REQUIRED_ACKS)
_I16: Final = struct.Struct(">h")
#: Topic names whose matching policy is remembered; past it the cache starts over (a client naming ever new topics).
POLICY_CACHE_LIMIT: Final = 4096


class AcksPolicy(BehaviourBase):
    """Reads every Produce request's acks in place and decides, per partition, what goes upstream."""

    request_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self, context: BehaviourContext, policies: Sequence[AcksPolicyConfig], rereads: IsrRereads) -> None:
        self.view = context.cluster_view
        self.min_insync = context.min_insync
        self.metrics = context.metrics
        #: A failed precheck re-reads the topic's ISR (at most once a second) so a retry sees recovery.
        self.rereads = rereads
        self.set_policies(policies)

    def set_policies(self, policies: Sequence[AcksPolicyConfig]) -> None:
        """Decide with these policies from the next Produce on (a reload); exchanges under way keep theirs."""
        self.policies = list(policies)
        self.has_floor = any(p.acks_floor is not None for p in self.policies)
        self.has_fast_fail = any(p.fast_fail for p in self.policies)
        self._policy_cache: dict[str, AcksPolicyConfig | None] = {}

    def on_request(self, exchange: Exchange) -> RequestResult:
        shared = produce_exchange(exchange)
        acks = shared.acks
        if acks == 0:
            return FORWARD_WITHOUT_RESPONSE
        if -2 <= acks <= 1:  # a range check, not a set lookup (hash(-1) == hash(-2): a collision)
            if acks == ACKS_MIN_INSYNC or (self.has_floor and acks == 1) or (self.has_fast_fail and acks == -1):
                return self._decide(shared, acks)
            return FORWARD  # the hot path: forwarded as it came
        if exchange.api_version > 0:  # Produce v0 predates KIP-1: forwarded as it came
            return self._reject_invalid_acks(shared)
        return FORWARD

    def _policy(self, topic: str) -> AcksPolicyConfig | None:
        """The first policy whose pattern matches the topic (cached per topic)."""
        try:
            return self._policy_cache[topic]
        except KeyError:
            cache = self._policy_cache
            if len(cache) >= POLICY_CACHE_LIMIT:
                cache.clear()  # a client naming ever new topics: matching again costs less than remembering all
            policy = cache[topic] = policy_for(self.policies, topic)
            return policy

    def _floor(self, partitions: list[PartitionRecords], floor_topics: set[str]) -> int:
        """The acks a request of acks=1 goes with: the strongest floor of its topics, whatever their order (-2,
        checked and sent as -1, over -1); acks is per request, so a floor on any topic raises all of it."""
        acks_sent = 1
        for topic, _, _, _ in partitions:
            name = self.view.topic_name(topic) or UNKNOWN_TOPIC_ID
            policy = self._policy(name)
            if policy is not None and policy.acks_floor is not None:
                floor_topics.add(name)
                if acks_sent == 1 or policy.acks_floor == ACKS_MIN_INSYNC:
                    acks_sent = policy.acks_floor
        return acks_sent

    def _decide(self, shared: ProduceExchange, acks: int) -> RequestResult:
        view, metrics = self.view, self.metrics
        partitions = shared.partitions()
        floor_topics: set[str] | None = None
        acks_sent = acks
        if acks == 1 and self.has_floor:
            floor_topics = set()
            acks_sent = self._floor(partitions, floor_topics)
        codes: list[int] = []
        errors: dict[PartitionKey, int] = {}
        readiness: list[Readiness] = []
        for topic, partition, _, _ in partitions:
            name = view.topic_name(topic) or UNKNOWN_TOPIC_ID
            ready = view.readiness(name, partition, self.min_insync.peek(name))
            readiness.append(ready)
            code = 0
            if acks_sent == ACKS_MIN_INSYNC or (
                acks_sent == -1 and self.has_fast_fail and (p := self._policy(name)) is not None and p.fast_fail
            ):
                label = metrics.topic(name)
                if ready.isr_size is None or ready.min_isr is None:
                    metrics.precheck_total.labels(label, "unknown").inc()
                elif ready.isr_size < ready.min_isr:
                    metrics.precheck_total.labels(label, "failed").inc()
                    code = errors[(topic, partition)] = _NOT_ENOUGH_REPLICAS
                    self.rereads.soon(name)
                else:
                    metrics.precheck_total.labels(label, "passed").inc()
            codes.append(code)
            if floor_topics and name in floor_topics:
                metrics.acks_floor_applied_total.labels(metrics.topic(name)).inc()
        upstream_acks = -1 if acks_sent == ACKS_MIN_INSYNC else acks_sent
        shared.decisions = ProduceDecisions(upstream_acks, codes, errors, floor_topics, readiness)
        if errors and len(errors) == len(partitions):
            return respond(build_produce_error_response(shared.index(), errors))
        if errors:  # split: the others go upstream, and the proxy's answers are merged into the broker's
            index = shared.index()
            keep = {(t, p) for t, p, _, _ in partitions if (t, p) not in errors}
            return forward(list(build_forward_request_chunks(index, keep, acks=upstream_acks)[1:]),
                           response_hook=functools.partial(_merge, index, errors))
        if upstream_acks != acks:
            frame, a = shared.frame, shared.acks_offset
            return forward([frame[:a], _I16.pack(upstream_acks), frame[a + 2:]])
        return FORWARD

    def _reject_invalid_acks(self, shared: ProduceExchange) -> RequestResult:
        index = shared.index()
        errors = {span.key: _INVALID_REQUIRED_ACKS for span in index.partitions()}
        shared.decisions = ProduceDecisions(None, [_INVALID_REQUIRED_ACKS] * len(shared.partitions()), errors, None,
                                            None)
        return respond(build_produce_error_response(index, errors))


def policy_for(policies: Sequence[AcksPolicyConfig], topic: str) -> AcksPolicyConfig | None:
    """The first policy whose pattern matches the whole topic name: `[[acks_policy]]` order decides."""
    return next((p for p in policies if p.matches(topic)), None)


def _merge(index: ProduceRequestIndex, errors: dict[PartitionKey, int], exchange: Exchange, frame: Frame) -> Frame:
    """The broker's answer for the forwarded partitions plus the proxy's own, in request order."""
    return merge_produce_responses(index, frame, errors)
