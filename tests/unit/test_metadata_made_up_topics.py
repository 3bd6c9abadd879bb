"""Made-up topics in a client's Metadata cost the proxy nothing (issue #29), through MetadataEnricher alone with
plain bytes (no sockets, no Kafka): the topics the broker answers as not there are not looked up in the
min.insync.replicas cache, so no DescribeConfigs, no wait, no back-off entry; other errors are looked up as before."""

from __future__ import annotations

import inspect
import time

import pytest

from insync_proxy.protocol import (
    ErrorCode,
)
from insync_proxy.protocol.messages import (
    MetadataResponseTopic,
)
from insync_proxy.proxy.controlplane.min_insync import CachedValue
from tests.unit.enricher_harness import (
    ORDERS,
    Proxy,
    made_up,
    min_insync_of,
    real,
    settle,
)


@pytest.mark.parametrize("version", [1, 9, 10, 12])
async def test_made_up_topics_beside_a_real_one_only_the_real_one_is_read(version: int) -> None:
    # Given a proxy that has read no min.insync.replicas yet (no miss wait)
    proxy = Proxy()
    # When a client's Metadata names a real topic and made-up ones, which the broker answers as not there
    result = proxy.answer(version, [real(ORDERS), *made_up(version)])
    assert not inspect.isawaitable(result)
    await settle()
    # Then only the real topic is read (one DescribeConfigs of one topic), and only it counts as a miss
    assert proxy.control.described == [[ORDERS]]
    assert proxy.sample("insync_proxy_topic_configs_read_total") == 1
    assert proxy.sample("insync_proxy_metadata_cache_misses_total") == 1
    assert sorted(proxy.cache.entries) == [ORDERS]
    # And the next answer naming them again reads nothing more
    proxy.answer(version, [real(ORDERS), *made_up(version)])
    await settle()
    assert proxy.control.described == [[ORDERS]]


async def test_made_up_topics_leave_no_back_off_entry_when_describe_configs_fails() -> None:
    # Given a control connection whose DescribeConfigs fails (a slow broker)
    proxy = Proxy(fail=True)
    # When clients name thousands of random topics (the broker answers each as not there)
    for batch in range(20):
        proxy.answer(12, [MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=f"r{batch}-{i}")
                          for i in range(50)])
    await settle()
    # Then the proxy sent no control request and keeps nothing for them: memory follows real use, not requests
    assert proxy.control.described == []
    assert proxy.cache._backoff == {} and proxy.cache.entries == {}


@pytest.mark.parametrize("version", [9, 12])
async def test_with_a_miss_wait_the_answer_is_not_delayed_for_made_up_topics(version: int) -> None:
    # Given a miss wait long enough to see, and the real topic's value cached
    proxy = Proxy(miss_wait_seconds=5.0)
    proxy.cache.entries[ORDERS] = CachedValue(2, time.monotonic())
    # When a client's Metadata names it beside made-up topics
    started = time.monotonic()
    result = proxy.answer(version, [real(ORDERS), *made_up(version)])
    # Then the answer is ready at once (nothing awaited), carrying the real topic's value; nothing is read
    assert not inspect.isawaitable(result)
    assert time.monotonic() - started < 1.0
    values = min_insync_of(version, result)
    assert values[ORDERS] == 2
    assert {name: v for name, v in values.items() if name != ORDERS} == dict.fromkeys(
        [name for name in values if name != ORDERS], -1)
    await settle()
    assert proxy.control.described == []


@pytest.mark.parametrize("miss_wait_seconds", [0.0, 5.0])
async def test_a_topic_answered_leader_not_available_is_still_read(miss_wait_seconds: float) -> None:
    # Given a topic just created (the broker answers LEADER_NOT_AVAILABLE while its leader is elected)
    proxy = Proxy(miss_wait_seconds=miss_wait_seconds)
    result = proxy.answer(12, [real("new-topic", ErrorCode.LEADER_NOT_AVAILABLE), *made_up(12)])
    # Then its min.insync.replicas is read as for any topic the broker has (awaited within the miss wait if any)
    if miss_wait_seconds > 0:
        assert inspect.isawaitable(result)
        await result
    else:
        assert not inspect.isawaitable(result)
    await settle()
    assert proxy.control.described == [["new-topic"]]
    assert proxy.cache.peek("new-topic") == 2
