"""Every AcksPolicy decision, driven through the sans-IO ConnectionCore with plain bytes: no sockets, no Kafka.

The decision runs among the Produce behaviours the proxy registers with it, in the proxy's order (topic-id
resolution, the decision, the accounting whose metrics tell what was decided, the ISR learning); they get a real BehaviourContext: a ClusterView fed with a decoded Metadata response, a
MinInsyncCache whose entries are set directly (its control connection is never used), its own
ProxyMetrics registry, and a refresh_topics that records its calls. Requests are encoded with the
protocol codec for Produce v0, v3, v9 and v13 (topic ids); what went upstream and what the client got
are decoded with it.
"""

from __future__ import annotations

import time
import uuid

import pytest

from harness.produce_frames import (
    produce_request,
    with_acks,
)
from harness.sidecar import (
    ALL_VERSIONS,
    AT_MIN,
    BELOW_MIN,
    HEALTHY,
    INVALID_REQUIRED_ACKS,
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER,
    ORDERS,
    PAYMENTS,
    TOPIC_IDS,
    V1_PLUS,
    Sidecar,
    run_to_completion,
)
from insync_proxy.proxy.config.settings import AcksPolicyConfig

# ====================================================================== acks -1, 0, 1: untouched


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("acks", [-1, 1])
@pytest.mark.parametrize("audit_on", [True, False])
def test_acks_minus_one_and_one_go_upstream_byte_for_byte(version: int, acks: int, audit_on: bool) -> None:
    # Given a proxy without policies, one partition below min ISR (irrelevant without a precheck)
    proxy = Sidecar(audit_on=audit_on)
    proxy.isr(orders=[HEALTHY, BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks -1 or 1
    sent = proxy.produce(version, acks, {ORDERS: [0, 1]}, transactional_id="tx-1" if version >= 3 else None)
    # Then the request goes upstream as it came, byte for byte, and a response is owed
    assert proxy.io.to_upstream == [sent]
    assert proxy.owed == [7]
    assert proxy.io.to_client == []
    # When the broker answers, the client gets that answer byte for byte
    (forwarded,) = proxy.upstream()
    answer = proxy.broker_answers(forwarded)
    assert proxy.io.to_client == [answer]
    assert proxy.owed == []
    # And no precheck, no refresh; each partition counts as forwarded, with the audit on or off
    assert proxy.decisions(ORDERS, acks, acks, "forwarded") == 2
    assert proxy.count("produce_records", topic=ORDERS) > 0
    assert proxy.prechecks(ORDERS, "failed") == 0 and proxy.prechecks(ORDERS, "passed") == 0
    assert proxy.refreshed == []


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_zero_goes_upstream_byte_for_byte_and_owes_no_response(version: int) -> None:
    # Given a proxy without policies
    proxy = Sidecar()
    proxy.isr(orders=[HEALTHY, BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=0, then pipelines an acks=1 request
    sent = proxy.produce(version, 0, {ORDERS: [0, 1]}, correlation_id=1)
    then = proxy.produce(version, 1, {ORDERS: [0]}, correlation_id=2)
    # Then both go upstream untouched, only the second is owed an answer, and acks=0 is already complete
    assert proxy.io.to_upstream == [sent, then]
    assert proxy.owed == [2]
    assert proxy.decisions(ORDERS, 0, 0, "forwarded") == 2
    # When the broker answers the only request that gets an answer, the client gets it
    proxy.broker_answers(proxy.upstream()[1])
    assert [a.correlation_id for a in proxy.client_got(version)] == [2]


# ====================================================================== acks -2 (KIP-926)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_minus_two_with_isr_at_min_is_forwarded_as_minus_one(version: int) -> None:
    # Given every partition's ISR at or above min.insync.replicas=2
    proxy = Sidecar()
    proxy.isr(orders=[HEALTHY, AT_MIN], payments=[AT_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-2
    sent = proxy.produce(version, -2, {ORDERS: [1, 0], PAYMENTS: [0]})
    # Then the whole request goes upstream with acks=-1, every other byte unchanged
    assert proxy.io.to_upstream == [with_acks(sent, -1)]
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1
    assert forwarded.partitions == [(ORDERS, 1), (ORDERS, 0), (PAYMENTS, 0)]
    # When the broker answers, the client gets the broker's answer as it is
    answer = proxy.broker_answers(forwarded)
    assert proxy.io.to_client == [answer]
    # And every partition passed its precheck and counts as forwarded with -1
    assert proxy.prechecks(ORDERS, "passed") == 2 and proxy.prechecks(PAYMENTS, "passed") == 1
    assert proxy.prechecks(ORDERS, "failed") == 0
    assert proxy.decisions(ORDERS, -2, -1, "forwarded") == 2
    assert proxy.decisions(PAYMENTS, -2, -1, "forwarded") == 1
    assert proxy.refreshed == []


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_minus_two_rejected_when_isr_below_min(version: int) -> None:
    # Given orders partition 0 below min ISR (1 < 2); orders 1 and payments 0 healthy
    proxy = Sidecar()
    proxy.isr(orders=[BELOW_MIN, HEALTHY], payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-2 to all three, the unready partition in the middle
    proxy.produce(version, -2, {ORDERS: [1, 0], PAYMENTS: [0]}, correlation_id=41)
    # Then only the ready partitions go upstream, with acks=-1 and the client's correlation id
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1
    assert forwarded.correlation_id == 41
    assert forwarded.partitions == [(ORDERS, 1), (PAYMENTS, 0)]
    # And nothing is answered before the broker is
    assert proxy.io.to_client == []
    assert proxy.owed == [41]
    # When the broker answers (in its own order, with an error of its own on orders 1)
    proxy.broker_answers(forwarded, errors={(ORDERS, 1): NOT_LEADER_OR_FOLLOWER}, reverse=True)
    # Then the client gets one merged answer: request order, its correlation id, the proxy's 19 for orders 0
    (answer,) = proxy.client_got(version)
    assert answer.correlation_id == 41
    assert answer.partitions == [
        (ORDERS, 1, NOT_LEADER_OR_FOLLOWER), (ORDERS, 0, NOT_ENOUGH_REPLICAS), (PAYMENTS, 0, 0)
    ]
    assert answer.base_offsets[(PAYMENTS, 0)] == 100
    assert proxy.owed == []
    # And the metrics tell which partition the proxy answered and why
    assert proxy.prechecks(ORDERS, "failed") == 1 and proxy.prechecks(ORDERS, "passed") == 1
    assert proxy.prechecks(PAYMENTS, "passed") == 1 and proxy.prechecks(PAYMENTS, "failed") == 0
    assert proxy.count("proxy_answered_errors", topic=ORDERS, error_code="19") == 1
    assert proxy.count("proxy_answered_errors", topic=PAYMENTS, error_code="19") == 0
    assert proxy.decisions(ORDERS, -2, None, "answered_not_enough_replicas") == 1
    assert proxy.decisions(ORDERS, -2, -1, "forwarded") == 1
    assert proxy.decisions(PAYMENTS, -2, -1, "forwarded") == 1
    # And the unready topic's ISR is re-read, the healthy one's is not
    assert proxy.refreshed == [[ORDERS]]


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_minus_two_answered_locally_when_every_partition_is_below_min(version: int) -> None:
    # Given every partition below min ISR
    proxy = Sidecar()
    proxy.isr(orders=[BELOW_MIN, BELOW_MIN], payments=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-2
    proxy.produce(version, -2, {ORDERS: [1, 0], PAYMENTS: [0]}, correlation_id=9)
    # Then nothing goes upstream and the client is answered at once, 19 on every partition, in request order
    assert proxy.io.to_upstream == []
    (answer,) = proxy.client_got(version)
    assert answer.correlation_id == 9
    assert answer.partitions == [
        (ORDERS, 1, NOT_ENOUGH_REPLICAS), (ORDERS, 0, NOT_ENOUGH_REPLICAS), (PAYMENTS, 0, NOT_ENOUGH_REPLICAS)
    ]
    assert proxy.owed == []
    # And every partition counts as a failed precheck answered by the proxy; each topic is re-read once
    assert proxy.prechecks(ORDERS, "failed") == 2 and proxy.prechecks(PAYMENTS, "failed") == 1
    assert proxy.count("proxy_answered_errors", topic=ORDERS, error_code="19") == 2
    assert proxy.decisions(PAYMENTS, -2, None, "answered_not_enough_replicas") == 1
    assert proxy.refreshed == [[ORDERS], [PAYMENTS]]


@pytest.mark.parametrize("version", V1_PLUS)
def test_acks_minus_two_forwarded_as_minus_one_when_isr_is_unknown(version: int) -> None:
    # Given min.insync.replicas known, and a topic Metadata named (with its id) but gave no partition state for
    proxy = Sidecar()
    proxy.isr(orders=[], payments=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-2 to it
    proxy.produce(version, -2, {ORDERS: [0, 1]})
    # Then the proxy does not guess: everything goes upstream with acks=-1
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1
    assert forwarded.partitions == [(ORDERS, 0), (ORDERS, 1)]
    assert proxy.prechecks(ORDERS, "unknown") == 2
    assert proxy.prechecks(ORDERS, "failed") == 0
    assert proxy.refreshed == []
    # And the broker's answer is the client's
    answer = proxy.broker_answers(forwarded, errors={(ORDERS, 1): NOT_ENOUGH_REPLICAS})
    assert proxy.io.to_client == [answer]


@pytest.mark.parametrize("cache", ["missing", "expired", "unreadable"])
def test_acks_minus_two_forwarded_as_minus_one_when_min_insync_is_unknown(cache: str) -> None:
    # Given an ISR of 1 the proxy knows, and no usable min.insync.replicas for the topic
    proxy = Sidecar()
    proxy.isr(orders=[BELOW_MIN])
    if cache == "expired":
        proxy.min_insync_replicas(3, ORDERS, age_seconds=proxy.min_insync.ttl + 1)
    elif cache == "unreadable":  # no DESCRIBE_CONFIGS permission: cached as None
        proxy.min_insync_replicas(None, ORDERS)
    # When a client produces with acks=-2
    proxy.produce(9, -2, {ORDERS: [0]})
    # Then it goes upstream with acks=-1 and the broker decides
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1 and forwarded.partitions == [(ORDERS, 0)]
    assert proxy.prechecks(ORDERS, "unknown") == 1
    assert proxy.prechecks(ORDERS, "failed") == 0
    assert proxy.refreshed == []


def test_min_isr_is_capped_by_the_replica_count() -> None:
    # Given min.insync.replicas=5 on a topic of 3 replicas whose ISR is all 3
    proxy = Sidecar()
    proxy.isr(orders=[HEALTHY])
    proxy.min_insync_replicas(5, ORDERS)
    # When a client produces with acks=-2
    proxy.produce(9, -2, {ORDERS: [0]})
    # Then the effective min ISR is 3, the ISR is enough, and the request goes upstream
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1
    assert proxy.prechecks(ORDERS, "passed") == 1


# ====================================================================== KIP-1: invalid acks


@pytest.mark.parametrize("version", V1_PLUS)
@pytest.mark.parametrize("acks", [2, 3, 100, -3])
def test_invalid_acks_answered_with_invalid_required_acks_on_every_partition(version: int, acks: int) -> None:
    # Given healthy partitions and policies that would otherwise act on the request
    proxy = Sidecar(AcksPolicyConfig(topics=".*", fast_fail=True, acks_floor=-2))
    proxy.isr(orders=[HEALTHY, HEALTHY], payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client produces with an acks value Kafka does not define
    proxy.produce(version, acks, {PAYMENTS: [0], ORDERS: [1, 0]}, correlation_id=23)
    # Then nothing goes upstream and every partition gets 21, in request order, with the client's correlation id
    assert proxy.io.to_upstream == []
    (answer,) = proxy.client_got(version)
    assert answer.correlation_id == 23
    assert answer.partitions == [
        (PAYMENTS, 0, INVALID_REQUIRED_ACKS), (ORDERS, 1, INVALID_REQUIRED_ACKS), (ORDERS, 0, INVALID_REQUIRED_ACKS)
    ]
    assert proxy.owed == []
    # And it is counted per partition as answered by the proxy, with no precheck and no floor
    assert proxy.decisions(ORDERS, acks, None, "answered_invalid_required_acks") == 2
    assert proxy.decisions(PAYMENTS, acks, None, "answered_invalid_required_acks") == 1
    assert proxy.count("proxy_answered_errors", topic=ORDERS, error_code="21") == 2
    assert proxy.prechecks(ORDERS, "passed") == 0
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 0


@pytest.mark.parametrize("acks", [2, 100, -3])
def test_invalid_acks_on_produce_v0_are_forwarded_as_is(acks: int) -> None:
    # Given a Produce v0 request (before KIP-1) with an acks value Kafka does not define
    proxy = Sidecar()
    proxy.isr(orders=[HEALTHY])
    proxy.min_insync_replicas(2)
    sent = proxy.produce(0, acks, {ORDERS: [0]})
    # Then it goes upstream byte for byte, and the broker's answer is the client's
    assert proxy.io.to_upstream == [sent]
    answer = proxy.broker_answers(proxy.upstream()[0])
    assert proxy.io.to_client == [answer]
    assert proxy.decisions(ORDERS, acks, acks, "forwarded") == 1
    assert proxy.count("proxy_answered_errors", topic=ORDERS, error_code="21") == 0


# ====================================================================== fast_fail


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_fast_fail_forwards_acks_minus_one_untouched_when_isr_is_healthy(version: int) -> None:
    # Given fast_fail on orders, whose ISR is at min
    proxy = Sidecar(AcksPolicyConfig(topics="ord.*", fast_fail=True))
    proxy.isr(orders=[AT_MIN, HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-1
    sent = proxy.produce(version, -1, {ORDERS: [0, 1]})
    # Then the precheck passes and the request goes upstream byte for byte
    assert proxy.io.to_upstream == [sent]
    assert proxy.prechecks(ORDERS, "passed") == 2
    proxy.broker_answers(proxy.upstream()[0])
    assert proxy.decisions(ORDERS, -1, -1, "forwarded") == 2


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_fast_fail_answers_not_enough_replicas_for_acks_minus_one_below_min(version: int) -> None:
    # Given fast_fail on orders, whose partition 0 is below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", fast_fail=True))
    proxy.isr(orders=[BELOW_MIN, HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-1 to both partitions
    proxy.produce(version, -1, {ORDERS: [0, 1]})
    # Then only partition 1 goes upstream, still with acks=-1
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1 and forwarded.partitions == [(ORDERS, 1)]
    # And the client gets 19 for partition 0 merged with the broker's answer for partition 1
    proxy.broker_answers(forwarded)
    (answer,) = proxy.client_got(version)
    assert answer.partitions == [(ORDERS, 0, NOT_ENOUGH_REPLICAS), (ORDERS, 1, 0)]
    assert proxy.decisions(ORDERS, -1, None, "answered_not_enough_replicas") == 1
    assert proxy.decisions(ORDERS, -1, -1, "forwarded") == 1
    assert proxy.refreshed == [[ORDERS]]


def test_fast_fail_answers_locally_when_every_partition_is_below_min() -> None:
    # Given fast_fail on orders, every partition below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", fast_fail=True))
    proxy.isr(orders=[BELOW_MIN, BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-1
    proxy.produce(3, -1, {ORDERS: [0, 1]})
    # Then nothing goes upstream, and the client has its answer at once
    assert proxy.io.to_upstream == []
    (answer,) = proxy.client_got(3)
    assert answer.partitions == [(ORDERS, 0, NOT_ENOUGH_REPLICAS), (ORDERS, 1, NOT_ENOUGH_REPLICAS)]


def test_fast_fail_applies_only_to_topics_its_pattern_matches() -> None:
    # Given fast_fail on payments only, and orders below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="payments", fast_fail=True))
    proxy.isr(orders=[BELOW_MIN], payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-1 to orders
    sent = proxy.produce(9, -1, {ORDERS: [0]})
    # Then orders is not prechecked: the broker decides, the request goes upstream untouched
    assert proxy.io.to_upstream == [sent]
    assert proxy.prechecks(ORDERS, "failed") == 0
    assert proxy.refreshed == []


def test_the_first_matching_policy_decides_fast_fail() -> None:
    # Given a policy for orders without fast_fail, then fast_fail for every topic; both topics below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-1), AcksPolicyConfig(topics=".*", fast_fail=True))
    proxy.isr(orders=[BELOW_MIN], payments=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-1 to both
    proxy.produce(9, -1, {ORDERS: [0], PAYMENTS: [0]})
    # Then orders' own policy wins (no precheck: forwarded with -1); payments is answered 19 by the proxy
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1 and forwarded.partitions == [(ORDERS, 0)]
    proxy.broker_answers(forwarded)
    (answer,) = proxy.client_got(9)
    assert answer.partitions == [(ORDERS, 0, 0), (PAYMENTS, 0, NOT_ENOUGH_REPLICAS)]
    assert proxy.prechecks(ORDERS, "failed") == 0 and proxy.prechecks(ORDERS, "passed") == 0
    assert proxy.refreshed == [[PAYMENTS]]


# ====================================================================== acks_floor


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_floor_minus_one_raises_acks_one_to_minus_one(version: int) -> None:
    # Given acks_floor=-1 on orders (no fast_fail), one of its partitions below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-1))
    proxy.isr(orders=[BELOW_MIN, HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=1
    sent = proxy.produce(version, 1, {ORDERS: [0, 1]})
    # Then the whole request goes upstream with acks=-1, every other byte unchanged, no precheck
    assert proxy.io.to_upstream == [with_acks(sent, -1)]
    assert proxy.prechecks(ORDERS, "failed") == 0 and proxy.prechecks(ORDERS, "passed") == 0
    # And the broker's answer is the client's
    answer = proxy.broker_answers(proxy.upstream()[0])
    assert proxy.io.to_client == [answer]
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 2
    assert proxy.decisions(ORDERS, 1, -1, "raised_by_floor") == 2


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_floor_minus_two_prechecks_acks_one_and_sends_minus_one(version: int) -> None:
    # Given acks_floor=-2 on orders, its partition 1 below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-2))
    proxy.isr(orders=[HEALTHY, BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=1
    proxy.produce(version, 1, {ORDERS: [0, 1]})
    # Then partition 0 goes upstream with acks=-1; partition 1 is answered by the proxy
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1 and forwarded.partitions == [(ORDERS, 0)]
    proxy.broker_answers(forwarded)
    (answer,) = proxy.client_got(version)
    assert answer.partitions == [(ORDERS, 0, 0), (ORDERS, 1, NOT_ENOUGH_REPLICAS)]
    assert proxy.prechecks(ORDERS, "passed") == 1 and proxy.prechecks(ORDERS, "failed") == 1
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 2
    assert proxy.decisions(ORDERS, 1, -1, "raised_by_floor") == 1
    assert proxy.decisions(ORDERS, 1, None, "answered_not_enough_replicas") == 1
    assert proxy.refreshed == [[ORDERS]]


@pytest.mark.parametrize("version", V1_PLUS)
def test_a_floor_on_one_topic_raises_the_whole_mixed_request(version: int) -> None:
    # Given acks_floor=-1 on orders and no policy for payments
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-1))
    proxy.isr(orders=[HEALTHY], payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=1 to payments and orders in one request
    sent = proxy.produce(version, 1, {PAYMENTS: [0], ORDERS: [0]})
    # Then acks is per request: the whole request goes with acks=-1
    assert proxy.io.to_upstream == [with_acks(sent, -1)]
    proxy.broker_answers(proxy.upstream()[0])
    # And only orders counts as raised by its floor; payments went with -1 as a plain forward
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 1
    assert proxy.count("acks_floor_applied", topic=PAYMENTS) == 0
    assert proxy.decisions(ORDERS, 1, -1, "raised_by_floor") == 1
    assert proxy.decisions(PAYMENTS, 1, -1, "forwarded") == 1


@pytest.mark.parametrize("version", V1_PLUS)
def test_a_minus_two_floor_on_one_topic_prechecks_every_topic_of_the_request(version: int) -> None:
    # Given acks_floor=-2 on orders (healthy); payments has no policy and is below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-2))
    proxy.isr(orders=[HEALTHY], payments=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=1 to both
    proxy.produce(version, 1, {ORDERS: [0], PAYMENTS: [0]})
    # Then the request has acks=-2 semantics as a whole: payments is answered 19, orders goes with -1
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1 and forwarded.partitions == [(ORDERS, 0)]
    proxy.broker_answers(forwarded)
    (answer,) = proxy.client_got(version)
    assert answer.partitions == [(ORDERS, 0, 0), (PAYMENTS, 0, NOT_ENOUGH_REPLICAS)]
    assert proxy.prechecks(PAYMENTS, "failed") == 1
    assert proxy.refreshed == [[PAYMENTS]]


def test_a_mixed_request_naming_the_minus_two_floor_first_is_prechecked_as_a_whole() -> None:
    # Given acks_floor=-1 on orders and acks_floor=-2 on payments, payments below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-1), AcksPolicyConfig(topics="payments", acks_floor=-2))
    proxy.isr(orders=[HEALTHY], payments=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=1, payments first
    proxy.produce(9, 1, {PAYMENTS: [0], ORDERS: [0]})
    # Then the whole request has -2 semantics: payments answered 19, orders prechecked too and sent with -1
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1 and forwarded.partitions == [(ORDERS, 0)]
    assert proxy.prechecks(PAYMENTS, "failed") == 1
    assert proxy.prechecks(ORDERS, "passed") == 1


def test_a_mixed_request_gets_the_strongest_of_its_topics_floors_whatever_their_order() -> None:
    # Given acks_floor=-1 on orders and acks_floor=-2 on payments, payments below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-1), AcksPolicyConfig(topics="payments", acks_floor=-2))
    proxy.isr(orders=[HEALTHY], payments=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=1, orders first
    proxy.produce(9, 1, {ORDERS: [0], PAYMENTS: [0]})
    # Then payments is checked as its -2 floor asks: answered 19 by the proxy, never forwarded
    (forwarded,) = proxy.upstream()
    assert forwarded.partitions == [(ORDERS, 0)]
    assert proxy.prechecks(PAYMENTS, "failed") == 1


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_one_to_topics_without_a_floor_goes_upstream_untouched(version: int) -> None:
    # Given a floor on payments only (orders' policy has fast_fail and no floor), and orders below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="payments", acks_floor=-2), AcksPolicyConfig(topics="orders", fast_fail=True))
    proxy.isr(orders=[BELOW_MIN], payments=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=1 to orders only
    sent = proxy.produce(version, 1, {ORDERS: [0]})
    # Then it goes upstream byte for byte, with no precheck and no floor applied
    assert proxy.io.to_upstream == [sent]
    assert proxy.prechecks(ORDERS, "failed") == 0
    proxy.broker_answers(proxy.upstream()[0])
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 0
    assert proxy.decisions(ORDERS, 1, 1, "forwarded") == 1


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_zero_is_never_raised_by_a_floor_nor_prechecked(version: int) -> None:
    # Given a -2 floor and fast_fail on every topic, every partition below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics=".*", fast_fail=True, acks_floor=-2))
    proxy.isr(orders=[BELOW_MIN, BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=0
    sent = proxy.produce(version, 0, {ORDERS: [0, 1]})
    # Then it goes upstream byte for byte, no response is owed, and the client gets nothing
    assert proxy.io.to_upstream == [sent]
    assert proxy.owed == []
    assert proxy.io.to_client == []
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 0
    assert proxy.prechecks(ORDERS, "failed") == 0
    assert proxy.decisions(ORDERS, 0, 0, "forwarded") == 2


def test_acks_minus_one_is_not_changed_by_a_floor() -> None:
    # Given a -2 floor on orders (no fast_fail), orders below min ISR
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-2))
    proxy.isr(orders=[BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a client produces with acks=-1
    sent = proxy.produce(9, -1, {ORDERS: [0]})
    # Then a floor raises acks=1 only: the request goes upstream byte for byte
    assert proxy.io.to_upstream == [sent]
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 0


# ====================================================================== Produce v13: topics by id


def test_v13_policies_metrics_and_refreshes_use_the_topic_name_the_metadata_gave_the_id() -> None:
    # Given a -2 floor on orders, known to the proxy by name and id from Metadata; partition 1 below min
    proxy = Sidecar(AcksPolicyConfig(topics="orders", acks_floor=-2))
    proxy.isr(orders=[HEALTHY, BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When a v13 client produces with acks=1, naming the topic by its id
    proxy.produce(13, 1, {ORDERS: [0, 1]})
    # Then the floor applies by name, partition 1 is answered by the proxy under the topic's id
    (forwarded,) = proxy.upstream()
    assert forwarded.acks == -1 and forwarded.partitions == [(ORDERS, 0)]
    proxy.broker_answers(forwarded)
    (answer,) = proxy.client_got(13)
    assert answer.partitions == [(ORDERS, 0, 0), (ORDERS, 1, NOT_ENOUGH_REPLICAS)]
    # And the refresh and the metrics name the topic, not its id
    assert proxy.refreshed == [[ORDERS]]
    assert proxy.count("acks_floor_applied", topic=ORDERS) == 2
    assert proxy.decisions(ORDERS, 1, None, "answered_not_enough_replicas") == 1


def test_v13_request_for_a_topic_id_the_proxy_never_saw_is_forwarded_as_minus_one() -> None:
    # Given a proxy whose Metadata never named this topic id
    proxy = Sidecar()
    proxy.min_insync_replicas(2)
    unknown = uuid.UUID("00000000-0000-4000-8000-0000000000ff")
    ids = {**TOPIC_IDS, "mystery": unknown}
    frame = produce_request(13, -2, {"mystery": [0]}, ids)
    # When a client produces with acks=-2 to it, and a second request right behind it
    proxy.core.receive_client_data(frame + produce_request(13, -1, {"orders": [0]}, ids))
    # Then the proxy first asks for the id's name, holding both requests (their order is the client's)
    assert proxy.io.to_upstream == [] and len(proxy.io.pending_async) == 1
    exchange, lookup = proxy.io.pending_async.pop()
    run_to_completion(lookup)
    assert proxy.resolved == [[unknown]]
    proxy.core.async_done(exchange, None)
    # And when the name stays unknown it does not guess: the request goes with acks=-1
    assert proxy.io.to_upstream == [with_acks(frame, -1)]
    # then the held request is handled (it names an id this view never saw either: it looks it up too)
    exchange, lookup = proxy.io.pending_async.pop()
    run_to_completion(lookup)
    proxy.core.async_done(exchange, None)
    assert len(proxy.io.to_upstream) == 2
    # and metrics name it __unknown_topic_id__, never by its id
    assert proxy.prechecks("__unknown_topic_id__", "unknown") == 1


def test_v13_topic_id_named_by_the_lookup_is_prechecked_by_name() -> None:
    # Given a proxy that learns orders (partition 0 below min ISR) only by looking its id up
    proxy = Sidecar()
    proxy.isr(payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    proxy.lookup_answer = {ORDERS: [BELOW_MIN, HEALTHY], PAYMENTS: [HEALTHY]}
    # When a v13 client pipelines acks=-2 to orders (1), then acks=1 to payments (2)
    proxy.produce(13, -2, {ORDERS: [0, 1]}, correlation_id=1)
    plain = proxy.produce(13, 1, {PAYMENTS: [0]}, correlation_id=2)
    # Then nothing goes upstream while orders' id is looked up: 2 waits behind 1
    assert proxy.io.to_upstream == [] and len(proxy.io.pending_async) == 1
    exchange, lookup = proxy.io.pending_async.pop()
    run_to_completion(lookup)
    assert proxy.resolved == [[TOPIC_IDS[ORDERS]]]
    # When the lookup named orders
    proxy.core.async_done(exchange, None)
    # Then 1 is prechecked by name (only partition 1 goes, with -1), then 2 goes untouched: the client's order
    first, second = proxy.upstream()
    assert (first.correlation_id, first.acks, first.partitions) == (1, -1, [(ORDERS, 1)])
    assert proxy.io.to_upstream[1] == plain
    assert proxy.refreshed == [[ORDERS]]
    # And the answers come back merged and in order
    proxy.broker_answers(first)
    proxy.broker_answers(second)
    answers = proxy.client_got(13)
    assert [a.correlation_id for a in answers] == [1, 2]
    assert answers[0].partitions == [(ORDERS, 0, NOT_ENOUGH_REPLICAS), (ORDERS, 1, 0)]


# ====================================================================== ISR re-reads and ordering


def test_failed_precheck_rereads_the_topic_at_most_once_a_second() -> None:
    # Given orders below min ISR, and the policy's clock under the test's control
    now = [time.monotonic()]
    proxy = Sidecar(clock=lambda: now[0])
    proxy.isr(orders=[BELOW_MIN, BELOW_MIN])
    proxy.min_insync_replicas(2)
    # When three acks=-2 requests fail their precheck within the same second
    for correlation_id in (1, 2, 3):
        proxy.produce(9, -2, {ORDERS: [0, 1]}, correlation_id=correlation_id)
        now[0] += 0.3
    # Then the topic's ISR was re-read once
    assert proxy.refreshed == [[ORDERS]]
    # When another fails more than a second after the re-read
    now[0] += 0.2
    proxy.produce(9, -2, {ORDERS: [0]}, correlation_id=4)
    # Then it is re-read again
    assert proxy.refreshed == [[ORDERS], [ORDERS]]
    assert [a.correlation_id for a in proxy.client_got(9)] == [1, 2, 3, 4]


def test_a_partial_answer_keeps_its_place_among_pipelined_requests() -> None:
    # Given orders partition 0 below min ISR, partition 1 and payments healthy
    proxy = Sidecar()
    proxy.isr(orders=[BELOW_MIN, HEALTHY], payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    # When a client pipelines: acks=-2 partly unready (1), acks=1 (2), acks=-2 entirely unready (3)
    proxy.produce(9, -2, {ORDERS: [0, 1]}, correlation_id=1)
    plain = proxy.produce(9, 1, {PAYMENTS: [0]}, correlation_id=2)
    proxy.produce(9, -2, {ORDERS: [0]}, correlation_id=3)
    # Then 1 (trimmed) and 2 (untouched) go upstream; 3 waits for the answers before it
    first, second = proxy.upstream()
    assert (first.correlation_id, first.partitions) == (1, [(ORDERS, 1)])
    assert proxy.io.to_upstream[1] == plain
    assert proxy.io.to_client == []
    assert proxy.owed == [1, 2, 3]
    # When the broker answers 1
    proxy.broker_answers(first)
    # Then the client gets 1 merged, and 3 still waits behind 2
    assert [a.correlation_id for a in proxy.client_got(9)] == [1]
    assert proxy.client_got(9)[0].partitions == [(ORDERS, 0, NOT_ENOUGH_REPLICAS), (ORDERS, 1, 0)]
    # When the broker answers 2
    proxy.broker_answers(second)
    # Then 2 and 3 follow, in request order
    answers = proxy.client_got(9)
    assert [a.correlation_id for a in answers] == [1, 2, 3]
    assert answers[1].partitions == [(PAYMENTS, 0, 0)]
    assert answers[2].partitions == [(ORDERS, 0, NOT_ENOUGH_REPLICAS)]
    assert proxy.owed == []
