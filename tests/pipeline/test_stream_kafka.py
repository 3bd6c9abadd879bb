"""Streaming mode over the real audit topic: the proxy writes it, Spark's Kafka source reads it.

The stream command's run and the batch report run in the suite's shared Spark session, which carries the
Kafka connector the commands resolve (`spark_kafka_source`, tests/pipeline/conftest.py); the commands
themselves, in their own processes, are tested over files (test_stream.py, test_cli.py). Two child
processes here cost two JVM starts with code generation on: the module took 154 CPU seconds with them, 75-83 without.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from harness.proxy_process import AUDIT_TOPIC, ProxyProcess
from harness.raw_client import RawKafkaClient, batch
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster

from .events import audited_requests


def test_streaming_windows_over_the_audit_topic(
    spark_kafka_source: SparkSession, proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, tmp_path: Path
) -> None:
    from insync_proxy.cli import build_parser, report_options, stream_options
    from insync_proxy.pipeline import report as report_command
    from insync_proxy.pipeline import stream as stream_command
    from insync_proxy.pipeline.report import _collect
    from insync_proxy.pipeline.spark_env import Progress

    spark = spark_kafka_source

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
    # When the streaming command's run processes what the topic holds (available-now, a new checkpoint: from the
    # earliest offset), over the lines the command's arguments name, with the connector PySpark's version
    # resolves to ...
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = stream_options(build_parser().parse_args(
        ["stream", "--kafka-bootstrap", kafka_cluster.bootstrap_servers, "--topic", AUDIT_TOPIC, "--output", str(out),
         "--checkpoint", str(checkpoint), "--available-now"]))
    stream_progress = io.StringIO()
    lines = stream_command.audit_lines(spark, options)
    assert stream_command.run_stream(spark, lines, options, Progress(stream=stream_progress)) == 0
    # ... and the batch report's run reads the same topic, with the command's default offsets
    report = report_options(build_parser().parse_args(
        ["report", "--kafka-bootstrap", kafka_cluster.bootstrap_servers, "--topic", AUDIT_TOPIC, "--output",
         str(tmp_path / "report")]))
    report_command.run_report(spark, report.inputs, report.output, progress=Progress(enabled=False),
                              kafka=report.kafka)

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
    assert "no window left open" in stream_progress.getvalue(), stream_progress.getvalue()
