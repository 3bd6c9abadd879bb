"""Kafka's own command-line tools, run from the jars the dev cluster already fetched (`insync-proxy kafka-cli`).

A new user needs a Kafka client to see a record go through the proxy; Kafka's scripts (kafka-console-producer.sh
and friends) are not on a fresh machine, but their classes are in the jars of ~/.cache/insync-proxy. Each tool
moved between packages over Kafka's releases (kafka.tools -> org.apache.kafka.tools, kafka.admin ->
org.apache.kafka.tools), so a tool is a list of candidate classes, the first one the jars hold is run.
"""

from __future__ import annotations

import os
import shlex
import zipfile
from pathlib import Path

from insync_proxy.devcluster.distribution import java_executable

#: tool name (Kafka's script without `kafka-` and `.sh`) -> its main classes, newest package first.
KAFKA_TOOLS: dict[str, tuple[str, ...]] = {
    "console-producer": ("org.apache.kafka.tools.ConsoleProducer", "kafka.tools.ConsoleProducer"),
    "console-consumer": ("org.apache.kafka.tools.consumer.ConsoleConsumer", "kafka.tools.ConsoleConsumer"),
    "topics": ("org.apache.kafka.tools.TopicCommand", "kafka.admin.TopicCommand"),
    "configs": ("org.apache.kafka.tools.ConfigCommand", "kafka.admin.ConfigCommand"),
    "consumer-groups": ("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                        "kafka.admin.ConsumerGroupCommand"),
    "acls": ("org.apache.kafka.tools.AclCommand", "kafka.admin.AclCommand"),
    "get-offsets": ("org.apache.kafka.tools.GetOffsetShell", "kafka.tools.GetOffsetShell"),
    "broker-api-versions": ("org.apache.kafka.tools.BrokerApiVersionsCommand", "kafka.admin.BrokerApiVersionsCommand"),
    "producer-perf-test": ("org.apache.kafka.tools.ProducerPerformance",),
    "consumer-perf-test": ("org.apache.kafka.tools.ConsumerPerformance", "kafka.tools.ConsumerPerformance"),
    "verifiable-producer": ("org.apache.kafka.tools.VerifiableProducer",),
    "verifiable-consumer": ("org.apache.kafka.tools.VerifiableConsumer",),
}

#: Warnings and errors to stderr, nothing else: the tools' stdout is their output (records, tables).
LOG4J = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%p %m (%c)%n
"""
LOG4J2 = """\
status = warn
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %p %m (%c)%n
"""


class KafkaToolError(RuntimeError):
    """A tool that is not known, or whose class none of the jars holds."""


def jars_hold(libs: Path, class_name: str) -> bool:
    """Whether one of Kafka's own jars in `libs` holds `class_name` (the tools, core and server jars)."""
    entry = class_name.replace(".", "/") + ".class"
    for jar in sorted(libs.glob("kafka*.jar")):
        with zipfile.ZipFile(jar) as archive:
            try:
                archive.getinfo(entry)
            except KeyError:
                continue
            return True
    return False


def tool_class(libs: Path, tool: str) -> str:
    """The main class of `tool` in this Kafka's jars."""
    candidates = KAFKA_TOOLS.get(tool)
    if candidates is None:
        raise KafkaToolError(f"unknown Kafka tool {tool!r}; one of: {', '.join(KAFKA_TOOLS)}")
    for class_name in candidates:
        if jars_hold(libs, class_name):
            return class_name
    raise KafkaToolError(f"this Kafka ({libs}) has no {tool} tool (looked for {', '.join(candidates)})")


def write_log_configuration(directory: Path) -> None:
    """log4j (Kafka 3.x) and log4j2 (4.x) files that send WARN and above to stderr."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "log4j.properties").write_text(LOG4J)
    (directory / "log4j2.properties").write_text(LOG4J2)


def java_command(libs: Path, main_class: str, args: list[str] | tuple[str, ...], log_dir: Path,
                 heap: str = "256m") -> list[str]:
    """The command line that runs `main_class` of Kafka's jars with `args` (log configuration in `log_dir`);
    $KAFKA_OPTS adds JVM options as Kafka's own scripts take them (e.g. the OAuth URLs Kafka 4 may call)."""
    return [
        java_executable(), f"-Xmx{heap}", "-XX:+UseSerialGC",
        f"-Dlog4j.configuration=file:{log_dir / 'log4j.properties'}",
        f"-Dlog4j2.configurationFile={log_dir / 'log4j2.properties'}",
        *shlex.split(os.environ.get("KAFKA_OPTS", "")),
        "-cp", f"{libs}/*", main_class, *args,
    ]
