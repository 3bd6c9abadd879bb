"""What the tests of the proxy's own logins (OAUTHBEARER, GSSAPI) share: room for their cluster, and the
KIP-926 precheck answered from an ISR view that came over that login."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.proxy_process import ProxyProcess
from harness.raw_client import RawKafkaClient, batch
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import ErrorCode


def make_room(cluster_pool: Any) -> None:
    """Stop the shared proxy and clusters of this worker: two cores carry one cluster at a time."""
    from tests import cluster_fixtures

    assert cluster_fixtures._POOL is cluster_pool
    cluster_fixtures._PROXIES.release()
    cluster_pool.release()
    cluster_fixtures._OWN.release()


def acks_minus_two_is_answered_by_the_proxy(cluster: LocalKafkaCluster, proxy: ProxyProcess, leader_address: str,
                                            log_in: Callable[[RawKafkaClient], object]) -> None:
    """A partition on brokers 1 and 2 (min.insync.replicas 2), broker 2 paused: an acks=-2 write through broker 1's
    proxy port, by a client `log_in` logged in, is answered NOT_ENOUGH_REPLICAS by the proxy itself."""
    topic = f"own-login-acks-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, configs={"min.insync.replicas": "2"}, assignments={0: [1, 2]})
    assert cluster.wait_for_leader(topic, 0) == 1
    with RawKafkaClient(leader_address) as client:
        log_in(client)
        wait_until(lambda: client.produce({(topic, 0): batch(b"warm")}, acks=-2)[(topic, 0)].error_code == 0, 60,
                   interval=0.5, what="an acks=-2 write through the proxy")
        answered = proxy.metric("insync_proxy_proxy_answered_errors_total", error_code="19")
        # When broker 2 is paused, the partition's ISR shrinks below min.insync.replicas
        cluster.pause_broker(2)
        try:
            cluster.wait_for_isr(topic, 0, 1)
            wait_until(lambda: proxy.metric("insync_proxy_partitions_below_min_isr") > 0, 60,
                       what="the proxy to see the ISR below min")
            result = client.produce({(topic, 0): batch(b"must-not-land")}, acks=-2)
        finally:
            cluster.resume_broker(2)
    # Then the proxy answered NOT_ENOUGH_REPLICAS itself
    assert result[(topic, 0)].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert proxy.metric("insync_proxy_proxy_answered_errors_total", error_code="19") == answered + 1


def start_keeping_logs(cluster: LocalKafkaCluster, *more: Path) -> None:
    """Start `cluster`; if it does not start, keep its nodes' logs (and `more` files: the KDC's log) in test-logs/
    for the post-mortem, then raise."""
    try:
        cluster.start()
    except BaseException:
        from tests.cluster_fixtures import LOG_KEEP_DIR

        target = LOG_KEEP_DIR / f"kafka-{cluster.version}-{cluster.cluster_id}"
        for node_dir in cluster.data_dir.iterdir() if cluster.data_dir.exists() else ():
            if (node_dir / "logs").is_dir():
                shutil.copytree(node_dir / "logs", target / node_dir.name, dirs_exist_ok=True)
        for path in more:
            if path.exists():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target / path.name)
        print(f"\nlogs of the cluster that did not start kept in {target}", file=sys.stderr)
        raise
