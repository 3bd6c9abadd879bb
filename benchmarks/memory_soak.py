"""What the proxy's memory does under churn, repeated quickly (issue #39's RSS trend; not a test).

    python benchmarks/memory_soak.py [--cycles 40] [--brokers 1] [--restart-every 10]

Starts its own KRaft Kafka (devcluster/) and the proxy as its own process under tracemalloc (`-X
tracemalloc`), then repeats a cycle of what a year brings, compressed: a topic created, the previous one's
min.insync.replicas altered and the oldest deleted (directly at the brokers, behind the proxy's back);
producers with new client ids (kafka-python acks=-1 and acks=-2, librdkafka) through the proxy; a consumer
group member joining and leaving; malformed frames (harness/hostile_clients.py) and a connection storm;
Metadata from clients of new client ids; a reload with changed settings (SIGHUP and POST /reload in
turn); every `--restart-every` cycles a broker SIGKILLed and started again.

After the warm-up cycles, after N and after 2N the proxy dumps a tracemalloc snapshot and its object
counts (SIGUSR1); the report is the growth between N and 2N by allocation site (traceback) and by type,
beside RSS. Something unbounded grows in proportion to the cycles; warm-up and caches that fill to a
bound do not grow between N and 2N.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------------- the proxy's side (a child process)
def child(config: str, out: str) -> int:
    """The proxy with a SIGUSR1 handler that writes a tracemalloc snapshot and object counts to `out`."""
    taken = [0]

    def dump(signum: int, frame: Any) -> None:
        gc.collect()
        taken[0] += 1
        stem = Path(out) / f"snap-{taken[0]}"
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(stem) + ".tracemalloc")
        counts = Counter(type(o).__qualname__ for o in gc.get_objects())
        status = Path("/proc/self/status").read_text()
        rss, anon, file = (int(status.split(f"{key}:")[1].split()[0]) / 1024 for key in ("VmRSS", "RssAnon", "RssFile"))
        traced, peak = tracemalloc.get_traced_memory()
        (Path(str(stem) + ".json")).write_text(json.dumps(
            {"rss_mib": rss, "rss_anon_mib": anon, "rss_file_mib": file, "traced": traced, "peak": peak, "types": counts.most_common(300),
             "blocks": sys.getallocatedblocks(), "malloc": mallinfo(), "closed": closed_connections()}))

    signal.signal(signal.SIGUSR1, dump)
    from insync_proxy.cli import main

    return main(["run", "--config", config])


def closed_connections() -> dict[str, Any]:
    """Client connections closed but still alive, and what holds the first few (two levels of referrers)."""
    from insync_proxy.proxy.datapath.connection import ClientConnection

    closed = [o for o in gc.get_objects() if isinstance(o, ClientConnection) and o.closed]
    holders = []
    for connection in closed[:3]:
        for referrer in gc.get_referrers(connection):
            if referrer is closed:
                continue
            above = [type(r).__qualname__ for r in gc.get_referrers(referrer) if r is not closed][:6]
            holders.append(f"{type(referrer).__qualname__} {str(referrer)[:160]!r} <- {above}")
    del closed[3:]
    return {"count": len([o for o in gc.get_objects() if isinstance(o, ClientConnection) and o.closed]),
            "held_by": holders}


def mallinfo() -> dict[str, int]:
    """glibc's heap figures (mallinfo2): `arena` bytes taken with brk, `hblkhd` in mmap'ed blocks, `uordblks` in use,
    `fordblks` free inside the heap (held, not returned to the system: fragmentation when it grows)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {name: int(getattr(info, name)) for name, _ in MallInfo2._fields_}


# ---------------------------------------------------------------------- the driver
def proxy_toml(servers: str, admin_port: int, bootstrap: int, base: int, refresh: float, summary: int,
               tls: Path | None = None) -> str:
    return (
        f"bootstrap_servers = {json.dumps(servers.split(','))}\nadmin_port = {admin_port}\nproxy_id = \"soak\"\n"
        f"metadata_refresh_seconds = {refresh}\nmin_insync_ttl_seconds = 5.0\n"
        f"log_summary_interval_seconds = {summary}\nlog_level = \"INFO\"\n"
        f"[[listener]]\nname = \"clients\"\nbootstrap_port = {bootstrap}\nbroker_port_base = {base}\n"
        "node_id_ranges = [\"0-9\"]\n[audit]\nenabled = false\n"
        + (f'[downstream_tls]\nenabled = true\ncert_file = "{tls}/c.pem"\nkey_file = "{tls}/k.pem"\n' if tls else "")
    )


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        from harness.proxy_process import free_port_base
        from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster, free_port

        self.args = args
        self.cluster = LocalKafkaCluster(ClusterSettings(brokers=args.brokers))
        self.work = Path(args.out)
        self.work.mkdir(parents=True, exist_ok=True)
        for old in self.work.glob("snap-*"):
            old.unlink()
        self.admin_port = free_port()
        self.bootstrap_port = free_port()
        self.base = free_port_base(10)
        self.config = self.work / "proxy.toml"
        self.proxy: subprocess.Popen[bytes] | None = None
        self.topics: list[str] = []
        self.snapshots = 0
        self.steady: list[Any] = []
        self.rf = min(args.brokers, 3)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.bootstrap_port}"

    def write_config(self, n: int) -> None:
        self.config.write_text(proxy_toml(self.cluster.bootstrap_servers, self.admin_port, self.bootstrap_port,
                                          self.base, 2 + n % 2, 60 if n % 2 == 0 else 30,
                                          self.work if self.args.tls else None))

    def start(self) -> None:
        self.cluster.start()
        self.cluster.create_topic("soak-steady", 3, self.rf)
        if self.args.tls:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                            str(self.work / "k.pem"), "-out", str(self.work / "c.pem"), "-days", "2", "-subj",
                            "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        self.write_config(0)
        log = open(self.work / "proxy.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proxy = subprocess.Popen(
            [sys.executable, *(["-X", f"tracemalloc={self.args.frames}"] if self.args.frames else []), __file__,
             "--child", str(self.config), str(self.work)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}, cwd=ROOT,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the proxy did not turn ready")

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.send_signal(signal.SIGTERM)
            try:
                self.proxy.wait(40)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
        self.cluster.stop()

    def snapshot(self) -> dict[str, Any]:
        assert self.proxy is not None
        self.snapshots += 1
        path = self.work / f"snap-{self.snapshots}.json"
        self.proxy.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 120
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        result: dict[str, Any] = json.loads(path.read_text())
        return result

    # ------------------------------------------------------------------ one cycle
    def cycle(self, n: int) -> None:
        if self.args.steady:
            self.steady_traffic(n)
            return
        if self.args.tls:
            self.tls_clients(n)
            self.reload(n)
            return
        self.topic_churn(n)
        self.producers(n)
        self.group_member(n)
        self.hostile_and_storm(n)
        self.new_clients(n)
        self.reload(n)
        if self.args.restart_every and n % self.args.restart_every == 0:
            node = sorted(self.cluster.brokers)[n // self.args.restart_every % len(self.cluster.brokers)]
            self.cluster.kill_broker(node)
            time.sleep(2)
            self.cluster.start_broker(node)

    def topic_churn(self, n: int) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

        name = f"soak-churn-{n}"
        self.cluster.create_topic(name, 1, self.rf, {"min.insync.replicas": "1"}, timeout=90)
        self.topics.append(name)
        admin = KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap_servers, client_id=f"soak-admin-{n}")
        try:
            if len(self.topics) > 1:
                admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, self.topics[-2],
                                                    configs={"min.insync.replicas": str(1 + n % self.rf)})])
            if len(self.topics) > 4:
                admin.delete_topics([self.topics.pop(0)])
        finally:
            admin.close()

    def producers(self, n: int) -> None:
        from confluent_kafka import Producer
        from kafka import KafkaProducer

        for acks in (-1, -2):
            producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks=acks, retries=0, client_id=f"soak-py-{acks}-{n}",
                                     request_timeout_ms=10000)
            try:
                for i in range(20):
                    for topic in (self.topics[-1], "soak-steady"):
                        try:
                            producer.send(topic, value=f"{n}-{i}".encode()).get(timeout=10)
                        except Exception:  # noqa: BLE001 - a broker away: counted nowhere, the soak goes on
                            pass
            finally:
                producer.close(timeout=5)
        rd = Producer({"bootstrap.servers": self.bootstrap, "client.id": f"soak-rd-{n}", "enable.idempotence": True,
                       "linger.ms": 5})
        for i in range(200):
            rd.produce(self.topics[-1] if i % 2 else "soak-steady", value=f"{n}-{i}".encode())
        rd.flush(20)

    def group_member(self, n: int) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer("soak-steady", bootstrap_servers=self.bootstrap, group_id="soak-group",
                                 client_id=f"soak-member-{n}", auto_offset_reset="earliest",
                                 session_timeout_ms=10000, heartbeat_interval_ms=3000)
        try:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=300)
        except Exception:  # noqa: BLE001
            pass
        finally:
            consumer.close()

    def hostile_and_storm(self, n: int) -> None:
        from harness.hostile_clients import send_malformed

        asyncio.run(send_malformed("127.0.0.1", self.bootstrap_port, frames=60, connections=12, wait=5))
        sockets = []
        for _ in range(100):
            try:
                sockets.append(socket.create_connection(("127.0.0.1", self.bootstrap_port), timeout=5))
            except OSError:
                pass
        for s in sockets:
            s.close()

    def new_clients(self, n: int) -> None:
        from insync_proxy.client.blocking_client import BlockingKafkaClient
        from insync_proxy.protocol import MetadataRequest
        from insync_proxy.protocol.messages import MetadataRequestTopic

        for i in range(10):
            try:
                with BlockingKafkaClient.connect(self.bootstrap, client_id=f"soak-client-{n}-{i}", timeout=10) as c:
                    c.api_versions()
                    c.request(MetadataRequest(topics=tuple(MetadataRequestTopic(name=t) for t in self.topics)), 9)
            except OSError:
                pass

    def steady_traffic(self, n: int) -> None:
        """`--steady` seconds of traffic on long-lived connections: an idempotent librdkafka producer, kafka-python
        with acks=-2 and a consumer, no churn (what the year run does between its events)."""
        from confluent_kafka import Consumer, Producer
        from kafka import KafkaProducer

        if not self.steady:
            self.steady = [
                Producer({"bootstrap.servers": self.bootstrap, "client.id": "soak-steady-rd", "enable.idempotence": True,
                          "linger.ms": 5}),
                KafkaProducer(bootstrap_servers=self.bootstrap, acks=-2, retries=0, client_id="soak-steady-py"),
                Consumer({"bootstrap.servers": self.bootstrap, "group.id": "soak-steady", "auto.offset.reset": "earliest"}),
            ]
            self.steady[2].subscribe(["soak-steady"])
        rd, py, consumer = self.steady
        deadline = time.monotonic() + self.args.steady
        i = 0
        while time.monotonic() < deadline:
            i += 1
            rd.produce("soak-steady", value=b"x" * (100 + i % 900))
            rd.poll(0)
            if i % 20 == 0:
                py.send("soak-steady", value=f"{n}-{i}".encode())
            if i % 50 == 0:
                consumer.poll(0)
                time.sleep(0.005)
        rd.flush(20)
        py.flush(20)

    def tls_clients(self, n: int, connections: int = 200) -> None:
        """TLS connections from new client ids: ApiVersions and a Metadata each, then closed."""
        import ssl

        from insync_proxy.client.blocking_client import BlockingKafkaClient
        from insync_proxy.protocol import MetadataRequest
        from insync_proxy.protocol.messages import MetadataRequestTopic

        context = ssl.create_default_context(cafile=str(self.work / "c.pem"))
        for i in range(connections):
            try:
                with BlockingKafkaClient.connect(self.bootstrap, client_id=f"soak-tls-{n}-{i}", timeout=10,
                                                 ssl_context=context) as c:
                    c.api_versions()
                    c.request(MetadataRequest(topics=(MetadataRequestTopic(name="soak-steady"),)), 9)
            except OSError:
                pass

    def reload(self, n: int) -> None:
        assert self.proxy is not None
        self.write_config(n)
        if n % 2:
            self.proxy.send_signal(signal.SIGHUP)
        else:
            request = urllib.request.Request(f"http://127.0.0.1:{self.admin_port}/reload", method="POST")
            with urllib.request.urlopen(request, timeout=30) as r:
                r.read()


def report(work: Path, first: int, second: int, third: int, top: int) -> None:
    """Growth from snapshot `second` to `third` (and `first` to `second`) by traceback and by type."""
    infos = [json.loads((work / f"snap-{i}.json").read_text()) for i in (first, second, third)]
    rss = " -> ".join(f"{i['rss_mib']:.1f}" for i in infos)
    traced = " -> ".join(f"{i['traced'] / 2**20:.2f}" for i in infos)
    blocks = " -> ".join(str(i.get("blocks")) for i in infos)
    anon = " -> ".join(f"{i.get('rss_anon_mib', 0):.1f}" for i in infos)
    file = " -> ".join(f"{i.get('rss_file_mib', 0):.1f}" for i in infos)
    print(f"RSS MiB: {rss} (anonymous {anon}, file-backed {file}); traced MiB: {traced}; "
          f"Python's allocated blocks: {blocks}")
    for key, meaning in (("arena", "heap (brk)"), ("hblkhd", "mmap'ed"), ("uordblks", "in use"),
                         ("fordblks", "free in the heap")):
        print(f"malloc {meaning} MiB: " + " -> ".join(f"{i.get('malloc', {}).get(key, 0) / 2**20:.1f}" for i in infos))
    types = [dict(i["types"]) for i in infos]
    if not (work / f"snap-{first}.tracemalloc").exists():
        _types(types, top)
        return
    snaps = [tracemalloc.Snapshot.load(str(work / f"snap-{i}.tracemalloc")) for i in (first, second, third)]
    filters = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap*")]
    a, b, c = (s.filter_traces(filters) for s in snaps)
    for label, old, new in (("warm-up end -> N", a, b), ("N -> 2N", b, c)):
        print(f"\n== top growth by allocation site, {label}")
        for stat in new.compare_to(old, "traceback")[:top]:
            if stat.size_diff <= 0:
                continue
            frames = [f"{f.filename.replace(str(ROOT) + '/', '')}:{f.lineno}" for f in stat.traceback]
            print(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  " + " <- ".join(reversed(frames[-6:])))
    _types(types, top)


def _types(types: list[dict[str, int]], top: int) -> None:
    print("\n== object counts growing in both halves (type: warm-up end, N, 2N)")
    for name in sorted(types[2], key=lambda k: types[2][k] - types[1].get(k, 0), reverse=True)[:top]:
        counts = [t.get(name, 0) for t in types]
        if counts[2] > counts[1]:
            print(f"  {name}: {counts[0]} -> {counts[1]} -> {counts[2]}")


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=40, help="N: snapshots after the warm-up, N and 2N cycles")
    parser.add_argument("--warm-up", type=int, default=4)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--restart-every", type=int, default=10, help="a broker SIGKILLed and restarted (0: never)")
    parser.add_argument("--frames", type=int, default=12, help="tracemalloc frames per allocation (0: no tracemalloc)")
    parser.add_argument("--steady", type=float, default=0,
                        help="a cycle is this many seconds of steady traffic on long-lived connections, no churn")
    parser.add_argument("--tls", action="store_true",
                        help="TLS towards the clients, and a cycle is only 200 TLS client connections and a reload")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default="/tmp/insync-memory-soak")
    parser.add_argument("--report-only", action="store_true", help="report on the snapshots already in --out")
    args = parser.parse_args(argv)
    if args.report_only:
        report(Path(args.out), 1, 2, 3, args.top)
        return 0
    soak = Soak(args)
    try:
        soak.start()
        started = time.monotonic()
        n = 0
        for target in (args.warm_up, args.warm_up + args.cycles, args.warm_up + 2 * args.cycles):
            while n < target:
                n += 1
                soak.cycle(n)
            info = soak.snapshot()
            malloc = info.get("malloc", {})
            print(f"cycle {n} ({time.monotonic() - started:.0f}s): RSS {info['rss_mib']:.1f} MiB, "
                  f"traced {info['traced'] / 2**20:.2f} MiB, malloc in use {malloc.get('uordblks', 0) / 2**20:.1f} "
                  f"MiB, free in heap {malloc.get('fordblks', 0) / 2**20:.1f} MiB", flush=True)
    finally:
        soak.stop()
    report(soak.work, 1, 2, 3, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
