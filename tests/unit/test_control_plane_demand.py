"""The demand-driven control plane (issue #29): what the proxy reads follows the topics its clients use, and a
slow broker's answers fail no request that the broker answers in turn."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    DescribeConfigsResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
    decode_request,
    decode_request_header,
    encode_request,
    encode_request_header,
    encode_response,
)
from insync_proxy.protocol.messages import (
    ApiVersion,
    DescribeConfigsResourceResult,
    DescribeConfigsResult,
    MetadataRequestTopic,
    MetadataResponseBroker,
)
from insync_proxy.proxy.behaviours.metadata import names_topics
from insync_proxy.proxy.controlplane.control import ControlConnection
from insync_proxy.proxy.controlplane.metadata_refresh import MetadataRefresh
from insync_proxy.proxy.controlplane.min_insync import CachedValue, MinInsyncCache, TopicDemand
from insync_proxy.proxy.controlplane.readiness import PartitionReadiness
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from tests.unit.control_brokers import FakeBroker
from tests.unit.control_doubles import NoListeners, RecordingControl


class SlowConfigBroker(FakeBroker):
    """Answers DescribeConfigs `delay` seconds after it starts on it, one request at a time, as Kafka does; counts
    the topic configs asked for."""

    def __init__(self, node_id: int, delay: float) -> None:
        super().__init__(node_id)
        self.delay = delay
        self.topic_configs = 0
        self.connections = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, offset = decode_request_header(frame)
                if header.request_api_key != ApiKey.DESCRIBE_CONFIGS:
                    await self._answer_other(frame, writer)
                    continue
                request: Any = decode_request(ApiKey.DESCRIBE_CONFIGS, header.request_api_version, frame[offset:])
                self.topic_configs += len(request.resources)
                await asyncio.sleep(self.delay)  # the broker works on one request of a connection at a time
                body = encode_response(DescribeConfigsResponse(results=tuple(
                    DescribeConfigsResult(resource_type=2, resource_name=r.resource_name, configs=(
                        DescribeConfigsResourceResult(name="min.insync.replicas", value="2"),))
                    for r in request.resources)), header.request_api_version)
                head = struct.pack(">i", header.correlation_id) + (b"\0" if header.request_api_version >= 4 else b"")
                writer.write(struct.pack(">i", len(head) + len(body)) + head + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _answer_other(self, frame: bytes, writer: asyncio.StreamWriter) -> None:
        """ApiVersions and Metadata, as FakeBroker answers them."""
        header, _ = decode_request_header(frame)
        key, version = header.request_api_key, header.request_api_version
        if key == ApiKey.API_VERSIONS:
            body = encode_response(ApiVersionsResponse(api_keys=tuple(
                ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.versions.items())),
                min(version, 3))
            head = struct.pack(">i", header.correlation_id)
        else:
            body = encode_response(MetadataResponse(brokers=(MetadataResponseBroker(
                node_id=self.node_id, host="127.0.0.1", port=1),)), version)
            head = struct.pack(">i", header.correlation_id) + (b"\0" if version >= 9 else b"")
        writer.write(struct.pack(">i", len(head) + len(body)) + head + body)


async def test_requests_queued_behind_a_slow_broker_time_out_from_when_it_starts_them_not_from_when_queued() -> None:
    # Given a broker that takes 0.3 s per DescribeConfigs and answers a connection's requests in turn, and a request
    # timeout of 0.5 s (plus 2 ms a topic)
    broker = SlowConfigBroker(1, delay=0.3)
    control = ControlConnection([await broker.start()], request_timeout=0.5)
    try:
        # When five DescribeConfigs are asked at once (pipelined, the fifth would wait 1.5 s for its answer)
        started = time.monotonic()
        answers = await asyncio.gather(*(control.describe_topic_configs([f"t{i}"], ["min.insync.replicas"])
                                         for i in range(5)))
        # Then every one is answered by the one broker, over one connection: no timeout, no failover, no re-send
        assert [a.results[0].resource_name for a in answers] == [f"t{i}" for i in range(5)]
        assert control.failovers == 0
        assert broker.connections == 1 and broker.topic_configs == 5
        assert time.monotonic() - started >= 1.4  # in turn
    finally:
        await control.close()
        broker.close()


async def test_a_describe_configs_waits_longer_for_a_bigger_batch() -> None:
    # Given a broker that takes 0.7 s for a DescribeConfigs and a request timeout of 0.5 s
    broker = SlowConfigBroker(1, delay=0.7)
    control = ControlConnection([await broker.start()], request_timeout=0.5)
    try:
        # When a batch of 200 topics is asked (0.5 s + 200 x 2 ms = 0.9 s)
        answer = await control.describe_topic_configs([f"t{i}" for i in range(200)], ["min.insync.replicas"])
        # Then it is answered, not timed out
        assert len(answer.results) == 200 and control.failovers == 0
    finally:
        await control.close()
        broker.close()


def test_a_topic_comes_into_use_once_and_leaves_after_topic_idle_seconds_untouched() -> None:
    now = [100.0]
    demand = TopicDemand(idle_seconds=60, clock=lambda: now[0])
    new: list[str] = []
    demand.on_new.append(new.append)
    demand.touch("orders")
    demand.touch("orders")
    demand.touch("payments")
    assert new == ["orders", "payments"] and sorted(demand.in_use()) == ["orders", "payments"]
    now[0] += 40
    demand.tick()
    demand.touch("orders")  # used again: its clock restarts
    now[0] += 30
    assert demand.tick() == ["payments"]
    assert demand.in_use() == ["orders"]
    demand.touch("payments")  # back in use: tracked again at once
    assert new == ["orders", "payments", "payments"]


async def test_the_periodic_metadata_asks_for_the_topics_in_use_and_a_new_topic_is_read_at_once() -> None:
    control = RecordingControl()
    metrics = ProxyMetrics()
    view = ClusterView()
    cache = MinInsyncCache(control, metrics, ttl_seconds=30)  # type: ignore[arg-type]
    refresh = MetadataRefresh(control, view, cache, metrics, NoListeners(), PartitionReadiness(view, cache, metrics, None),  # type: ignore[arg-type]
                              interval_seconds=10)
    # Given no topic in use: the periodic refresh asks for the brokers only (an empty topic list, never all topics)
    await refresh.refresh_metadata()
    assert control.metadata_asked == [[]]
    # When a client produces to a topic not tracked yet (the acks=-2 precheck's cold path)
    cache.demand.touch("orders")
    for _ in range(20):
        await asyncio.sleep(0)
    # Then its partitions and its min.insync.replicas are read at once, and the periodic refresh follows it
    assert ["orders"] in control.metadata_asked and control.described == [["orders"]]
    assert view.partition("orders", 0) is not None and cache.peek("orders") == 2
    await refresh.refresh_metadata()
    assert control.metadata_asked[-1] == ["orders"]
    assert metrics.registry.get_sample_value("insync_proxy_topic_configs_read_total") == 1


async def test_only_topics_in_use_are_refreshed_ahead_and_others_are_forgotten_once_past_the_max_stale_age() -> None:
    control = RecordingControl()
    cache = MinInsyncCache(control, ProxyMetrics(), ttl_seconds=30, batch_topics=2,  # type: ignore[arg-type]
                           max_stale_seconds=30)
    now = time.monotonic()
    # Given three topics learnt from an all-topics answer 25 s ago (past any refresh point: 50-80% of the TTL) and
    # one learnt 70 s ago (older than the TTL plus the max stale age: no longer served), of which one is in use
    for topic in ("a", "b", "c"):
        cache.entries[topic] = CachedValue(2, now - 25)
    cache.entries["old"] = CachedValue(2, now - 70)
    cache.demand.last_used["a"] = cache.demand.now
    # Then only the topic in use is due, and the entry that can no longer be served is forgotten
    assert cache.due() == ["a"]
    assert sorted(cache.entries) == ["a", "b", "c"]
    # And a fetch goes in bounded batches
    await cache.fetch(["a", "b", "c", "d", "e"])
    assert control.described == [["a", "b"], ["c", "d"], ["e"]]


class FailingOnce(RecordingControl):
    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        self.described.append(list(topics))
        raise TimeoutError("slow broker")


async def test_a_failed_describe_backs_off_instead_of_asking_again_at_once() -> None:
    control = FailingOnce()
    cache = MinInsyncCache(control, ProxyMetrics())  # type: ignore[arg-type]
    await cache.fetch(["orders"])
    await cache.fetch(["orders"])  # e.g. the next client's Metadata answer, a moment later
    assert control.described == [["orders"]]


def _metadata_request(version: int, topics: tuple[str, ...] | None) -> memoryview:
    request = MetadataRequest(topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics))
    header = RequestHeader(request_api_key=ApiKey.METADATA, request_api_version=version, correlation_id=1,
                           client_id="c")
    return memoryview(encode_request_header(header) + encode_request(request, version))


def test_a_metadata_request_names_topics_only_when_it_lists_some() -> None:
    # Named topics come into use; all topics (null, or v0's empty list) and none (brokers only) do not
    for version in (1, 4, 9, 12):
        assert names_topics(_metadata_request(version, ("orders",)))
        assert not names_topics(_metadata_request(version, None))
        assert not names_topics(_metadata_request(version, ()))
    assert names_topics(_metadata_request(0, ("orders",)))
    assert not names_topics(_metadata_request(0, ()))  # v0: an empty list means all topics


class ClusterOfTopics(RecordingControl):
    """A control connection in front of a cluster with some topics: an all-topics Metadata names them all."""

    def __init__(self, topics: list[str]) -> None:
        super().__init__()
        self.topics = topics

    async def metadata(self, topics: list[str] | None = None) -> MetadataResponse:
        response = await super().metadata(self.topics if topics is None else topics)
        self.metadata_asked[-1] = None if topics is None else list(topics)
        return response


async def test_the_warm_up_reads_every_topic_once_at_start_and_holds_readyz_back_until_done() -> None:
    control = ClusterOfTopics([f"t{i}" for i in range(5)])
    metrics = ProxyMetrics()
    view = ClusterView()
    cache = MinInsyncCache(control, metrics, ttl_seconds=30, batch_topics=2)  # type: ignore[arg-type]
    refresh = MetadataRefresh(control, view, cache, metrics, NoListeners(), PartitionReadiness(view, cache, metrics, None),  # type: ignore[arg-type]
                              interval_seconds=10, warm_up=True)
    # Given a proxy that has not read Metadata yet: not ready
    assert refresh.unready_reason() == "no broker metadata yet"
    # When its first Metadata comes in
    await refresh.refresh_metadata()
    # Then it asked for every topic (this once), and /readyz waits while their min.insync.replicas are read
    assert control.metadata_asked == [None]
    assert refresh.warming_up and "warm-up" in (refresh.unready_reason() or "")
    await refresh.finish_warm_up()
    # In batches of describe_configs_batch_topics, every topic once; then ready
    assert sorted(t for batch in control.described for t in batch) == [f"t{i}" for i in range(5)]
    assert max(len(batch) for batch in control.described) == 2
    assert all(cache.peek(f"t{i}") == 2 for i in range(5))
    # The view holds no topic of the warm-up's answer that no client uses (it follows the clients)
    assert view.partition("t0", 0) is None
    assert not refresh.warming_up and refresh.unready_reason() is None
    # And the periodic refresh afterwards asks for the topics in use only (none), never all topics again
    await refresh.refresh_metadata()
    assert control.metadata_asked[1:] == [[]]
    assert len(control.described) == 3


async def test_without_the_warm_up_the_first_metadata_asks_for_the_topics_in_use_only() -> None:
    control = ClusterOfTopics(["a", "b"])
    metrics = ProxyMetrics()
    view = ClusterView()
    cache = MinInsyncCache(control, metrics, ttl_seconds=30)  # type: ignore[arg-type]
    refresh = MetadataRefresh(control, view, cache, metrics, NoListeners(), PartitionReadiness(view, cache, metrics, None),  # type: ignore[arg-type]
                              interval_seconds=10, warm_up=False)
    await refresh.refresh_metadata()
    await refresh.finish_warm_up()
    assert control.metadata_asked == [[]] and control.described == []
    assert not refresh.warming_up and refresh.unready_reason() is None
