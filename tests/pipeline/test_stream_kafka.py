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
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

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
    # When the docs' streaming command processes what the topic holds (available-now, a new checkpoint: from the
    # earliest offset) in its own process, with the connector PySpark's version resolves to ...
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    env = {k: v for k, v in os.environ.items() if k not in ("INSYNC_SPARK_KAFKA_VERSION",
                                                           "INSYNC_SPARK_TOKEN_PROVIDER_VERSION")}
    result = subprocess.run(
        [sys.executable, "-m", "insync_proxy.pipeline.stream", "--kafka-bootstrap", kafka_cluster.bootstrap_servers,
         "--topic", AUDIT_TOPIC, "--output", str(out), "--checkpoint", str(checkpoint), "--master", "local[2]",
         "--available-now"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # ... and the batch report reads the same topic
    report = subprocess.run(
        [sys.executable, "-m", "insync_proxy.pipeline.report", "--kafka-bootstrap", kafka_cluster.bootstrap_servers,
         "--topic", AUDIT_TOPIC, "--output", str(tmp_path / "report"), "--master", "local[2]", "--quiet"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert report.returncode == 0, report.stderr[-4000:]

    # Then the windows for that topic, the last one closed by the end of input, count exactly the decisions the
    # client saw, as the batch report does
    rows = [r for r in _collect(spark.read.parquet(str(out / "windows"))) if r["topic"] == topic]
    by_decision: dict[str, int] = {}
    for r in rows:
        by_decision[r["decision"]] = by_decision.get(r["decision"], 0) + r["requests"]
    assert by_decision == {"forwarded": requests}, by_decision
    reported: dict[str, int] = {}
    for r in _collect(spark.read.parquet(str(tmp_path / "report" / "decisions_by_kind"))):
        if r["topic"] == topic:
            reported[r["decision"]] = reported.get(r["decision"], 0) + r["requests"]
    assert reported == by_decision
    assert "no window left open" in result.stderr, result.stderr[-2000:]
