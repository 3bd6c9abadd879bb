"""The proxy as a user runs it: `python -m insync_proxy run --config FILE` in its own process (the compiled build
unless asked otherwise), its configuration file, its admin API (/readyz, /metrics, POST /reload), SIGHUP, and the
settings a client needs to reach it (SASL_SSL, trusting the proxy's CAs)."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.scenario.clock import say, wait_until
from benchmarks.scenario.cluster import ScenarioCluster
from benchmarks.scenario.credentials import CLIENT_USER, MECHANISM, PROXY_USER, RunCertificates, Users
from harness.compiled_build import compiled_extensions
from harness.kafka_wire import WireConnection, WireError
from harness.proxy_process import free_port_base, metric_sum
from insync_proxy.devcluster.cluster import _die_with_parent, free_ports

ROOT = Path(__file__).resolve().parents[2]
#: The proxy's min_insync_ttl_seconds in the run: a tag 637 may lag a change made behind its back this long
#: (plus a refresh and a Metadata round): the sampler allows twice the TTL and 5 s.
MIN_INSYNC_TTL = 5.0
#: The proxy's memory budget in the run (max_buffered_bytes).
BUFFER_BUDGET_MIB = 32


def choose_build(interpreted: bool) -> str:
    """The build the proxy will run: the compiled one (made now with ./scripts/compile when missing or stale), or,
    with --interpreted, the interpreted one. SystemExit(2) when it cannot be had."""
    found, stale = compiled_extensions()
    if interpreted:
        if found:
            raise SystemExit(f"--interpreted, but {len(found)} compiled modules are in place and Python would import "
                             "them: ./scripts/compile --clean first")
        return "interpreted (--interpreted)"
    if not found or stale:
        say(f"no compiled build ({len(found)} modules, {len(stale)} stale): ./scripts/compile")
        made = subprocess.run([str(ROOT / "scripts" / "compile")], cwd=ROOT, capture_output=True, text=True)
        found, stale = compiled_extensions()
        if made.returncode != 0 or not found or stale:
            raise SystemExit(f"the compiled build could not be made ({made.stdout[-800:]}{made.stderr[-800:]}); "
                             "run ./scripts/compile, or give --interpreted to run the interpreted build")
    return f"compiled (mypyc, {len(found)} modules)"


class ScenarioProxy:
    """One proxy process in front of the run's cluster: mTLS and SCRAM upstream, TLS downstream."""

    def __init__(self, work: Path, cluster: ScenarioCluster, users: Users, pki: RunCertificates) -> None:
        self.work, self.cluster, self.users, self.pki = work, cluster, users, pki
        self.process: subprocess.Popen[bytes] | None = None
        self.config_file = work / "proxy.toml"
        self.log = work / "proxy.log"
        #: what the proxy's insync_proxy_build_info says ("true", "false" or "unknown")
        self.compiled = "unknown"

    # ------------------------------------------------------------------ the process
    def toml(self, metadata_refresh: float = 2, summary_interval: float = 60) -> str:
        password_file = self.work / "proxy.password"
        password_file.write_text(self.users.scram[PROXY_USER] + "\n")
        password_file.chmod(0o600)
        servers = json.dumps(self.cluster.upstream_servers())
        return (
            f"bootstrap_servers = {servers}\nadmin_port = {self.admin_port}\nproxy_id = \"year\"\n"
            f"metadata_refresh_seconds = {metadata_refresh}\nmin_insync_ttl_seconds = {MIN_INSYNC_TTL}\n"
            f"log_summary_interval_seconds = {summary_interval}\nlog_level = \"INFO\"\n"
            # Certificates are picked up by the runner's SIGHUP and POST /reload once both files of a pair are
            # written, not by the periodic check (which could meet a certificate before its key)
            f"tls_reload_seconds = 86400\nmax_buffered_bytes = {BUFFER_BUDGET_MIB * 1024 * 1024}\n"
            f"[[listener]]\nname = \"clients\"\nbootstrap_port = {self.bootstrap_port}\n"
            f"broker_port_base = {self.broker_port_base}\nnode_id_ranges = [\"0-9\"]\n"
            f"[upstream_tls]\nenabled = true\nca_file = \"{self.pki.upstream_ca}\"\n"
            f"cert_file = \"{self.pki.proxy_cert}\"\nkey_file = \"{self.pki.proxy_key}\"\n"
            f"[downstream_tls]\nenabled = true\ncert_file = \"{self.pki.server_cert}\"\n"
            f"key_file = \"{self.pki.server_key}\"\n"
            f"[control_sasl]\nmechanism = \"{MECHANISM}\"\nusername = \"{PROXY_USER}\"\n"
            f"password_file = \"{password_file}\"\n"
            f"[audit]\nenabled = false\n"
        )

    def start(self) -> None:
        self.admin_port, self.bootstrap_port = free_ports(2)
        self.broker_port_base = free_port_base(10)
        self.config_file.write_text(self.toml())
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "insync_proxy", "run", "--config", str(self.config_file)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        wait_until(lambda: self.readyz()[0], 90, "the proxy to be ready")
        build = re.search(r'insync_proxy_build_info\{[^}]*compiled="(\w+)"', self.metrics_text())
        self.compiled = build.group(1) if build else "unknown"
        say(f"proxy pid {self.process.pid} at 127.0.0.1:{self.bootstrap_port} (TLS; compiled: {self.compiled})")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.bootstrap_port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    # ------------------------------------------------------------------ the admin API
    def readyz(self) -> tuple[bool, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=3) as r:
                return r.status == 200, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return False, e.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as e:
            return False, str(e)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` in /metrics whose labels include `labels` (0 when none)."""
        return metric_sum(self.metrics_text(), name, **labels)

    def serves(self) -> bool:
        """An ApiVersions through the proxy's bootstrap port is answered within its connect_timeout_seconds (10 s)
        and 5 s: a bootstrap connection may meet a frozen broker first and move on after that timeout."""
        try:
            with WireConnection("127.0.0.1", self.bootstrap_port, timeout=15, ssl_context=self.client_context()) as conn:
                return conn.api_versions() == 0
        except (OSError, WireError, ssl.SSLError):
            return False

    # ------------------------------------------------------------------ reloads
    def send_reload(self, how: str) -> dict[str, Any]:
        """SIGHUP (answers {}) or POST /reload (its answer)."""
        assert self.process is not None
        if how == "SIGHUP":
            self.process.send_signal(signal.SIGHUP)
            return {}
        request = urllib.request.Request(f"http://127.0.0.1:{self.admin_port}/reload", method="POST")
        with urllib.request.urlopen(request, timeout=30) as r:
            return dict(json.loads(r.read()))

    def reload_tls(self, how: str, sides: tuple[str, ...] = ("upstream_tls", "downstream_tls")) -> None:
        """SIGHUP or POST /reload; returns when the TLS `sides` whose files changed reloaded
        (insync_proxy_reloads_total{result="ok"} went up)."""
        before = {side: self.reload_count(side, "ok") for side in sides}
        self.send_reload(how)
        for side, count in before.items():
            wait_until(lambda s=side, c=count: self.reload_count(s, "ok") > c, 30, f"the proxy to reload {side}")

    def reload_count(self, what: str, result: str) -> float:
        return self.metric("insync_proxy_reloads_total", what=what, result=result)

    def reload_lines(self) -> int:
        return len(re.findall(r"\breload\b", self.log_text()))

    def reload_failures(self) -> float:
        return sum(float(v) for v in re.findall(r'^insync_proxy_reloads_total\{[^}]*result="failed"[^}]*\} (\S+)$',
                                                 self.metrics_text(), re.M))

    # ------------------------------------------------------------------ what a client needs (TLS towards the proxy)
    def client_context(self) -> ssl.SSLContext:
        """What a Python client trusts towards the proxy: the downstream CAs' bundle."""
        return ssl.create_default_context(cafile=str(self.pki.client_trust))

    def kafka_python_security(self) -> dict[str, Any]:
        return {"security_protocol": "SASL_SSL", "ssl_cafile": str(self.pki.client_trust), "sasl_mechanism": MECHANISM,
                "sasl_plain_username": CLIENT_USER, "sasl_plain_password": self.users.client_password}

    def librdkafka_settings(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.pki.client_trust), "sasl.mechanism": MECHANISM,
                "sasl.username": CLIENT_USER, "sasl.password": self.users.client_password}

    def java_client_properties(self, name: str, base: str = "") -> Path:
        path = self.work / name
        path.write_text(base + "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=PEM\n"
                        f"ssl.truststore.location={self.pki.client_trust}\n" + self.users.client_jaas())
        return path
