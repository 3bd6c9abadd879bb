"""What the proxy keeps per topic name has a bound (issue #39: a sidecar runs for a year, through thousands of
topics created and deleted and clients naming topics that do not exist): the Produce behaviours' per-topic state
and the cluster view's "the leader said below min ISR" marks (no sockets, no Kafka)."""

from __future__ import annotations

from harness.produce_frames import read_produce_request
from harness.sidecar import HEALTHY, ORDERS, TOPIC_IDS, Sidecar, metadata_response
from insync_proxy.proxy.behaviours.acks import POLICY_CACHE_LIMIT
from insync_proxy.proxy.behaviours.isr_learning import REREADS_KEPT
from insync_proxy.proxy.config.settings import AcksPolicyConfig
from insync_proxy.proxy.datapath.cluster_view import BROKER_SAID_KEPT, BROKER_SAID_SECONDS, ClusterView
from tests.helpers import Clock

UNKNOWN_TOPIC_OR_PARTITION = 3


def _produce_to_names(proxy: Sidecar, names: list[str], acks: int, error: int | None, clock: Clock | None = None,
                      step: float = 0.0) -> None:
    """One Produce v9 per name, each answered by the broker (with `error` for its partition, if given)."""
    for i, name in enumerate(names):
        proxy.produce(9, acks, {name: [0]}, correlation_id=i + 1)
        sent = read_produce_request(proxy.io.to_upstream[-1], TOPIC_IDS)
        proxy.broker_answers(sent, errors={(name, 0): error} if error is not None else None)
        proxy.io.to_upstream.clear()
        proxy.io.to_client.clear()
        if clock is not None:
            clock.now += step


def test_topics_reread_once_leave_no_state_behind() -> None:
    # Given ever new topics re-read once each, a second or more apart (topics deleted behind the proxy's back: the
    # leader answers UNKNOWN_TOPIC_OR_PARTITION, a "stale leader" error, and the topic's ISR is re-read)
    clock = Clock()
    proxy = Sidecar(clock=clock)
    rereads = proxy.policy.rereads
    names = [f"deleted-{i}" for i in range(3 * REREADS_KEPT)]
    for name in names:
        rereads.soon(name)
        clock.now += 1.5
    # Then each was re-read once, and what the re-reads remember stays within its bound
    assert len(proxy.refreshed) == len(names)
    assert len(rereads._last) <= REREADS_KEPT


def test_a_produce_to_a_topic_the_proxy_never_saw_answered_unknown_topic_rereads_nothing() -> None:
    # Given a client producing to made-up topic names (a typo in a loop, a scanner), each answered
    # UNKNOWN_TOPIC_OR_PARTITION by the broker
    clock = Clock()
    proxy = Sidecar(clock=clock)
    proxy.isr(orders=[HEALTHY])
    _produce_to_names(proxy, [f"made-up-{i}" for i in range(50)], -1, UNKNOWN_TOPIC_OR_PARTITION, clock, step=1.5)
    # Then no control request and no memory is spent on them: there is nothing of theirs to re-read
    assert proxy.refreshed == []
    assert not proxy.policy.rereads._last
    # While a topic the proxy knows, answered so (deleted, or its leader moved), is re-read (then forgotten)
    _produce_to_names(proxy, [ORDERS], -1, UNKNOWN_TOPIC_OR_PARTITION)
    assert proxy.refreshed == [[ORDERS]]


def test_a_topic_is_still_reread_at_most_once_a_second_when_many_are() -> None:
    clock = Clock()
    proxy = Sidecar(clock=clock)
    rereads = proxy.policy.rereads
    # Many topics re-read within one second (beyond the bound): none of them twice in that second
    names = [f"t-{i}" for i in range(2 * REREADS_KEPT)]
    for name in names:
        rereads.soon(name)
    for name in names:
        rereads.soon(name)
    assert len(proxy.refreshed) == len(names)
    # A second later, each may be re-read again
    clock.now += 1.0
    rereads.soon(names[0])
    assert proxy.refreshed[-1] == [names[0]]


def test_the_acks_policy_remembers_a_bounded_number_of_topic_names() -> None:
    # Given an acks floor (every acks=1 request's topics are matched against the policies)
    proxy = Sidecar(AcksPolicyConfig(topics="floor-.*", acks_floor=-1))
    # When a client produces acks=1 to ever new topic names
    names = [f"made-up-{i}" for i in range(POLICY_CACHE_LIMIT + 500)] + ["floor-orders"]
    _produce_to_names(proxy, names, 1, None)
    # Then the policies' per-topic cache stays within its bound, and the floor still applies
    assert len(proxy.policy._policy_cache) <= POLICY_CACHE_LIMIT
    proxy.produce(9, 1, {"floor-orders": [0]}, correlation_id=99)
    assert read_produce_request(proxy.io.to_upstream[-1], TOPIC_IDS).acks == -1


def test_a_deleted_topic_leaves_no_mark_of_the_leaders_not_enough_replicas() -> None:
    view = ClusterView()
    view.update(metadata_response({ORDERS: [HEALTHY]}))
    view.broker_said_below_min_isr(ORDERS, 0)
    assert view.readiness(ORDERS, 0, 2).below_min_isr
    # When the topic is deleted
    view.forget_topic(ORDERS)
    # Then nothing of it stays behind
    assert not view._broker_said_below


def test_the_leaders_not_enough_replicas_marks_are_bounded_when_never_looked_at_again() -> None:
    # Given marks for ever new partitions (topic churn), none of which is looked at again
    clock = Clock()
    view = ClusterView(clock=clock)
    for i in range(3 * BROKER_SAID_KEPT):
        view.broker_said_below_min_isr(f"churn-{i}", 0)
        clock.now += BROKER_SAID_SECONDS / 100
    # Then those past BROKER_SAID_SECONDS are forgotten once the marks reach their bound
    assert len(view._broker_said_below) <= BROKER_SAID_KEPT
    # And a fresh mark still counts
    view.broker_said_below_min_isr(ORDERS, 0)
    assert (ORDERS, 0) in view._broker_said_below

