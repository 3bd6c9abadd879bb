"""The control connection keeps the proxy's view fresh while the broker it talks to hangs."""

from __future__ import annotations

import time

import pytest

from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.proxy.controlplane.control import ControlConnection


@pytest.mark.every_kafka_version  # the control connection negotiates Metadata v11 with Kafka 2.8
async def test_refresh_succeeds_through_another_broker_when_the_control_broker_is_paused(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    # Given a control connection (default request timeout: 2 s) that has read Metadata from some broker
    control = ControlConnection(kafka_cluster.broker_addresses)
    paused: int | None = None
    try:
        first = await control.metadata(None)
        assert control.connected_to is not None
        port = control.connected_to[1]
        paused = next(node_id for node_id, node in kafka_cluster.brokers.items() if node.port == port)
        assert {b.node_id for b in first.brokers} == set(kafka_cluster.brokers)
        # When that broker freezes (SIGSTOP: its kernel still accepts connections, nothing answers)
        kafka_cluster.pause_broker(paused)
        started = time.monotonic()
        response = await control.metadata(None)
        elapsed = time.monotonic() - started
        # Then the next refresh is answered by another broker after about one request timeout
        print(f"refresh through another broker after {elapsed:.2f}s (broker {paused} paused)")
        assert control.connected_to is not None and control.connected_to[1] != port
        assert response.brokers, response
        assert elapsed < 6.0, f"failover took {elapsed:.2f}s"
        # And later refreshes no longer wait for the paused broker
        started = time.monotonic()
        await control.describe_topic_configs(["__insync_proxy_ready"], ["min.insync.replicas"])
        assert time.monotonic() - started < 1.9
    finally:
        if paused is not None:
            kafka_cluster.resume_broker(paused)
        await control.close()
