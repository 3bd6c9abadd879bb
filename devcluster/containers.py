"""The same 3-broker KRaft cluster from the official apache/kafka image, for machines with a Docker engine.

Selected with INSYNC_PROXY_KAFKA_BACKEND=testcontainers. Brokers replicate over a private Docker
network and advertise 127.0.0.1:<published port> to the host, so tests and the proxy reach them
exactly as they reach the local-JVM cluster. Pause and resume use `docker pause`/`unpause`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from insync_proxy.devcluster.cluster import (
    ClusterError,
    ClusterSettings,
    LocalKafkaCluster,
    free_port,
)

BACKEND_ENV = "INSYNC_PROXY_KAFKA_BACKEND"


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers; else a one-line reason."""
    try:
        import docker
    except ImportError:
        return "the docker/testcontainers Python packages are not installed (pip install '.[test]')"
    try:
        docker.from_env().ping()
    except Exception as exc:  # any failure to reach the engine means: no engine here
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"no Docker engine reachable ({first_line[:120]})"
    return None


def container_unsupported_reason(version: str) -> str | None:
    """Why Kafka `version` cannot run from the official image (None when it can)."""
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) < (3, 7):
        return (f"the official apache/kafka image starts at 3.7.0: Kafka {version} runs with the local backend "
                "only (INSYNC_PROXY_KAFKA_BACKEND=local)")
    return None


class ContainerKafkaCluster(LocalKafkaCluster):
    """A controller and N brokers as apache/kafka containers on one Docker network."""

    def __init__(
        self, settings: ClusterSettings | None = None, progress: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(settings, progress)
        reason = container_unsupported_reason(self.version)
        if reason:
            raise ClusterError(reason)
        self.image = f"apache/kafka:{self.version}"
        self._containers: dict[int, Any] = {}
        self._network: Any = None

    def start(self, timeout: float = 300.0) -> ContainerKafkaCluster:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.network import Network

        started = time.monotonic()
        self._network = Network().create()
        voters = f"{self.controller.node_id}@kafka-controller:9093"
        common = {
            "CLUSTER_ID": self.cluster_id,
            "KAFKA_CONTROLLER_QUORUM_VOTERS": voters,
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "KAFKA_HEAP_OPTS": f"-Xmx{self.settings.broker_heap} -Xms64m",
        }
        controller = (
            DockerContainer(self.image)
            .with_network(self._network)
            .with_network_aliases("kafka-controller")
            .with_envs(
                **common,
                KAFKA_NODE_ID=str(self.controller.node_id),
                KAFKA_PROCESS_ROLES="controller",
                KAFKA_LISTENERS="CONTROLLER://0.0.0.0:9093",
            )
        )
        controller.start()
        self._containers[self.controller.node_id] = controller
        for node_id, node in self.brokers.items():
            node.port = free_port()
            container = (
                DockerContainer(self.image)
                .with_network(self._network)
                .with_network_aliases(f"kafka-{node_id}")
                .with_bind_ports(9092, node.port)
                .with_envs(
                    **common,
                    KAFKA_NODE_ID=str(node_id),
                    KAFKA_PROCESS_ROLES="broker",
                    KAFKA_LISTENERS="INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092",
                    KAFKA_ADVERTISED_LISTENERS=f"INTERNAL://kafka-{node_id}:19092,EXTERNAL://127.0.0.1:{node.port}",
                    KAFKA_INTER_BROKER_LISTENER_NAME="INTERNAL",
                    KAFKA_DEFAULT_REPLICATION_FACTOR="3",
                    KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="3",
                    KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="3",
                    KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
                    KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
                    KAFKA_REPLICA_LAG_TIME_MAX_MS=str(self.settings.replica_lag_time_max_ms),
                    KAFKA_REPLICA_FETCH_WAIT_MAX_MS="200",
                )
            )
            container.start()
            self._containers[node_id] = container
        try:
            self.wait_until_ready(timeout - (time.monotonic() - started))
        except BaseException:
            self.stop()
            raise
        self._say(f"Kafka {self.version} (containers): ready at {self.bootstrap_servers}")
        return self

    def _container(self, node_id: int) -> Any:
        try:
            return self._containers[node_id]
        except KeyError:
            raise ClusterError(f"no container for node {node_id}") from None

    def live_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.port) for i, n in self.brokers.items() if i in self._containers and not n.paused]

    def pause_broker(self, node_id: int) -> None:
        self._container(node_id).get_wrapped_container().pause()
        self.brokers[node_id].paused = True

    def resume_broker(self, node_id: int) -> None:
        self._container(node_id).get_wrapped_container().unpause()
        self.brokers[node_id].paused = False

    def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:
        self._container(node_id).get_wrapped_container().stop(timeout=int(timeout))

    def kill_broker(self, node_id: int) -> None:
        self._container(node_id).get_wrapped_container().kill()

    def start_broker(self, node_id: int, timeout: float = 120.0) -> None:
        self._container(node_id).get_wrapped_container().start()
        self.wait_for(lambda: node_id in self.metadata([]).brokers, timeout, f"broker {node_id}", nodes=[])

    def wait_until_ready(self, timeout: float = 180.0) -> None:
        # Containers are not child processes: skip the exited-JVM check by passing no nodes.
        deadline = time.monotonic() + timeout
        self.wait_for(
            lambda: set(self.metadata([]).brokers) >= set(self.brokers),
            max(1.0, deadline - time.monotonic()),
            "brokers to register",
            nodes=[],
        )
        super().wait_until_ready(max(1.0, deadline - time.monotonic()))

    def nodes(self) -> list[Any]:
        return []  # no local processes to watch

    def stop(self, graceful_timeout: float = 15.0) -> None:
        for container in reversed(list(self._containers.values())):
            try:
                container.stop()
            except Exception:  # best effort: a container may already be gone
                pass
        self._containers.clear()
        if self._network is not None:
            try:
                self._network.remove()
            except Exception:
                pass
            self._network = None
