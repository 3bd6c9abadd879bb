"""Runs the real proxy as its own process (`python -m insync_proxy run`) in front of a test cluster.

A separate process, as in production: it gets its own core and GIL, and a test sees exactly what a
client sees. One proxy serves several listener groups, so one process covers the default schema,
a KIP-637 listener and a producer-only listener that hides unready partitions.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness.scratch import scratch_directory
from insync_proxy.devcluster.cluster import LocalKafkaCluster, _die_with_parent, free_port
from insync_proxy.proxy.config.broker_ports import BrokerPorts
from insync_proxy.proxy.config.defaults import DEFAULT_NODE_ID_RANGES

GROUPS = ("default", "kip637", "producers")
#: The audit topic the shared test proxy also writes to (created by the fixture before the proxy starts).
AUDIT_TOPIC = "insync-audit"

#: Acks policies of the shared test proxy: topics named floor-* get an acks floor of -1, fastfail-* the
#: precheck for acks=-1.
TEST_POLICIES = """
[[acks_policy]]
topics = "floor-.*"
acks_floor = -1

[[acks_policy]]
topics = "fastfail-.*"
fast_fail = true
"""


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_base(span: int = BrokerPorts(0).size, avoid: tuple[range, ...] = ()) -> int:
    """A base port such that base .. base+span-1 are free (per-broker listener ports) and meet no `avoid`.

    Drawn below the ephemeral port range where it can be, so the ports free_port() hands out (bootstrap,
    admin) never fall inside it: the proxy refuses to start when they would.
    """
    low = _ephemeral_low()
    top = low - span if low - span > 21000 else 60000
    for _ in range(200):
        base = random.randrange(20000, top, 10)
        block = range(base, base + span)
        if any(block.start < a.stop and a.start < block.stop for a in avoid):
            continue
        if all(_port_free(port) for port in block):
            return base
    raise RuntimeError("no free port range found")


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` in a Prometheus text page whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
    return total


class ProxyProcess:
    """The proxy under test; `bootstrap(group)` is what clients get."""

    def __init__(
        self, cluster: LocalKafkaCluster, extra_toml: str = TEST_POLICIES, groups: tuple[str, ...] = GROUPS,
        debug_checks: bool = True,
        audit_topic: bool = False,
        bootstrap_servers: str | None = None,
        metadata_refresh_seconds: float = 2,
        audit_interval_seconds: float = 1,
        audit_enabled: bool = True,
        node_id_ranges: tuple[str, ...] | dict[str, tuple[str, ...]] = DEFAULT_NODE_ID_RANGES,
        listener_toml: dict[str, str] | None = None,
        open_files_limit: int | None = None,
        checkout: Path | None = None,
    ) -> None:
        """`debug_checks=False` leaves out debug-only work (the address-leak scan), e.g. for benchmarks.
        `node_id_ranges`: every listener's, or each group's by name (the proxy's default unless given).
        `listener_toml`: more settings of a group's [[listener]] table, by name; `open_files_limit`: the
        proxy's RLIMIT_NOFILE (soft and hard), as `ulimit -n` would set it; `checkout`: another source tree
        whose insync_proxy runs (its PYTHONPATH; benchmarks compare two checkouts), else the one imported here."""
        self.cluster = cluster
        self.checkout = checkout
        self.open_files_limit = open_files_limit
        self.dir = scratch_directory("insync-proxy-test-")  # configuration, log, audit files, captured frames
        self.audit_dir = self.dir / "audit"
        self.capture_dir = self.dir / "capture"
        self.admin_port = free_port()
        self.ports: dict[str, tuple[int, int]] = {}
        #: Each listener's node id -> port mapping, as the proxy computes it.
        self.broker_ports: dict[str, BrokerPorts] = {}
        listeners = []
        for name in groups:
            ranges = node_id_ranges.get(name, DEFAULT_NODE_ID_RANGES) if isinstance(node_id_ranges, dict) \
                else node_id_ranges
            taken = tuple(range(p.base, p.last_port + 1) for p in self.broker_ports.values())
            bootstrap = free_port()
            base = free_port_base(BrokerPorts.from_settings(0, ranges).size, avoid=taken)
            self.ports[name] = (bootstrap, base)
            self.broker_ports[name] = BrokerPorts.from_settings(base, ranges)
            extra = {"kip637": 'metadata_schema = "kip637"\n', "producers": "hide_unready_partitions = true\n"}
            listeners.append(
                f'[[listener]]\nname = "{name}"\nbootstrap_port = {bootstrap}\nbroker_port_base = {base}\n'
                + f"node_id_ranges = {json.dumps(list(ranges))}\n" + extra.get(name, "")
                + (listener_toml or {}).get(name, "")
            )
        servers = json.dumps((bootstrap_servers or cluster.bootstrap_servers).split(","))
        self.config_file = self.dir / "config.toml"
        self.config_file.write_text(
            f"bootstrap_servers = {servers}\nadmin_port = {self.admin_port}\nproxy_id = \"test-proxy\"\n"
            f"metadata_refresh_seconds = {metadata_refresh_seconds}\nmin_insync_ttl_seconds = 5\nlog_level = \"INFO\"\n"
            + (f'debug_address_leak_check = true\ndebug_capture_dir = "{self.capture_dir}"\n' if debug_checks else "")
            + extra_toml + "\n" + "\n".join(listeners)
            + f'\n[audit]\nenabled = {str(audit_enabled).lower()}\ndirectory = "{self.audit_dir}"\n'
            + f"interval_seconds = {audit_interval_seconds}\n"
            + (f'kafka_topic = "{AUDIT_TOPIC}"\n' if audit_topic else "")
        )
        self.log_file = self.dir / "proxy.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0, wait_ready: bool = True) -> ProxyProcess:
        """Start the proxy; return once /readyz is 200 (or at once with `wait_ready=False`)."""
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "insync_proxy", "run", "--config", str(self.config_file)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=self._preexec, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                               **({"PYTHONPATH": str(self.checkout)} if self.checkout else {})},
                cwd=self.checkout,  # `python -m` puts the working directory first on sys.path
            )
        if not wait_ready:
            return self
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"proxy exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.admin_url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"proxy not ready after {timeout}s:\n{self.log_tail()}")

    def _preexec(self) -> None:
        _die_with_parent()
        if self.open_files_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files_limit, self.open_files_limit))

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def bootstrap(self, group: str = "default") -> str:
        return f"127.0.0.1:{self.ports[group][0]}"

    def broker_port(self, node_id: int, group: str = "default") -> int:
        port = self.broker_ports[group].port_for(node_id)
        assert port is not None, f"node id {node_id} is outside listener {group}'s node_id_ranges"
        return port

    def listener_ports(self) -> set[int]:
        """Every port of the proxy's listeners: bootstrap ports and every port node_id_ranges give."""
        ports = set()
        for name, (bootstrap, _) in self.ports.items():
            ports.add(bootstrap)
            mapping = self.broker_ports[name]
            ports.update(range(mapping.base, mapping.last_port + 1))
        return ports

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"{self.admin_url}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
        return metric_sum(self.metrics_text(), name, **labels)

    def audit_events(self) -> list[dict[str, object]]:
        events = []
        for path in sorted(self.audit_dir.glob("*.jsonl")):
            for line in path.read_text().splitlines():
                if line.strip():
                    events.append(json.loads(line))
        return events

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 40.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode
