"""benchmarks/peers_bench.py's pure parts: statistics and tables, peers' configs, the raw Fetch codec, goals;
the benchmarks' toolkit's CPU between two snapshots (benchmarks/shared.py).

A full run needs a cluster and the peers; none of this does.
"""

from __future__ import annotations

import struct
import uuid

import pytest
import yaml

from benchmarks import peers_bench as bench
from benchmarks import shared as toolkit
from harness.raw_client import batch, fetch_request_body


def test_summary_spread_and_ratios() -> None:
    assert bench.summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert bench.summary([])["n"] == 0
    assert bench.spread([151.2, 140.0, 170.4]) == "151 (140..170)"
    assert bench.spread([0.5]) == "0.500"
    assert bench.spread([]) == "-"
    assert bench.spread([float("nan")]) == "-"
    assert bench.ratios([2.0, 3.0, float("nan")], [1.0, 0.0, 1.0]) == [2.0]  # NaN and a zero baseline left out
    assert bench.ratios([2.0, 4.0, 6.0], [1.0, 2.0]) == [2.0, 2.0]  # a target dropped after 2 rounds


def test_rotation_interleaves_every_target_in_every_position() -> None:
    names = ["direct", "insync-proxy", "relay"]
    orders = [bench.rotated(names, r) for r in range(3)]
    assert orders == [["direct", "insync-proxy", "relay"], ["insync-proxy", "relay", "direct"],
                      ["relay", "direct", "insync-proxy"]]
    assert bench.rotated([], 2) == []


def test_kafka_proxy_maps_every_broker_to_loopback() -> None:
    args = bench.kafka_proxy_args("/bin/kp", {("127.0.0.1", 9092): 30001, ("127.0.0.1", 9093): 30002})
    assert args[:2] == ["/bin/kp", "server"]
    mappings = [args[i + 1] for i, a in enumerate(args) if a == "--bootstrap-server-mapping"]
    assert mappings == ["127.0.0.1:9092,127.0.0.1:30001", "127.0.0.1:9093,127.0.0.1:30002"]
    assert args[args.index("--default-listener-ip") + 1] == "127.0.0.1"
    assert "--dynamic-listeners-disable" in args and "--http-disable" in args


def test_kroxylicious_config_is_port_per_node_on_loopback() -> None:
    config = yaml.safe_load(bench.kroxylicious_yaml("127.0.0.1:1,127.0.0.1:2", 40001, 40002, [1, 2, 3]))
    [cluster] = config["virtualClusters"]
    assert cluster["targetCluster"]["bootstrapServers"] == "127.0.0.1:1,127.0.0.1:2"
    [gateway] = cluster["gateways"]
    node = gateway["portIdentifiesNode"]
    assert node["bootstrapAddress"] == "127.0.0.1:40001"
    assert node["advertisedBrokerAddressPattern"] == "127.0.0.1"
    assert node["nodeStartPort"] == 40002
    assert node["nodeIdRanges"] == [{"name": "brokers", "start": 1, "end": 3}]
    assert "filterDefinitions" not in config and "management" not in config


def fetch_response(records: bytes, error_code: int = 0, high_watermark: int = 100) -> bytes:
    """A Fetch v11 response frame (correlation id 7, size prefix stripped) of one topic and partition."""
    topic = b"t"
    return (struct.pack(">iihii", 7, 0, 0, 0, 1) + struct.pack(">h", len(topic)) + topic + struct.pack(">i", 1)
            + struct.pack(">ihqqqi", 0, error_code, high_watermark, high_watermark, 0, -1) + struct.pack(">i", -1)
            + struct.pack(">i", len(records)) + records)


def test_fetch_request_body_layout() -> None:
    # the benchmarks' one Fetch request builder (harness/raw_client.py), v11 as the peers benchmark sends it
    body = fetch_request_body("t", 42, 8 << 20, partition=0)
    replica, wait, min_bytes, max_bytes, isolation, session, epoch = struct.unpack_from(">iiiibii", body)
    assert (replica, min_bytes, max_bytes, isolation, session, epoch) == (-1, 1, 8 << 20, 0, 0, -1)
    assert wait > 0
    topics, name_len = struct.unpack_from(">ih", body, 25)
    assert (topics, body[31:31 + name_len]) == (1, b"t")
    partitions, partition, leader_epoch, offset, log_start, partition_max = struct.unpack_from(">iiiqqi", body, 32)
    assert (partitions, partition, leader_epoch, offset, log_start, partition_max) == (1, 0, -1, 42, -1, 8 << 20)
    assert body[64:] == struct.pack(">ih", 0, 0)  # no forgotten topics, empty rack id


def test_fetch_request_body_by_topic_id_from_v13_and_without_replica_id_from_v15() -> None:
    topic_id = uuid.UUID(int=7)
    v13 = fetch_request_body("t", 42, 1024, version=13, topic_id=topic_id)
    assert v13[:4] == struct.pack(">i", -1) and topic_id.bytes in v13 and b"t" not in v13[:40]
    assert fetch_request_body("t", 42, 1024, version=15, topic_id=topic_id) == v13[4:]
    with pytest.raises(ValueError, match="topic_id"):
        fetch_request_body("t", 42, 1024, version=13)
    with pytest.raises(ValueError, match="v11-v17"):
        fetch_request_body("t", 42, 1024, version=10)


def test_fetch_response_and_next_offset() -> None:
    first, second = bytearray(batch(b"a" * 10, b"b" * 10)), bytearray(batch(b"c" * 10))
    struct.pack_into(">q", second, 0, 2)  # the broker's offsets: 0-1, then 2
    records = bytes(first) + bytes(second)
    [part] = bench.parse_fetch_response(fetch_response(records))
    assert (part.error_code, part.high_watermark, bytes(part.records)) == (0, 100, records)
    assert bench.next_offset(part.records, 0) == 3
    # A batch cut off at the end of the response (partition max bytes) is not counted.
    assert bench.next_offset(records[:-5], 0) == 2
    assert bench.next_offset(b"", 9) == 9
    [failed] = bench.parse_fetch_response(fetch_response(b"", error_code=6))
    assert failed.error_code == 6


def test_consumer_performance_line() -> None:
    output = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
        "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-22 07:40:01:123, 2026-11-22 07:40:05:456, 58.5938, 13.5225, 60000, 13847.2, 3012, 1321, "
        "44.3557, 45420.1\n"
    )
    result = bench.parse_consumer_performance(output)
    assert result["records"] == 60000 and result["fetch_mb_per_sec"] == pytest.approx(44.3557)
    assert result["rebalance_ms"] == 3012
    with pytest.raises(RuntimeError):
        bench.parse_consumer_performance("no result here")


def results(cpu: dict[str, float], fetch: dict[str, float], rss: float) -> dict[str, object]:
    def s(v: float) -> dict[str, float]:
        return {"median": v, "min": v, "max": v, "n": 1}

    return {
        "produce": {name: {"cpu_us_per_request": s(v)} for name, v in cpu.items()},
        "fetch": {"targets": {name: {"mib_per_sec": s(v), "vs_relay": s(v / fetch["relay"]),
                                     "cpu_vs_relay": s(1.1)} for name, v in fetch.items()}},
        "memory": {"connections": 1000, "targets": {"insync-proxy": {"with_connections": {"rss_mib": rss}}}},
    }


def test_goals() -> None:
    rows = {r[0]: r[3] for r in bench.goal_rows(results(
        {"insync-proxy": 45.0, "kafka-proxy": 60.0, "kroxylicious": 80.0, "relay": 40.0},
        {"insync-proxy": 95.0, "kafka-proxy": 90.0, "kroxylicious": 80.0, "relay": 100.0}, 63.0))}
    assert rows == {
        "Produce 16 KiB, proxy CPU per request": "MET",
        "Produce CPU/request below kafka-proxy": "MET",
        "Produce CPU/request below kroxylicious": "MET",
        "Produce CPU/request vs relay": "MET",
        "Fetch throughput vs relay": "MET",
        "Fetch CPU per MiB vs relay": "MET",
        "Fetch throughput above kafka-proxy": "MET",
        "Fetch throughput above kroxylicious": "MET",
        "RSS with 1,000 client connections": "MET",
    }
    # A skipped peer gives n/a, not a verdict; misses are NOT MET.
    rows = {r[0]: r[3] for r in bench.goal_rows(results(
        {"insync-proxy": 151.0, "kafka-proxy": 150.0, "relay": 40.0},
        {"insync-proxy": 50.0, "relay": 400.0}, 70.0))}
    assert rows["Produce 16 KiB, proxy CPU per request"] == "NOT MET"
    assert rows["Produce CPU/request below kafka-proxy"] == "NOT MET"
    assert rows["Produce CPU/request below kroxylicious"] == "n/a"
    assert rows["Produce CPU/request vs relay"] == "NOT MET"
    assert rows["Fetch throughput vs relay"] == "NOT MET"
    assert rows["Fetch throughput above kafka-proxy"] == "n/a"
    assert rows["RSS with 1,000 client connections"] == "NOT MET"


def test_moderate_rate() -> None:
    assert bench.moderate_rate(5000, 20_000.0) == 5000  # the cluster has room
    assert bench.moderate_rate(5000, 7_900.0) == 3500  # half its direct max, rounded down to 500/s
    assert bench.moderate_rate(5000, 600.0) == 500
    assert bench.moderate_rate(5000, None) == 5000
    assert bench.moderate_rate(5000, 3_000.0, explicit=True) == 5000


def test_cpu_between_snapshots() -> None:
    cpu = toolkit.ProcessCpu
    before = {
        10: cpu(frozenset({10, 11}), 2_000_000_000, 2.0, 0.0),  # a proxy: same threads later
        20: cpu(frozenset({20, 21, 22}), 5_000_000_000, 5.0, 0.0),  # a JVM: a thread exits
        30: cpu(frozenset({30}), 100_000_000, 0.1, 0.5),  # socat's listener
        31: cpu(frozenset({31}), 300_000_000, 0.3, 0.0),  # one of its children, reaped before the end
    }
    after = {
        10: cpu(frozenset({10, 11}), 2_250_000_000, 2.2, 0.0),
        20: cpu(frozenset({20, 21}), 1_000_000_000, 5.5, 0.0),
        30: cpu(frozenset({30}), 110_000_000, 0.1, 0.5 + 0.4),  # the child's whole life: 0.3 before + 0.1
        32: cpu(frozenset({32}), 70_000_000, 0.0, 0.0),  # a child born meanwhile
    }
    assert toolkit.cpu_between(before, after) == pytest.approx(0.25 + 0.5 + 0.01 + 0.4 - 0.3 + 0.07)
    assert toolkit.cpu_between(after, after) == 0


def test_p99_goal_needs_an_unsaturated_cluster() -> None:
    def perf(direct_p50: float, added: float) -> dict[str, object]:
        def s(v: float) -> dict[str, float]:
            return {"median": v, "min": v, "max": v, "n": 1}

        return {"perf": {"fixed_rate": 2000, "targets": {
            "direct": {"p50_ms": s(direct_p50)},
            "insync-proxy": {"vs_direct": s(0.97), "p99_added_ms": s(added)}}}}

    rows = {r[0]: r[3] for r in bench.goal_rows(perf(5.0, 0.4))}
    assert rows == {"ProducerPerformance max throughput vs direct": "MET",
                    "ProducerPerformance p99 added at 2,000/s": "MET"}
    rows = {r[0]: r[3] for r in bench.goal_rows(perf(927.0, -1238.0))}
    assert rows["ProducerPerformance p99 added at 2,000/s"] == "n/a: saturated (direct p50 927 ms)"
