"""The topics in use are bounded (issue #29): at most `max_topics_in_use` are followed; a topic named beyond the
bound is served (enriched through the cache's miss path) but not followed, counted and said once per interval.

Sans-IO where it can be: the demand and the cache with a fake clock, the Produce behaviours through the
connection core with plain bytes; the refresh and the miss path with a recording control connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from harness.produce_frames import broker_response, read_produce_request
from harness.sidecar import HEALTHY, ORDERS, PAYMENTS, TOPIC_IDS, Sidecar
from insync_proxy.protocol import MetadataResponse
from insync_proxy.protocol.messages import (
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from insync_proxy.proxy.controlplane.metadata_refresh import MetadataRefresh
from insync_proxy.proxy.controlplane.min_insync import DEFAULT_MAX_TOPICS_IN_USE, MinInsyncCache, TopicDemand
from insync_proxy.proxy.controlplane.readiness import PartitionReadiness
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from tests.helpers import Clock
from tests.unit.control_doubles import NoListeners, RecordingControl

UNKNOWN_TOPIC_OR_PARTITION = 3


def _not_followed(metrics: ProxyMetrics) -> float:
    return metrics.registry.get_sample_value("insync_proxy_topics_not_followed_total") or 0.0


def test_a_full_set_takes_no_new_topic_and_says_so_to_its_listeners() -> None:
    # Given a bound of 3 topics
    demand = TopicDemand(idle_seconds=60, clock=Clock(), max_topics=3)
    new: list[str] = []
    refused: list[str] = []
    demand.on_new.append(new.append)
    demand.on_not_followed.append(refused.append)
    # When a client names 5 topics
    for topic in ("a", "b", "c", "d", "e"):
        demand.touch(topic)
    # Then the first 3 are followed, the other 2 are not (and are said each time they are named)
    assert demand.in_use() == ["a", "b", "c"] and new == ["a", "b", "c"]
    assert refused == ["d", "e"] and "d" not in demand and len(demand) == 3
    demand.touch("d")
    assert refused == ["d", "e", "d"]
    # And a topic in use is still touched as before
    demand.touch("a")
    assert new == ["a", "b", "c"] and len(demand) == 3


def test_topics_gone_idle_make_room_for_new_ones() -> None:
    clock = Clock()
    demand = TopicDemand(idle_seconds=60, clock=clock, max_topics=2)
    new: list[str] = []
    demand.on_new.append(new.append)
    # Given a full set, one of whose topics keeps being named
    demand.touch("a")
    demand.touch("b")
    demand.touch("c")
    assert "c" not in demand
    clock.now += 40
    demand.tick()
    demand.touch("a")
    # When the other goes idle for topic_idle_seconds
    clock.now += 30
    assert demand.tick() == ["b"]
    # Then a new topic is followed again
    demand.touch("c")
    assert sorted(demand.in_use()) == ["a", "c"] and new == ["a", "b", "c"]


def test_a_lowered_bound_lets_the_least_recently_named_topics_go_at_once() -> None:
    clock = Clock()
    demand = TopicDemand(idle_seconds=600, clock=clock, max_topics=4)
    for topic in ("a", "b", "c", "d"):
        demand.touch(topic)
        clock.now += 1
        demand.tick()
    demand.touch("a")  # named again last: the most recent
    assert demand.set_max_topics(2) == ["b", "c"]
    assert sorted(demand.in_use()) == ["a", "d"]
    assert demand.set_max_topics(10) == [] and len(demand) == 2


def test_the_default_bound_is_the_settings_default() -> None:
    from insync_proxy.proxy.config.settings import ProxyConfig

    assert TopicDemand().max_topics == DEFAULT_MAX_TOPICS_IN_USE == ProxyConfig(
        bootstrap_servers=("k:9092",)).max_topics_in_use


def test_topics_beyond_the_bound_are_counted_said_once_per_interval_and_the_gauge_stays_within_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="insync_proxy.min_insync")
    metrics = ProxyMetrics()
    # Given a cache whose topics in use are bounded to 10
    cache = MinInsyncCache(RecordingControl(), metrics, demand=TopicDemand(max_topics=10))  # type: ignore[arg-type]
    # When a client names 1,000 made-up topics (no event loop here: nothing is read)
    for i in range(1000):
        cache.demand.touch(f"made-up-{i}")
    cache._update_gauges()
    # Then 10 are followed, the gauge says so, and the 990 others are counted
    assert len(cache.demand) == 10
    assert metrics.registry.get_sample_value("insync_proxy_topics_in_use") == 10
    assert _not_followed(metrics) == 990
    # And one line says it, naming the setting that lifts the bound (the repeats wait for the summary)
    lines = [r for r in caplog.records if r.name == "insync_proxy.min_insync"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "max_topics_in_use" in lines[0].getMessage() and "'made-up-10'" in lines[0].getMessage()


async def test_a_topic_beyond_the_bound_is_served_through_the_miss_path_but_never_followed() -> None:
    control = RecordingControl()
    metrics = ProxyMetrics()
    view = ClusterView()
    cache = MinInsyncCache(control, metrics, ttl_seconds=30, demand=TopicDemand(max_topics=1))  # type: ignore[arg-type]
    events: list[dict[str, Any]] = []

    class Audit:
        def emit(self, event: dict[str, Any], at: float | None = None) -> None:
            events.append(event)

    readiness = PartitionReadiness(view, cache, metrics, Audit())
    refresh = MetadataRefresh(control, view, cache, metrics, NoListeners(), readiness,  # type: ignore[arg-type]
                              interval_seconds=10)
    # Given one topic in use, the bound
    cache.demand.touch(ORDERS)
    for _ in range(20):
        await asyncio.sleep(0)
    assert control.metadata_asked == [[ORDERS]] and control.described == [[ORDERS]]
    # When a client names another topic
    cache.demand.touch(PAYMENTS)
    for _ in range(20):
        await asyncio.sleep(0)
    # Then it is not read ahead, and the proxy's own Metadata does not ask for it
    assert control.metadata_asked == [[ORDERS]] and control.described == [[ORDERS]]
    await refresh.refresh_metadata()
    assert control.metadata_asked[-1] == [ORDERS]
    assert PAYMENTS not in cache.due()
    # But a client's answer naming it is still enriched: the miss path reads it
    found = cache.values_for([ORDERS, PAYMENTS])
    assert found.values == {ORDERS: 2} and found.missing == [PAYMENTS]
    await cache.wait_for(found.missing, bound_seconds=5)
    assert cache.peek(PAYMENTS) == 2
    # And its partitions in the view (a leader's error re-reads it) make no readiness event
    before = len(events)
    view.update(MetadataResponse(
        brokers=(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092),),
        topics=(MetadataResponseTopic(name=PAYMENTS, partitions=(MetadataResponsePartition(
            partition_index=0, leader_id=1, replica_nodes=(1, 2, 3), isr_nodes=(1,)),)),)))
    assert len(events) == before
    assert all(e["topic"] == ORDERS for e in events) and any(e["event"] == "isr_change" for e in events)
    assert _not_followed(metrics) == 1


def test_a_produce_to_a_topic_that_does_not_exist_does_not_bring_it_into_use() -> None:
    # Given a proxy whose view knows orders, not payments
    side = Sidecar()
    side.isr(orders=[HEALTHY])
    # When a client produces to both and the broker answers payments does not exist
    side.produce(9, -1, {ORDERS: [0], PAYMENTS: [0]})
    sent = read_produce_request(side.io.to_upstream[0], TOPIC_IDS)
    side.core.receive_upstream_data(broker_response(sent, TOPIC_IDS,
                                                    errors={(PAYMENTS, 0): UNKNOWN_TOPIC_OR_PARTITION}))
    # Then orders is in use and payments is not (as a Metadata answer's error topics are not)
    assert ORDERS in side.min_insync.demand and PAYMENTS not in side.min_insync.demand
    # And a Produce the broker accepts brings a new topic into use as before
    side.produce(9, -1, {PAYMENTS: [0]})
    sent = read_produce_request(side.io.to_upstream[1], TOPIC_IDS)
    side.core.receive_upstream_data(broker_response(sent, TOPIC_IDS))
    assert PAYMENTS in side.min_insync.demand
