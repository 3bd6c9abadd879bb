"""Slow consumers against the memory budget, through the real proxy and real Kafka (issue #29 item 3; the
figures at the default budget come from benchmarks/budget_bench.py)."""

from __future__ import annotations

from harness.proxy_process import ProxyProcess
from harness.slow_consumers import (
    MIB,
    SlowConsumers,
    fill,
    memory_kib,
    p50,
    produce_round_trips,
    reference_answer,
)
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.proxy.datapath.budget import MIN_READ_BYTES

#: Small, so the test runs quickly: 40 connections x 8 pipelined 1 MiB Fetches would otherwise leave the
#: proxy holding about 40 x 4 MiB (each connection's write buffer up to its ceiling). A smallest read in
#: reserve for each of their 80 buffers (1.25 MiB) fits in it: the first to turn slow fill the budget, and
#: reads shrink to what it has left.
BUDGET = 4 * MIB
CONNECTIONS = 40
FETCHES = 8


def test_slow_consumers_are_held_to_the_budget_a_producer_beside_them_keeps_flowing_and_all_is_read_whole(
    kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    proxy = ProxyProcess(kafka_cluster, extra_toml=f"max_buffered_bytes = {BUDGET}\n", groups=("default",),
                         debug_checks=False).start()
    consumers: SlowConsumers | None = None
    try:
        produced = topic_name + "-beside"
        kafka_cluster.create_topic(topic_name, 1, 3)
        kafka_cluster.create_topic(produced, 1, 3)
        port = proxy.broker_port(kafka_cluster.leader_of(topic_name, 0))
        fill(f"127.0.0.1:{port}", topic_name, 1.2)
        expected = reference_answer("127.0.0.1", port, topic_name, MIB)
        assert len(expected) > MIB // 2  # whole record batches up to 1 MiB
        producer = f"127.0.0.1:{proxy.broker_port(kafka_cluster.leader_of(produced, 0))}"
        normal = produce_round_trips(producer, produced, 40)
        before = memory_kib(proxy.pid)["VmRSS"]
        # Given slow consumers that each pipeline 8 Fetches of 1 MiB and read nothing
        consumers = SlowConsumers("127.0.0.1", port, topic_name, CONNECTIONS, FETCHES, MIB).open()
        # Then the budget holds every one of them back (each holds bytes once the budget is reached)
        wait_until(lambda: proxy.metric("insync_proxy_budget_paused_connections") >= CONNECTIONS, 120,
                   what="every slow consumer held back by the budget")
        # And a producer beside them is answered as fast as before
        during = produce_round_trips(producer, produced, 40)
        assert p50(during) <= 3 * p50(normal) + 0.05, (p50(normal), p50(during))
        assert max(during) < 2.0, during
        # And the proxy holds no more than the budget and a smallest read for each buffer opened after it was
        # reached (reads are sized by the budget), and its RSS grew by less than the budget + 32 MiB
        buffered = proxy.metric("insync_proxy_buffered_bytes")
        assert 0 < buffered <= BUDGET + 2 * CONNECTIONS * MIN_READ_BYTES, buffered
        growth = (memory_kib(proxy.pid)["VmHWM"] - before) * 1024
        assert growth <= BUDGET + 32 * MIB, f"RSS grew by {growth / MIB:.1f} MiB"
        # And afterwards every answer is read whole, in order
        assert consumers.read_all(expected) == CONNECTIONS * FETCHES * (len(expected) + 8)
        consumers.close()
        wait_until(lambda: proxy.metric("insync_proxy_buffered_bytes") == 0
                   and proxy.metric("insync_proxy_budget_paused_connections") == 0, 30,
                   what="the budget's gauges back to 0")
        assert proxy.alive()
    finally:
        if consumers is not None:
            consumers.close()
        proxy.stop()
