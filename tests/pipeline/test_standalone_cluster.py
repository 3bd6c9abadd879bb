"""The report on a real Spark standalone cluster (a master and two workers started with PySpark's own
launcher, loopback only) gives the same tables as local mode."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from harness.waiting import wait_until
from insync_proxy.pipeline import report, tables
from insync_proxy.pipeline.spark_env import Progress

from .events import decision, isr_change, readiness, summary, write_jsonl


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):  # all held at once, so no port is drawn twice
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class StandaloneCluster:
    """A master and workers as child processes (``bin/spark-class``), each in its own process group."""

    def __init__(self, work: Path, workers: int = 2) -> None:
        import pyspark

        self.spark_home = Path(pyspark.__file__).parent
        self.work = work
        self.workers = workers
        self.port, self.ui_port, *self.worker_ports = _free_ports(2 + 2 * workers)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self.env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(work / "logs"),
                    "SPARK_HOME": str(self.spark_home), "PYSPARK_PYTHON": sys.executable}

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str) -> None:
        log = (self.work / f"{name}.log").open("wb")
        self.procs.append(subprocess.Popen(
            [str(self.spark_home / "bin" / "spark-class"), *args], stdout=log, stderr=subprocess.STDOUT,
            env=self.env, start_new_session=True,
        ))

    def start(self) -> None:
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        wait_until(lambda: self._state() is not None, 180, what="the Spark master's web UI")
        for i in range(self.workers):
            port, ui = self.worker_ports[2 * i], self.worker_ports[2 * i + 1]
            (self.work / f"worker-{i}").mkdir(parents=True, exist_ok=True)
            self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                        "--port", str(port), "--webui-port", str(ui), "--cores", "1", "--memory", "1g",
                        "--work-dir", str(self.work / f"worker-{i}"))
        wait_until(lambda: (self._state() or {}).get("aliveworkers") == self.workers, 180,
                   what=f"{self.workers} workers registered with the master")

    def start_in_background(self) -> None:
        """Start the daemons while the test does other work (2 cores: the JVMs' start overlaps it)."""

        def start() -> None:
            try:
                self.start()
            except BaseException as exc:  # re-raised by ready()
                self._start_error = exc

        self._starting = threading.Thread(target=start, name="spark-standalone-start", daemon=True)
        self._starting.start()

    def ready(self) -> StandaloneCluster:
        """Wait until start_in_background() is done (its own bounds: 180 s each); raise what it raised."""
        if self._starting is not None:
            self._starting.join()
        if self._start_error is not None:
            raise self._start_error
        return self

    def _state(self) -> dict[str, Any] | None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise AssertionError(f"a Spark daemon exited ({proc.returncode}): see {self.work}/*.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as resp:
                state: dict[str, Any] = json.load(resp)
                return state
        except (OSError, ValueError):  # not listening yet, or a UI still starting answers an empty or cut page
            return None

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers first, then the master
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path / "spark-cluster")
    cluster.work.mkdir(parents=True)
    try:
        cluster.start_in_background()  # the test calls ready() before it uses the cluster
        yield cluster
    finally:
        if cluster._starting is not None:  # not ready() here: a start error is the test's to report
            cluster._starting.join()
        cluster.stop()
    assert all(proc.poll() is not None for proc in cluster.procs)


def _rows(spark: SparkSession, path: Path, name: str) -> list[dict[str, Any]]:
    rows = report._collect(spark.read.schema(tables.TABLE_SCHEMAS[name]).parquet(str(path)))
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_report_on_a_standalone_cluster_equals_local_mode(
    spark: SparkSession, standalone_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    # Given v1 and v2 audit files (decisions, summaries, ISR and readiness events, a bad line)
    audit = tmp_path / "audit"
    write_jsonl(audit / "audit-old-1.jsonl", [decision(t, latency_ms=1.0 + t) for t in range(30)]
                + [isr_change(30, 1), decision(31, decision="answered_not_enough_replicas", acks_sent=None,
                                               isr_size=1, error_code=19), isr_change(40, 3), "{bad"])
    write_jsonl(audit / "audit-new-1.jsonl", [summary(10 * k, proxy_id="new", partition=k % 3) for k in range(30)]
                + [readiness(100, False, 1, partition=2, proxy_id="new"), readiness(160, True, 3, partition=2,
                                                                                  proxy_id="new")])
    # When the report runs in local mode (while the cluster's daemons start) and, through the command line,
    # on the standalone cluster
    local = report.run_report(spark, [str(audit)], tmp_path / "local", progress=Progress(enabled=False))
    standalone_cluster.ready()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "insync_proxy", "report", "--master", standalone_cluster.url, "--quiet",
         "--driver-memory", "512m", "--input", str(audit), "--output", str(tmp_path / "cluster")],
        capture_output=True, text=True, timeout=600, env=standalone_cluster.env,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"report on the standalone cluster (2 workers): {elapsed:.1f} s including the driver's start")
    # Then the cluster ran it (an application completed on the master) and every table is equal
    def apps(kind: str) -> list[str]:
        return [app["name"] for app in (standalone_cluster._state() or {}).get(kind, [])]

    # The master moves the application to its completed list once the driver has gone.
    wait_until(lambda: apps("completedapps") == ["insync-proxy durability report"], 60,
               what=f"the application completed on the master (active: {apps('activeapps')})")
    for name in tables.TABLES:
        assert _rows(spark, tmp_path / "cluster" / name, name) == _rows(spark, local.table_paths[name], name), name
    assert local.tables["isr_below_min_intervals"] and local.tables["latency_by_acks"]
