"""Fixtures of the deploy tests: a real Prometheus on loopback, and a sample metrics target.

`prometheus_server(targets)` starts /usr/bin/prometheus (Debian's `prometheus` package) scraping the
given host:port targets every second as job "insync-proxy", waits until they are up and returns its
base URL. It works the same against the real proxy's admin port once the proxy runs in tests.
"""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pytest
import yaml

from harness.waiting import wait_until
from tests.cluster_fixtures import *  # noqa: F403  the fixtures that start clusters, proxies, the Java client
from tests.deploy.sample_metrics import SampleMetricsServer
from tests.deploy.tools import ALERTS, STARTING_ERRORS, find_tool, http_get_json

JOB = "insync-proxy"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


class PrometheusFactory(Protocol):
    def __call__(
        self,
        targets: Sequence[str],
        *,
        rule_files: Sequence[Path] = (),
        job: str = JOB,
        wait_up: bool = True,
    ) -> str: ...


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class _PrometheusProcess:
    def __init__(self, binary: str, workdir: Path, config: dict[str, object]) -> None:
        self.workdir = workdir
        self.config_file = workdir / "prometheus.yml"
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_file = workdir / "prometheus.log"
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        for _attempt in range(3):  # the free port may be taken between probing and binding
            port = _free_port()
            self.url = f"http://127.0.0.1:{port}"
            with self.log_file.open("ab") as log:
                self.proc = subprocess.Popen(
                    [
                        self.binary,
                        f"--config.file={self.config_file}",
                        f"--storage.tsdb.path={self.workdir / 'data'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--storage.tsdb.retention.time=1h",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.workdir,
                    start_new_session=True,
                )
            try:
                wait_until(self._ready, timeout=START_TIMEOUT, what=f"Prometheus at {self.url} to be ready",
                           retry_on=STARTING_ERRORS)
                return self.url
            except _Exited:
                if "address already in use" not in _log_tail(self.log_file, 50):
                    break
        self.stop()
        raise RuntimeError(f"Prometheus did not start; its log ends with:\n{_log_tail(self.log_file)}")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise _Exited()
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; only the process this fixture started."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)


class _Exited(OSError):
    """Prometheus exited while we waited for it."""


def targets_up(url: str, job: str, expected: int) -> bool:
    """True when Prometheus has scraped all `expected` targets of `job` successfully."""
    answer = http_get_json(f"{url}/api/v1/targets?state=active")
    active = [t for t in answer["data"]["activeTargets"] if t["labels"].get("job") == job]
    return len(active) == expected and all(t["health"] == "up" for t in active)


@pytest.fixture
def prometheus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusFactory]:
    """Factory: prometheus_server(["127.0.0.1:9190"]) -> "http://127.0.0.1:<port>", stopped at teardown."""
    yield from _prometheus_factory(tmp_path_factory)


@pytest.fixture(scope="session")
def sample_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Prometheus for the session, scraping a sample metrics target (below) with deploy/prometheus/alerts.yml
    loaded: the dashboard and alert-rule checks share it (Prometheus hands its first targets to the scraper
    about 5 s after it starts, whatever the scrape interval)."""
    server = SampleMetricsServer().start()
    try:
        for start in _prometheus_factory(tmp_path_factory):
            yield start([server.address], rule_files=[ALERTS])
    finally:
        server.stop()


def _prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusFactory]:
    binary, reason = find_tool("prometheus")
    if binary is None:
        print(f"SKIP prometheus_server: {reason}")
        pytest.skip(reason)
    started: list[_PrometheusProcess] = []

    def start(
        targets: Sequence[str], *, rule_files: Sequence[Path] = (), job: str = JOB, wait_up: bool = True
    ) -> str:
        config: dict[str, object] = {
            "global": {"scrape_interval": "250ms", "scrape_timeout": "250ms", "evaluation_interval": "250ms"},
            "rule_files": [str(Path(f).resolve()) for f in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
        }
        process = _PrometheusProcess(binary, tmp_path_factory.mktemp("prometheus"), config)
        started.append(process)
        url = process.start()
        if wait_up:
            wait_until(
                lambda: targets_up(url, job, len(targets)),
                timeout=START_TIMEOUT,
                what=f"targets {list(targets)} to be up in Prometheus",
                retry_on=STARTING_ERRORS,
            )
        return url

    try:
        yield start
    finally:
        for process in started:
            process.stop()
