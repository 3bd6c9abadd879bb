"""`insync-proxy chaos`: no acknowledged record is lost while brokers are killed and restarted behind the proxy."""

from __future__ import annotations

import functools
import re

import pytest

from insync_proxy.cli import main
from insync_proxy.devcluster import chaos
from insync_proxy.devcluster.cluster import LocalKafkaCluster


@pytest.mark.bounces_brokers
@pytest.mark.slow
def test_chaos_command_loses_no_acknowledged_record_over_three_bounces(
    kafka_cluster: LocalKafkaCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given Kafka's VerifiableProducer (idempotent, acks=all) writing through the proxy, the command lent the
    # suite's shared cluster (the same settings as the one it starts: 3 brokers, replica.lag.time.max.ms 5 s)
    # instead of starting its own; it runs last on that cluster and leaves every broker running
    monkeypatch.setattr(chaos, "ChaosRun", functools.partial(chaos.ChaosRun, cluster=kafka_cluster))
    # When three brokers in turn are SIGKILLed and restarted
    code = main(["chaos", "--bounces", "3", "--throughput", "200"])
    out = capsys.readouterr().out
    figures = {k: int(v) for k, v in re.findall(r"^(bounces|acked|consumed|lost|duplicates):\s+(\d+)", out, re.M)}
    print(out)
    # Then every acknowledged record is read back, once
    assert code == 0, out
    assert figures["bounces"] == 3
    assert figures["acked"] > 0 and figures["lost"] == 0
    assert figures["consumed"] >= figures["acked"]
    assert figures["duplicates"] == 0
    assert all(node.alive() for node in kafka_cluster.brokers.values())
