"""The dev cluster starts over with new ports when one it drew is taken before its JVM binds it: another process's
outgoing connection may get any port of the ephemeral range in between (a CI run lost a cluster so)."""

from __future__ import annotations

import socket

import pytest

from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster


@pytest.mark.own_cluster
def test_a_port_taken_before_the_broker_binds_it_is_drawn_again(exclusive_cluster_slot: None) -> None:
    # Given a one-broker cluster whose broker port another process takes after it was drawn
    said: list[str] = []
    cluster = LocalKafkaCluster(ClusterSettings(brokers=1), progress=said.append)
    taken = cluster.brokers[1].port
    thief = socket.socket()
    thief.bind(("127.0.0.1", taken))
    thief.listen()
    try:
        # When the cluster starts
        cluster.start()
        # Then it started over on a new port, said why, and serves there
        assert cluster.brokers[1].port != taken
        assert any(f"port(s) {taken} of the cluster were taken" in line for line in said), said
        assert cluster.bootstrap_servers == f"127.0.0.1:{cluster.brokers[1].port}"
        cluster.create_topic("after-the-race", partitions=1, replication_factor=1)
        assert cluster.wait_for_leader("after-the-race", 0) == 1
        assert "Address already in use" in (cluster.brokers[1].directory / "logs.attempt-1" / "server.log").read_text()
    finally:
        thief.close()
        cluster.stop()
        cluster.cleanup()

