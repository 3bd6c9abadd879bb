"""The fixtures that start clusters, proxies and the Java client, and the pools that keep them running.

One real Kafka cluster for the whole run, per version (`ClusterPool`: a process runs one cluster at a time and
stops one before starting another); named clusters with settings of their own (`OwnClusterPool`); one proxy
process per running cluster (`ProxyPool`). The conftests of the folders whose tests use them (tests/integration,
tests/pipeline, tests/deploy) take the fixtures from here (`from tests.cluster_fixtures import ...`), so the
other folders' tests load no dev cluster; the root conftest reaches the pools only through this module once it is
loaded (`run_failed`, `end_of_run`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from harness.java_client import JavaClient
from harness.proxy_process import AUDIT_TOPIC, ProxyProcess
from insync_proxy.devcluster.cluster import (
    ClusterSettings,
    LocalKafkaCluster,
    find_devcluster_jvms,
    kill_pids,
)
from insync_proxy.devcluster.containers import (
    BACKEND_ENV,
    ContainerKafkaCluster,
    container_unsupported_reason,
    docker_unavailable_reason,
)
from insync_proxy.devcluster.distribution import KAFKA_39_VERSION, selected_version

#: Where a failed run keeps the brokers' and proxies' logs.
LOG_KEEP_DIR = Path(os.environ.get("INSYNC_PROXY_TEST_LOGS", "test-logs"))

#: The fixtures a folder's conftest takes from here (`from tests.cluster_fixtures import *` takes these).
__all__ = ["cluster_pool", "exclusive_cluster_slot", "java_client", "kafka_cluster", "kafka_version", "own_clusters",
           "proxy"]


class ClusterPool:
    """Hands out the running cluster of a version, starting it (and stopping another) on demand."""

    def __init__(self) -> None:
        self.current: LocalKafkaCluster | None = None
        self.backend = os.environ.get(BACKEND_ENV, "local")
        self.failed = False
        self.started_cluster_ids: set[str] = set()

    def get(self, version: str) -> LocalKafkaCluster:
        if self.current is not None and self.current.version == version:
            return self.current
        _PROXIES.release()
        _OWN.release()
        self.release()
        cls: type[LocalKafkaCluster]
        if self.backend == "testcontainers":
            reason = docker_unavailable_reason() or container_unsupported_reason(version)
            if reason:
                pytest.skip(f"testcontainers backend selected but {reason}")
            cls = ContainerKafkaCluster
        elif self.backend == "local":
            cls = LocalKafkaCluster
        else:
            raise pytest.UsageError(f"{BACKEND_ENV}={self.backend!r}: use 'local' or 'testcontainers'")
        cluster = cls(ClusterSettings(version=version))
        self.started_cluster_ids.add(cluster.cluster_id)
        cluster.start()
        self.current = cluster
        return cluster

    def release(self) -> None:
        if self.current is None:
            return
        cluster, self.current = self.current, None
        cluster.stop()
        if self.failed and cluster.data_dir.exists():
            # Keep broker logs of a failed run for the post-mortem; drop the data.
            target = LOG_KEEP_DIR / f"kafka-{cluster.version}-{cluster.cluster_id}"
            for node_dir in cluster.data_dir.iterdir():
                if (node_dir / "logs").is_dir():
                    shutil.copytree(node_dir / "logs", target / node_dir.name, dirs_exist_ok=True)
            print(f"\nKafka logs of the failed run kept in {target}", file=sys.stderr)
        cluster.cleanup()


_POOL = ClusterPool()


class OwnClusterPool:
    """Clusters with settings of their own (SASL, TLS, custom node ids, ...), each shared by every test that
    names it: one start per name and run, not one per test.

    How a test uses one::

        @pytest.mark.own_cluster("secured")      # the name: tests of one name run one after the other
        def test_x(own_clusters: OwnClusterPool) -> None:
            cluster = own_clusters.get("secured", ClusterSettings(sasl_plain_users=USERS))

    The first `get` of a name stops the shared cluster and proxy (one cluster at a time on 2 cores) and
    starts it; later tests of that name get the running one; it stops when a test asks for another name,
    for the shared pool's cluster, or for a cluster of its own (`exclusive_cluster_slot`), and at the end.
    One name, one set of settings: `get` fails when a name comes back with other settings. A test on a
    named cluster does not stop it, and leaves it as it found it (brokers running, no cluster-wide config
    changed); a test whose cluster cannot be shared keeps the bare `own_cluster` marker and starts it itself.
    Named own clusters run after the tests on the shared cluster, grouped by name (pytest_collection_modifyitems).
    """

    def __init__(self) -> None:
        self.name: str | None = None
        self.settings: ClusterSettings | None = None
        self.current: LocalKafkaCluster | None = None
        self.started: dict[str, ClusterSettings] = {}

    def get(self, name: str, settings: ClusterSettings) -> LocalKafkaCluster:
        known = self.started.get(name)
        if known is not None and known != settings:
            raise pytest.UsageError(f"own cluster {name!r} asked for with other settings: {settings} != {known}")
        if self.current is not None and self.name == name:
            return self.current
        _PROXIES.release()
        _POOL.release()
        self.release()
        cluster = LocalKafkaCluster(settings)
        _POOL.started_cluster_ids.add(cluster.cluster_id)
        self.started[name] = settings
        cluster.start()
        self.name, self.settings, self.current = name, settings, cluster
        return cluster

    def release(self) -> None:
        if self.current is None:
            return
        cluster, self.current, self.name = self.current, None, None
        cluster.stop()
        cluster.cleanup()


_OWN = OwnClusterPool()


@pytest.fixture(scope="session")
def cluster_pool() -> ClusterPool:
    return _POOL


@pytest.fixture
def exclusive_cluster_slot() -> None:
    """Stops the shared proxy and cluster: the test starts a cluster of its own (2 cores, one at a time)."""
    _PROXIES.release()
    _POOL.release()
    _OWN.release()


@pytest.fixture(scope="session")
def own_clusters() -> OwnClusterPool:
    """Named clusters with settings of their own, each started once per run (see OwnClusterPool)."""
    return _OWN


@pytest.fixture
def kafka_version(request: pytest.FixtureRequest) -> str:
    """The Kafka version a test runs on: its parameter (core checks), 3.9.x if marked kafka39, else the selected."""
    param = getattr(request, "param", None)
    if param is not None:
        return str(param)
    return KAFKA_39_VERSION if request.node.get_closest_marker("kafka39") else selected_version()


@pytest.fixture
def kafka_cluster(kafka_version: str) -> LocalKafkaCluster:
    """The running cluster of the test's Kafka version (default: the newest 4.x)."""
    return _POOL.get(kafka_version)


class ProxyPool:
    """One proxy process per running cluster, restarted when the cluster changes or the proxy died."""

    def __init__(self) -> None:
        self.current: ProxyProcess | None = None
        self.leaks_seen = 0.0
        self.unretrieved_seen = 0

    def get(self, cluster: LocalKafkaCluster) -> ProxyProcess:
        if self.current is not None and self.current.cluster is cluster and self.current.alive():
            return self.current
        self.release()
        cluster.create_topic(AUDIT_TOPIC, 1, 3)
        self.current = ProxyProcess(cluster, audit_topic=True).start()
        return self.current

    def release(self) -> None:
        if self.current is None:
            return
        proxy, self.current = self.current, None
        if proxy.alive():
            try:
                self.leaks_seen += proxy.metric("insync_proxy_address_leaks_total")
            except OSError:
                pass
        proxy.stop()
        if proxy.log_file.exists():
            self.unretrieved_seen += proxy.log_file.read_text(errors="replace").count("never retrieved")
        if _POOL.failed:
            target = LOG_KEEP_DIR / f"proxy-{proxy.dir.name}.log"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(proxy.log_file, target)


_PROXIES = ProxyPool()


@pytest.fixture
def proxy(kafka_cluster: LocalKafkaCluster) -> ProxyProcess:
    """The proxy (a separate process) in front of the running cluster; clients use proxy.bootstrap()."""
    return _PROXIES.get(kafka_cluster)


@pytest.fixture(scope="session")
def java_client() -> JavaClient:
    """Apache Kafka's Java client (kafka-clients from Maven Central), compiled once per run."""
    return JavaClient(selected_version())


def run_failed() -> None:
    """A test of this run failed (the root conftest's report hook): the logs of the clusters and proxies stopped
    from now on are kept in LOG_KEEP_DIR."""
    _POOL.failed = True


def end_of_run() -> list[str]:
    """Stops the pools' proxy and clusters; returns what went wrong meanwhile: real broker addresses the shared
    proxies sent, background failures in their logs, Kafka JVMs of this run left running (killed now)."""
    _PROXIES.release()
    _POOL.release()
    _OWN.release()
    failures = []
    if _PROXIES.leaks_seen:
        failures.append(f"the proxy sent {_PROXIES.leaks_seen:.0f} response(s) carrying a real broker address")
    if _PROXIES.unretrieved_seen:
        failures.append(f"{_PROXIES.unretrieved_seen} 'Task exception was never retrieved' in the shared proxies' "
                        "logs (a background failure must be one WARNING line)")
    # Only this run's clusters count: a developer's dev cluster or a parallel run is not ours to kill.
    leftovers = [(pid, cid) for pid, cid in find_devcluster_jvms() if cid in _POOL.started_cluster_ids]
    if leftovers:
        kill_pids([pid for pid, _ in leftovers])
        failures.append(f"Kafka JVMs left running after the suite (now killed): {leftovers}")
    return failures
