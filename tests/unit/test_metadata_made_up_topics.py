"""Made-up topics in a client's Metadata cost the proxy nothing (issue #29), through MetadataEnricher alone with
plain bytes (no sockets, no Kafka): the topics the broker answers as not there are not looked up in the
min.insync.replicas cache, so no DescribeConfigs, no wait, no back-off entry; other errors are looked up as before."""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Awaitable, Iterable

import pytest

from insync_proxy.protocol import (
    ApiKey,
    DescribeConfigsResponse,
    ErrorCode,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
    decode_response,
    encode_request,
    encode_request_header,
    encode_response,
    encode_response_with_header,
    split_response,
)
from insync_proxy.protocol.messages import (
    DescribeConfigsResourceResult,
    DescribeConfigsResult,
    MetadataRequestTopic,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher
from insync_proxy.proxy.config.broker_ports import BrokerPorts
from insync_proxy.proxy.controlplane.context import BehaviourContext
from insync_proxy.proxy.controlplane.min_insync import CachedValue, MinInsyncCache
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.datapath.exchange import Exchange, Frame, ListenerAddresses, ListenerSettings
from insync_proxy.proxy.observability.metrics import ProxyMetrics

#: Node 1's listener is open already: the answer goes back without waiting for a listener to open.
LISTENER = ListenerSettings(
    name="default", label="bootstrap", metadata_schema="tagged", hide_unready_partitions=False,
    addresses=ListenerAddresses("127.0.0.1", BrokerPorts(9100)), broker_listeners=frozenset({1}),
)

ORDERS = "orders"
#: A topic the proxy's view still maps from its id (deleted since): the broker answers UNKNOWN_TOPIC_ID.
GONE_ID = uuid.UUID(int=7)
#: What a broker answers for names that are not there, or that the client may not see (no partitions).
MADE_UP: dict[str, int] = {
    "made-up-1": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION,
    "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
}


class RecordingControl:
    """The control connection as the cache uses it: records every DescribeConfigs, answers 2 (or fails)."""

    request_timeout = 2.0

    def __init__(self, fail: bool = False) -> None:
        self.described: list[list[str]] = []
        self.fail = fail

    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        self.described.append(list(topics))
        if self.fail:
            raise TimeoutError("slow broker")
        return DescribeConfigsResponse(results=tuple(DescribeConfigsResult(resource_type=2, resource_name=t, configs=(
            DescribeConfigsResourceResult(name="min.insync.replicas", value="2"),)) for t in topics))


class Proxy:
    """MetadataEnricher with a real min.insync.replicas cache in front of a recording control connection."""

    def __init__(self, miss_wait_seconds: float = 0.0, fail: bool = False) -> None:
        self.control = RecordingControl(fail)
        self.metrics = ProxyMetrics()
        self.view = ClusterView()
        self.view.topic_ids[GONE_ID] = "gone"
        self.cache = MinInsyncCache(self.control, self.metrics, ttl_seconds=30,  # type: ignore[arg-type]
                                    miss_wait_seconds=miss_wait_seconds)
        self.enricher = MetadataEnricher(BehaviourContext(
            cluster_view=self.view, min_insync=self.cache, metrics=self.metrics, audit=None,
            refresh_topics=lambda topics: None, open_broker_listeners=self._no_listeners,
            call_soon=lambda f: f(), control=None,  # type: ignore[arg-type]
        ))

    async def _no_listeners(self) -> None:
        return None

    def answer(self, version: int, topics: Iterable[MetadataResponseTopic]) -> Frame | Awaitable[Frame]:
        """A client's Metadata naming these topics, answered by the broker so: what the enricher makes of it."""
        topics = tuple(topics)
        request = MetadataRequest(topics=tuple(MetadataRequestTopic(name=t.name) for t in topics if t.name))
        header = RequestHeader(request_api_key=ApiKey.METADATA, request_api_version=version, correlation_id=3,
                               client_id="c")
        exchange = Exchange(LISTENER, ApiKey.METADATA, version, 3, "c",
                            memoryview(encode_request_header(header) + encode_request(request, version)))
        self.enricher.on_request(exchange)
        response = MetadataResponse(
            brokers=(MetadataResponseBroker(node_id=1, host="10.0.0.1", port=9092),), topics=topics)
        frame = encode_response_with_header(ApiKey.METADATA, version, 3, encode_response(response, version))
        result = self.enricher.on_response(exchange, memoryview(frame))
        assert not isinstance(result, list)
        return result

    def sample(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(name) or 0.0


def real(name: str, error_code: int = 0) -> MetadataResponseTopic:
    partitions = () if error_code else (
        MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=(1,), isr_nodes=(1,)),)
    return MetadataResponseTopic(error_code=error_code, name=name, partitions=partitions)


def made_up(version: int) -> list[MetadataResponseTopic]:
    """The broker's answer for the made-up names (no partitions); v10+ also a topic id it does not know."""
    topics = [MetadataResponseTopic(error_code=code, name=name) for name, code in MADE_UP.items()]
    if version >= 12:  # names nullable: a topic asked for by id comes back with its id only
        topics.append(MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=GONE_ID))
    elif version >= 10:
        topics.append(MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name="gone", topic_id=GONE_ID))
    return topics


def min_insync_of(version: int, frame: Frame) -> dict[str | None, int]:
    _, body = split_response(frame, ApiKey.METADATA, version)
    response = decode_response(ApiKey.METADATA, version, body)
    assert isinstance(response, MetadataResponse)
    return {t.name: t.min_insync_replicas for t in response.topics}


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


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
