"""`insync-proxy chaos`: no acknowledged record is lost while brokers are killed and restarted behind the proxy."""

from __future__ import annotations

import re

import pytest

from insync_proxy.cli import main


@pytest.mark.own_cluster
@pytest.mark.slow
def test_chaos_command_loses_no_acknowledged_record_over_three_bounces(
    exclusive_cluster_slot: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given Kafka's VerifiableProducer (idempotent, acks=all) writing through the proxy
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
