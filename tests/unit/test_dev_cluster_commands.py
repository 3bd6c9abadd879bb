"""`dev-cluster` acts on its own directory's cluster only, and `kafka-cli` finds each tool where a Kafka release
keeps it: without starting a JVM (the real cluster is in tests/integration/test_demo_command.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from insync_proxy.cli import DEV_PORT_BASE, KAFKA_TOOL_NAMES, main
from insync_proxy.devcluster import detached
from insync_proxy.devcluster.cluster import JVM_MARKER
from insync_proxy.devcluster.kafka_tools import KAFKA_TOOLS, KafkaToolError, tool_class


def _state(directory: Path, cluster_id: str, pids: list[int]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    nodes = [{"node_id": i, "role": "broker", "port": 19091 + i, "pid": pid, "log": "server.log"}
             for i, pid in enumerate(pids)]
    (directory / detached.STATE_FILE).write_text(json.dumps({
        "version": "4.3.1", "cluster_id": cluster_id, "bootstrap_servers": "127.0.0.1:19091",
        "data_dir": str(directory / "data"), "nodes": nodes}))


def test_the_default_directory_is_the_cache_unless_one_is_given(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv("INSYNC_PROXY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(detached.DEV_CLUSTER_DIR_ENV, raising=False)
    assert detached.cluster_directory(None) == tmp_path / "cache" / "dev-cluster"
    monkeypatch.setenv(detached.DEV_CLUSTER_DIR_ENV, str(tmp_path / "from-env"))
    assert detached.cluster_directory(None) == tmp_path / "from-env"
    assert detached.cluster_directory(str(tmp_path / "given")) == tmp_path / "given"


def test_down_stops_only_the_jvms_of_its_own_cluster(tmp_path: Path) -> None:
    # Given two clusters' processes, each marked with its cluster id as a dev cluster's JVMs are
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"{JVM_MARKER}ours"])
    theirs = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"{JVM_MARKER}theirs"])
    try:
        # And my directory's state names both pids (a pid reused by another cluster looks just like this)
        mine = tmp_path / "mine"
        _state(mine, "ours", [ours.pid, theirs.pid])
        # When I stop my cluster
        assert detached.down(mine, say=lambda line: None) == 0
        # Then my JVM is gone, the other cluster's runs on, and my directory is removed
        assert ours.wait(30) != 0
        assert theirs.poll() is None
        assert not mine.exists()
    finally:
        for process in (ours, theirs):
            process.kill()
            process.wait(30)


def test_status_of_a_directory_without_a_cluster_says_so_and_exits_1(tmp_path: Path) -> None:
    said: list[str] = []
    assert detached.status(tmp_path / "nothing", say=said.append) == 1
    assert "no dev cluster in" in said[0] and "dev-cluster up" in said[0]


def test_up_refuses_a_port_in_use_before_anything_starts(tmp_path: Path) -> None:
    # Given a port base whose first port (the controller's, the first one checked) another program holds;
    # a base below the held port would make the test depend on that lower port being free as well
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        complaints: list[str] = []
        # When a cluster is asked for on it
        started = detached.up(tmp_path / "cluster", None, None, None, taken, "127.0.0.1:9092",
                              say=lambda line: None, complain=complaints.append)
    # Then it is refused with the port and the way out named, and nothing was made
    assert started == 1
    assert f"port {taken} is in use" in complaints[0] and "--port-base" in complaints[0]
    assert not (tmp_path / "cluster").exists()


def test_a_port_base_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["dev-cluster", "up", "--dir", str(tmp_path), "--port-base", "65534"]) == 2
    assert "--port-base 65534" in capsys.readouterr().err


def test_the_default_ports_are_the_documented_ones() -> None:
    assert detached.dev_ports(DEV_PORT_BASE) == (19090, [19091, 19092, 19093])


def _jar(path: Path, *classes: str) -> None:
    with zipfile.ZipFile(path, "w") as jar:
        for name in classes:
            jar.writestr(name.replace(".", "/") + ".class", b"\xca\xfe\xba\xbe")


def test_each_tool_is_found_in_the_package_its_kafka_keeps_it(tmp_path: Path) -> None:
    # Given a Kafka 4 layout (tools in org.apache.kafka.tools) and a Kafka 3.7 one (ConsoleProducer in core)
    new, old = tmp_path / "new", tmp_path / "old"
    new.mkdir()
    old.mkdir()
    _jar(new / "kafka-tools-4.3.1.jar", "org.apache.kafka.tools.ConsoleProducer",
         "org.apache.kafka.tools.consumer.ConsoleConsumer")
    _jar(old / "kafka_2.13-3.7.2.jar", "kafka.tools.ConsoleProducer", "kafka.tools.ConsoleConsumer")
    _jar(old / "kafka-tools-3.7.2.jar", "org.apache.kafka.tools.TopicCommand")
    # Then each resolves to the class its own jars hold
    assert tool_class(new, "console-producer") == "org.apache.kafka.tools.ConsoleProducer"
    assert tool_class(old, "console-producer") == "kafka.tools.ConsoleProducer"
    assert tool_class(old, "console-consumer") == "kafka.tools.ConsoleConsumer"
    assert tool_class(old, "topics") == "org.apache.kafka.tools.TopicCommand"
    # And a tool the jars lack, or an unknown name, is an error that says which
    with pytest.raises(KafkaToolError, match="no topics tool"):
        tool_class(new, "topics")
    with pytest.raises(KafkaToolError, match="unknown Kafka tool 'kafka-topics'"):
        tool_class(new, "kafka-topics")


def test_the_command_line_lists_exactly_the_tools_it_can_run() -> None:
    assert tuple(KAFKA_TOOLS) == KAFKA_TOOL_NAMES


def test_an_unknown_tool_exits_1_with_the_list(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    libs = tmp_path / "libs"
    libs.mkdir()
    _jar(libs / "kafka_2.13-4.3.1.jar", "kafka.Kafka")
    monkeypatch.setenv("INSYNC_PROXY_KAFKA_LIBS", str(libs))
    monkeypatch.setenv("INSYNC_PROXY_CACHE", str(tmp_path / "cache"))
    assert main(["kafka-cli", "producer"]) == 1
    err = capsys.readouterr().err
    assert "unknown Kafka tool 'producer'" in err and "console-producer" in err


def test_maven_runs_with_the_client_compiler_and_the_users_maven_opts_last(monkeypatch: pytest.MonkeyPatch) -> None:
    from insync_proxy.devcluster.distribution import MAVEN_JVM_OPTIONS, maven_environment

    # Given MAVEN_OPTS of the user's (a repository of their own, and a compiler option of their own)
    monkeypatch.setenv("MAVEN_OPTS", "-Dmaven.repo.local=/tmp/m2 -XX:TieredStopAtLevel=4")
    options = maven_environment()["MAVEN_OPTS"].split()
    # Then Maven's JVM gets the client compiler first, and the user's options after it (the last one counts)
    assert options[:len(MAVEN_JVM_OPTIONS)] == list(MAVEN_JVM_OPTIONS)
    assert options[len(MAVEN_JVM_OPTIONS):] == ["-Dmaven.repo.local=/tmp/m2", "-XX:TieredStopAtLevel=4"]
    # And without MAVEN_OPTS, only the client compiler's options
    monkeypatch.delenv("MAVEN_OPTS")
    assert maven_environment()["MAVEN_OPTS"].split() == list(MAVEN_JVM_OPTIONS)
