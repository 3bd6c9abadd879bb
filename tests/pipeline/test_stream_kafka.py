"""Streaming mode over the real audit topic: the proxy writes it, Spark's Kafka source reads it.

Runs `python -m insync_proxy.pipeline.stream` in its own process: the Kafka connector jars must be on the session's
classpath from the start, and the test suite's shared Spark session has none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from insync_proxy.devcluster.cluster import LocalKafkaCluster
from tests.helpers import wait_until
from tests.proxy_harness import AUDIT_TOPIC, ProxyProcess
from tests.raw_client import RawKafkaClient, batch

from .events import audited_requests


def test_streaming_windows_over_the_audit_topic(
    spark: Any, proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, tmp_path: Path
) -> None:
    from insync_proxy.pipeline.report import _collect

    topic = f"stream-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, 1, 3)
    leader = kafka_cluster.wait_for_leader(topic, 0)
    # Given acks=-2 traffic through the proxy, whose audit events go to the audit topic
    requests = 12
    with RawKafkaClient(f"127.0.0.1:{proxy.broker_port(leader)}") as client:
        codes = [client.produce({(topic, 0): batch(b"s")}, acks=-2)[(topic, 0)].error_code for _ in range(requests)]
    assert codes.count(0) >= requests - 2  # a brand-new leader may answer NOT_LEADER once or twice
    # ...and wait until every one of its decisions is in the audit topic
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(AUDIT_TOPIC, 0, 0)])
    seen = 0

    def all_decisions_in_the_topic() -> bool:
        nonlocal seen
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += audited_requests([json.loads(msg.value())], topic)
        return seen >= requests

    try:
        wait_until(all_decisions_in_the_topic, 90, interval=0, what="the decisions in the audit topic")
    finally:
        consumer.close()
    # And a decision 10 minutes ahead (the watermark follows decisions), so the current windows close
    later = (datetime.now(UTC) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    marker = {"schema_version": 1, "event": "produce_decision", "ts": later, "proxy_id": "watermark",
              "listener": "bootstrap", "client_id": "w", "topic": "w", "partition": 0, "acks_requested": -1,
              "acks_sent": -1, "isr_size": 1, "min_isr": 1, "decision": "forwarded", "error_code": 0,
              "latency_ms": 1.0, "record_bytes": 1, "api_version": 9, "correlation_id": 1}
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"})
    producer.produce(AUDIT_TOPIC, json.dumps(marker).encode())
    assert producer.flush(30) == 0

    # When the streaming job processes what the topic holds (available-now) in its own process
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    env = {**os.environ, "INSYNC_SPARK_KAFKA_VERSION": os.environ.get("INSYNC_SPARK_KAFKA_VERSION", "4.2.0"),
           "INSYNC_SPARK_TOKEN_PROVIDER_VERSION": os.environ.get("INSYNC_SPARK_TOKEN_PROVIDER_VERSION", "4.0.0")}
    result = subprocess.run(
        [sys.executable, "-m", "insync_proxy.pipeline.stream", "--kafka-bootstrap", kafka_cluster.bootstrap_servers,
         "--topic", AUDIT_TOPIC, "--output", str(out), "--checkpoint", str(checkpoint), "--master", "local[2]",
         "--available-now", "--starting-offsets", "earliest"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]

    # Then the closed window for that topic counts exactly the decisions the client saw
    rows = [r for r in _collect(spark.read.parquet(str(out / "windows"))) if r["topic"] == topic]
    by_decision: dict[str, int] = {}
    for r in rows:
        by_decision[r["decision"]] = by_decision.get(r["decision"], 0) + r["requests"]
    assert by_decision == {"forwarded": requests}, by_decision
