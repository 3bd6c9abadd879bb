"""Hostile clients through the real proxy against real Kafka: exact counters, a bounded log, a healthy
client beside them that sees nothing (issue #29 item 5; benchmarks/hostile_bench.py sends a million)."""

from __future__ import annotations

import asyncio
import re

from harness.hostile_clients import CAUSES, HealthyProducer, send_malformed
from harness.proxy_process import ProxyProcess
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster

FRAMES = 900


def test_many_malformed_frames_are_counted_exactly_logged_boundedly_and_leave_a_healthy_client_alone(
    kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    # A proxy of its own: its log holds only this test's lines, and stopping it writes the owed summaries
    proxy = ProxyProcess(kafka_cluster, groups=("default",), debug_checks=False).start()
    try:
        kafka_cluster.create_topic(topic_name, 1, 3)
        healthy = HealthyProducer(proxy.bootstrap(), topic_name, rate_per_second=100).start()
        wait_until(lambda: healthy.delivered > 20, 60, what="the healthy producer to get going")
        lines_before = len(proxy.log_file.read_text().splitlines())
        # When 900 malformed frames come from 16 hostile clients at once, one frame per connection
        host, port = proxy.bootstrap().rsplit(":", 1)
        hostile = asyncio.run(send_malformed(host, int(port), FRAMES, connections=16))
        delivered_during = healthy.delivered
        wait_until(lambda: healthy.delivered > delivered_during + 20, 60, what="the producer to keep going")
        assert healthy.stop() == 0
        # Then the proxy closed every hostile connection and counted each frame under its cause
        assert hostile.closed_by_proxy == FRAMES and hostile.connect_failures == 0
        assert all(hostile.sent[cause] == FRAMES // len(CAUSES) for cause in CAUSES), hostile.sent
        for cause in CAUSES:
            assert proxy.metric("insync_proxy_bad_input_total", cause=cause) == FRAMES // len(CAUSES), cause
        # And the healthy producer saw no error at all
        assert healthy.errors == []
        # And the log grew by one line per cause (the first), not one per frame
        during = proxy.log_file.read_text().splitlines()[lines_before:]
        assert len([line for line in during if "bad request frame" in line]) == 2, during
        assert len([line for line in during if "closed the connection of client" in line]) == 1, during
        assert len(during) <= 10, during
        assert proxy.alive()
    finally:
        code = proxy.stop()
    # And at exit one summary per cause says how many more there were: with the first lines, all of them
    assert code == 0
    log = proxy.log_file.read_text()
    for cause in CAUSES:
        held = [int(n) for n in re.findall(rf"(\d+) more like this \({cause}\)", log)]
        assert sum(held) + 1 == FRAMES // len(CAUSES), (cause, held)
    assert len(log.splitlines()) <= lines_before + 10
