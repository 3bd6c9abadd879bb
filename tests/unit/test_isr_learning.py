"""The leader's own answers teach the proxy's ISR view at once (no sockets, no Kafka)."""

from __future__ import annotations

import time

import pytest

from harness.sidecar import (
    HEALTHY,
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER_OR_FOLLOWER,
    ORDERS,
    PAYMENTS,
    Sidecar,
)
from insync_proxy.proxy.datapath import cluster_view as cluster_view_module

NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


@pytest.mark.parametrize("code", [NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND])
@pytest.mark.parametrize("acks", [-1, -2])
@pytest.mark.parametrize("audit_on", [True, False])
def test_after_the_leaders_not_enough_replicas_the_next_acks_minus_two_is_answered_by_the_proxy(
    code: int, acks: int, audit_on: bool
) -> None:
    # Given a view that still shows a full ISR (its Metadata predates the shrink); the audit on or off
    proxy = Sidecar(audit_on=audit_on)
    proxy.isr(orders=[HEALTHY], payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    # When a forwarded request gets NOT_ENOUGH_REPLICAS(_AFTER_APPEND) from the leader
    proxy.produce(9, acks, {ORDERS: [0]}, correlation_id=1)
    (forwarded,) = proxy.upstream()
    proxy.broker_answers(forwarded, errors={(ORDERS, 0): code})
    assert [a.partitions for a in proxy.client_got(9)] == [[(ORDERS, 0, code)]]
    # Then the very next acks=-2 request to that partition is answered by the proxy, nothing forwarded
    proxy.produce(9, -2, {ORDERS: [0]}, correlation_id=2)
    assert len(proxy.upstream()) == 1
    assert proxy.client_got(9)[1].partitions == [(ORDERS, 0, NOT_ENOUGH_REPLICAS)]
    assert proxy.prechecks(ORDERS, "failed") == 1
    # And the view is re-read; another partition is not affected
    assert [ORDERS] in proxy.refreshed
    proxy.produce(9, -2, {PAYMENTS: [0]}, correlation_id=3)
    assert len(proxy.upstream()) == 2


def test_the_leaders_word_yields_to_metadata_after_a_few_seconds() -> None:
    # Given the leader said NOT_ENOUGH_REPLICAS, and the view's Metadata still shows a full ISR
    proxy = Sidecar()
    proxy.isr(orders=[HEALTHY])
    proxy.min_insync_replicas(2)
    proxy.view.broker_said_below_min_isr(ORDERS, 0)
    assert proxy.view.readiness(ORDERS, 0, 2).below_min_isr
    # When BROKER_SAID_SECONDS have passed (the re-read it triggered saw the ISR recover)
    later = time.monotonic() + cluster_view_module.BROKER_SAID_SECONDS + 0.1
    proxy.view.clock = lambda: later
    # Then Metadata decides again
    assert not proxy.view.readiness(ORDERS, 0, 2).below_min_isr


@pytest.mark.parametrize("audit_on", [True, False])
def test_a_leadership_error_rereads_the_topic(audit_on: bool) -> None:
    proxy = Sidecar(audit_on=audit_on)
    proxy.isr(orders=[HEALTHY])
    proxy.min_insync_replicas(2)
    proxy.produce(9, -1, {ORDERS: [0]}, correlation_id=1)
    (forwarded,) = proxy.upstream()
    proxy.broker_answers(forwarded, errors={(ORDERS, 0): NOT_LEADER_OR_FOLLOWER})
    assert proxy.refreshed == [[ORDERS]]
    # and it does not make the partition "below min ISR"
    assert not proxy.view.readiness(ORDERS, 0, 2).below_min_isr


def test_the_proxys_own_answers_in_a_merged_response_do_not_teach_the_view() -> None:
    # Given orders 0 below min ISR in the view and payments 0 healthy
    proxy = Sidecar()
    proxy.isr(orders=[(1,)], payments=[HEALTHY])
    proxy.min_insync_replicas(2)
    # When an acks=-2 request to both is split (payments forwarded, the proxy answers orders with 19)
    proxy.produce(9, -2, {ORDERS: [0], PAYMENTS: [0]}, correlation_id=1)
    (forwarded,) = proxy.upstream()
    proxy.broker_answers(forwarded)
    assert proxy.client_got(9)[0].partitions == [(ORDERS, 0, NOT_ENOUGH_REPLICAS), (PAYMENTS, 0, 0)]
    # and then the view learns that orders 0 recovered
    proxy.isr(orders=[HEALTHY], payments=[HEALTHY])
    # Then orders 0 is ready at once: the proxy's own 19 in the merged answer was not taken for the broker's
    assert not proxy.view.readiness(ORDERS, 0, 2).below_min_isr
