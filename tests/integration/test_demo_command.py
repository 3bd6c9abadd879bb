"""The README's first command, `insync-proxy demo`: a local 3-broker Kafka and the proxy in front of it."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.proxy_process import free_port_base
from harness.waiting import WaitTimeout, wait_until
from insync_proxy.devcluster.cluster import free_port
from insync_proxy.devcluster.distribution import kafka_libs

#: Generous: three brokers start from cold on two shared cores (a minute or two under load).
START_TIMEOUT = 420.0
STOP_TIMEOUT = 120.0


def _console_script() -> str:
    """The `insync-proxy` entry point `pip install` put beside this interpreter (the README runs it by name)."""
    found = shutil.which("insync-proxy", path=str(Path(sys.executable).parent)) or shutil.which("insync-proxy")
    if found is None:
        pytest.fail("the insync-proxy console script is not installed (python3 -m pip install -e .)")
    return found


@pytest.mark.own_cluster
@pytest.mark.slow
def test_demo_starts_kafka_and_the_proxy_serves_producers_then_stops_both_on_ctrl_c(
    exclusive_cluster_slot: None, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    bootstrap_port, admin_port, base = free_port(), free_port(), free_port_base()
    command = [_console_script(), "demo", "--bootstrap-port", str(bootstrap_port), "--broker-port-base", str(base),
               "--admin-port", str(admin_port)]
    # Run from the checkout's root, as a newcomer does, its cache in tmp_path: nothing may be written in the tree
    untracked_before = _untracked(ROOT)
    cache = tmp_path / "cache"
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                                            "INSYNC_PROXY_CACHE": str(cache),
                                                            "INSYNC_PROXY_KAFKA_LIBS": str(kafka_libs())})
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()

    def wait_for_line(pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"demo exited ({process.wait()}) before {pattern!r}:\n{''.join(seen)}")
            seen.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no {pattern!r} within {timeout:.0f}s:\n{''.join(seen)}")

    try:
        # Given the README's first command
        wait_for_line(r"and insync-proxy are up", START_TIMEOUT)
        printed = re.search(r"bootstrap\.servers=(\S+)", wait_for_line(r"Point producers at", 10))
        assert printed is not None and printed.group(1) == f"127.0.0.1:{bootstrap_port}"
        bootstrap = printed.group(1)
        # When a producer (acks=all) writes to the demo topic through the printed address
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        delivered: list[object] = []
        for i in range(20):
            producer.produce("demo", f"record-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(120) == 0
        # Then every record is acknowledged, and the proxy's metrics counted them
        assert delivered == [None] * 20
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
        counted = sum(float(value) for value in re.findall(
            r'^insync_proxy_produce_records_total\{[^}]*topic="demo"[^}]*\} (\S+)$', metrics, re.M))
        assert counted >= 20, metrics[:2000]
        del producer  # its connections close before the proxy goes
        # When Ctrl-C is pressed, then the proxy and Kafka stop and the command exits 0
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(STOP_TIMEOUT) == 0, "".join(seen)
        wait_for_line(r"Stopping Kafka", 10)
        # And the audit files went to the cache, nothing into the checkout
        assert any((cache / "demo-audit").glob("*.jsonl")), "".join(seen)
        assert _untracked(ROOT) == untracked_before
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


ROOT = Path(__file__).resolve().parents[2]


def _untracked(root: Path) -> set[str]:
    """Files under `root` git neither tracks nor ignores (what `git status` shows a user as new)."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--exclude-standard"],
                            capture_output=True, text=True, timeout=60)
    return set(listed.stdout.splitlines())


@pytest.mark.own_cluster
@pytest.mark.slow
def test_dev_cluster_up_with_mtls_prints_a_proxy_toml_that_reaches_the_brokers(
    exclusive_cluster_slot: None, tmp_path: Path
) -> None:
    from insync_proxy.cli import DEV_PORT_BASE
    from insync_proxy.devcluster.detached import dev_ports
    from insync_proxy.devcluster.distribution import kafka_libs

    controller_port, broker_ports = dev_ports(DEV_PORT_BASE)
    _skip_unless_ports_free((*broker_ports, controller_port), "dev-cluster up needs it")
    # This source tree's CLI, its dev-cluster state in tmp_path (the jars where they are already)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INSYNC_PROXY_CACHE": str(tmp_path / "cache"),
           "INSYNC_PROXY_KAFKA_LIBS": str(kafka_libs())}
    cli = [sys.executable, "-m", "insync_proxy"]
    try:
        # Given `dev-cluster up --security mtls`
        up = subprocess.run([*cli, "dev-cluster", "up", "--security", "mtls"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=START_TIMEOUT)
        assert up.returncode == 0, up.stdout + up.stderr
        # Then it prints the proxy's TOML (and where it is) and the clients' properties
        toml_file = Path(re.search(r"^proxy configuration: (\S+)$", up.stdout, re.M).group(1))  # type: ignore[union-attr]
        assert toml_file.read_text() in up.stdout and "[upstream_tls]" in up.stdout
        assert "security.protocol=PLAINTEXT" in up.stdout and "bootstrap.servers=127.0.0.1:9092" in up.stdout
        # When that TOML is checked against the brokers: Then TLS (the proxy's certificate too), Metadata and
        # DescribeConfigs work, and nothing is warned about
        check = subprocess.run([*cli, "check-config", "--config", str(toml_file), "--connect"], env=env,
                               cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "the proxy's certificate presented" in check.stdout, check.stdout
        assert "warning" not in check.stderr, check.stderr
        status = subprocess.run([*cli, "dev-cluster", "status"], env=env, cwd=tmp_path, capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0 and "MTLS listener" in status.stdout, status.stdout
    finally:
        down = subprocess.run([*cli, "dev-cluster", "down"], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=STOP_TIMEOUT)
        assert down.returncode == 0, down.stdout + down.stderr
    assert not (tmp_path / "cache" / "dev-cluster" / "security").exists()


#: Every port the README's quick start takes: the dev cluster's, and the proxy's defaults (bootstrap, the
#: brokers' 9100 + node id, admin).
QUICK_START_PORTS = (19090, 19091, 19092, 19093, 9092, 9101, 9102, 9103, 9190)


def _skip_unless_ports_free(ports: tuple[int, ...], why: str) -> None:
    """Skip when one of `ports` still has a listener after 60 s: a dev cluster or proxy of the user's own. The
    wait covers this module's previous test, whose cluster on the same ports may still be closing them (a bare
    run skipped the quick start once for that)."""
    def listening() -> list[int]:
        busy = []
        for port in ports:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    busy.append(port)
        return busy

    try:
        wait_until(lambda: not listening(), 60, interval=0.5, what="the ports to be free")
    except WaitTimeout:
        busy = listening()
        if busy:
            pytest.skip(f"port {busy[0]} is in use (a dev cluster or proxy of your own?): {why}")


def readme_quick_start() -> str:
    """The README's quick-start block, exactly as a user copies it."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


@pytest.mark.own_cluster
@pytest.mark.slow
def test_the_readmes_quick_start_pasted_into_a_shell_consumes_a_record_through_the_proxy(
    exclusive_cluster_slot: None, tmp_path: Path
) -> None:
    _skip_unless_ports_free(QUICK_START_PORTS, "the quick start needs it")
    block = readme_quick_start()
    assert "dev-cluster up --security sasl_ssl" in block and "console-consumer" in block
    script = tmp_path / "quick-start.sh"
    # Given the block as pasted, stopping at the first failing line (a shell a user watches would show it)
    script.write_text("set -e\n" + block)
    # The console script that `pip install -e .` put beside this interpreter, as the README runs it by name
    env = {**os.environ, "PATH": f"{Path(_console_script()).parent}{os.pathsep}{os.environ['PATH']}"}
    # When it runs in a fresh directory (a session of its own: the proxy it puts in the background is in its
    # process group, which the end kills whatever happened)
    shell = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = shell.communicate(timeout=START_TIMEOUT + 300)
        # Then every line succeeded, the proxy was ready, and the record came back through it
        assert shell.returncode == 0, f"exit {shell.returncode}\n{stdout}\n{stderr}"
        assert "ok   sasl: SCRAM-SHA-512 login as 'insync-proxy'" in stdout, stdout
        assert "hello through the proxy" in stdout.splitlines(), stdout
        assert "Processed a total of 1 messages" in stderr + stdout
        # And the proxy's log says it was ready and stopped cleanly (`wait` returned its exit code 0)
        log = (tmp_path / "proxy.log").read_text()
        assert "ready: 3 broker(s) known" in log and "stopping:" in log, log[-3000:]
        # And the cluster is gone with its directory
        assert not (tmp_path / "kafka-dev").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(30)
        if (tmp_path / "kafka-dev" / "state.json").exists():
            subprocess.run([sys.executable, "-m", "insync_proxy", "dev-cluster", "down", "--dir",
                            str(tmp_path / "kafka-dev")], env=env, capture_output=True, timeout=STOP_TIMEOUT)


def _identity_processes(directory: Path) -> list[int]:
    """krb5kdc or identity-provider processes serving `directory`'s dev cluster (their environment or command
    line names it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if (b"krb5kdc" in cmdline or b"identity_provider" in cmdline) and str(directory).encode() in cmdline + environ:
            found.append(int(entry.name))
    return found


@pytest.mark.own_cluster
@pytest.mark.slow
@pytest.mark.parametrize("security", ["oauthbearer", "gssapi"])
def test_dev_cluster_up_with_oauthbearer_or_gssapi_carries_a_record_through_the_proxy_it_configures(
    exclusive_cluster_slot: None, tmp_path: Path, security: str
) -> None:
    from insync_proxy.devcluster.distribution import kafka_libs

    if security == "gssapi":
        if not Path("/usr/sbin/krb5kdc").exists() and shutil.which("krb5kdc") is None:
            pytest.skip("MIT Kerberos KDC not installed (apt-get install krb5-kdc krb5-admin-server)")
        if os.geteuid() != 0:
            pytest.skip("dev-cluster up --security gssapi maps kafka-N.insync.test in /etc/hosts: root only")
    _skip_unless_ports_free((9092, 9101, 9102, 9103, 9190), "the proxy's default ports, which client.properties names")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INSYNC_PROXY_KAFKA_LIBS": str(kafka_libs())}
    cli = [_console_script()]
    directory = tmp_path / "kafka-dev"
    base = str(free_port_base(5))
    proxy = None
    try:
        # Given `dev-cluster up --security oauthbearer|gssapi`: an identity provider or a KDC beside the brokers
        up = subprocess.run([*cli, "dev-cluster", "up", "--security", security, "--dir", str(directory),
                             "--port-base", base], env=env, capture_output=True, text=True, timeout=START_TIMEOUT)
        assert up.returncode == 0, up.stdout + up.stderr
        assert ("identity provider (OAuth 2.0)" if security == "oauthbearer" else "Kerberos KDC: realm") in up.stdout
        toml_file, properties = directory / "proxy.toml", directory / "client.properties"
        # When its TOML is checked: every step passes, the login of the proxy's own included
        check = subprocess.run([*cli, "check-config", "--config", str(toml_file), "--connect"], env=env,
                               capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        mechanism = "OAUTHBEARER" if security == "oauthbearer" else "GSSAPI"
        assert f"ok   sasl: {mechanism} login as" in check.stdout, check.stdout
        # And the proxy runs on it, and a record goes through it with Kafka's own tools and client.properties
        proxy = subprocess.Popen([*cli, "run", "--config", str(toml_file)], env=env, stdout=subprocess.DEVNULL,
                                 stderr=open(tmp_path / "proxy.log", "wb"), start_new_session=True)  # noqa: SIM115
        wait_until(lambda: _ready("http://127.0.0.1:9190/readyz"), 120, interval=0.5, what="the proxy ready")
        text = properties.read_text()
        bootstrap = re.search(r"^bootstrap.servers=(\S+)$", text, re.M).group(1)  # type: ignore[union-attr]
        opts = re.search(r"KAFKA_OPTS=(\S+)", text).group(1)  # type: ignore[union-attr]
        tool_env = {**env, "KAFKA_OPTS": opts}
        tool = [*cli, "kafka-cli"]
        common = ["--bootstrap-server", bootstrap, "--command-config", str(properties)]
        created = subprocess.run([*tool, "topics", *common, "--create", "--topic", "through", "--partitions", "3",
                                  "--replication-factor", "3"], env=tool_env, capture_output=True, text=True,
                                 timeout=180)
        assert created.returncode == 0, created.stdout + created.stderr
        produced = subprocess.run([*tool, "console-producer", *common, "--topic", "through"], input=f"via {security}\n",
                                  env=tool_env, capture_output=True, text=True, timeout=180)
        assert produced.returncode == 0, produced.stdout + produced.stderr
        consumed = subprocess.run([*tool, "console-consumer", *common, "--topic", "through", "--from-beginning",
                                   "--max-messages", "1"], env=tool_env, capture_output=True, text=True, timeout=180)
        # Then the record is read back through the proxy
        assert consumed.returncode == 0 and f"via {security}" in consumed.stdout, consumed.stdout + consumed.stderr
    finally:
        if proxy is not None:
            os.killpg(proxy.pid, signal.SIGTERM)
            proxy.wait(60)
        down = subprocess.run([*cli, "dev-cluster", "down", "--dir", str(directory)], env=env, capture_output=True,
                              text=True, timeout=STOP_TIMEOUT)
        assert down.returncode == 0, down.stdout + down.stderr
    # And `down` stopped the identity provider or the KDC with the brokers
    wait_until(lambda: not _identity_processes(directory), 30, what="the KDC or identity provider to stop")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _parent(pid: int) -> int:
    """The parent of a process (/proc/<pid>/stat), -1 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _interrupt_while_kafka_starts(argv: list[str], cwd: Path, env: dict[str, str]
                                  ) -> tuple[int, str, str, set[str]] | None:
    """Runs `argv`, and once a JVM of the new cluster runs, sends Ctrl-C: (exit code, stdout, stderr, the new cluster
    ids), or None when Kafka was up before the signal came (the command said so, or had ended: on a busy machine the
    test can be starved for the whole start, and a Ctrl-C then lands after the work is done). The JVMs seen are
    paused until Ctrl-C is sent, so the cluster cannot become ready meanwhile."""
    from insync_proxy.devcluster.cluster import find_devcluster_jvms

    before = {cluster_id for _, cluster_id in find_devcluster_jvms()}
    # Ctrl-C as a terminal delivers it: SIGINT at its default (a background job of a script inherits it ignored)
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    paused: list[int] = []

    def started() -> list[tuple[int, str]]:
        # The command's own JVMs: its children. A new cluster of another test (another worker's) is not one of
        # them: taken for the command's, it was paused and the Ctrl-C came while the command was still importing.
        return [(pid, cid) for pid, cid in find_devcluster_jvms() if cid not in before and _parent(pid) == process.pid]

    try:
        wait_until(lambda: bool(started()) or process.poll() is not None, 120, interval=0.05,
                   what="a JVM of the new cluster")
        for pid, _ in started():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                paused.append(pid)
        ours = {cid for _, cid in started()}
        if process.poll() is not None:
            out, err = process.communicate()
            assert process.returncode == 0 and ours, (process.returncode, out, err)
            return None
        # Ctrl-C reaches the command only: the JVMs must be stopped by it
        process.send_signal(signal.SIGINT)
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        out, err = process.communicate(timeout=STOP_TIMEOUT)
        if process.returncode == 0 and ("stop it with:" in out or "insync-proxy are up" in out):
            return None  # Kafka was up before the signal came (a starved test): not a start that was interrupted
        return process.returncode, out, err, ours
    finally:
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if process.poll() is None:
            process.kill()
            process.wait(30)


@pytest.mark.own_cluster
@pytest.mark.slow
@pytest.mark.parametrize("command", ["demo", "dev-cluster up"])
def test_ctrl_c_while_kafka_starts_stops_everything_with_one_line_and_no_traceback(
    exclusive_cluster_slot: None, tmp_path: Path, command: str
) -> None:
    from insync_proxy.devcluster.cluster import find_devcluster_jvms
    from insync_proxy.devcluster.distribution import kafka_libs

    env = {**os.environ, "INSYNC_PROXY_CACHE": str(tmp_path / "cache"), "INSYNC_PROXY_KAFKA_LIBS": str(kafka_libs())}
    for attempt in range(3):
        argv = [_console_script(), *command.split()]
        if command == "demo":
            argv += ["--bootstrap-port", str(free_port()), "--broker-port-base", str(free_port_base()),
                     "--admin-port", str(free_port())]
        else:
            argv += ["--dir", str(tmp_path / f"kafka-dev-{attempt}"), "--port-base", str(free_port_base(5))]
        interrupted = _interrupt_while_kafka_starts(argv, tmp_path, env)
        if interrupted is not None:
            returncode, out, err, ours = interrupted
            break
        # the cluster was ready before a JVM of it was seen: no start to interrupt; stopped, and tried again
        subprocess.run([_console_script(), "dev-cluster", "down", "--dir", str(tmp_path / f"kafka-dev-{attempt}")],
                       env=env, capture_output=True, timeout=STOP_TIMEOUT)
    else:
        pytest.fail("three times the cluster was ready before a JVM of it was seen: no start to interrupt")
    # Then it exits 130 with one clean line, no traceback, and nothing of it keeps running
    assert returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert f"insync-proxy {command.split()[0]}: interrupted; what it had started is stopped" in err, err
    wait_until(lambda: not ({cluster_id for _, cluster_id in find_devcluster_jvms()} & ours), 60,
               what="the new cluster's JVMs to be gone")


@pytest.mark.own_cluster
@pytest.mark.slow
def test_a_ctrl_c_the_start_swallowed_still_stops_what_dev_cluster_up_and_demo_started(
    exclusive_cluster_slot: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from insync_proxy.cli.dev import _demo_cluster
    from insync_proxy.cli.interrupts import Interrupts
    from insync_proxy.devcluster import detached
    from insync_proxy.devcluster.cluster import find_devcluster_jvms

    def ours() -> set[str]:  # this process's new clusters (another worker's are not its children)
        return {cid for pid, cid in find_devcluster_jvms() if cid not in before and _parent(pid) == os.getpid()}

    before = {cluster_id for _, cluster_id in find_devcluster_jvms()}
    # Given a Ctrl-C recorded while Kafka started, raised nowhere (an at-fork callback printed and dropped it)
    # When `dev-cluster up` finishes the start
    directory = tmp_path / "kafka-dev"
    with pytest.raises(KeyboardInterrupt):
        detached.up(directory, None, None, None, free_port_base(5), "127.0.0.1:9092", say=lambda _: None,
                    complain=lambda _: None, interrupted=lambda: True)
    # Then the cluster had started, and is stopped as for a Ctrl-C raised in the start: no JVM left, no state written
    assert "brokers ready at" in capsys.readouterr().err
    wait_until(lambda: not ours(), 60, what="dev-cluster up's JVMs to be gone")
    assert not (directory / detached.STATE_FILE).exists()
    # And `demo` stops at its checkpoint after the start, stopping its cluster on the way out
    interrupts = Interrupts()
    interrupts.requested = True
    with pytest.raises(KeyboardInterrupt):
        _demo_cluster(argparse.Namespace(kafka_version=None), None, lambda servers: {"bootstrap_servers": servers},
                      "", interrupts)
    out = capsys.readouterr()
    assert "brokers ready at" in out.err and "Stopping Kafka" in out.out, out
    assert "insync-proxy are up" not in out.out
    wait_until(lambda: not ours(), 60, what="demo's JVMs to be gone")


def _readiness_lines() -> str:
    """The quick start's line that waits for /readyz (with its continuation), as the README has it."""
    lines = readme_quick_start().splitlines()
    at = next(i for i, line in enumerate(lines) if "/readyz" in line)
    taken = [lines[at]]
    while taken[-1].rstrip().endswith("\\"):
        at += 1
        taken.append(lines[at])
    return "\n".join(taken) + "\n"


def _readyz_answer() -> str:
    """The body of the default admin port's /readyz, ready or not ("" while nothing answers)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:9190/readyz", timeout=5) as answer:
            return str(answer.read().decode(errors="replace"))
    except urllib.error.HTTPError as error:  # 503: not ready, and why
        return str(error.read().decode(errors="replace"))
    except OSError:
        return ""


@pytest.mark.own_cluster  # in this module's group: its other tests take port 9190 too, one at a time
@pytest.mark.slow
def test_the_quick_starts_readiness_line_stops_the_block_with_why_when_the_proxy_never_becomes_ready(
    tmp_path: Path
) -> None:
    _skip_unless_ports_free((9190,), "the quick start's readiness line asks the proxy's default admin port")
    # Given a proxy that cannot become ready (no broker where its bootstrap_servers point), its log in proxy.log as
    # the quick start has it
    log = tmp_path / "proxy.log"
    proxy = subprocess.Popen(
        [_console_script(), "run", "--bootstrap-servers", "127.0.0.1:1", "--bootstrap-port", str(free_port()),
         "--broker-port-base", str(free_port_base()), "--admin-port", "9190", "--audit-directory",
         str(tmp_path / "audit")], cwd=tmp_path, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        # When the README's readiness line runs, then a line after it, stopping at the first failure
        # (once the proxy answers /readyz with why it is not ready; the line's 60 retries, a second apart, cut to 3:
        # a proxy that never becomes ready fails the same way, and the run does not idle a minute)
        wait_until(lambda: "127.0.0.1:1" in _readyz_answer(), 120, what="/readyz to name the unreachable broker")
        line = _readiness_lines()
        assert "--retry 60 " in line, line
        script = tmp_path / "ready.sh"
        script.write_text("set -e\n" + line.replace("--retry 60 ", "--retry 3 ", 1) + "echo carried-on\n")
        ran = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    finally:
        os.killpg(proxy.pid, signal.SIGTERM)
        proxy.wait(60)
    # Then the block stops (non-zero, nothing after it runs), saying why the proxy is not ready and the log's end,
    # with none of curl's retry noise
    assert ran.returncode != 0, ran
    assert "carried-on" not in ran.stdout
    assert "not ready" in ran.stdout and "127.0.0.1:1" in ran.stdout, ran.stdout
    assert "INFO insync_proxy" in ran.stdout, ran.stdout  # the log's last lines
    assert "Failed to connect" not in ran.stderr, ran.stderr
