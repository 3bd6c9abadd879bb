"""The proxy's own CPU per Produce request, with no Kafka to share the CPU with (not a test).

    python benchmarks/loopback_bench.py [--rounds 3] [--seconds 5] [--produce-version 12]
                                        [--connections 4] [--in-flight 4] [--proxy-arg=--no-audit ...]
                                        [--baseline /path/to/another/checkout] [--rate 2000]

A fake broker (this script, `--fake-broker PORT`: asyncio + uvloop, one node, one topic `orders`) answers
ApiVersions, Metadata and DescribeConfigs like a one-broker cluster and every Produce at once with a
canned success. In front of it: insync-proxy as shipped (its own process, audit on unless told otherwise)
and the bare uvloop byte relay (benchmarks/byte_relay.py, the floor of a Python proxy). A load generator
(this script, `--load`: one process, N connections x W requests in flight, 16 KiB batches of 16 x 1 KiB
records, acks=-1) drives each target in turn, interleaved over rounds (the order alternates). With
`--baseline DIR`, the insync-proxy of another checkout (e.g. `git worktree add /tmp/before HEAD~3`) runs as
a third target: before/after in one run, under the same load. With `--rate N` the load is N requests/s in all
(each connection sends at its share of the rate, at most W in flight) instead of as fast as answers come: a
read or two per wakeup, where what a wakeup costs shows. Wakeups are the target's threads' voluntary context
switches (a thread that slept in epoll_wait or on a lock and was woken).

The JVM-backed benchmarks (proxy_bench.py, peers_bench.py) measure what users see; on two cores the brokers
take most of the CPU there, and a proxy's cost moves with them. Here the broker costs almost nothing, so
the table isolates what the proxy spends per request, and splits it: user time (Python and the event loop)
against system time (the kernel's TCP work, which a relay pays too), and read/write syscalls per request.
CPU is the target process's threads' run time (schedstat); user/sys from /proc/<pid>/stat (10 ms ticks:
read them over seconds, not milliseconds).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.shared import cpu_seconds  # noqa: E402
from insync_proxy.devcluster.cluster import free_ports  # noqa: E402
from insync_proxy.protocol import (  # noqa: E402
    ApiKey,
    ApiVersionsResponse,
    DescribeConfigsResponse,
    MetadataResponse,
    ProduceResponse,
    encode_response,
    encode_response_with_header,
)
from insync_proxy.protocol.messages import (  # noqa: E402
    ApiVersion,
    DescribeConfigsResourceResult,
    DescribeConfigsResult,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    PartitionProduceResponse,
    TopicProduceResponse,
)

TOPIC = "orders"
PARTITIONS = 4
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")


# ---------------------------------------------------------------------------------------------- fake broker
def _control_answer(port: int, key: int, version: int, correlation_id: int) -> bytes | None:
    """ApiVersions, Metadata and DescribeConfigs of a one-broker cluster (what the proxy asks at start)."""
    if key == ApiKey.API_VERSIONS:
        v = 0 if version == 0 else min(version, 3)
        body = encode_response(ApiVersionsResponse(api_keys=tuple(
            ApiVersion(api_key=k, min_version=0, max_version=m) for k, m in (
                (ApiKey.PRODUCE, 12), (ApiKey.METADATA, 12), (ApiKey.API_VERSIONS, 3), (ApiKey.DESCRIBE_CONFIGS, 4))
        )), v)
        return encode_response_with_header(key, v, correlation_id, body)
    if key == ApiKey.METADATA:
        body = encode_response(MetadataResponse(
            brokers=(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port),), cluster_id="loopback",
            controller_id=1, topics=(MetadataResponseTopic(name=TOPIC, partitions=tuple(
                MetadataResponsePartition(partition_index=p, leader_id=1, leader_epoch=0, replica_nodes=(1,),
                                          isr_nodes=(1,)) for p in range(PARTITIONS))),)), version)
        return encode_response_with_header(key, version, correlation_id, body)
    if key == ApiKey.DESCRIBE_CONFIGS:
        body = encode_response(DescribeConfigsResponse(results=(DescribeConfigsResult(
            resource_type=2, resource_name=TOPIC,
            configs=(DescribeConfigsResourceResult(name="min.insync.replicas", value="1"),)),)), version)
        return encode_response_with_header(key, version, correlation_id, body)
    return None


def _produce_answer(version: int) -> bytearray:
    """A size-prefixed Produce success (partition 0) whose correlation id is patched at offset 4."""
    body = encode_response(ProduceResponse(responses=(TopicProduceResponse(name=TOPIC, partition_responses=(
        PartitionProduceResponse(index=0, error_code=0, base_offset=0),)),)), version)
    payload = encode_response_with_header(ApiKey.PRODUCE, version, 0, body)
    return bytearray(_I32.pack(len(payload)) + payload)


def serve_fake_broker(port: int) -> None:
    produce: dict[int, bytearray] = {}

    class Broker(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.buffer = bytearray()

        def data_received(self, data: bytes) -> None:
            buffer = self.buffer
            buffer += data
            out: list[bytes] = []
            pos = 0
            while len(buffer) - pos >= 4:
                (size,) = _I32.unpack_from(buffer, pos)
                if len(buffer) - pos - 4 < size:
                    break
                key, version, correlation_id = _HEAD.unpack_from(buffer, pos + 4)
                pos += 4 + size
                if key == ApiKey.PRODUCE:
                    answer = produce.get(version) or produce.setdefault(version, _produce_answer(version))
                    _I32.pack_into(answer, 4, correlation_id)
                    out.append(bytes(answer))
                else:
                    payload = _control_answer(port, key, version, correlation_id)
                    if payload is not None:
                        out.append(_I32.pack(len(payload)) + payload)
            del buffer[:pos]
            if out:
                self.transport.writelines(out)

    async def main() -> None:
        await asyncio.get_running_loop().create_server(Broker, "127.0.0.1", port)
        print("ready", flush=True)
        await asyncio.Event().wait()

    _run(main())


# ---------------------------------------------------------------------------------------------- load generator
def run_load(port: int, seconds: float, connections: int, in_flight: int, version: int, rate: float = 0) -> None:
    """Prints the number of requests answered (correlation ids checked) in `seconds`; `rate`: requests/s in
    all (each connection its share, at most `in_flight` outstanding), 0 for as fast as answers come."""
    from benchmarks import proxy_bench as pb
    from insync_proxy.client.blocking_client import CORRELATION_ID_OFFSET

    pb.PRODUCE_VERSION = version
    from harness.raw_client import batch

    payload = batch(*[bytes([65 + i % 26]) * pb.RECORD_SIZE for i in range(16)])
    answered = 0

    class Producer(asyncio.Protocol):
        def __init__(self, frame: bytearray, stop_at: float, index: int) -> None:
            self.index = index  # staggers the paced connections' sends
            self.frame = frame
            self.stop_at = stop_at
            self.buffer = bytearray()
            self.sent = self.received = 0
            self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            if rate:
                self.loop = asyncio.get_running_loop()
                self.interval = connections / rate
                self.next_at = self.loop.time() + self.index * self.interval / connections
                self.loop.call_at(self.next_at, self.tick)
                return
            for _ in range(in_flight):
                self.send()

        def tick(self) -> None:
            """The paced load: one request at its time (later when `in_flight` are outstanding)."""
            if time.perf_counter() >= self.stop_at:
                if self.received == self.sent and not self.finished.done():
                    self.finished.set_result(None)
                return
            if self.sent - self.received < in_flight:
                self.send()
                self.next_at += self.interval
            else:
                self.next_at = self.loop.time() + self.interval / 4
            self.loop.call_at(max(self.next_at, self.loop.time()), self.tick)

        def send(self) -> None:
            self.sent += 1
            _I32.pack_into(self.frame, CORRELATION_ID_OFFSET, self.sent)
            self.transport.write(bytes(self.frame))

        def data_received(self, data: bytes) -> None:
            nonlocal answered
            buffer = self.buffer
            buffer += data
            while len(buffer) >= 4:
                (size,) = _I32.unpack_from(buffer, 0)
                if len(buffer) < 4 + size:
                    break
                (correlation_id,) = _I32.unpack_from(buffer, 4)
                del buffer[:4 + size]
                self.received += 1
                answered += 1
                if correlation_id != self.received:
                    raise SystemExit(f"correlation id {correlation_id}, expected {self.received}")
                if rate:
                    if self.received == self.sent and time.perf_counter() >= self.stop_at \
                            and not self.finished.done():
                        self.finished.set_result(None)
                elif time.perf_counter() < self.stop_at:
                    self.send()
                elif self.received == self.sent and not self.finished.done():
                    self.finished.set_result(None)

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.finished.done():
                self.finished.set_exception(ConnectionError(f"connection lost after {self.received} answers"))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop_at = time.perf_counter() + seconds
        producers = []
        for i in range(connections):
            frame = pb.produce_frame(TOPIC, i % PARTITIONS, payload, -1)
            _, producer = await loop.create_connection(functools.partial(Producer, frame, stop_at, i), "127.0.0.1", port)
            producers.append(producer)
        await asyncio.wait_for(asyncio.gather(*(p.finished for p in producers)), seconds + 60)
        print(answered, flush=True)

    _run(main())


def _run(main: Any) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


# ---------------------------------------------------------------------------------------------- measuring
def user_system_seconds(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def wakeups(pid: int) -> int:
    """Voluntary context switches of the process's live threads so far: each a sleep (epoll_wait, a lock) ended."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            pass  # a thread that ended
    return total


def syscalls(pid: int) -> tuple[int, int]:
    """(read, write) syscalls so far (/proc/<pid>/io: libuv reads and writes sockets with read/write(v))."""
    values = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(values["syscr"]), int(values["syscw"])


def wait_until(ready: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


def _ready(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).read()
        return True
    except OSError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=5.0, help="load per target per round (default 5)")
    parser.add_argument("--connections", type=int, default=4, help="client connections (default 4)")
    parser.add_argument("--in-flight", type=int, default=4, help="requests in flight per connection (default 4)")
    parser.add_argument("--produce-version", type=int, default=12, help="Produce version sent (default 12)")
    parser.add_argument("--proxy-arg", action="append", default=[],
                        help="extra `insync-proxy run` argument, e.g. --proxy-arg=--no-audit (repeatable)")
    parser.add_argument("--rate", type=float, default=0,
                        help="requests/s in all (default 0: as fast as answers come, the in-flight window full)")
    parser.add_argument("--baseline", type=Path, help="another checkout whose insync-proxy runs as a third target")
    parser.add_argument("--fake-broker", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=6, type=float, metavar="X", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fake_broker:
        serve_fake_broker(args.fake_broker)
        return 0
    if args.load:
        port, seconds, connections, in_flight, version, rate = args.load
        run_load(int(port), seconds, int(connections), int(in_flight), int(version), rate)
        return 0

    py = sys.executable
    me = str(Path(__file__).resolve())
    broker_port, relay_port = free_ports(2)
    processes: list[subprocess.Popen[Any]] = []
    targets: dict[str, tuple[int, int]] = {}

    def load(port: int, seconds: float) -> int:
        out = subprocess.run([py, me, "--load", str(port), str(seconds), str(args.connections), str(args.in_flight),
                              str(args.produce_version), str(args.rate)], check=True, capture_output=True, text=True,
                             timeout=seconds + 120)
        return int(out.stdout.strip())

    try:
        with tempfile.TemporaryDirectory(prefix="insync-loopback-") as work:
            broker = subprocess.Popen([py, me, "--fake-broker", str(broker_port)], stdout=subprocess.PIPE, text=True)
            processes.append(broker)
            assert broker.stdout is not None
            broker.stdout.readline()
            checkouts = {"insync-proxy": ROOT}
            if args.baseline:
                checkouts["baseline"] = args.baseline.resolve()
            for name, checkout in checkouts.items():
                bootstrap_port, admin_port, base = free_ports(3)
                broker_port_base = base - 1  # the proxy's listener for node 1 is base_port + 1
                directory = Path(work) / name
                directory.mkdir()
                proxy = subprocess.Popen(
                    [py, "-m", "insync_proxy", "run", "--bootstrap-servers", f"127.0.0.1:{broker_port}",
                     "--bootstrap-port", str(bootstrap_port), "--broker-port-base", str(broker_port_base),
                     "--admin-port", str(admin_port), "--audit-directory", str(directory / "audit"),
                     "--log-level", "WARNING", *args.proxy_arg],
                    cwd=directory, env=dict(os.environ, PYTHONPATH=str(checkout)))
                processes.append(proxy)
                wait_until(lambda p=admin_port: _ready(f"http://127.0.0.1:{p}/readyz"), 60, f"{name}'s /readyz")
                load(bootstrap_port, 0.5)  # the first Metadata opens the listener of node 1
                wait_until(lambda p=broker_port_base + 1: _listening(p), 30, f"{name}'s listener of node 1")
                targets[name] = (proxy.pid, broker_port_base + 1)
            relay = subprocess.Popen([py, str(ROOT / "benchmarks" / "byte_relay.py"),
                                      f"{relay_port}:127.0.0.1:{broker_port}"], stdout=subprocess.PIPE, text=True)
            processes.append(relay)
            assert relay.stdout is not None
            relay.stdout.readline()
            targets["relay"] = (relay.pid, relay_port)
            for _pid, port in targets.values():
                load(port, min(2.0, args.seconds))  # warm up
            rows: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
            for r in range(args.rounds):
                order = list(targets)[r % len(targets):] + list(targets)[:r % len(targets)]
                for name in order:
                    pid, port = targets[name]
                    cpu0, (u0, s0), (r0, w0) = cpu_seconds(pid), user_system_seconds(pid), syscalls(pid)
                    k0 = wakeups(pid)
                    n = load(port, args.seconds)
                    cpu1, (u1, s1), (r1, w1) = cpu_seconds(pid), user_system_seconds(pid), syscalls(pid)
                    k1 = wakeups(pid)
                    rows[name].append({"us": (cpu1 - cpu0) / n * 1e6, "user": (u1 - u0) / n * 1e6,
                                       "sys": (s1 - s0) / n * 1e6, "reads": (r1 - r0) / n, "writes": (w1 - w0) / n,
                                       "wakeups": (k1 - k0) / n, "rps": n / args.seconds})
                    print(f"round {r + 1} {name}: {n} requests, {rows[name][-1]['us']:.1f} us CPU each", flush=True)
    finally:
        for p in processes:
            p.send_signal(signal.SIGTERM)
        for p in processes:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()

    def med(name: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[name])

    print()
    load = (f"{args.connections} connections x {args.in_flight} in flight" if not args.rate else
            f"{args.rate:,.0f} requests/s over {args.connections} connections (at most {args.in_flight} in flight each)")
    print(f"Produce v{args.produce_version}, 16 KiB, acks=-1, {load}, instant fake broker; medians of {args.rounds} "
          f"rounds; load average {os.getloadavg()[0]:.1f}")
    header = ("target", "us CPU/request", "user us", "sys us", "reads/request", "writes/request", "wakeups/request",
              "requests/s", "CPU vs relay")
    table = [header]
    relay_us = med("relay", "us")
    for name in rows:
        table.append((name, f"{med(name, 'us'):.1f}", f"{med(name, 'user'):.1f}", f"{med(name, 'sys'):.1f}",
                      f"{med(name, 'reads'):.2f}", f"{med(name, 'writes'):.2f}", f"{med(name, 'wakeups'):.2f}",
                      f"{med(name, 'rps'):.0f}",
                      f"{med(name, 'us') / relay_us:.2f}x"))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
