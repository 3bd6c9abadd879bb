"""The dev cluster's class archive (devcluster/class_archive.py) with the real JDK and Kafka's jars: written by
a JVM at its exit, checked by another JVM before it is put in place, then mapped; a JDK that cannot make one
makes none, and a broken candidate is never used."""

from __future__ import annotations

import subprocess
from pathlib import Path

from insync_proxy.devcluster.class_archive import ClassArchive
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
