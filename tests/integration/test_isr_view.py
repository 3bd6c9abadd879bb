"""How fast the proxy's ISR view follows a real ISR shrink (followers paused or killed), through the proxy."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from harness.proxy_process import ProxyProcess
from harness.raw_client import RawKafkaClient, batch
from insync_proxy.client.blocking_client import BlockingKafkaClient
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import MetadataRequest, MetadataResponse
from insync_proxy.protocol.messages import MetadataRequestTopic

NOT_ENOUGH_REPLICAS = (19, 20)


class LeaderIsrWatch(threading.Thread):
    """Polls the leader's own Metadata and notes when it first shows the ISR below `size`."""

    def __init__(self, address: str, topic: str, size: int) -> None:
        super().__init__(daemon=True)
        self.address, self.topic, self.size = address, topic, size
        self.shrunk_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        with BlockingKafkaClient.connect(self.address, timeout=10) as client:
            while not self.stop.is_set() and self.shrunk_at is None:
                response = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=self.topic),)), 12,
                                          MetadataResponse)
                isr = response.topics[0].partitions[0].isr_nodes
                if len(isr) < self.size:
                    self.shrunk_at = time.monotonic()
                self.stop.wait(0.05)


@pytest.mark.parametrize("fault", ["pause", "kill"])
def test_the_proxy_answers_not_enough_replicas_soon_after_the_isr_shrinks(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a partition led by one broker, RF 3, min.insync.replicas=2, written with acks=-2 through the proxy
    topic = f"isr-view-{fault}-{uuid.uuid4().hex[:6]}"
    kafka_cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = kafka_cluster.wait_for_leader(topic, 0)
    kafka_cluster.wait_for_isr(topic, 0, 3)
    followers = [b for b in kafka_cluster.brokers if b != leader]
    leader_address = f"127.0.0.1:{kafka_cluster.brokers[leader].port}"
    outcomes: list[tuple[float, str]] = []  # (when answered, "ok" | "broker_19" | "proxy_19" | other)
    with RawKafkaClient(f"127.0.0.1:{proxy.broker_port(leader)}", timeout=60) as client:
        assert client.produce({(topic, 0): batch(b"warm")}, acks=-2)[(topic, 0)].error_code == 0
        watch = LeaderIsrWatch(leader_address, topic, 2)
        watch.start()
        # When both followers stop (frozen, or dead)
        for node_id in followers:
            (kafka_cluster.pause_broker if fault == "pause" else kafka_cluster.kill_broker)(node_id)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and "proxy_19" not in [o for _, o in outcomes]:
                failed_before = proxy.metric("insync_proxy_precheck_total", topic=topic, outcome="failed")
                # (a short timeout: while the frozen followers are still in the ISR the leader waits for them)
                code = client.produce({(topic, 0): batch(b"x")}, acks=-2, timeout_ms=1000)[(topic, 0)].error_code
                answered = time.monotonic()
                by_proxy = proxy.metric("insync_proxy_precheck_total", topic=topic, outcome="failed") > failed_before
                outcomes.append((answered, "proxy_19" if by_proxy else
                                 "broker_19" if code in NOT_ENOUGH_REPLICAS else "ok" if code == 0 else str(code)))
            watch.join(30)
        finally:
            watch.stop.set()
            for node_id in followers:
                if fault == "pause":
                    kafka_cluster.resume_broker(node_id)
                else:
                    kafka_cluster.start_broker(node_id)
    kinds = [o for _, o in outcomes]
    # Then the proxy answered NOT_ENOUGH_REPLICAS itself, right after the broker's own first one (if any)
    assert "proxy_19" in kinds, outcomes
    first_proxy = kinds.index("proxy_19")
    if "broker_19" in kinds:
        assert kinds.index("broker_19") == first_proxy - 1, kinds
    # and soon after the leader's ISR shrank (goal 1.5 s; the bound here is generous for a loaded machine)
    assert watch.shrunk_at is not None
    delay = outcomes[first_proxy][0] - watch.shrunk_at
    with capsys.disabled():
        print(f"\n[isr view, followers {dict(pause='paused', kill='killed')[fault]}] first proxy-answered 19 {delay:+.3f}s after the leader's ISR "
              f"shrink; answers before it: {kinds[:first_proxy]}")
    assert delay <= 10.0, (delay, outcomes)
    kafka_cluster.wait_for_isr(topic, 0, 3)
