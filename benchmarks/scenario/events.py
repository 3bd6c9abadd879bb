"""The schedule of overlapping events and what each does: a broker killed, paused, restarted one by one or
upgraded to the new Kafka, a network gone silent, the proxy reloaded by SIGHUP and POST /reload, hostile clients
and a connection storm, a third member in the consumer group, slow consumers, certificate rotations and a CA change
(rotations.py), a share group once the cluster runs 4.x. Each runs in a thread of its own; its window (start, end,
what it did, how it failed) goes to the findings."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import threading
import time
import traceback
from collections.abc import Callable

from benchmarks.scenario.clients import Clients
from benchmarks.scenario.clock import Clock, say, wait_until
from benchmarks.scenario.cluster import RELAYED_BROKER, ScenarioCluster
from benchmarks.scenario.credentials import SAMPLER_USER, Users
from benchmarks.scenario.findings import Findings, Window
from benchmarks.scenario.proxy import ScenarioProxy
from benchmarks.scenario.rotations import Rotations
from benchmarks.scenario.topics import BULK_TOPIC, IDEMPOTENT_TOPIC
from harness.hostile_clients import send_malformed
from harness.kafka_wire import WireConnection, WireError
from insync_proxy.devcluster.cluster import _die_with_parent
from insync_proxy.devcluster.distribution import kafka_libs

Action = Callable[[Window], None]


class Events:
    def __init__(self, cluster: ScenarioCluster, proxy: ScenarioProxy, clients: Clients, rotations: Rotations,
                 users: Users, clock: Clock, found: Findings, stop: threading.Event, minutes: float) -> None:
        self.cluster, self.proxy, self.clients, self.rotations, self.users = cluster, proxy, clients, rotations, users
        self.clock, self.found, self.stop_event = clock, found, stop
        self.minutes = minutes
        self.seconds = minutes * 60

    # ------------------------------------------------------------------ the schedule
    def schedule(self) -> list[tuple[float, str, Action]]:
        """(seconds after start, name, action): each event's first time as a fraction of the run, repeated at its
        period in a long run; they overlap by design (e.g. the pause begins while the killed broker restarts)."""
        T = self.seconds
        kinds: list[tuple[float, float, str, Action]] = [
            (0.07, 480, "kill+restart", self.kill_and_restart),
            (0.12, 600, "pause 30s", self.pause),
            (0.10, 300, "SIGHUP reload", lambda w: self.reload(w, "SIGHUP")),
            (0.25, 360, "hostile+storm", self.hostile_and_storm),
            (0.30, 300, "POST /reload", lambda w: self.reload(w, "POST")),
            (0.28, 900, "silent network 60s", self.silent_network),
            (0.33, 1200, "rolling restart", self.rolling_restart),
            (0.45, 10 * T, "rolling upgrade", self.rolling_upgrade),
            (0.50, 420, "group rebalance", self.rebalance),
            (0.14, 600, "slow consumers", self.slow_consumers),
            (0.18, 600, "cert rotation", self.rotations.rotate_certificates),
            (0.40, 1200, "CA change", self.rotations.change_ca),
            # waits for the upgrade's end: share groups need Kafka 4.x and its metadata.version
            (0.46, 10 * T, "share group", self.share_group),
        ]
        out = []
        for first, period, name, action in kinds:
            at = first * T
            out.append((at, name, action))
            while at + period < 0.9 * T:
                at += period
                out.append((at, name, action))
        return sorted(out, key=lambda e: e[0])

    def run_schedule(self) -> list[threading.Thread]:
        """Each event started in a thread of its own at its time (until `stop` is set): the threads."""
        events = []
        for at, name, action in self.schedule():
            delay = at - self.clock.now()
            if delay > 0 and self.stop_event.wait(delay):
                break
            thread = threading.Thread(target=self.event, args=(name, action), daemon=True)
            thread.start()
            events.append(thread)
        return events

    def event(self, name: str, action: Action) -> None:
        window = Window(name, self.clock.now())
        with self.found.lock:
            self.found.windows.append(window)
        say(f"event {name} begins")
        try:
            action(window)
        except Exception as exc:  # noqa: BLE001 - an event that failed is a finding, the run goes on
            window.failed = f"{type(exc).__name__}: {exc}"
            self.found.errors.append(f"{window.start:.0f}s {name}: {window.failed}")
            traceback.print_exc()
        window.end = self.clock.now()
        say(f"event {name} ends ({window.end - window.start:.0f}s){' FAILED: ' + window.failed if window.failed else ''}")

    # ------------------------------------------------------------------ brokers
    def kill_and_restart(self, window: Window, node_id: int = 1) -> None:
        window.detail = f"broker {node_id}"
        self.cluster.kill_and_restart(node_id)
        self.cluster.wait_full_isr()

    def pause(self, window: Window, node_id: int = 2) -> None:
        window.detail = f"broker {node_id} 30 s"
        self.cluster.pause(node_id, 30)

    def rolling_restart(self, window: Window) -> None:
        for node_id in sorted(self.cluster.cluster.brokers):
            self.cluster.restart_broker(node_id)
            self.cluster.wait_full_isr()
        window.detail = "SIGTERM each broker"

    def rolling_upgrade(self, window: Window) -> None:
        """Every node restarted on the new version's jars, ISRs full between nodes; then metadata.version."""
        cluster = self.cluster
        if cluster.cluster.version == cluster.new_version:
            window.detail = "already upgraded"
            return
        cluster.upgrade()
        window.detail = f"{cluster.old_version} -> {cluster.new_version}; {cluster.mv_bump}"

    def silent_network(self, window: Window) -> None:
        window.detail = f"broker {RELAYED_BROKER}'s SASL_SSL listener silent 60 s"
        self.cluster.silence(60)

    # ------------------------------------------------------------------ the proxy
    def reload(self, window: Window, how: str) -> None:
        """A changed setting in the proxy's file, picked up by SIGHUP or POST /reload: the reload logged, none failed."""
        proxy = self.proxy
        before = proxy.reload_failures()
        lines_before = proxy.reload_lines()
        refresh = 3 if how == "SIGHUP" else 2
        proxy.config_file.write_text(proxy.toml(metadata_refresh=refresh, summary_interval=30 if how == "SIGHUP" else 60))
        answer = proxy.send_reload(how)
        if how == "SIGHUP":
            window.detail = f"SIGHUP, metadata_refresh_seconds -> {refresh}"
        else:
            window.detail = f"POST /reload: {answer.get('result')} {answer.get('changed')}"
            if answer.get("result") != "ok":
                raise RuntimeError(f"POST /reload answered {answer}")
        wait_until(lambda: proxy.reload_lines() > lines_before, 30, "the reload's log line")
        if proxy.reload_failures() > before:
            raise RuntimeError("a reload failed (insync_proxy_reloads_total{result=\"failed\"} went up)")

    def hostile_and_storm(self, window: Window) -> None:
        port = self.proxy.bootstrap_port
        result = asyncio.run(send_malformed("127.0.0.1", port, frames=60, connections=12, wait=30))
        opened = failed = 0
        sockets: list[socket.socket] = []
        for _ in range(300):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                sockets.append(s)
                opened += 1
            except OSError:
                failed += 1
        for s in sockets:
            s.close()
        window.detail = f"{sum(result.sent.values())} malformed frames; storm {opened} opened, {failed} refused"

    # ------------------------------------------------------------------ clients
    def rebalance(self, window: Window) -> None:
        """A third member joins the group for 20 s, then leaves: two rebalances."""
        leave = threading.Event()
        member = threading.Thread(target=self.clients.group_member, args=("year-member-3", leave), daemon=True)
        member.start()
        time.sleep(20)
        leave.set()
        member.join(60)
        window.detail = "a third member joined for 20 s and left"

    def slow_consumers(self, window: Window, consumers: int = 3) -> None:
        """A few consumers through the proxy that Fetch 8 MiB of BULK_TOPIC at a time with a small receive buffer
        and read 16 KiB every 50 ms: the proxy's memory budget (max_buffered_bytes) must bound what it holds,
        and the other clients must go on."""
        seconds = 30.0 if self.minutes <= 10 else 60.0
        proxy, password = self.proxy, self.users.sampler_password

        def leader_address() -> tuple[int, str, int]:
            with WireConnection("127.0.0.1", proxy.bootstrap_port, timeout=15, ssl_context=proxy.client_context()) as conn:
                conn.sasl_plain(SAMPLER_USER, password)
                answer = conn.metadata([BULK_TOPIC])
            leader = answer.topics[BULK_TOPIC].partitions[0][0]
            return (leader, *answer.brokers[leader])

        leaders: list[int] = []
        start = self.clock.now()
        rss_before = self.found.samples[-1].rss_mib if self.found.samples else float("nan")
        acked_before = len(self.found.acked)
        until = time.monotonic() + seconds
        read = [0] * consumers
        errors: list[str] = []

        def consume(i: int) -> None:
            # Its leader's broker may be killed, paused or restarting meanwhile: connect again until the deadline
            while time.monotonic() < until and not self.stop_event.is_set():
                try:
                    leader, host, port = leader_address()
                    leaders.append(leader)
                    with WireConnection(host, port, timeout=60, ssl_context=proxy.client_context(),
                                        receive_buffer=8192) as slow:
                        slow.sasl_plain(SAMPLER_USER, password)
                        while time.monotonic() < until and not self.stop_event.is_set():
                            read[i] += slow.slow_fetch(BULK_TOPIC, 0, 0, 8 * 1024 * 1024, 16384, 0.1, until)
                except (OSError, WireError, ssl.SSLError, KeyError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(1)

        workers = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(consumers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(seconds + 90)
        end = self.clock.now()
        in_window = [s for s in self.found.samples if start <= s.t <= end]
        rss_peak = max((s.rss_mib for s in in_window), default=float("nan"))
        leader = "/".join(str(n) for n in sorted(set(leaders))) or "?"
        record = {"start": round(start, 1), "end": round(end, 1), "consumers": consumers, "leader": leader,
                  "bytes_read": sum(read), "rss_before_mib": round(rss_before, 1), "rss_peak_mib": round(rss_peak, 1),
                  "acked_by_others": len(self.found.acked) - acked_before,
                  "probes_failed": sum(1 for s in in_window if not s.can_serve), "probes": len(in_window),
                  "reconnects": len(errors), "errors": errors[:5]}
        with self.found.lock:
            self.found.slow.append(record)
        window.detail = (f"{consumers} consumers read {sum(read) / 2**20:.1f} MiB from broker {leader}'s port slowly; "
                         f"RSS {rss_before:.0f} -> peak {rss_peak:.0f} MiB")

    def share_group(self, window: Window) -> None:
        """Once the cluster runs 4.x with the new metadata.version: share groups on (share.version, FeatureCommand)
        and Kafka's console share consumer (KafkaShareConsumer) reading the idempotent topic through the proxy."""
        upgrade = lambda: [w for w in self.found.windows if w.name == "rolling upgrade"]  # noqa: E731
        wait_until(lambda: bool(upgrade()) and all(w.end is not None for w in upgrade()), 900,
                   "the rolling upgrade to finish")
        if not self.cluster.upgraded:
            raise RuntimeError("the cluster was not upgraded: no share group")
        level = self.cluster.enable_share_groups()
        props = self.proxy.java_client_properties("share-consumer.properties")
        wanted = 20
        consumer = subprocess.run(
            self.cluster.java(kafka_libs(self.cluster.new_version), "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
                              "--bootstrap-server", self.proxy.bootstrap, "--topic", IDEMPOTENT_TOPIC, "--group",
                              "year-share", "--command-config", str(props), "--max-messages", str(wanted),
                              "--timeout-ms", "60000"),
            capture_output=True, text=True, timeout=180, preexec_fn=_die_with_parent)
        received = sum(1 for line in consumer.stdout.splitlines() if line.strip().isdigit())
        with self.found.lock:
            self.found.share_received.append(received)
        window.detail = f"share.version {level}; KafkaShareConsumer through the proxy received {received}/{wanted}"
        if received == 0:
            (self.cluster.work / "share-consumer.log").write_text(consumer.stdout + consumer.stderr)
            raise RuntimeError(f"the share consumer received nothing (exit {consumer.returncode}): "
                               f"{consumer.stderr.strip()[-400:]}")
