"""The Metadata enrichment's test harness: `MetadataEnricher` with a real min.insync.replicas cache in front of a
control connection that records every DescribeConfigs (`Proxy`, `RecordingControl`), and the topics' answers it is
fed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Iterable

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
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
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
