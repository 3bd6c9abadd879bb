"""Connections beyond max_connections and beyond the file descriptor limit (`ulimit -n 256` for the proxy) are
refused cleanly: closed at once, counted, logged once; established connections carry on; an idle proxy stays
idle (issue #29 item 4)."""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

from harness.proxy_process import ProxyProcess
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import ApiKey

OPEN_FILES = 256
MAX_CONNECTIONS = 20


def _api_versions(sock: socket.socket, correlation_id: int) -> bool:
    """An ApiVersions v0 round trip; False when the proxy closed the connection instead."""
    client_id = b"limits"
    payload = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    try:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        head = sock.recv(8, socket.MSG_WAITALL)
    except (ConnectionResetError, BrokenPipeError):
        return False
    if len(head) < 8:
        return False
    size, answered = struct.unpack(">ii", head)
    rest = size - 4
    while rest > 0:
        chunk = sock.recv(rest)
        assert chunk, "closed mid-answer"
        rest -= len(chunk)
    assert answered == correlation_id
    return True


def _connect(port: int) -> socket.socket | None:
    """A connection that got an answer, or None when the proxy closed it at once."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if _api_versions(sock, 1):
        return sock
    sock.close()
    return None


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_connections_beyond_max_connections_and_the_fd_limit_are_refused_and_the_established_ones_carry_on(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    proxy = ProxyProcess(kafka_cluster, extra_toml="", groups=("default", "many"), debug_checks=False,
                         audit_enabled=False, listener_toml={"default": f"max_connections = {MAX_CONNECTIONS}\n"},
                         open_files_limit=OPEN_FILES).start()
    established: list[socket.socket] = []
    try:
        default_port = int(proxy.bootstrap("default").rsplit(":", 1)[1])
        many_port = int(proxy.bootstrap("many").rsplit(":", 1)[1])
        # Given a listener with max_connections = 20, full
        for _ in range(MAX_CONNECTIONS):
            sock = _connect(default_port)
            assert sock is not None
            established.append(sock)
        # When 5 more connect, each is closed at once and counted
        assert [_connect(default_port) for _ in range(5)] == [None] * 5
        assert proxy.metric("insync_proxy_bad_input_total", listener="default", cause="refused_connection") == 5
        # Given another listener without a limit of its own, when clients connect until the process's file
        # descriptors (256) run out
        accepted, refused = [], 0
        for _ in range(OPEN_FILES):
            sock = _connect(many_port)
            if sock is None:
                refused += 1
                if refused >= 10:
                    break
            else:
                accepted.append(sock)
        established += accepted
        # Then the proxy took connections up to near its limit (2 descriptors each) and refused the rest
        assert len(accepted) >= 50 and refused == 10, (len(accepted), refused)
        assert proxy.metric("insync_proxy_bad_input_total", listener="many", cause="refused_connection") == 10
        # And every established connection is still answered
        for i, sock in enumerate(established):
            assert _api_versions(sock, 100 + i), f"established connection {i} was dropped"
        # And an idle proxy at its limit stays idle (no accept loop spinning)
        cpu_before = _cpu_seconds(proxy.pid)
        started = time.monotonic()
        time.sleep(3.0)  # measuring idle CPU over a window, not waiting for a condition
        cpu_per_second = (_cpu_seconds(proxy.pid) - cpu_before) / (time.monotonic() - started)
        assert cpu_per_second < 0.05, cpu_per_second
        # And once connections close, new ones are accepted again
        for sock in accepted[:10]:
            sock.close()
            established.remove(sock)
        again = wait_until(lambda: _connect(many_port), 30, what="a new connection accepted again")
        established.append(again)
        # And the log said it once (the rest are counted, summarised a minute later), never EMFILE
        log = proxy.log_file.read_text()
        assert 1 <= log.count("refused a connection") <= 2, log
        assert "Too many open files" not in log and "out of system resource" not in log, log
        assert proxy.alive()
    finally:
        for sock in established:
            sock.close()
        proxy.stop()
