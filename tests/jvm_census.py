"""JVM census: which test starts which JVMs, counted (diagnostic; off unless INSYNC_TEST_JVM_CENSUS is set).

    INSYNC_TEST_JVM_CENSUS=/tmp/jvms python3 -m pytest tests/integration/test_chaos.py

Every JVM the run starts, children of children included (Kafka brokers, controllers and their storage
formatting, Kafka's tools, the Java client and javac, Spark drivers, executors and standalone daemons),
writes a HotSpot log into that directory through JAVA_TOOL_OPTIONS (``-XX:LogFile=DIR/jvm-%p.log``). At the
end each JVM is given to the test that was running when it started (the log's ``time_ms``) and a table per
test file lists the main classes and how many of each started. Counting changes what JVMs print: each one
says "Picked up JAVA_TOOL_OPTIONS" on stderr, which a test that reads a child's stderr line by line
(tests/pipeline/test_cli.py) sees; count, do not judge those tests, in such a run.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ENV = "INSYNC_TEST_JVM_CENSUS"

#: Main classes shown by a short name (the rest as they are).
_SHORT = {
    "kafka.Kafka": "Kafka broker/controller",
    "org.apache.zookeeper.server.ZooKeeperServerMain": "ZooKeeper",
    "kafka.tools.StorageTool": "kafka-storage format",
    "org.apache.spark.deploy.SparkSubmit": "Spark driver (spark-submit)",
    "org.apache.spark.executor.CoarseGrainedExecutorBackend": "Spark executor",
    "org.apache.spark.deploy.master.Master": "Spark master",
    "org.apache.spark.deploy.worker.Worker": "Spark worker",
    "com.sun.tools.javac.Main": "javac",
    "org.apache.spark.launcher.Main": "Spark's launcher (builds the spark-submit command)",
}


def census_dir() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def install(directory: Path) -> None:
    """Make every JVM started from now on (by this process or its children) log into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    options = f"-XX:+UnlockDiagnosticVMOptions -XX:+LogVMOutput -XX:-DisplayVMOutput -XX:LogFile={directory}/jvm-%p.log"
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join(filter(None, [os.environ.get("JAVA_TOOL_OPTIONS"), options]))


def _jvms(directory: Path) -> list[tuple[float, str]]:
    """(start time in s since the epoch, main class) of each JVM that logged into `directory`."""
    found = []
    for path in directory.glob("jvm-*.log"):
        text = path.read_text(errors="replace")
        started = re.search(r"<hotspot_log [^>]*time_ms='(\d+)'", text)
        command = re.search(r"sun\.java\.command=(\S*)", text)
        main = command.group(1) if command and command.group(1) else "no main class (java -version)"
        if main.endswith(".java"):
            main = "java " + Path(main).name  # source-file mode
        found.append((int(started.group(1)) / 1000 if started else 0.0, _SHORT.get(main, main)))
    return found


class JvmCensus:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.windows: list[tuple[float, float, str]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        started = time.time()
        yield
        self.windows.append((started, time.time(), item.nodeid))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        per_test: dict[str, Counter[str]] = defaultdict(Counter)
        for started, main in _jvms(self.directory):
            owner = next((nodeid for t0, t1, nodeid in self.windows if t0 <= started <= t1), "(between tests)")
            per_test[owner][main] += 1
        per_file: dict[str, Counter[str]] = defaultdict(Counter)
        for nodeid, counts in per_test.items():
            per_file[nodeid.split("::")[0]].update(counts)
        write = terminalreporter.write_line
        terminalreporter.section(f"JVM census ({ENV}={self.directory})")
        total = sum(sum(c.values()) for c in per_file.values())
        write(f"{total} JVM(s) started")
        for path in sorted(per_file):
            counts = per_file[path]
            write(f"{path}: {sum(counts.values())}: " + ", ".join(f"{n} {main}" for main, n in counts.most_common()))
            for nodeid in sorted(n for n in per_test if n.split("::")[0] == path and "::" in n):
                write(f"    {nodeid.split('::', 1)[1]}: " + ", ".join(
                    f"{n} {main}" for main, n in per_test[nodeid].most_common()))
