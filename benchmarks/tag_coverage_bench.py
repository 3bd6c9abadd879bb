"""Tag 637 coverage of Metadata answers over time, in process (not a test; issue 39, item 3).

No sockets, no Kafka: the proxy's `MetadataEnricher` and `MinInsyncCache` (its refresh loop running, the
settings' defaults for everything but the TTL) in front of a fake control connection whose DescribeConfigs
takes `--base-ms` plus `--per-topic-ms` a topic, one request at a time (as a broker works through a connection).
A small TTL (`--ttl`, 2 s) stands in for the default 30 s, so idle periods of minutes take seconds. Printed, per
answer: how many of its topics carry tag 637, and how long the answer took.

1. the start's warm-up reads every topic (`min_insync_warm_up`), then an all-topics answer;
2. an all-topics answer 1x the TTL later, then 4x the TTL later (the issue's 30 s and 120 s idle);
3. a Metadata naming 5 topics created since the start, their DescribeConfigs taking `--new-topic-ms` (a busy
   machine).

    python benchmarks/tag_coverage_bench.py [--topics 10010] [--ttl 2] [--checkout DIR]

`--checkout DIR` measures another checkout's code (e.g. one before a change) with this script.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import time
from collections.abc import Awaitable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The code measured: this checkout, or `--checkout DIR` (read before the imports below).
CHECKOUT = Path(sys.argv[sys.argv.index("--checkout") + 1]).resolve() if "--checkout" in sys.argv[:-1] else ROOT
sys.path.insert(0, str(CHECKOUT))

from insync_proxy.protocol import (  # noqa: E402
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
from insync_proxy.protocol.messages import (  # noqa: E402
    DescribeConfigsResourceResult,
    DescribeConfigsResult,
    MetadataRequestTopic,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher  # noqa: E402
from insync_proxy.proxy.config.broker_ports import BrokerPorts  # noqa: E402
from insync_proxy.proxy.config.settings import ProxyConfig  # noqa: E402
from insync_proxy.proxy.controlplane.context import BehaviourContext  # noqa: E402
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache, TopicDemand  # noqa: E402
from insync_proxy.proxy.datapath.cluster_view import ClusterView  # noqa: E402
from insync_proxy.proxy.datapath.exchange import Exchange, Frame, ListenerAddresses, ListenerSettings  # noqa: E402
from insync_proxy.proxy.observability.metrics import ProxyMetrics  # noqa: E402

LISTENER = ListenerSettings(
    name="default", label="bootstrap", metadata_schema="tagged", hide_unready_partitions=False,
    addresses=ListenerAddresses("127.0.0.1", BrokerPorts(9100)), broker_listeners=frozenset({1}),
)
VERSION = 12


class SlowBroker:
    """DescribeConfigs, one at a time, each `base + per_topic x topics` seconds; `slow` topics take `slow_delay`."""

    request_timeout = 30.0

    def __init__(self, base: float, per_topic: float) -> None:
        self.base = base
        self.per_topic = per_topic
        self.slow: set[str] = set()
        self.slow_delay = 0.0
        self.lock = asyncio.Lock()

    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        async with self.lock:
            delay = self.base + self.per_topic * len(topics)
            if self.slow.intersection(topics):
                delay = max(delay, self.slow_delay)
            await asyncio.sleep(delay)
        return DescribeConfigsResponse(results=tuple(DescribeConfigsResult(resource_type=2, resource_name=t, configs=(
            DescribeConfigsResourceResult(name="min.insync.replicas", value="2"),)) for t in topics))


def broker_answer(topics: list[str]) -> bytes:
    response = MetadataResponse(
        brokers=(MetadataResponseBroker(node_id=1, host="10.0.0.1", port=9092),),
        topics=tuple(MetadataResponseTopic(name=t, partitions=(MetadataResponsePartition(
            partition_index=0, leader_id=1, replica_nodes=(1,), isr_nodes=(1,)),)) for t in topics))
    return encode_response_with_header(ApiKey.METADATA, VERSION, 5, encode_response(response, VERSION))


async def ask(enricher: MetadataEnricher, topics: list[str], named: bool, answer: bytes) -> tuple[int, float]:
    """(topics of the answer carrying tag 637, seconds the answer took)."""
    request = MetadataRequest(topics=tuple(MetadataRequestTopic(name=t) for t in topics) if named else None)
    header = RequestHeader(request_api_key=ApiKey.METADATA, request_api_version=VERSION, correlation_id=5,
                           client_id="c")
    exchange = Exchange(LISTENER, ApiKey.METADATA, VERSION, 5, "c",
                        memoryview(encode_request_header(header) + encode_request(request, VERSION)))
    started = time.monotonic()
    enricher.on_request(exchange)
    result: Frame | Awaitable[Frame] = enricher.on_response(exchange, memoryview(answer))  # type: ignore[assignment]
    frame = await result if inspect.isawaitable(result) else result
    took = time.monotonic() - started
    from insync_proxy.protocol import decode_response, split_response

    _, body = split_response(frame, ApiKey.METADATA, VERSION)
    decoded = decode_response(ApiKey.METADATA, VERSION, body)
    assert isinstance(decoded, MetadataResponse)
    return sum(1 for t in decoded.topics if t.min_insync_replicas >= 0), took


async def run(args: argparse.Namespace) -> list[list[object]]:
    config = ProxyConfig(bootstrap_servers=("k:9092",))
    broker = SlowBroker(args.base_ms / 1000, args.per_topic_ms / 1000)
    metrics = ProxyMetrics()
    cache = MinInsyncCache(broker, metrics, args.ttl, config.min_insync_miss_wait_ms / 1000,  # type: ignore[arg-type]
                           TopicDemand(config.topic_idle_seconds, max_topics=config.max_topics_in_use),
                           config.describe_configs_batch_topics)
    enricher = MetadataEnricher(BehaviourContext(
        cluster_view=ClusterView(), min_insync=cache, metrics=metrics, audit=None,
        refresh_topics=lambda topics: None, open_broker_listeners=_no_listeners, call_soon=lambda f: f(),
        control=None,  # type: ignore[arg-type]
    ))
    topics = [f"topic-{i:05d}" for i in range(args.topics)]
    rows: list[list[object]] = []
    cache.start()
    try:
        started = time.monotonic()
        await cache.fetch(topics)  # the start's warm-up (min_insync_warm_up)
        rows.append(["warm-up read", "-", f"{time.monotonic() - started:.2f}"])
        answer = broker_answer(topics)
        tagged, took = await ask(enricher, topics, False, answer)
        rows.append(["all topics, first answer after ready", f"{tagged:,}/{len(topics):,}", f"{took:.3f}"])
        for ttls in (1.0, 4.0):
            await asyncio.sleep(ttls * args.ttl)
            tagged, took = await ask(enricher, topics, False, answer)
            rows.append([f"all topics, after {ttls:.0f}x the TTL idle", f"{tagged:,}/{len(topics):,}", f"{took:.3f}"])
        await asyncio.sleep(0.5 * args.ttl)
        tagged, took = await ask(enricher, topics, False, answer)
        rows.append(["all topics, the next answer 0.5x the TTL later", f"{tagged:,}/{len(topics):,}", f"{took:.3f}"])
        new = [f"created-later-{i}" for i in range(5)]
        broker.slow, broker.slow_delay = set(new), args.new_topic_ms / 1000
        tagged, took = await ask(enricher, new, True, broker_answer(new))
        rows.append([f"5 new topics named, DescribeConfigs {args.new_topic_ms:.0f} ms", f"{tagged}/5", f"{took:.3f}"])
    finally:
        cache.stop()
    return rows


async def _no_listeners() -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--topics", type=int, default=10_010, help="topics in the cluster (default 10,010)")
    parser.add_argument("--ttl", type=float, default=2.0, help="min_insync_ttl_seconds standing for 30 (default 2)")
    parser.add_argument("--base-ms", type=float, default=20.0, help="DescribeConfigs base latency (default 20)")
    parser.add_argument("--per-topic-ms", type=float, default=0.05, help="and per topic (default 0.05)")
    parser.add_argument("--new-topic-ms", type=float, default=300.0,
                        help="DescribeConfigs latency of the new topics' read (default 300: a busy machine)")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose code is measured (default this one)")
    args = parser.parse_args(argv)
    config = ProxyConfig(bootstrap_servers=("k:9092",))
    print(f"checkout: {Path(sys.modules['insync_proxy.proxy.controlplane.min_insync'].__file__ or '').parents[2]}, "
          f"min_insync_miss_wait_ms = {config.min_insync_miss_wait_ms:g}, "
          f"min_insync_max_stale_seconds = {getattr(config, 'min_insync_max_stale_seconds', '(none)')}, "
          f"TTL {args.ttl:g} s")
    rows = asyncio.run(run(args))
    width = max(len(str(r[0])) for r in rows)
    print(f"{'answer':<{width}}  {'tagged':>13}  seconds")
    for what, tagged, took in rows:
        print(f"{what:<{width}}  {tagged:>13}  {took}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
