"""Each Produce behaviour on its own, through the sans-IO ConnectionCore with plain bytes (no sockets, no Kafka).

The acks decision's own cases are in test_acks_policy.py (the four behaviours together, as the proxy registers
them); here each of the other three runs alone, or with the decision only where it needs its outcome.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.connection_core import LISTENER, RecordingIO
from harness.produce_frames import broker_response, produce_request, read_produce_request
from harness.sidecar import (
    BELOW_MIN,
    HEALTHY,
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER,
    ORDERS,
    PAYMENTS,
    TOPIC_IDS,
    Sidecar,
    run_to_completion,
)
from insync_proxy.protocol import ApiKey
from insync_proxy.proxy.audit.summary import NO_LATENCY, ProduceSummaries
from insync_proxy.proxy.behaviours.accounting import ProduceAccounting
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.behaviours.isr_learning import IsrLearning, IsrRereads
from insync_proxy.proxy.behaviours.produce_exchange import ProduceExchange, produce_exchange
from insync_proxy.proxy.behaviours.topic_ids import TopicIdResolution
from insync_proxy.proxy.datapath.core import ConnectionCore
from insync_proxy.proxy.datapath.exchange import BehaviourBase, BehaviourRegistry, Exchange


def alone(side: Sidecar, *behaviours: BehaviourBase) -> tuple[ConnectionCore, RecordingIO]:
    """A connection whose Produce requests go through these behaviours only (the Sidecar's view and metrics)."""
    io = RecordingIO()
    return ConnectionCore(BehaviourRegistry(list(behaviours)), LISTENER, io, max_frame_bytes=1 << 20), io


class Refreshes:
    def __init__(self) -> None:
        self.topics: list[list[str]] = []

    def __call__(self, topics: Iterable[str]) -> None:
        self.topics.append(list(topics))


# ====================================================================== accounting


def test_accounting_alone_counts_every_partition_and_gives_the_audit_plain_values() -> None:
    # Given the accounting alone, with the audit on
    side = Sidecar()
    side.isr(orders=[HEALTHY, HEALTHY])
    summaries = ProduceSummaries(10.0)
    core, io = alone(side, ProduceAccounting(side.context, summaries))
    # When an acks=-1 request of two partitions is answered with an error on one of them
    core.receive_client_data(produce_request(9, -1, {ORDERS: [0, 1]}, TOPIC_IDS, correlation_id=5))
    sent = read_produce_request(io.to_upstream[0], TOPIC_IDS)
    core.receive_upstream_data(broker_response(sent, TOPIC_IDS, errors={(ORDERS, 1): NOT_LEADER_OR_FOLLOWER}))
    # Then each partition counts once in the metrics, as forwarded with acks -1
    assert side.decisions(ORDERS, -1, -1, "forwarded") == 2
    assert side.count("produce_records", topic=ORDERS) > 0
    # And the audit's summary holds one entry per partition, with the broker's own code and one latency each
    _, events = summaries.drain()
    by_partition = {e["partition"]: e for e in events}
    assert {p: (e["error_code"], e["requests"], e["latency_count"]) for p, e in by_partition.items()} == {
        0: (0, 1, 1), 1: (NOT_LEADER_OR_FOLLOWER, 1, 1)}
    assert all(sum(n for _, n in e["latency_buckets"]) == 1 for e in events)


def test_accounting_alone_counts_acks_zero_without_an_answer() -> None:
    side = Sidecar()
    summaries = ProduceSummaries(10.0)
    core, io = alone(side, ProduceAccounting(side.context, summaries))
    core.receive_client_data(produce_request(9, 0, {ORDERS: [0]}, TOPIC_IDS))
    # acks=0 owes no answer, yet the core expects one without the decision: the broker's answer completes it
    core.receive_upstream_data(broker_response(read_produce_request(io.to_upstream[0], TOPIC_IDS), TOPIC_IDS))
    assert side.decisions(ORDERS, 0, 0, "forwarded") == 1
    (event,) = summaries.drain()[1]
    assert (event["acks_requested"], event["acks_sent"], event["decision"]) == (0, 0, "forwarded")


def test_accounting_counts_what_the_decision_answered_itself() -> None:
    # Given the decision and the accounting, orders 0 below min ISR
    side = Sidecar()
    side.isr(orders=[BELOW_MIN, HEALTHY])
    side.min_insync_replicas(2)
    summaries = ProduceSummaries(10.0)
    core, io = alone(side, AcksPolicy(side.context, [], IsrRereads(Refreshes())),
                     ProduceAccounting(side.context, summaries))
    # When acks=-2 is split: orders 0 answered by the proxy, orders 1 forwarded and acknowledged
    core.receive_client_data(produce_request(9, -2, {ORDERS: [0, 1]}, TOPIC_IDS))
    core.receive_upstream_data(broker_response(read_produce_request(io.to_upstream[0], TOPIC_IDS), TOPIC_IDS))
    # Then the summary tells each partition's decision, acks sent and code
    events = {e["partition"]: e for e in summaries.drain()[1]}
    assert (events[0]["decision"], events[0]["acks_sent"], events[0]["error_code"]) == (
        "answered_not_enough_replicas", None, NOT_ENOUGH_REPLICAS)
    assert (events[1]["decision"], events[1]["acks_sent"], events[1]["error_code"]) == ("forwarded", -1, 0)
    assert side.count("proxy_answered_errors", topic=ORDERS, error_code="19") == 1


def test_summaries_take_plain_values_and_drain_them_per_interval() -> None:
    summaries = ProduceSummaries(10.0)
    key = ("bootstrap", "c", ORDERS, 0, -1, -1, "forwarded", 0)
    summaries.add(key, 16, 1000, 2.0, 12)
    summaries.add(key, 4, 200, None, None)  # acks=0: no latency
    summaries.add(key, 1, 10, 3.0, 12)
    end, (event,) = summaries.drain(now=time.time())
    assert (event["requests"], event["records"], event["record_bytes"]) == (3, 21, 1210)
    assert (event["latency_count"], event["latency_min_ms"], event["latency_max_ms"]) == (2, 2.0, 3.0)
    assert event["latency_buckets"] == [[12, 2]]
    assert summaries.drain()[1] == []


@settings(max_examples=100, deadline=None)
@given(adds=st.lists(st.tuples(st.sampled_from(["a", "b"]),
                               # "cc" also as a new object each time: each connection decodes its own client id
                               st.one_of(st.sampled_from([None, "cc"]), st.builds(lambda: b"cc".decode())),
                               st.sampled_from([ORDERS, "t"]),
                               st.integers(0, 1), st.sampled_from([-1, 1]), st.sampled_from([None, -1]),
                               st.sampled_from(["forwarded", "answered_not_enough_replicas"]),
                               st.sampled_from([None, 0, 19]), st.integers(0, 5)), max_size=40),
       drain_after=st.integers(0, 40))
def test_summaries_count_every_key_as_a_dict_of_keys_does(
    adds: list[tuple[str, str | None, str, int, int, int | None, str, int | None, int]], drain_after: int,
) -> None:
    # runs of one key reuse its accumulator; any field that differs, or a drain, must start another; equal values
    # that are other objects find the same one
    summaries = ProduceSummaries(10.0)
    expected: list[dict[tuple[object, ...], int]] = [{}, {}]
    for i, (*key, records) in enumerate(adds):
        if i == drain_after:
            first = {_key_of(e): e["records"] for e in summaries.drain()[1]}
            assert first == expected[0]
        expected[i >= drain_after][tuple(key)] = expected[i >= drain_after].get(tuple(key), 0) + records
        summaries.accumulator(*key).add(records, records, 0.0, NO_LATENCY)
    events = summaries.drain()[1]
    assert {_key_of(e): e["records"] for e in events} == expected[drain_after < len(adds)]


def _key_of(event: dict[str, Any]) -> tuple[object, ...]:
    return tuple(event[k] for k in ("listener", "client_id", "topic", "partition", "acks_requested", "acks_sent",
                                    "decision", "error_code"))


# ====================================================================== ISR learning


def test_isr_learning_alone_marks_a_partition_the_leader_said_is_below_min_isr() -> None:
    side = Sidecar()
    side.isr(orders=[HEALTHY], payments=[HEALTHY])
    refreshes = Refreshes()
    core, io = alone(side, IsrLearning(side.context, IsrRereads(refreshes)))
    core.receive_client_data(produce_request(12, -1, {ORDERS: [0], PAYMENTS: [0]}, TOPIC_IDS))
    sent = read_produce_request(io.to_upstream[0], TOPIC_IDS)
    core.receive_upstream_data(broker_response(sent, TOPIC_IDS, errors={(ORDERS, 0): NOT_ENOUGH_REPLICAS}))
    assert side.view.readiness(ORDERS, 0, 2).below_min_isr
    assert not side.view.readiness(PAYMENTS, 0, 2).below_min_isr
    assert refreshes.topics == [[ORDERS]]


def test_isr_rereads_a_topic_at_most_once_a_second() -> None:
    now = [100.0]
    refreshes = Refreshes()
    rereads = IsrRereads(refreshes, clock=lambda: now[0])
    rereads.soon(ORDERS)
    now[0] += 0.9
    rereads.soon(ORDERS)
    rereads.soon(PAYMENTS)
    now[0] += 0.2
    rereads.soon(ORDERS)
    assert refreshes.topics == [[ORDERS], [PAYMENTS], [ORDERS]]


# ====================================================================== topic-id resolution


def test_topic_id_resolution_alone_holds_a_v13_request_until_its_ids_are_looked_up() -> None:
    side = Sidecar()
    side.lookup_answer = {ORDERS: [HEALTHY]}
    core, io = alone(side, TopicIdResolution(side.context))
    frame = produce_request(13, -1, {ORDERS: [0]}, TOPIC_IDS)
    core.receive_client_data(frame)
    assert io.to_upstream == [] and len(io.pending_async) == 1
    exchange, lookup = io.pending_async.pop()
    run_to_completion(lookup)
    core.async_done(exchange, None)
    assert side.resolved == [[TOPIC_IDS[ORDERS]]]
    assert io.to_upstream == [frame]
    # a second request for the same id, now known, goes at once
    core.receive_client_data(produce_request(13, -1, {ORDERS: [0]}, TOPIC_IDS, correlation_id=8))
    assert len(io.to_upstream) == 2 and side.resolved == [[TOPIC_IDS[ORDERS]]]


def test_the_behaviours_share_one_walk_of_the_request() -> None:
    # Given the four Produce behaviours as the proxy registers them, a v13 request whose id is known
    side = Sidecar()
    side.isr(orders=[HEALTHY])
    seen: list[ProduceExchange] = []

    class Spy(BehaviourBase):
        complete_keys = frozenset({ApiKey.PRODUCE})

        def on_complete(self, exchange: Exchange, latency_seconds: float | None) -> None:
            seen.append(produce_exchange(exchange))

    core, io = alone(side, *side.behaviours, Spy())
    core.receive_client_data(produce_request(13, -2, {ORDERS: [0]}, TOPIC_IDS))
    core.receive_upstream_data(broker_response(read_produce_request(io.to_upstream[0], TOPIC_IDS), TOPIC_IDS))
    # Then the resolution, the decision and the accounting used one shared state, which holds the decision
    (shared,) = seen
    assert shared.decisions is not None and shared.decisions.acks_sent == -1
    assert [(p[0], p[1]) for p in shared.partitions()] == [(TOPIC_IDS[ORDERS], 0)]
