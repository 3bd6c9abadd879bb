"""`insync-proxy dev-cluster up|down|status`: a detached local Kafka whose state lives in a directory of its own.

Each cluster is one directory (`--dir`, $INSYNC_PROXY_DEV_CLUSTER_DIR, or ~/.cache/insync-proxy/dev-cluster):
its state file, the brokers' data and logs, and for a secured cluster its certificates, the proxy's TOML
(`proxy.toml`) and the clients' properties (`client.properties`). `down` and `status` act on that directory's
cluster only, and `down` kills only JVMs that carry that cluster's id: two people (or two test runs) with
two directories cannot stop each other's clusters. Two clusters at once also need two port ranges
(`--port-base`); a port already taken is refused before anything starts.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from insync_proxy.devcluster.cluster import (
    ClusterError,
    ClusterSettings,
    LocalKafkaCluster,
    find_devcluster_jvms,
    kill_pids,
)
from insync_proxy.devcluster.distribution import DistributionError, cache_dir

DEV_CLUSTER_DIR_ENV = "INSYNC_PROXY_DEV_CLUSTER_DIR"
#: The controller's port; the brokers take the next three (19091-19093 by default).
DEFAULT_PORT_BASE = 19090
BROKERS = 3
STATE_FILE = "state.json"
PROXY_TOML = "proxy.toml"
CLIENT_PROPERTIES = "client.properties"


def cluster_directory(given: str | None = None) -> Path:
    """The cluster's directory: `given`, else $INSYNC_PROXY_DEV_CLUSTER_DIR, else the cache's dev-cluster/."""
    chosen = given or os.environ.get(DEV_CLUSTER_DIR_ENV)
    return Path(chosen).expanduser().absolute() if chosen else cache_dir() / "dev-cluster"


def dev_ports(port_base: int) -> tuple[int, list[int]]:
    """(controller port, broker ports) of a cluster at `port_base`."""
    return port_base, [port_base + 1 + i for i in range(BROKERS)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_state(directory: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    return state


def _own_jvms(state: dict[str, Any]) -> list[int]:
    """The running JVMs of this cluster: those that carry its cluster id (a recorded pid alone could have been
    reused by another process, or belong to another directory's cluster)."""
    return [pid for pid, cluster_id in find_devcluster_jvms() if cluster_id == state.get("cluster_id")]


def status(directory: Path, say: Callable[[str], None] = print) -> int:
    """One line per node, the bootstrap servers; exit 0 when every node runs, 1 otherwise."""
    state = _read_state(directory)
    if state is None:
        say(f"no dev cluster in {directory} (start one with: insync-proxy dev-cluster up)")
        return 1
    running = set(_own_jvms(state))
    alive = [n for n in state["nodes"] if n["pid"] in running]
    say(f"Kafka {state['version']} dev cluster in {directory}: {len(alive)}/{len(state['nodes'])} processes running")
    for n in state["nodes"]:
        shown = "running" if n in alive else "stopped"
        say(f"  {n['role']:<10} node {n['node_id']}: 127.0.0.1:{n['port']} pid {n['pid']} {shown}  log {n['log']}")
    say(f"bootstrap.servers={state['bootstrap_servers']}")
    if state.get("security"):
        say(f"{state['security'].upper()} listener: {state['secured_bootstrap_servers']} "
            f"(proxy TOML and client properties in {directory})")
    return 0 if len(alive) == len(state["nodes"]) else 1


def down(directory: Path, say: Callable[[str], None] = print) -> int:
    """Stop this directory's cluster and remove what `up` made there."""
    state = _read_state(directory)
    if state is None:
        say(f"no dev cluster in {directory}")
        return 0
    kill_pids(_own_jvms(state))
    _stop_identity_provider(state)
    _stop_kdc(state)
    for made in ("data", "security"):
        shutil.rmtree(directory / made, ignore_errors=True)
    shutil.rmtree(state["data_dir"], ignore_errors=True)
    for made in (PROXY_TOML, CLIENT_PROPERTIES, STATE_FILE):
        (directory / made).unlink(missing_ok=True)
    try:
        directory.rmdir()  # only when empty: a directory the user also keeps other files in stays
    except OSError:
        pass
    say(f"dev cluster in {directory} stopped and its data removed")
    return 0


def _start_identity_provider(security_dir: Path, port: int) -> int:
    """The dev cluster's identity provider as a process of its own (it outlives `up`, like the brokers)."""
    import subprocess
    import sys
    import time

    log = open(security_dir / "identity-provider.log", "wb")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(
        [sys.executable, "-m", "insync_proxy.devcluster.identity_provider", "--dir", str(security_dir)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ClusterError(f"the identity provider exited ({process.returncode}): "
                               f"{(security_dir / 'identity-provider.log').read_text()[-500:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process.pid
        except OSError:
            time.sleep(0.1)  # polling its port: the condition is the port answering
    process.kill()
    raise ClusterError(f"the identity provider did not listen on 127.0.0.1:{port} within 30 s")


def _stop_kdc(state: dict[str, Any]) -> None:
    """Stop the cluster's KDC: only a krb5kdc whose profile is this cluster's."""
    kdc = state.get("kdc")
    if not kdc:
        return
    try:
        cmdline = Path(f"/proc/{kdc['pid']}/cmdline").read_bytes()
        environ = Path(f"/proc/{kdc['pid']}/environ").read_bytes()
    except OSError:
        return
    if b"krb5kdc" in cmdline and kdc["directory"].encode() in environ:
        kill_pids([kdc["pid"]])


def _stop_identity_provider(state: dict[str, Any]) -> None:
    """Stop the cluster's identity provider: only the process that serves this cluster's directory."""
    idp = state.get("identity_provider")
    if not idp:
        return
    try:
        cmdline = Path(f"/proc/{idp['pid']}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if b"insync_proxy.devcluster.identity_provider" in cmdline and idp["directory"].encode() in cmdline:
        kill_pids([idp["pid"]])


def _taken(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def up(directory: Path, version: str | None, security: str | None, broker_heap: str | None, port_base: int,
       proxy_bootstrap: str, say: Callable[[str], None] = print, complain: Callable[[str], None] = print,
       interrupted: Callable[[], bool] = lambda: False) -> int:
    """Start a detached cluster in `directory`; for a secured one, write the proxy's TOML and the clients'
    properties there and print them. 0 started, 1 not (why is said with `complain`). `interrupted`: whether a
    Ctrl-C came while the cluster started (the command's record of it): then it is stopped and KeyboardInterrupt
    raised, as for one raised during the start."""
    state = _read_state(directory)
    if state is not None and _own_jvms(state):
        complain(f"a dev cluster already runs in {directory}: bootstrap.servers={state['bootstrap_servers']} "
                 f"(stop it with: insync-proxy dev-cluster down --dir {directory})")
        return 1
    controller_port, broker_ports = dev_ports(port_base)
    for port in (controller_port, *broker_ports):
        if _taken(port):
            complain(f"port {port} is in use (another dev cluster, or another program): start this one on other "
                     f"ports with --port-base (ports N to N+{BROKERS}), or stop the other "
                     f"(insync-proxy dev-cluster down --dir ITS_DIRECTORY)")
            return 1
    data_dir, security_dir = directory / "data", directory / "security"
    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.rmtree(security_dir, ignore_errors=True)
    base: dict[str, Any] = {"version": version, "broker_ports": broker_ports, "controller_port": controller_port,
                            "data_dir": data_dir, "die_with_parent": False,
                            **({"broker_heap": broker_heap} if broker_heap else {})}
    setup = None
    if security:
        from insync_proxy.devcluster.certificates import CertificateError
        from insync_proxy.devcluster.kerberos import KdcError
        from insync_proxy.devcluster.secured import secured_setup

        try:
            setup = secured_setup(security, security_dir)
        except (CertificateError, KdcError) as exc:
            complain(str(exc))
            return 1
    cluster = LocalKafkaCluster(setup.cluster_settings(**base) if setup else ClusterSettings(**base))
    idp_pid = None
    idp = setup.identity_provider if setup is not None else None
    if idp is not None:
        try:  # before the brokers: they read its JWKS as they start
            idp_pid = _start_identity_provider(security_dir, idp.port)
        except ClusterError as exc:
            complain(f"dev cluster did not start: {exc}")
            return 1
    kdc = setup.kdc if setup is not None else None
    try:
        cluster.start()
        if interrupted():  # a Ctrl-C the start swallowed (an at-fork callback drops what it raises): as if raised
            cluster.stop()
            raise KeyboardInterrupt
    except BaseException as exc:  # Ctrl-C too: the cluster stopped its JVMs, the identity services go with them
        if idp_pid is not None:
            kill_pids([idp_pid])
        if kdc is not None:
            kdc.stop()
        if not isinstance(exc, (ClusterError, DistributionError)):
            raise
        complain(f"dev cluster did not start: {exc}")
        return 1
    state = cluster.state()
    if kdc is not None and kdc.process is not None:  # the KDC outlives `up`, like the brokers
        state["kdc"] = {"pid": kdc.process.pid, "directory": str(kdc.directory), "realm": kdc.realm,
                        "krb5_conf": str(kdc.krb5_conf)}
        say(f"Kerberos KDC: realm {kdc.realm} at 127.0.0.1:{kdc.port} (pid {kdc.process.pid}), krb5.conf "
            f"{kdc.krb5_conf}")
    if idp is not None and idp_pid is not None:
        state["identity_provider"] = {"pid": idp_pid, "url": idp.issuer, "directory": str(security_dir)}
        say(f"identity provider (OAuth 2.0): {idp.issuer} (pid {idp_pid})")
    say(f"bootstrap.servers={cluster.bootstrap_servers}")
    if setup:
        servers = setup.upstream_servers(cluster)
        state.update({"security": setup.security, "secured_bootstrap_servers": servers,
                      "security_dir": str(security_dir)})
        toml_file, properties_file = directory / PROXY_TOML, directory / CLIENT_PROPERTIES
        toml_file.write_text(setup.proxy_toml(servers))
        properties_file.write_text(setup.client_properties(proxy_bootstrap))
        say(f"{setup.security.upper()} listener: {servers}")
        say(f"\nproxy configuration: {toml_file}\n")
        say(toml_file.read_text())
        say(f"client properties (clients through the proxy at {proxy_bootstrap}): {properties_file}\n")
        say(properties_file.read_text())
        say(f"check it:  insync-proxy check-config --config {toml_file} --connect")
        say(f"run it:    insync-proxy run --config {toml_file}")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2))
    where = "" if directory == cluster_directory(None) else f" --dir {directory}"
    say(f"stop it with: insync-proxy dev-cluster down{where}")
    return 0
