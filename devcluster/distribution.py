"""Apache Kafka's own jars, resolved with Maven from Maven Central into a cache outside the repo."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TextIO

#: The newest complete Apache Kafka 4.x release on Maven Central (4.4.0 is published only in part).
DEFAULT_KAFKA_VERSION = "4.3.1"
#: The newest 3.9.x, the second version the project is tested against.
KAFKA_39_VERSION = "3.9.2"
#: An older 3.x (KRaft, Metadata v12, Produce v9, no Fetch v16 node endpoints) for the old-broker checks.
KAFKA_3X_VERSION = "3.7.2"
#: The last 2.x, run in ZooKeeper mode (Metadata v11, no DescribeCluster before 2.8's v0).
KAFKA_28_VERSION = "2.8.2"
SUPPORTED_KAFKA_VERSIONS = (DEFAULT_KAFKA_VERSION, KAFKA_39_VERSION, KAFKA_3X_VERSION, KAFKA_28_VERSION)

KAFKA_VERSION_ENV = "INSYNC_PROXY_KAFKA_VERSION"
KAFKA_LIBS_ENV = "INSYNC_PROXY_KAFKA_LIBS"
CACHE_ENV = "INSYNC_PROXY_CACHE"

_POM = Path(__file__).with_name("pom.xml")
_DOWNLOADED = re.compile(r"Downloaded from [^:]+: (\S+)")
_COMPLETE_MARKER = ".complete"


class DistributionError(RuntimeError):
    """Kafka's jars or a JVM could not be found or fetched; the message says how to fix it."""


def cache_dir() -> Path:
    """Where jars and dev-cluster state live: $INSYNC_PROXY_CACHE or ~/.cache/insync-proxy."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "insync-proxy"


def selected_version(version: str | None = None) -> str:
    """The Kafka version to run: the argument, else $INSYNC_PROXY_KAFKA_VERSION, else the default."""
    chosen = version or os.environ.get(KAFKA_VERSION_ENV) or DEFAULT_KAFKA_VERSION
    if not re.fullmatch(r"\d+\.\d+\.\d+", chosen):
        raise DistributionError(
            f"Kafka version {chosen!r} is not of the form X.Y.Z; set {KAFKA_VERSION_ENV} to e.g. "
            f"{DEFAULT_KAFKA_VERSION} or {KAFKA_39_VERSION}"
        )
    return chosen


def java_executable() -> str:
    """The `java` to start brokers with: $JAVA_HOME/bin/java, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise DistributionError(
            "No Java found: the local Kafka cluster runs Apache Kafka's jars on a JVM. Install a JDK 17+ "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME."
        )
    return found


def kafka_major(version: str) -> int:
    return int(version.split(".", 1)[0])


def uses_zookeeper(version: str) -> bool:
    """Kafka 2.x runs with ZooKeeper (its KRaft mode was an early access); 3.x and 4.x run KRaft here."""
    return kafka_major(version) < 3


def kafka_libs(version: str | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """A directory holding every jar Kafka `version` needs, fetched by Maven on first use.

    $INSYNC_PROXY_KAFKA_LIBS points at an existing directory of jars instead (e.g. the libs/ of an
    unpacked Kafka distribution), for machines without Maven.
    """
    override = os.environ.get(KAFKA_LIBS_ENV)
    if override:
        libs = Path(override).expanduser()
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise DistributionError(f"{KAFKA_LIBS_ENV}={override} holds no kafka_2.13-*.jar")
        return libs
    version = selected_version(version)
    libs = cache_dir() / f"kafka-{version}" / "libs"
    if (libs / _COMPLETE_MARKER).exists():
        return libs
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    mvn = shutil.which("mvn")
    if not mvn:
        raise DistributionError(
            "Maven (mvn) is needed once to fetch Apache Kafka's jars from Maven Central: install it "
            f"(e.g. `apt-get install maven`), or set {KAFKA_LIBS_ENV} to a Kafka distribution's libs/ directory."
        )
    if libs.exists():
        shutil.rmtree(libs)
    libs.mkdir(parents=True)
    say(f"Fetching Apache Kafka {version} jars from Maven Central into {libs} (first run only) ...")
    cmd = [
        mvn,
        "-B",
        "-f",
        str(_POM),
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={libs}",
    ]
    if kafka_major(version) >= 4:
        cmd.append("-Dkafka.logging=log4j2")
    if uses_zookeeper(version):
        cmd.append("-Dkafka.zookeeper=true")
    tail: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=maven_environment()) as proc:
        assert proc.stdout is not None
        shown = FetchProgress(say if progress is not None else None)
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-30:]
            shown.line(line)
        shown.finish()
        code = proc.wait()
    if code != 0:
        raise DistributionError(
            f"Maven could not fetch Kafka {version} (exit {code}). Last lines:\n" + "\n".join(tail)
        )
    (libs / _COMPLETE_MARKER).write_text(version)
    say(f"Kafka {version}: {sum(1 for _ in libs.glob('*.jar'))} jars ready.")
    return libs


#: JVM options for Maven's one short run: the client compiler only and the serial collector (a fetch from an empty
#: repository: 17 CPU seconds instead of 27, measured with `dev-cluster fetch`). They come before the environment's
#: MAVEN_OPTS, which can still say otherwise (the JVM takes the last of a repeated option).
MAVEN_JVM_OPTIONS: Final = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def maven_environment() -> dict[str, str]:
    """The environment Maven runs in: this process's, with `MAVEN_JVM_OPTIONS` before the user's MAVEN_OPTS."""
    return {**os.environ, "MAVEN_OPTS": " ".join([*MAVEN_JVM_OPTIONS, os.environ.get("MAVEN_OPTS", "")]).strip()}


class FetchProgress:
    """Maven's download lines as progress: one updating line on a terminal, a line every few seconds elsewhere.

    `say` (a line printer) makes it line-based too, for callers that route progress themselves.
    """

    def __init__(
        self, say: Callable[[str], None] | None = None, stream: TextIO | None = None, interval: float = 5.0,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.say = say
        self.tty = say is None and self.stream.isatty()
        self.interval = interval
        self.fetched = 0
        self.latest = ""
        self._last_said = time.monotonic()
        self._said_count = 0
        self._drawn = False

    def line(self, line: str) -> None:
        """Feed one line of Maven's output."""
        match = _DOWNLOADED.search(line)
        if match is None:
            return
        self.fetched += 1
        self.latest = match.group(1).rsplit("/", 1)[-1]
        text = f"  ... {self.fetched} artifacts fetched (latest: {self.latest})"
        if self.tty:
            self.stream.write(f"\r\033[K{text}")
            self.stream.flush()
            self._drawn = True
        elif time.monotonic() - self._last_said >= self.interval:
            self._emit(text)

    def finish(self) -> None:
        """End the updating line (terminal) or say the final count once (elsewhere)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
        elif self.fetched and self._said_count != self.fetched:
            self._emit(f"  ... {self.fetched} artifacts fetched")

    def _emit(self, text: str) -> None:
        self._last_said = time.monotonic()
        self._said_count = self.fetched
        if self.say is not None:
            self.say(text)
        else:
            print(text, file=self.stream, flush=True)
