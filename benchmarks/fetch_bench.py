"""Fetch throughput through the proxy against a direct connection and a bare uvloop relay (not a test).

    python benchmarks/fetch_bench.py [--mib 300] [--rounds 3] [--version 11] [--max-bytes 8388608]

Starts a 1-broker Kafka (devcluster/), the real proxy (harness/proxy_process.ProxyProcess, no debug
checks) and a bare uvloop relay (one process: bytes in, bytes out, flow control, nothing else), fills a
one-partition topic with ~`--mib` MiB (~1 MiB batches of 1 KiB records), then reads the whole partition
from offset 0 with raw Fetch requests (`--max-bytes` per response, one request in flight) directly, through
the relay and through the proxy, in interleaved rounds. Reported per path: MiB/s, the median time of one
fetch (request sent to last byte read), and for the relay and the proxy their CPU milliseconds per MiB
(the threads' run time from /proc/<pid>/task/*/schedstat), with the medians of the per-round ratios
against the relay. `--version 16` or higher reads by topic id (the node_endpoints path).
A JSON summary goes to bench-results/fetch-bench-<UTC timestamp>.json.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.shared import cpu_seconds, say, stop_run, write_summary  # noqa: E402
from harness.proxy_process import ProxyProcess  # noqa: E402
from harness.raw_client import RawKafkaClient, fetch_request_body, next_offset  # noqa: E402
from insync_proxy.client.blocking_client import request_frame  # noqa: E402
from insync_proxy.devcluster.cluster import (  # noqa: E402
    ClusterSettings,
    LocalKafkaCluster,
    _die_with_parent,
    free_port,
)
from insync_proxy.protocol import ApiKey, MetadataRequest, MetadataResponse  # noqa: E402
from insync_proxy.protocol.messages import MetadataRequestTopic  # noqa: E402
from insync_proxy.protocol.primitives import Reader  # noqa: E402
from insync_proxy.protocol.records import encode_record_batch  # noqa: E402

TOPIC = "fetch-bench"
MIB = 1024 * 1024
RECORDS_PER_BATCH = 1000

RELAY = r"""
import asyncio, sys, uvloop

class Up(asyncio.Protocol):
    def __init__(self, down): self.down = down
    def connection_made(self, t): self.t = t
    def data_received(self, data): self.down.t.write(data)
    def pause_writing(self): self.down.t.pause_reading()
    def resume_writing(self): self.down.t.resume_reading()
    def connection_lost(self, exc): self.down.t.close()

class Down(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.up, self.early = t, None, []
        t.pause_reading()
        asyncio.get_running_loop().create_task(self.connect())
    async def connect(self):
        _, self.up = await asyncio.get_running_loop().create_connection(lambda: Up(self), HOST, PORT)
        for data in self.early: self.up.t.write(data)
        self.t.resume_reading()
    def data_received(self, data):
        if self.up is None: self.early.append(data)
        else: self.up.t.write(data)
    def pause_writing(self): self.up.t.pause_reading()
    def resume_writing(self): self.up.t.resume_reading()
    def connection_lost(self, exc):
        if self.up is not None: self.up.t.close()

HOST, PORT, LISTEN = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

async def main():
    server = await asyncio.get_running_loop().create_server(Down, "127.0.0.1", LISTEN)
    print("ready", flush=True)
    await server.serve_forever()

uvloop.run(main())
"""


# ---------------------------------------------------------------------------------------------- fetch client
def fetch_request(version: int, correlation_id: int, topic: str, topic_id: uuid.UUID, offset: int,
                  max_bytes: int) -> bytes:
    """A Fetch request frame (size prefix included) for partition 0 of one topic, from `offset`."""
    body = fetch_request_body(topic, offset, max_bytes, version=version, topic_id=topic_id)
    return bytes(request_frame(ApiKey.FETCH, version, body, client_id="fetch-bench", correlation_id=correlation_id))


def records_of(frame: memoryview, version: int) -> memoryview:
    """The records of the first partition of a Fetch response (header and size prefix stripped)."""
    r = Reader(frame)
    r.int32()
    if version >= 12:
        r.tagged_fields()
    r.int32()  # throttle
    if version >= 7:
        r.int16()
        r.int32()
    flexible = version >= 12
    n = r.array_length(flexible)
    if n < 1:
        raise RuntimeError("Fetch response without topics")
    if version >= 13:
        r.take(16)
    elif flexible:
        r.compact_string()
    else:
        r.string()
    r.array_length(flexible)
    r.int32()
    error = r.int16()
    if error:
        raise RuntimeError(f"Fetch error {error}")
    r.take(24 if version >= 5 else 16 if version >= 4 else 8)
    if version >= 4:
        for _ in range(max(r.array_length(flexible), 0)):
            r.take(16)
            if flexible:
                r.tagged_fields()
    if version >= 11:
        r.int32()
    records = r.compact_nullable_bytes() if flexible else r.nullable_bytes()
    return records if records is not None else memoryview(b"")


@dataclass
class ReadResult:
    bytes: int = 0
    seconds: float = 0.0
    fetches: list[float] = field(default_factory=list)


def read_partition(port: int, version: int, topic_id: uuid.UUID, end_offset: int, max_bytes: int) -> ReadResult:
    """Read the partition from offset 0 to `end_offset`, one Fetch in flight."""
    result = ReadResult()
    buf = bytearray(max_bytes + (1 << 20))
    view = memoryview(buf)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        offset, correlation_id = 0, 0
        started = time.perf_counter()
        while offset < end_offset:
            correlation_id += 1
            t0 = time.perf_counter()
            sock.sendall(fetch_request(version, correlation_id, TOPIC, topic_id, offset, max_bytes))
            got = 0
            while got < 4:
                got += sock.recv_into(view[got:4])
            (size,) = struct.unpack_from(">i", buf)
            if size > len(buf):
                buf = bytearray(size)
                view = memoryview(buf)
            got = 0
            while got < size:
                k = sock.recv_into(view[got:size])
                if not k:
                    raise RuntimeError("connection closed mid-response")
                got += k
            result.fetches.append(time.perf_counter() - t0)
            frame = view[:size]
            (cid,) = struct.unpack_from(">i", frame)
            if cid != correlation_id:
                raise RuntimeError(f"correlation id {cid}, expected {correlation_id}")
            new = next_offset(records_of(frame, version), offset)
            if new == offset:
                raise RuntimeError(f"no progress at offset {offset}")
            offset = new
            result.bytes += size + 4
        result.seconds = time.perf_counter() - started
    return result


# ---------------------------------------------------------------------------------------------- setup
def fill(cluster: LocalKafkaCluster, mib: int) -> int:
    """Write ~mib MiB to partition 0 of TOPIC; return the log end offset."""
    batch = encode_record_batch([os.urandom(1024) for _ in range(RECORDS_PER_BATCH)])  # under 1 MiB (the
    end = 0                                                                                 # broker's limit)
    with RawKafkaClient(cluster.bootstrap_servers.split(",")[0]) as client:
        for _ in range(mib * MIB // len(batch)):
            result = client.produce({(TOPIC, 0): batch}, acks=1)[(TOPIC, 0)]
            if result.error_code:
                raise RuntimeError(f"produce failed: {result.error_code}")
            end = result.base_offset + RECORDS_PER_BATCH
    return end


def topic_id_of(cluster: LocalKafkaCluster) -> uuid.UUID:
    with RawKafkaClient(cluster.bootstrap_servers.split(",")[0]) as client:
        md = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=TOPIC),)), 12, MetadataResponse)
    (topic,) = md.topics
    assert topic.topic_id is not None
    return topic.topic_id


def start_relay(host: str, port: int) -> tuple[subprocess.Popen[bytes], int]:
    listen = free_port()
    proc = subprocess.Popen([sys.executable, "-c", RELAY, host, str(port), str(listen)], stdout=subprocess.PIPE,
                            preexec_fn=_die_with_parent)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise RuntimeError("relay did not start")
    return proc, listen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--mib", type=int, default=300, help="MiB to write to the partition (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of direct/relay/proxy")
    parser.add_argument("--version", type=int, action="append", help="Fetch version(s) (default 11)")
    parser.add_argument("--max-bytes", type=int, default=8 * MIB, help="max bytes per response (default 8 MiB)")
    parser.add_argument("--paths", default="direct,relay,proxy")
    parser.add_argument("--output", type=Path, default=ROOT / "bench-results")
    parser.add_argument("--py-spy", type=Path, help="profile the proxy's reads with py-spy into this directory "
                        "(collapsed stacks, one file per run)")
    args = parser.parse_args(argv)
    versions = args.version or [11]
    paths = [p for p in args.paths.split(",") if p]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results: dict[str, Any] = {"started_utc": stamp, "args": {k: str(v) for k, v in vars(args).items()},
                               "loadavg_at_start": os.getloadavg(), "runs": []}
    cluster = LocalKafkaCluster(ClusterSettings(brokers=1))
    proxy: ProxyProcess | None = None
    relay: subprocess.Popen[bytes] | None = None
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1, 1)
        say(f"filling {TOPIC} with {args.mib} MiB ...")
        end_offset = fill(cluster, args.mib)
        topic_id = topic_id_of(cluster)
        broker_host, broker_port = cluster.broker_addresses[0]
        # Production's refresh and audit intervals (the test harness's are 2 s and 1 s): background work
        # would otherwise be a visible share of a run that lasts about a second.
        proxy = ProxyProcess(cluster, extra_toml="", groups=("default",), debug_checks=False,
                             metadata_refresh_seconds=10, audit_interval_seconds=10).start()
        relay, relay_port = start_relay(broker_host, broker_port)
        assert proxy.process is not None
        ports = {"direct": broker_port, "relay": relay_port, "proxy": proxy.broker_port(1)}
        pids = {"relay": relay.pid, "proxy": proxy.process.pid}
        for name, idle_pid in pids.items():  # what each process costs with no traffic at all
            cpu0 = cpu_seconds(idle_pid)
            time.sleep(5)
            results[f"{name}_idle_cpu_ms_per_s"] = (cpu_seconds(idle_pid) - cpu0) * 1e3 / 5
            say(f"{name} idle: {results[f'{name}_idle_cpu_ms_per_s']:.2f} ms of CPU per second")
        for version in versions:  # warm-up: one pass each
            for path in paths:
                read_partition(ports[path], version, topic_id, min(end_offset, 20 * 1024), args.max_bytes)
        for rnd in range(args.rounds):
            for version in versions:
                order = paths[rnd % len(paths):] + paths[:rnd % len(paths)]
                for path in order:
                    pid = pids.get(path)
                    spy = None
                    if args.py_spy and path == "proxy":
                        args.py_spy.mkdir(parents=True, exist_ok=True)
                        spy = subprocess.Popen(["py-spy", "record", "-p", str(pid), "-f", "raw", "-r", "200", "-o",
                                                str(args.py_spy / f"proxy-v{version}-r{rnd}.txt")],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        time.sleep(1.0)
                    cpu0 = cpu_seconds(pid) if pid else 0.0
                    r = read_partition(ports[path], version, topic_id, end_offset, args.max_bytes)
                    cpu = cpu_seconds(pid) - cpu0 if pid else None
                    if spy is not None:
                        spy.send_signal(signal.SIGINT)
                        spy.wait(30)
                    mib = r.bytes / MIB
                    run = {"round": rnd, "version": version, "path": path, "mib": mib, "seconds": r.seconds,
                           "mib_per_s": mib / r.seconds, "fetch_p50_ms": statistics.median(r.fetches) * 1e3,
                           "cpu_ms_per_mib": cpu * 1e3 / mib if cpu is not None else None,
                           "loadavg": os.getloadavg()[0]}
                    results["runs"].append(run)
                    say(f"round {rnd} v{version} {path:6}: {run['mib_per_s']:7.1f} MiB/s, fetch p50 "
                        f"{run['fetch_p50_ms']:.1f} ms" + (f", CPU {run['cpu_ms_per_mib']:.2f} ms/MiB" if cpu is not None else "")
                        + f" (load {run['loadavg']:.1f})")
        print_summary(results["runs"], versions, paths)
    finally:
        if relay is not None:
            relay.kill()
            relay.wait()
        stop_run(proxy, cluster)
        say(f"wrote {write_summary(results, args.output, 'fetch-bench', stamp)}")
    return 0


def print_summary(runs: list[dict[str, Any]], versions: list[int], paths: list[str]) -> None:
    """Means per path, and the medians of the per-round ratios against the relay (steadier on a shared machine)."""
    print("| Fetch | path | MiB/s (mean) | vs direct | vs relay (median per round) | fetch p50 ms | CPU ms/MiB | "
          "CPU vs relay (median per round) |")
    print("|---|---|---|---|---|---|---|---|")
    for version in versions:
        def of(path: str, version: int = version) -> dict[int, dict[str, Any]]:
            return {r["round"]: r for r in runs if r["version"] == version and r["path"] == path}

        def ratio(path: str, key: str, base: str) -> str:
            mine, theirs = of(path), of(base)
            values = [mine[k][key] / theirs[k][key] for k in mine if k in theirs and mine[k][key] and theirs[k][key]]
            return f"{statistics.median(values):.2f}" if values else ""

        for path in paths:
            mine = list(of(path).values())
            mbs = statistics.mean(r["mib_per_s"] for r in mine)
            p50 = statistics.mean(r["fetch_p50_ms"] for r in mine)
            cpus = [r["cpu_ms_per_mib"] for r in mine if r["cpu_ms_per_mib"] is not None]
            cpu = f"{statistics.mean(cpus):.2f}" if cpus else ""
            print(f"| v{version} | {path} | {mbs:.0f} | {ratio(path, 'mib_per_s', 'direct')} | "
                  f"{ratio(path, 'mib_per_s', 'relay')} | {p50:.1f} | {cpu} | {ratio(path, 'cpu_ms_per_mib', 'relay')} |")


if __name__ == "__main__":
    sys.exit(main())
