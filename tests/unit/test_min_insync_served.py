"""Tag 637 on every answer a client asks for (issue 39, item 3), through MetadataEnricher with plain bytes and a
fake clock (no sockets, no Kafka):

- stale while revalidate: a min.insync.replicas the proxy has read is served after its TTL (up to the max stale
  age) while it is re-read in the background, so a client asking for all topics less often than the TTL still
  gets every tag; bounded in age (`min_insync_max_stale_seconds`) and count (`min_insync_max_entries`);
- a new topic's first answer waits for a slow DescribeConfigs up to `min_insync_miss_wait_ms` (that answer
  only), and an answer that hits the bound is counted and said once per log interval.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Iterable

import pytest

from insync_proxy.protocol import (
    ApiKey,
    DescribeConfigsResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
    encode_request,
    encode_request_header,
    encode_response,
    encode_response_with_header,
)
from insync_proxy.protocol.messages import MetadataResponseBroker, MetadataResponseTopic
from insync_proxy.proxy.config.settings import ProxyConfig
from insync_proxy.proxy.controlplane.min_insync import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_STALE_SECONDS,
    DEFAULT_MISS_WAIT_SECONDS,
    CachedValue,
    MinInsyncCache,
    TopicDemand,
)
from insync_proxy.proxy.datapath.exchange import Exchange, Frame
from tests.helpers import Clock
from tests.unit.enricher_harness import (
    LISTENER,
    Proxy,
    RecordingControl,
    min_insync_of,
    real,
    settle,
)

TOPICS = [f"t{i}" for i in range(10)]
TTL = 30.0


class ClockedProxy(Proxy):
    """`Proxy` (MetadataEnricher, a real cache, a recording control connection) on a fake clock, and answers to
    all-topics requests (which put no topic in use)."""

    def __init__(self, miss_wait_seconds: float = 0.0, max_stale_seconds: float = DEFAULT_MAX_STALE_SECONDS) -> None:
        super().__init__(miss_wait_seconds)
        self.clock = Clock()
        self.cache.clock = self.clock
        self.cache.ttl = TTL
        self.cache.max_stale = max_stale_seconds

    def answer_all(self, version: int, topics: Iterable[MetadataResponseTopic]) -> Frame | Awaitable[Frame]:
        """A client's Metadata for all topics, answered by the broker with these: what the enricher makes of it."""
        request = MetadataRequest(topics=None)
        header = RequestHeader(request_api_key=ApiKey.METADATA, request_api_version=version, correlation_id=5,
                               client_id="c")
        exchange = Exchange(LISTENER, ApiKey.METADATA, version, 5, "c",
                            memoryview(encode_request_header(header) + encode_request(request, version)))
        self.enricher.on_request(exchange)
        response = MetadataResponse(
            brokers=(MetadataResponseBroker(node_id=1, host="10.0.0.1", port=9092),), topics=tuple(topics))
        frame = encode_response_with_header(ApiKey.METADATA, version, 5, encode_response(response, version))
        result = self.enricher.on_response(exchange, memoryview(frame))
        assert not isinstance(result, list)
        return result

    def tagged(self, frame: Frame | Awaitable[Frame], version: int = 9) -> int:
        """How many topics of an answer (given at once) carry tag 637."""
        assert not inspect.isawaitable(frame), "the answer waited"
        return sum(1 for value in min_insync_of(version, frame).values() if value >= 0)


async def test_an_all_topics_answer_long_after_the_ttl_carries_every_value_read_and_has_them_re_read() -> None:
    # Given a proxy that read every topic's min.insync.replicas once (the start's warm-up), no topic in use
    proxy = ClockedProxy()
    await proxy.cache.fetch(TOPICS)
    assert proxy.tagged(proxy.answer_all(9, map(real, TOPICS))) == 10
    proxy.control.described.clear()
    # When a client asks for all topics again after 30 s, then after 120 s idle (past the TTL: nothing refreshed
    # them, they are in no client's use)
    for idle in (30.0, 120.0):
        proxy.clock.now += idle
        proxy.cache.due()  # the refresh loop's tick: it forgets what can no longer be served
        answer = proxy.answer_all(9, map(real, TOPICS))
        # Then the answer goes out at once carrying every topic's value (the one read before)
        assert proxy.tagged(answer) == 10
        # And those values are read again in the background, batched, for the next answers
        await settle()
        assert proxy.control.described == [TOPICS]
        assert all(proxy.cache.entries[t].fetched_at == proxy.clock.now for t in TOPICS)
        proxy.control.described.clear()
    # And the age of what was served is visible: one observation per answer, the oldest value it carried
    assert proxy.sample("insync_proxy_min_insync_served_age_seconds_count") == 3
    assert proxy.sample("insync_proxy_min_insync_stale_served_total") == 20
    assert proxy.metrics.registry.get_sample_value(
        "insync_proxy_min_insync_served_age_seconds_bucket", {"le": "120.0"}) == 3
    assert proxy.metrics.registry.get_sample_value(
        "insync_proxy_min_insync_served_age_seconds_bucket", {"le": "60.0"}) == 2


async def test_a_value_older_than_the_max_stale_age_is_not_served_but_read_again() -> None:
    # Given values read once, and a max stale age of 60 s past the TTL
    proxy = ClockedProxy(max_stale_seconds=60)
    await proxy.cache.fetch(TOPICS)
    proxy.control.described.clear()
    # When an all-topics answer comes 91 s later (older than the TTL plus the max stale age)
    proxy.clock.now += TTL + 61
    answer = proxy.answer_all(9, map(real, TOPICS))
    # Then it carries none of them (no miss wait here), and they are read for the next answer
    assert proxy.tagged(answer) == 0
    await settle()
    assert proxy.control.described == [TOPICS]
    assert proxy.tagged(proxy.answer_all(9, map(real, TOPICS))) == 10
    # And the refresh loop forgets an entry of a topic not in use once it can no longer be served
    proxy.clock.now += TTL + 61
    proxy.cache.due()
    assert proxy.cache.entries == {}


async def test_a_stale_value_is_never_used_by_the_acks_precheck_or_the_readiness_sweep() -> None:
    # Given a value read 45 s ago (TTL 30 s): served in Metadata answers while re-read
    proxy = ClockedProxy()
    proxy.cache.entries["t0"] = CachedValue(2, proxy.clock.now - 45)
    # Then the precheck and the readiness sweep (peek) see no value: the broker decides, as on a cold cache
    assert proxy.cache.peek("t0") is None and not proxy.cache.has_fresh("t0")
    assert proxy.cache.values_for(["t0"]).values == {"t0": 2}


async def test_the_cache_holds_at_most_max_entries_dropping_those_read_longest_ago() -> None:
    # Given a cache bounded to 4 entries
    proxy = ClockedProxy()
    proxy.cache.max_entries = 4
    # When 10 topics are read, two at a time, and the first two again last
    for first in range(0, 10, 2):
        await proxy.cache.fetch(TOPICS[first:first + 2])
        proxy.clock.now += 1
    await proxy.cache.fetch(["t0", "t1"])
    # Then 4 are kept: the two read last, and the two read just before them; the others are counted as dropped
    assert list(proxy.cache.entries) == ["t8", "t9", "t0", "t1"]
    assert proxy.sample("insync_proxy_metadata_cache_evicted_total") == 8
    assert proxy.sample("insync_proxy_metadata_cache_entries") == 4
    # And a lowered bound (a reload) applies at once
    proxy.cache.set_max_entries(1)
    assert list(proxy.cache.entries) == ["t1"]


def test_the_cache_defaults_are_the_settings_defaults() -> None:
    config = ProxyConfig(bootstrap_servers=("k:9092",))
    assert config.min_insync_max_stale_seconds == DEFAULT_MAX_STALE_SECONDS >= 3600
    assert config.min_insync_max_entries == DEFAULT_MAX_ENTRIES
    assert config.min_insync_miss_wait_ms / 1000 == DEFAULT_MISS_WAIT_SECONDS


async def test_the_cache_age_gauge_follows_the_topics_in_use_not_the_entries_kept_stale() -> None:
    # Given a topic in use read 10 s ago, and another topic's entry kept 50 minutes (servable, not refreshed)
    clock = Clock()
    cache = MinInsyncCache(RecordingControl(), Proxy().metrics, ttl_seconds=TTL,  # type: ignore[arg-type]
                           demand=TopicDemand(clock=clock), clock=clock)
    cache.entries["old"] = CachedValue(2, clock.now - 3000)
    cache.entries["orders"] = CachedValue(2, clock.now - 10)
    cache.demand.last_used["orders"] = clock.now
    cache._update_gauges()
    # Then the age gauge (InsyncProxyMinInsyncCacheStale: "refreshes fail") says 10 s, not 3000 s
    assert cache.metrics.metadata_cache_age_seconds._value.get() == 10


# ------------------------------------------------------------------ the first answer of a new topic


class SlowControl(RecordingControl):
    """DescribeConfigs answered `delay` seconds after the broker starts on it (a busy machine), or never until
    `release`; one request at a time, as the control connection sends them."""

    def __init__(self, delay: float | None) -> None:
        super().__init__()
        self.delay = delay
        self.release = asyncio.Event()
        self.one_at_a_time = asyncio.Lock()

    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        async with self.one_at_a_time:
            if self.delay is None:
                await self.release.wait()
            else:
                await asyncio.sleep(self.delay)
            return await super().describe_topic_configs(topics, keys)


def _default_miss_wait_seconds() -> float:
    """The wait the proxy runs with when nothing is configured (proxy/server.py passes the setting)."""
    return ProxyConfig(bootstrap_servers=("k:9092",)).min_insync_miss_wait_ms / 1000


@pytest.mark.parametrize("version", [9, 12])
async def test_new_topics_first_answer_carries_their_tags_when_describe_configs_takes_300_ms(version: int) -> None:
    # Given a proxy with the default miss wait, whose brokers take 300 ms to answer DescribeConfigs (a busy machine)
    proxy = Proxy(miss_wait_seconds=_default_miss_wait_seconds())
    proxy.control = proxy.cache.control = SlowControl(delay=0.3)  # type: ignore[assignment]
    # When a client's first Metadata names five topics created after the proxy started
    new = [f"created-later-{i}" for i in range(5)]
    result = proxy.answer(version, map(real, new))
    # Then that answer waits for the read and carries each topic's min.insync.replicas
    assert inspect.isawaitable(result)
    assert min_insync_of(version, await result) == dict.fromkeys(new, 2)
    assert proxy.sample("insync_proxy_min_insync_miss_wait_exceeded_total") == 0
    # Read in one DescribeConfigs (not one per topic queued behind each other), though they came into use one by one
    await settle()
    assert proxy.control.described == [new]


async def test_only_the_answer_waits_others_go_out_at_once() -> None:
    # Given a DescribeConfigs that does not come back, and another connection's enricher with its topic cached
    waiting = Proxy(miss_wait_seconds=_default_miss_wait_seconds())
    waiting.control = waiting.cache.control = control = SlowControl(delay=None)  # type: ignore[assignment]
    other = Proxy(miss_wait_seconds=_default_miss_wait_seconds())
    other.cache = waiting.cache
    other.enricher.context.min_insync = waiting.cache
    waiting.cache.entries["orders"] = CachedValue(2, waiting.cache.clock())
    # When one client's answer waits for a new topic's read
    pending = asyncio.ensure_future(_awaited(waiting.answer(9, [real("created-later")])))
    await settle()
    assert not pending.done()
    # Then another client's answer (another connection) goes out at once
    at_once = other.answer(9, [real("orders")])
    assert not inspect.isawaitable(at_once) and min_insync_of(9, at_once)["orders"] == 2
    # And the waiting one goes out with its tag as soon as the brokers answer
    control.release.set()
    assert min_insync_of(9, await pending)["created-later"] == 2


async def _awaited(result: Frame | Awaitable[Frame]) -> Frame:
    return await result if inspect.isawaitable(result) else result


async def test_an_answer_that_hits_the_bound_is_counted_and_said_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="insync_proxy.min_insync")
    # Given brokers that do not answer DescribeConfigs within a 50 ms miss wait
    proxy = Proxy(miss_wait_seconds=0.05)
    proxy.control = proxy.cache.control = control = SlowControl(delay=None)  # type: ignore[assignment]
    # When three answers name new topics
    for i in range(3):
        result = proxy.answer(9, [real(f"new-{i}")])
        assert inspect.isawaitable(result)
        # Then each goes out after the bound, without the tag
        assert min_insync_of(9, await result)[f"new-{i}"] == -1
    # And each is counted, and one line says so, naming the setting (the others wait for the interval's summary)
    assert proxy.sample("insync_proxy_min_insync_miss_wait_exceeded_total") == 3
    lines = [r for r in caplog.records if r.name == "insync_proxy.min_insync"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "min_insync_miss_wait_ms (50 ms)" in lines[0].getMessage() and "new-0" in lines[0].getMessage()
    control.release.set()
    await settle()
