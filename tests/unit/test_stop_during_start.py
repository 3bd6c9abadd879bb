"""A stop signal that arrives while the proxy is still starting ends the start and exits 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.proxy_process import free_port_base


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_the_start_drains_and_exits_0(sig: signal.Signals, tmp_path: Path) -> None:
    # Given a "broker" that accepts connections and never answers: the start waits on it a whole control timeout
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        proxy = subprocess.Popen(
            [sys.executable, "-m", "insync_proxy", "run", "--bootstrap-servers", f"127.0.0.1:{silent.getsockname()[1]}",
             "--bootstrap-port", "0", "--admin-port", "0", "--broker-port-base", str(free_port_base()),
             "--control-request-timeout-seconds", "120", "--audit-directory", str(tmp_path / "audit")],
            stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )
        try:
            assert proxy.stderr is not None
            lines = []
            for line in proxy.stderr:
                lines.append(line)
                if "listening:" in line:
                    break
            # When the stop signal comes while the start still waits for the broker
            sig_sent = time.monotonic()
            proxy.send_signal(sig)
            rest = proxy.communicate(timeout=60)[1]
        finally:
            if proxy.poll() is None:
                proxy.kill()
                proxy.wait()
    # Then the process drains and exits 0, well before the control timeout, saying so
    log = "".join(lines) + rest
    assert proxy.returncode == 0, log
    assert time.monotonic() - sig_sent < 60
    assert "stopping:" in rest and "stopped" in rest, log
    assert "ready:" not in log
