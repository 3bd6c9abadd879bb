"""Issue 12's acceptance, end to end: Kafka's own ProducerPerformance through the proxy, then the Spark report
over the proxy's audit files agrees with the proxy's own counters and with each partition's log end offset."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from harness.proxy_process import ProxyProcess
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.devcluster.distribution import java_executable

from .events import audited_requests

PARTITIONS = 6
RECORDS = 20_000
RECORD_SIZE = 1024

QUIET_LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p %c: %m%n
rootLogger.level = error
rootLogger.appenderRef.console.ref = STDERR
"""


def _producer_performance(cluster: LocalKafkaCluster, bootstrap: str, topic: str, work: Path) -> str:
    assert cluster.libs is not None
    log4j = work / "log4j2.properties"
    log4j.write_text(QUIET_LOG4J2)
    done = subprocess.run(
        [java_executable(), "-Xmx256m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={log4j}",
         "-cp", f"{cluster.libs}/*", "org.apache.kafka.tools.ProducerPerformance",
         "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(RECORDS),
         "--record-size", str(RECORD_SIZE), "--throughput", "-1",
         "--command-property", "acks=all", "client.id=acceptance-perf"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def _log_end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"leo-{uuid.uuid4().hex[:6]}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def test_report_per_partition_equals_the_proxys_counters_and_the_log_end_offsets(
    spark: Any, kafka_cluster: LocalKafkaCluster, tmp_path: Path
) -> None:
    from insync_proxy.pipeline.report import run_report

    # Given a proxy of its own (its per-topic metric labels are not shared with the rest of the suite)
    proxy = ProxyProcess(kafka_cluster, debug_checks=False).start()
    try:
        topic = f"acceptance-{uuid.uuid4().hex[:8]}"
        kafka_cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        for p in range(PARTITIONS):
            kafka_cluster.wait_for_leader(topic, p)
        # When Apache Kafka's ProducerPerformance sends 20,000 records of 1 KiB with acks=all through it
        out = _producer_performance(kafka_cluster, proxy.bootstrap(), topic, tmp_path)
        assert f"{RECORDS} records sent" in out, out[-2000:]
        counted_requests = proxy.metric("insync_proxy_produce_partitions_total", topic=topic, acks_requested="-1",
                                        acks_sent="-1", decision="forwarded")
        counted_records = proxy.metric("insync_proxy_produce_records_total", topic=topic)
        counted_bytes = proxy.metric("insync_proxy_produce_record_bytes_total", topic=topic)
        # (the last summary interval is written when it ends)
        wait_until(lambda: audited_requests(proxy.audit_events(), topic) >= counted_requests, 60,
                   what="every request in the audit summaries")
        leo = _log_end_offsets(kafka_cluster.bootstrap_servers, topic)

        # Then the report over the proxy's audit directory ...
        result = run_report(spark, [str(proxy.audit_dir)], str(tmp_path / "report"))
        traffic = {r["partition"]: r for r in result.tables["partition_traffic"] if r["topic"] == topic}
        # ... has every partition, with the records each partition's log grew by
        assert sorted(traffic) == list(range(PARTITIONS))
        assert {p: r["records"] for p, r in traffic.items()} == leo
        assert {p: r["written_records"] for p, r in traffic.items()} == leo
        assert sum(leo.values()) == RECORDS
        # ... and the requests, records and record bytes the proxy's own counters counted
        assert sum(r["requests"] for r in traffic.values()) == counted_requests > 0
        assert sum(r["records"] for r in traffic.values()) == counted_records == RECORDS
        assert sum(r["record_bytes"] for r in traffic.values()) == counted_bytes >= RECORDS * RECORD_SIZE
        assert all(r["answered_by_proxy_requests"] == 0 and r["failed_requests"] == 0 for r in traffic.values())
        # ... and per partition, the same requests and bytes as the audit summaries it was computed from
        per_partition: dict[int, list[int]] = {}
        events: list[dict[str, Any]] = proxy.audit_events()
        for e in events:
            if e.get("event") == "produce_summary" and e.get("topic") == topic:
                acc = per_partition.setdefault(e["partition"], [0, 0])
                acc[0] += e["requests"]
                acc[1] += e["record_bytes"]
        assert {p: [r["requests"], r["record_bytes"]] for p, r in traffic.items()} == per_partition
    finally:
        proxy.stop()
        shutil.rmtree(proxy.dir, ignore_errors=True)
