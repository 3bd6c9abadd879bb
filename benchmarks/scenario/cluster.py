"""The Kafka cluster of the run and what is done to it: three brokers and a KRaft controller on loopback with a
SASL_SSL listener asking for a client certificate, broker 3's listener behind a relay that can go silent; brokers
killed, paused, restarted, silenced; the rolling upgrade and its feature bumps (FeatureCommand); per-broker
dynamic configs. Every time a broker was out of the proxy's reach goes to the findings as an outage."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.scenario.clock import Clock, wait_until
from benchmarks.scenario.credentials import SAMPLER_USER, TRUSTSTORE, RunCertificates, Users
from benchmarks.scenario.findings import Findings
from insync_proxy.devcluster.cluster import (
    ClusterSettings,
    KafkaNode,
    LocalKafkaCluster,
    _die_with_parent,
    free_port,
)
from insync_proxy.devcluster.distribution import kafka_libs
from insync_proxy.devcluster.kafka_tools import java_command

OLD_VERSION = "3.9.2"
NEW_VERSION = "4.3.1"
NEW_RELEASE = "4.3"
#: The silent relay sits in front of this broker's SASL_SSL listener.
RELAYED_BROKER = 3
#: The brokers' replica.lag.time.max.ms in the run, s: how long before an event an acks=1 record may still be
#: the leader's alone.
REPLICA_LAG_SECONDS = 5.0
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"


class SilentRelay:
    """TCP relay in front of one broker listener (asyncio in a thread). `silence(True)`: bytes stop moving both
    ways and new connections are accepted but never forwarded; every socket stays open (a black-holed network)."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port, self.target_port = listen_port, target_port
        self.silent = False
        self.loop = asyncio.new_event_loop()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="silent-relay", daemon=True)
        self.thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self._ready.set()
        self.loop.run_forever()

    async def _serve(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.listen_port)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    def silence(self, silent: bool) -> None:
        self.silent = silent
        self.loop.call_soon_threadsafe(self.flowing.clear if silent else self.flowing.set)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class RelayedCluster(LocalKafkaCluster):
    """A cluster whose broker RELAYED_BROKER advertises its SASL listener at the relay's port, and whose JVMs are
    all started by one long-lived thread: the kernel's parent-death signal (PR_SET_PDEATHSIG) follows the thread
    that started a child, so a JVM started by an event's thread would be SIGKILLed when that event ends."""

    relay_port: int = 0
    launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jvm-launcher")

    def _launch(self, node: KafkaNode) -> None:
        self.launcher.submit(LocalKafkaCluster._launch, self, node).result()

    def _properties(self, node: KafkaNode) -> str:
        text = super()._properties(node)
        if node.role == "broker" and node.node_id == RELAYED_BROKER and self.relay_port:
            real = self.sasl_ports[node.node_id]
            lines = []
            for line in text.splitlines():
                if line.startswith("advertised.listeners="):
                    line = line.replace(f"SASL://127.0.0.1:{real}", f"SASL://127.0.0.1:{self.relay_port}")
                lines.append(line)
            text = "\n".join(lines) + "\n"
        return text


class ScenarioCluster:
    """The run's cluster (a RelayedCluster on `old_version`, later `new_version`) and its relay; each operation
    that takes a broker out of the proxy's reach holds that broker's lock and records the outage."""

    def __init__(self, work: Path, users: Users, pki: RunCertificates, clock: Clock, found: Findings,
                 stop: threading.Event, full_isr_topics: tuple[tuple[str, ...], int], old_version: str = OLD_VERSION,
                 new_version: str = NEW_VERSION, progress: Callable[[str], None] = print) -> None:
        self.work, self.users, self.pki, self.clock, self.found, self.stop_event = work, users, pki, clock, found, stop
        #: (topics, partitions each) whose ISRs must be full again after a broker came back
        self.full_isr_topics = full_isr_topics
        self.old_version, self.new_version = old_version, new_version
        self.progress = progress
        self.broker_locks = {n: threading.Lock() for n in (1, 2, 3)}
        self.kafka: RelayedCluster | None = None
        self.relay: SilentRelay | None = None
        self.upgraded = False
        self.mv_bump = ""

    # ------------------------------------------------------------------ life
    def start(self) -> RelayedCluster:
        settings = ClusterSettings(
            version=self.old_version, sasl_scram_users=self.users.scram,
            sasl_plain_users={SAMPLER_USER: self.users.sampler_password}, sasl_ssl=True,
            tls_keystore_pem=self.pki.broker_keystore, replica_lag_time_max_ms=int(REPLICA_LAG_SECONDS * 1000), class_archive=False,
            data_dir=self.work / "kafka",
            # The relay's connections and the storms' are idle between events: kept by the brokers.
            extra_broker_config={"connections.max.idle.ms": "3600000", "listener.name.sasl.ssl.client.auth": "required",
                                 "listener.name.sasl.ssl.truststore.type": "PEM", TRUSTSTORE: str(self.pki.broker_trust)},
        )
        cluster = RelayedCluster(settings, progress=self.progress)
        cluster.relay_port = free_port()
        self.relay = SilentRelay(cluster.relay_port, cluster.sasl_ports[RELAYED_BROKER])
        self.kafka = cluster
        cluster.start()
        return cluster

    def stop(self) -> None:
        if self.kafka is not None:
            self.kafka.stop()
        if self.relay is not None:
            self.relay.stop()

    @property
    def cluster(self) -> RelayedCluster:
        assert self.kafka is not None, "the cluster has not started"
        return self.kafka

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' PLAINTEXT listeners (the runner's own clients, straight to the brokers)."""
        return self.cluster.bootstrap_servers

    def upstream_servers(self) -> list[str]:
        """The brokers' SASL_SSL listeners, their real ports (not the relay)."""
        return [f"127.0.0.1:{p}" for p in self.cluster.sasl_ports.values()]

    def real_ports(self) -> set[int]:
        """Every port of the real cluster: broker listeners, the relay, the controller."""
        cluster = self.cluster
        return {n.port for n in cluster.brokers.values()} | set(cluster.sasl_ports.values()) \
            | set(cluster.tls_ports.values()) | {cluster.relay_port, cluster.controller.port}

    def java(self, libs: Path, main: str, *args: str) -> list[str]:
        return java_command(libs, main, list(args), self.work, heap="192m")

    def admin(self) -> Any:
        """kafka-python's admin client, straight to the brokers (close it with close_quietly)."""
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=10000,
                                client_id="year-admin")

    @staticmethod
    def close_quietly(admin: Any) -> None:
        """Close an admin client that may have lost its broker (its next round makes a new one)."""
        if admin is not None:
            try:
                admin.close()
            except Exception:  # noqa: BLE001 - a broker down: nothing left to close
                pass

    def wait_full_isr(self, timeout: float = 120) -> None:
        """Until every partition of the watched topics has all three replicas in its ISR."""
        topics, partitions = self.full_isr_topics
        for topic in topics:
            for partition in range(partitions):
                self.cluster.wait_for_isr(topic, partition, 3, timeout)

    # ------------------------------------------------------------------ brokers out of reach
    def _outage(self, node_id: int, down: float) -> None:
        self.found.outages.append((node_id, down, self.clock.now()))

    def kill_and_restart(self, node_id: int, down_seconds: float = 10) -> None:
        """SIGKILL, `down_seconds` away, start again."""
        with self.broker_locks[node_id]:
            down = self.clock.now()
            self.cluster.kill_broker(node_id)
            self.stop_event.wait(down_seconds)
            self.cluster.start_broker(node_id)
            self._outage(node_id, down)

    def pause(self, node_id: int, seconds: float) -> None:
        """SIGSTOP for `seconds`, then SIGCONT."""
        with self.broker_locks[node_id]:
            down = self.clock.now()
            self.cluster.pause_broker(node_id)
            try:
                time.sleep(seconds)
            finally:
                self.cluster.resume_broker(node_id)
                self._outage(node_id, down)

    def restart_broker(self, node_id: int) -> None:
        """SIGTERM (a controlled shutdown) and start again, on the cluster's jars of the moment."""
        with self.broker_locks[node_id]:
            down = self.clock.now()
            self.cluster.stop_broker(node_id)
            self.cluster.start_broker(node_id)
            self._outage(node_id, down)

    def silence(self, seconds: float) -> None:
        """The relayed broker's network silent for `seconds` (its sockets stay open)."""
        assert self.relay is not None
        down = self.clock.now()
        self.relay.silence(True)
        try:
            time.sleep(seconds)
        finally:
            self.relay.silence(False)
            self._outage(RELAYED_BROKER, down)

    # ------------------------------------------------------------------ versions and features
    def upgrade(self) -> None:
        """Every node restarted on the new version's jars, same data and config, ISRs full between nodes;
        then the metadata.version bump with the new version's FeatureCommand."""
        cluster = self.cluster
        cluster.libs = kafka_libs(self.new_version)
        cluster.version = self.new_version
        cluster._class_archive = None
        for node_id in sorted(cluster.brokers):
            self.restart_broker(node_id)
            self.wait_full_isr()
        controller = cluster.controller
        cluster._signal(controller, signal.SIGTERM)
        cluster._reap([controller], 60)
        cluster._launch(controller)
        wait_until(lambda: len(cluster.metadata([]).brokers) == 3, 120, "the brokers after the controller's upgrade")
        self.wait_full_isr()
        self.upgraded = True
        self.mv_bump = self.bump_metadata_version()

    def _feature_command(self, *args: str) -> subprocess.CompletedProcess[str]:
        server = self.bootstrap_servers.split(",")[0]
        return subprocess.run(self.java(kafka_libs(self.new_version), FEATURE_COMMAND, "--bootstrap-server", server,
                                        *args), capture_output=True, text=True, timeout=120,
                              preexec_fn=_die_with_parent)

    def bump_metadata_version(self) -> str:
        upgrade = self._feature_command("upgrade", "--release-version", NEW_RELEASE)
        level = self.feature_level("metadata.version")
        if upgrade.returncode != 0 or not level.startswith(NEW_RELEASE):
            raise RuntimeError(f"metadata.version bump: exit {upgrade.returncode}, now {level}: "
                               f"{(upgrade.stdout + upgrade.stderr).strip()[-400:]}")
        return f"metadata.version {level}"

    def feature_level(self, feature: str) -> str:
        """A feature's finalized level as FeatureCommand describes it ("?" when it does not say)."""
        described = self._feature_command("describe")
        found = re.search(rf"Feature: {re.escape(feature)}\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
                          r"FinalizedVersionLevel: (\S+)", described.stdout)
        return found.group(1) if found else "?"

    def enable_share_groups(self) -> str:
        """share.version raised to 1 when the release bump left it at 0: its level now."""
        level = self.feature_level("share.version")
        if level in ("0", "?"):
            enable = self._feature_command("upgrade", "--feature", "share.version=1")
            level = self.feature_level("share.version")
            if enable.returncode != 0 or level in ("0", "?"):
                raise RuntimeError(f"share.version=1: exit {enable.returncode}, now {level}: "
                                   f"{(enable.stdout + enable.stderr).strip()[-400:]}")
        return level

    # ------------------------------------------------------------------ dynamic configs, TLS at every broker
    def alter_brokers(self, configs: dict[str, str], timeout: float = 180) -> None:
        """A per-broker dynamic config on every broker (IncrementalAlterConfigs, sent by librdkafka to that broker,
        which checks a new keystore or truststore before taking it); a broker down meanwhile is asked again."""
        from confluent_kafka.admin import (
            AdminClient,
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        bootstrap = self.bootstrap_servers

        def alter(node_id: int) -> None:
            resource = ConfigResource(ResourceType.BROKER, str(node_id), incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
            deadline = time.monotonic() + timeout
            while True:
                try:
                    # A new client each try: one whose broker was paused or restarted can wait on a dead connection
                    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2, "socket.timeout.ms": 10000})
                    admin.incremental_alter_configs([resource], request_timeout=10)[resource].result(timeout=15)
                    return
                except Exception as exc:  # noqa: BLE001 - a broker restarting: again until the deadline
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"broker {node_id} did not take {configs}: {exc}") from exc
                    time.sleep(1)

        with ThreadPoolExecutor(max_workers=len(self.cluster.brokers)) as pool:  # a broker down delays only itself
            for done in [pool.submit(alter, node_id) for node_id in sorted(self.cluster.brokers)]:
                done.result()

    def wait_brokers(self, what: str, check: Callable[[int], bool], timeout: float = 180) -> None:
        """Until `check(port)` holds for every broker's SASL_SSL listener (their real ports, not the relay)."""
        ports = list(self.cluster.sasl_ports.values())
        with ThreadPoolExecutor(max_workers=len(ports)) as pool:
            for done in [pool.submit(wait_until, lambda p=port: check(p), timeout, f"{what} at 127.0.0.1:{port}")
                         for port in ports]:
                done.result()
