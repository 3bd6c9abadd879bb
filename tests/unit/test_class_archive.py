"""The dev cluster's class archive (devcluster/class_archive.py) with the real JDK and Kafka's jars: written by
a JVM at its exit, checked by another JVM before it is put in place, then mapped; a JDK that cannot make one
makes none, and a broken candidate is never used."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from insync_proxy.devcluster.class_archive import MAX_ARCHIVES, ClassArchive
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster
from insync_proxy.devcluster.distribution import java_executable, kafka_libs


def _fake_java(home: Path, release: str | None) -> str:
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\nexit 1\n")
    java.chmod(0o755)
    if release is not None:
        (home / "release").write_text(release)
    return str(java)


def test_only_a_jdk_of_13_or_later_that_says_its_version_makes_an_archive(tmp_path: Path) -> None:
    libs, cache = tmp_path / "kafka-4.3.1" / "libs", tmp_path / "cache"
    libs.mkdir(parents=True)
    assert ClassArchive.for_kafka(_fake_java(tmp_path / "jdk11", 'JAVA_VERSION="11.0.2"\n'), libs, cache) is None
    assert ClassArchive.for_kafka(_fake_java(tmp_path / "unknown", None), libs, cache) is None
    jdk17 = _fake_java(tmp_path / "jdk17", 'IMPLEMENTOR="x"\nJAVA_VERSION="17.0.15"\n')
    archive = ClassArchive.for_kafka(jdk17, libs, cache)
    assert archive is not None and archive.path.parent == cache and archive.classpath == f"{libs}/*"
    # another JDK or other jars, another archive
    other_jdk = ClassArchive.for_kafka(_fake_java(tmp_path / "jdk21", 'JAVA_VERSION="21.0.1"\n'), libs, cache)
    other_libs = tmp_path / "kafka-3.9.2" / "libs"
    other_libs.mkdir(parents=True)
    other_jars = ClassArchive.for_kafka(jdk17, other_libs, cache)
    assert other_jdk is not None and other_jars is not None
    assert len({archive.path, other_jdk.path, other_jars.path}) == 3
    assert not archive.ready() and archive.use_options() == [] and not cache.exists()


def _kafka_version(archive: ClassArchive, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([archive.java, *options, "-cp", archive.classpath, "kafka.Kafka", "--version"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_an_archive_is_written_at_exit_checked_then_mapped_and_a_broken_one_never_used(tmp_path: Path) -> None:
    libs = kafka_libs()
    archive = ClassArchive(java_executable(), f"{libs}/*", tmp_path / "classes-test.jsa")
    # Given a JVM started with the options that write a candidate when it exits
    options, candidate = archive.dump_options()
    assert candidate.parent == tmp_path and candidate.name.endswith(".partial")
    assert _kafka_version(archive, *options).returncode == 0
    assert candidate.is_file()
    # When it is settled: checked by another JVM and put in place
    assert archive.settle(candidate) is True
    assert archive.ready() and not candidate.exists()
    # Then a JVM started with it loads Kafka's classes from it
    mapped = _kafka_version(archive, "-Xshare:on", *archive.use_options(), "-Xlog:class+load=info")
    assert mapped.returncode == 0, mapped.stdout[-2000:] + mapped.stderr[-2000:]
    kafka_classes = [line for line in mapped.stdout.splitlines() if " kafka." in line or " org.apache.kafka." in line]
    assert kafka_classes and all("shared objects file (top)" in line for line in kafka_classes), kafka_classes[:5]
    # And a truncated candidate (a JVM killed while writing it) is removed, never put in place
    truncated = tmp_path / "classes-test.1-2.partial"
    truncated.write_bytes(archive.path.read_bytes()[:4096])
    archive.path.unlink()
    assert archive.settle(truncated) is False
    assert not archive.ready() and not truncated.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "the checking JVM's crash report is left behind"
    # And a candidate that was never written (the JVM was killed first) leaves nothing either
    assert archive.settle(tmp_path / "classes-test.3-4.partial") is False
    assert not archive.ready()


class _FakeJvm:
    """Stands in for subprocess.Popen: records the command; the JVM has exited at once."""

    commands: list[list[str]] = []

    def __init__(self, command: list[str], **_: object) -> None:
        _FakeJvm.commands.append(command)
        self.pid = 0
        self.returncode = 0

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


def _launch_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, detached: bool) -> tuple[LocalKafkaCluster,
                                                                                            list[list[str]]]:
    from insync_proxy.devcluster import cluster as cluster_module

    monkeypatch.setattr(cluster_module.subprocess, "Popen", _FakeJvm)
    _FakeJvm.commands = []
    cluster = LocalKafkaCluster(ClusterSettings(version="4.3.1", data_dir=tmp_path / "data",
                                                die_with_parent=not detached))
    cluster.libs = tmp_path / "libs"
    cluster._class_archive = ClassArchive("java", f"{cluster.libs}/*", tmp_path / "archives" / "kafka-x.jsa")
    for node in cluster.nodes():
        (node.directory / "logs").mkdir(parents=True, exist_ok=True)
        cluster._launch(node)
    return cluster, _FakeJvm.commands


def _with(commands: list[list[str]], option: str) -> int:
    return sum(any(arg.startswith(option) for arg in command) for command in commands)


def test_one_broker_of_a_cluster_writes_the_archive_and_every_jvm_maps_it_once_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no archive yet: one broker of the cluster (not the controller) writes one, the others start as before
    cluster, commands = _launch_all(tmp_path / "first", monkeypatch, detached=False)
    assert len(commands) == 4 and _with(commands, "-XX:ArchiveClassesAtExit=") == 1
    writer = next(n for n in cluster.nodes() if n.archive_candidate is not None)
    assert writer.role == "broker" and _with(commands, "-XX:SharedArchiveFile=") == 0
    # When that broker has exited, its candidate is settled (here: never written, so it leaves nothing)
    cluster._reap([writer], 1.0)
    assert writer.archive_candidate is None and not cluster._class_archive.ready()  # type: ignore[union-attr]
    # And a detached cluster (dev-cluster up, ended by SIGKILL from another process) writes none
    _, detached = _launch_all(tmp_path / "detached", monkeypatch, detached=True)
    assert _with(detached, "-XX:ArchiveClassesAtExit=") == 0
    # Given an archive in place: every JVM maps it and none writes another
    archive_dir = tmp_path / "ready" / "archives"
    archive_dir.mkdir(parents=True)
    (archive_dir / "kafka-x.jsa").write_bytes(b"x")
    _, ready = _launch_all(tmp_path / "ready", monkeypatch, detached=False)
    assert _with(ready, "-XX:SharedArchiveFile=") == 4 and _with(ready, "-XX:ArchiveClassesAtExit=") == 0


def test_the_cache_keeps_the_most_recently_used_archives(tmp_path: Path) -> None:
    # Given more archives than the cache keeps (JDK updates, other Kafkas), each used at another time
    olds = []
    for i in range(MAX_ARCHIVES + 3):
        old = tmp_path / f"kafka-{i:016x}.jsa"
        old.write_bytes(b"x")
        os.utime(old, (1000 + i, 1000 + i))
        olds.append(old)
    archive = ClassArchive("java", "libs/*", olds[0])
    # When the oldest is used again (a JVM maps it), then a new one is put in place
    assert archive.use_options() == [f"-XX:SharedArchiveFile={olds[0]}"]
    newest = ClassArchive("java", "libs/*", tmp_path / "kafka-new.jsa")
    newest.path.write_bytes(b"x")
    newest._keep_recent_archives()
    # Then the cache holds MAX_ARCHIVES: the new one, the one just used and the most recent others
    kept = sorted(p.name for p in tmp_path.glob("*.jsa"))
    assert len(kept) == MAX_ARCHIVES
    assert newest.path.name in kept and olds[0].name in kept
    assert sorted(p.name for p in olds[-(MAX_ARCHIVES - 2):]) == sorted(set(kept) - {newest.path.name, olds[0].name})
