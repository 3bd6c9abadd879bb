"""Control-plane load of one proxy in front of a cluster of many topics, and its all-topics Metadata (not a test).

    python benchmarks/control_plane_bench.py [--topics 3000] [--window 60] [--before /work/main]

Starts its own 3-broker KRaft Kafka (devcluster/, broker heap sized for the topics), creates N topics (2
partitions, RF 3) and runs the real proxy as its own process. The proxy's bootstrap server is a counting
relay in front of broker 1: it reads every request of the proxy's control connection (client id
insync-proxy-control) and the bytes of its answers, so the same numbers come out for any version of the
proxy (`--before DIR` runs the proxy of another checkout, e.g. main, first). A client uses 5 of the topics.

1. Tag 637 coverage of the first answers after /readyz: the client's Metadata of its 5 topics, then an
   all-topics Metadata v12.
2. Control-plane reads per minute, idle (no client) and under traffic (the client asks Metadata of its 5
   topics and produces acks=-2 to them, every 200 ms).
3. All-topics Metadata v12, direct vs through the proxy (interleaved blocks): p50 latency ratio, the proxy's
   CPU per answer and per topic (its threads' run time from /proc).

Targets (issue #29): topic configs read per minute <= 10x the topics in use, independent of N; all-topics
p50 <= 1.5x direct. Prints tables; writes a JSON summary to bench-results/control-plane-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.proxy_bench import (  # noqa: E402
    _terminate,
    cpu_seconds,
    pct,
    request_frame,
    round_trips,
    say,
    table,
)
from benchmarks.shared import write_summary  # noqa: E402
from harness.proxy_process import ProxyProcess  # noqa: E402
from harness.raw_client import batch, produce_request  # noqa: E402
from insync_proxy.client.blocking_client import CORRELATION_ID_OFFSET, BlockingKafkaClient  # noqa: E402
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster, broker_heap_for  # noqa: E402
from insync_proxy.protocol import (  # noqa: E402
    ApiKey,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    decode_request,
    encode_request,
    peek_request_header,
)
from insync_proxy.protocol.messages import CreatableTopic, MetadataRequestTopic  # noqa: E402

CONTROL_CLIENT_ID = "insync-proxy-control"
TOPICS_IN_USE = 5
PARTITIONS = 2
#: The proxy as a platform team runs it: the defaults (metadata_refresh_seconds 10, min.insync TTL 30 s).
PROXY_TOML = "min_insync_ttl_seconds = 30\n"


# ---------------------------------------------------------------------------------------------- the counting relay
class ControlCounter:
    """A TCP relay in front of one broker that counts the control connection's requests and answer bytes."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.topic_configs = 0
        self.all_topics_metadata = 0
        self.answer_bytes: Counter[str] = Counter()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ControlCounter:
        self._thread.start()
        self._started.wait(10)
        return self

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return {"metadata": self.requests["METADATA"], "all_topics_metadata": self.all_topics_metadata,
                    "describe_configs": self.requests["DESCRIBE_CONFIGS"], "topic_configs": self.topic_configs,
                    "metadata_answer_bytes": self.answer_bytes["METADATA"],
                    "describe_answer_bytes": self.answer_bytes["DESCRIBE_CONFIGS"]}

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        pending: dict[int, str] = {}
        control = [False]

        async def requests() -> None:
            while True:
                head = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", head)[0])
                up_writer.write(head + frame)
                peek = peek_request_header(frame)
                if peek.client_id == CONTROL_CLIENT_ID:
                    control[0] = True
                    name = ApiKey(peek.api_key).name
                    pending[peek.correlation_id] = name
                    with self.lock:
                        self.requests[name] += 1
                        if peek.api_key == ApiKey.DESCRIBE_CONFIGS:
                            request = decode_request(ApiKey.DESCRIBE_CONFIGS, peek.api_version,
                                                     frame[peek.header_size:])
                            self.topic_configs += len(request.resources)  # type: ignore[attr-defined]
                        elif peek.api_key == ApiKey.METADATA:
                            request = decode_request(ApiKey.METADATA, peek.api_version, frame[peek.header_size:])
                            if request.topics is None:  # type: ignore[attr-defined]
                                self.all_topics_metadata += 1

        async def answers() -> None:
            while True:
                head = await up_reader.readexactly(4)
                frame = await up_reader.readexactly(struct.unpack(">i", head)[0])
                writer.write(head + frame)
                if control[0]:
                    name = pending.pop(struct.unpack_from(">i", frame)[0], "other")
                    with self.lock:
                        self.answer_bytes[name] += 4 + len(frame)

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(answers())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            writer.close()
            up_writer.close()


# ---------------------------------------------------------------------------------------------- the cluster
def create_topics(cluster: LocalKafkaCluster, names: list[str], chunk: int = 200, partitions: int = PARTITIONS) -> None:
    """CreateTopics (`partitions` partitions, RF 3), many a request; waits until each partition has a leader."""
    host, port = cluster.broker_addresses[0]
    with BlockingKafkaClient(host, port, timeout=300, client_id="insync-proxy-bench") as client:
        version = client.highest_common_version(ApiKey.CREATE_TOPICS, (2, 7))
        for i in range(0, len(names), chunk):
            request = CreateTopicsRequest(topics=tuple(
                CreatableTopic(name=n, num_partitions=partitions, replication_factor=3) for n in names[i:i + chunk]),
                timeout_ms=120000)
            response = client.request(request, version, CreateTopicsResponse)
            failed = {t.name: t.error_code for t in response.topics if t.error_code not in (0, 36)}
            if failed:
                raise RuntimeError(f"CreateTopics failed: {dict(list(failed.items())[:5])}")
    cluster.wait_for(lambda: len(all_topics_metadata(f"{host}:{port}").topics) >= len(names), 600,
                     f"{len(names)} topics")


def metadata_frame(topics: list[str] | None, version: int = 12) -> bytearray:
    request = MetadataRequest(topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics),
                              allow_auto_topic_creation=False)
    return request_frame(ApiKey.METADATA, version, encode_request(request, version))


def metadata(bootstrap: str, topics: list[str] | None, version: int = 12) -> MetadataResponse:
    host, port = bootstrap.rsplit(":", 1)
    with BlockingKafkaClient(host, int(port), timeout=30, client_id="bench-client") as client:
        response = client.request(
            MetadataRequest(topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics),
                            allow_auto_topic_creation=False), version, MetadataResponse)
    return response


def all_topics_metadata(bootstrap: str) -> MetadataResponse:
    return metadata(bootstrap, None)


def coverage(response: MetadataResponse) -> tuple[int, int]:
    """(topics carrying tag 637, topics) of an answer."""
    topics = [t for t in response.topics if t.error_code == 0]
    return sum(t.min_insync_replicas >= 0 for t in topics), len(topics)


@contextmanager
def small_requests(port: int, topics: list[str]) -> Iterator[list[float]]:
    """Another connection beside the all-topics answers: 5-topic Metadata round trips, back to back, 2 ms apart
    (seconds each, in the list yielded). What a big answer costs every other client of the same proxy."""
    stop = threading.Event()
    timings: list[float] = []
    frame = metadata_frame(topics)

    def run() -> None:
        with BlockingKafkaClient("127.0.0.1", port, timeout=60) as client:
            i = 0
            while not stop.is_set():
                i += 1
                struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, i)
                t0 = time.perf_counter()
                client.send_bytes(frame)
                client.receive_frame()
                timings.append(time.perf_counter() - t0)
                stop.wait(0.002)

    thread = threading.Thread(target=run, name="small-requests", daemon=True)
    thread.start()
    try:
        yield timings
    finally:
        stop.set()
        thread.join(timeout=60)


# ---------------------------------------------------------------------------------------------- the client
@contextmanager
def client_traffic(proxy: ProxyProcess, topics: list[str]) -> Iterator[None]:
    """Every 200 ms: Metadata of its topics, and an acks=-2 Produce to each (through the proxy)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            host, port = proxy.bootstrap().rsplit(":", 1)
            response = metadata(proxy.bootstrap(), topics)
            leaders = {(t.name, p.partition_index): p.leader_id for t in response.topics for p in t.partitions}
            clients = {node: BlockingKafkaClient("127.0.0.1", proxy.broker_port(node), timeout=30)
                       for node in set(leaders.values())}
            for client in clients.values():
                client.__enter__()
            meta = BlockingKafkaClient(host, int(port), timeout=30, client_id="bench-client").__enter__()
            try:
                while not stop.wait(0.2):
                    meta.request(MetadataRequest(topics=tuple(MetadataRequestTopic(name=t) for t in topics),
                                                 allow_auto_topic_creation=False), 12, MetadataResponse)
                    for (topic, partition), leader in leaders.items():
                        clients[leader].request(produce_request({(topic, partition): batch(b"x" * 100)}, -2), 9)
            finally:
                for client in [*clients.values(), meta]:
                    client.__exit__(None, None, None)
        except BaseException as exc:  # reported after the window
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        if errors:
            raise RuntimeError(f"client traffic failed: {errors[0]!r}")


def own_counts(proxy: ProxyProcess) -> dict[str, float] | None:
    """The proxy's own control-plane counters (None: a version without them)."""
    text = proxy.metrics_text()
    if "insync_proxy_topic_configs_read_total" not in text:
        return None
    return {"metadata": proxy.metric("insync_proxy_control_requests_total", api="METADATA"),
            "describe_configs": proxy.metric("insync_proxy_control_requests_total", api="DESCRIBE_CONFIGS"),
            "topic_configs": proxy.metric("insync_proxy_topic_configs_read_total")}


# ---------------------------------------------------------------------------------------------- one proxy
def run_proxy(name: str, checkout: Path, cluster: LocalKafkaCluster, relay: ControlCounter, names: list[str],
              window: float, requests: int, results: dict[str, Any]) -> None:
    """One proxy (the code of `checkout`): first answers, control load idle and under traffic, all-topics Metadata."""
    in_use = names[:TOPICS_IN_USE]
    proxy = ProxyProcess(cluster, extra_toml=PROXY_TOML, groups=("default",), debug_checks=False,
                         bootstrap_servers=f"127.0.0.1:{relay.port}", metadata_refresh_seconds=10,
                         audit_enabled=False)
    # ProxyProcess writes its own metadata_refresh_seconds and TTL: the bench's PROXY_TOML repeats the defaults
    proxy.config_file.write_text(proxy.config_file.read_text().replace("min_insync_ttl_seconds = 5\n", ""))
    here = Path.cwd()
    os.chdir(checkout)  # `python -m insync_proxy` runs the checkout's code
    started = time.monotonic()
    try:
        proxy.start(timeout=180)
    finally:
        os.chdir(here)
    out: dict[str, Any] = results.setdefault(name, {})
    try:
        pid = proxy.process.pid  # type: ignore[union-attr]
        # 0. from start to /readyz (with min_insync_warm_up: every topic's min.insync.replicas read once)
        out["ready_seconds"] = time.monotonic() - started
        out["topic_configs_read_at_ready"] = own_counts(proxy)
        say(f"[{name}] ready after {out['ready_seconds']:.1f} s; the proxy's own counts then: "
            f"{out['topic_configs_read_at_ready']}")
        # 1. the first answers after /readyz
        first_named = coverage(metadata(proxy.bootstrap(), in_use))
        first_all = coverage(all_topics_metadata(proxy.bootstrap()))
        out["first_answer"] = {"named_topics": first_named, "all_topics": first_all}
        say(f"[{name}] first answers after ready: {first_named[0]}/{first_named[1]} named topics, "
            f"{first_all[0]}/{first_all[1]} of all topics carry tag 637")
        # 2. control load: idle (the first answers' reads settle first), then under traffic
        time.sleep(min(window / 2, 15))
        for phase in ("idle", "traffic"):
            own0 = own_counts(proxy)
            before, cpu0, t0 = relay.snapshot(), cpu_seconds(pid), time.monotonic()
            if phase == "idle":
                time.sleep(window)
            else:
                with client_traffic(proxy, in_use):
                    time.sleep(window)
            after, cpu1, elapsed = relay.snapshot(), cpu_seconds(pid), time.monotonic() - t0
            per_minute = {k: (after[k] - before[k]) * 60 / elapsed for k in after}
            per_minute["proxy_cpu_seconds"] = (cpu1 - cpu0) * 60 / elapsed
            own1 = own_counts(proxy)
            if own0 is not None and own1 is not None:
                # The proxy's own count: also what went to brokers other than the relay's after a failover.
                per_minute.update({f"own_{k}": (own1[k] - own0[k]) * 60 / elapsed for k in own1})
            out[phase] = per_minute
            say(f"[{name}] {phase}: {per_minute}")
        try:
            out["topics_in_use"] = proxy.metric("insync_proxy_topics_in_use")
        except Exception:  # an older proxy has no such gauge
            out["topics_in_use"] = None
        # 3. all-topics Metadata v12: direct vs proxy, interleaved
        frame = metadata_frame(None)
        ports = {"direct": cluster.brokers[1].port, "proxy": proxy.broker_port(1)}
        for port in ports.values():
            round_trips(port, frame, 3, None)
        # The min.insync entries of topics not in use went stale during the phases above (TTL 30 s): the first
        # all-topics answers read them again (batched). Measure the steady state: every topic's tag present.
        warm_from = time.monotonic()
        while (seen := coverage(metadata(f"127.0.0.1:{ports['proxy']}", None)))[0] < seen[1]:
            if time.monotonic() - warm_from > 120:
                raise RuntimeError("all-topics answers through the proxy still lack tag 637 after 120 s")
            time.sleep(0.5)
        out["all_topics_warm_seconds"] = time.monotonic() - warm_from
        say(f"[{name}] all-topics answers carry tag 637 for every topic {out['all_topics_warm_seconds']:.1f} s "
            "after the first")
        timings: dict[str, list[float]] = {"direct": [], "proxy": []}
        beside: dict[str, list[float]] = {"direct": [], "proxy": []}
        cpu = 0.0
        blocks = 4
        for _ in range(blocks):
            for path, port in ports.items():
                c0 = cpu_seconds(pid)
                with small_requests(port, in_use) as small:
                    timings[path] += round_trips(port, frame, requests // blocks, None)
                beside[path] += small
                if path == "proxy":
                    cpu += cpu_seconds(pid) - c0
        p50 = {path: pct([t * 1000 for t in ts], 50) for path, ts in timings.items()}
        cpu_ms = cpu * 1000 / len(timings["proxy"])
        out["all_topics_metadata"] = {
            "p50_ms": p50, "p99_ms": {path: pct([t * 1000 for t in ts], 99) for path, ts in timings.items()},
            "ratio_p50": p50["proxy"] / p50["direct"], "proxy_cpu_ms_per_answer": cpu_ms,
            "proxy_cpu_us_per_topic": cpu_ms * 1000 / len(names), "requests": len(timings["proxy"]),
            # 5-topic Metadata on another connection meanwhile (the proxy's CPU above includes them)
            "beside_p50_ms": {path: pct([t * 1000 for t in ts], 50) for path, ts in beside.items()},
            "beside_p99_ms": {path: pct([t * 1000 for t in ts], 99) for path, ts in beside.items()},
            "beside_requests": {path: len(ts) for path, ts in beside.items()},
        }
        say(f"[{name}] all-topics Metadata: {out['all_topics_metadata']}")
    except BaseException:
        log = proxy.dir / "proxy.log"
        say(f"[{name}] failed; the proxy's log ends with:\n" + (log.read_text()[-8000:] if log.exists() else "(none)"))
        raise
    finally:
        proxy.stop()
        shutil.rmtree(proxy.dir, ignore_errors=True)


def report(results: dict[str, Any], topics: int) -> None:
    variants = [v for v in ("before", "after") if v in results]
    rows = []
    for variant in variants:
        for phase in ("idle", "traffic"):
            m = results[variant].get(phase)
            if m is None:
                continue
            rows.append((variant, phase, m["metadata"], m["all_topics_metadata"],
                         m["metadata_answer_bytes"] / 2**20, m["describe_configs"], m["topic_configs"],
                         m.get("own_metadata", "-"), m.get("own_describe_configs", "-"), m.get("own_topic_configs", "-"),
                         m["proxy_cpu_seconds"]))
    table(f"Control-plane reads per minute by one proxy, {topics} topics x {PARTITIONS} partitions (RF 3), a client "
          f"using {TOPICS_IN_USE} of them (counted at the relay in front of broker 1; own_: the proxy's own "
          "counters, every broker)",
          ("proxy", "phase", "Metadata", "all-topics", "Metadata MiB", "DescribeConfigs", "topic configs",
           "own Metadata", "own DescribeConfigs", "own topic configs", "proxy CPU s"), rows)
    rows = []
    for variant in variants:
        a = results[variant].get("all_topics_metadata")
        f = results[variant].get("first_answer")
        if a is None or f is None:
            continue
        beside = a.get("beside_p99_ms", {})
        rows.append((variant, a["p50_ms"]["direct"], a["p50_ms"]["proxy"], a["ratio_p50"], a["p99_ms"]["proxy"],
                     beside.get("direct", float("nan")), beside.get("proxy", float("nan")),
                     a["proxy_cpu_ms_per_answer"], a["proxy_cpu_us_per_topic"],
                     f"{f['named_topics'][0]}/{f['named_topics'][1]}", f"{f['all_topics'][0]}/{f['all_topics'][1]}",
                     results[variant].get("ready_seconds", float("nan"))))
    table(f"All-topics Metadata v12 ({topics} topics), direct vs proxy; tag 637 coverage of the first answers after "
          "/readyz; beside: a 5-topic Metadata on another connection meanwhile",
          ("proxy", "direct p50 ms", "proxy p50 ms", "ratio", "proxy p99 ms", "beside p99 ms direct",
           "beside p99 ms proxy", "CPU ms/answer",
                      "CPU us/topic", "first 5-topic answer", "first all-topics answer", "start to ready s"), rows)
    if "after" in results and "traffic" in results["after"]:
        after = results["after"]
        worst = max(after[phase].get("own_topic_configs", after[phase]["topic_configs"])
                    for phase in ("idle", "traffic"))
        ratio = after.get("all_topics_metadata", {}).get("ratio_p50", float("nan"))
        table("Targets (issue #29)", ("measure", "value", "goal", "result"), [
            ("topic configs read / minute (worst phase)", worst, f"<= {10 * TOPICS_IN_USE}",
             "MET" if worst <= 10 * TOPICS_IN_USE else "NOT MET"),
            ("all-topics Metadata p50 proxy/direct", ratio, "<= 1.5", "MET" if ratio <= 1.5 else "NOT MET"),
        ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--topics", type=int, default=3000, help="topics of the cluster (default 3000; 10000: full)")
    parser.add_argument("--window", type=float, default=60, help="seconds of each measured phase (default 60)")
    parser.add_argument("--requests", type=int, default=200, help="all-topics Metadata round trips per path")
    parser.add_argument("--before", type=Path, help="also run the proxy of this checkout first (e.g. /work/main)")
    parser.add_argument("--output", type=Path, default=ROOT / "bench-results", help="directory of the JSON summary")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    heap = broker_heap_for(args.topics * PARTITIONS)
    results: dict[str, Any] = {"started_utc": stamp, "topics": args.topics, "partitions": PARTITIONS,
                               "broker_heap": heap, "window_seconds": args.window, "cpus": os.cpu_count()}
    cluster: LocalKafkaCluster | None = None
    code = 0
    try:
        cluster = LocalKafkaCluster(ClusterSettings(broker_heap=heap))
        cluster.start()
        results["kafka_version"] = cluster.version
        names = [f"cp-{i:05d}" for i in range(args.topics)]
        t0 = time.monotonic()
        create_topics(cluster, names)
        say(f"{args.topics} topics created in {time.monotonic() - t0:.0f}s (broker heap {heap})")
        relay = ControlCounter(cluster.broker_addresses[0]).start()
        variants = ([("before", args.before)] if args.before else []) + [("after", ROOT)]
        for name, checkout in variants:
            run_proxy(name, checkout, cluster, relay, names, args.window, args.requests, results)
        report(results, args.topics)
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except Exception as exc:
        say(f"benchmark failed: {exc!r}")
        results["error"] = repr(exc)
        code = 1
    finally:
        if cluster is not None:
            cluster.stop()
            cluster.cleanup()
        say(f"wrote {write_summary(results, args.output, 'control-plane', stamp)}")
    return code


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    sys.exit(main())
