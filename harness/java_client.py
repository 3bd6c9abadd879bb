"""Compiles and runs a Java check (harness/java/ClientCheck.java by default; a test may name its own source) against
kafka-clients (Apache Kafka's own Java client)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.scratch import scratch_directory
from insync_proxy.devcluster.distribution import java_executable, kafka_libs

SOURCE = Path(__file__).with_name("java") / "ClientCheck.java"
_LOG4J2 = "status = warn\nrootLogger.level = WARN\nrootLogger.appenderRef.stderr.ref = STDERR\n" \
          "appender.stderr.type = Console\nappender.stderr.name = STDERR\nappender.stderr.target = SYSTEM_ERR\n" \
          "appender.stderr.layout.type = PatternLayout\nappender.stderr.layout.pattern = %p %m%n\n"


class JavaClient:
    def __init__(self, version: str | None = None, source: Path = SOURCE) -> None:
        self.main_class = source.stem
        self.libs = kafka_libs(version)
        self.out = scratch_directory("insync-java-")
        javac = shutil.which("javac")
        if javac is None:
            raise RuntimeError("javac not found: the Java client test needs a JDK")
        (self.out / "log4j2.properties").write_text(_LOG4J2)
        result = subprocess.run([javac, "-cp", f"{self.libs}/*", "-d", str(self.out), str(source)],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"javac failed:\n{result.stdout}{result.stderr}")

    def command(self, *args: str, jvm_options: tuple[str, ...] = ()) -> list[str]:
        return [java_executable(), "-Xmx256m", f"-Dlog4j2.configurationFile={self.out / 'log4j2.properties'}",
                *jvm_options, "-cp", f"{self.out}:{self.libs}/*", self.main_class, *args]

    def start(self, *args: str) -> subprocess.Popen[str]:
        """The check running in the background (stdin, stdout and stderr piped, text)."""
        return subprocess.Popen(self.command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, *args: str, timeout: float = 300, jvm_options: tuple[str, ...] = ()) -> str:
        """`jvm_options`: system properties, e.g. the OAuth URLs Kafka 4's client may call."""
        result = subprocess.run(self.command(*args, jvm_options=jvm_options), capture_output=True, text=True,
                                timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(f"Java client failed ({result.returncode}):\n{result.stdout}\n{result.stderr[-4000:]}")
        return result.stdout
