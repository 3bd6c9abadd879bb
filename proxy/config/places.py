"""Configuration, the places it names on this machine: the addresses the ports bind and the directories the
proxy writes, checked the way `run` will use them, so `check-config` refuses what `run` would refuse at start,
with the same line, and `run` refuses it before binding anything.

Checked without side effects: a host is resolved and bound on port 0 (any free port, released at once), which
shows whether it is an address of this machine; a port below 1024 is bound for a moment to see the permission
(a port in use then is not an error here); a directory is looked at, never created. Not checked: whether a
port is in use now (a runtime matter: another process may take or free it between the check and the start;
`run` exits 1 naming it), and the brokers (`check-config --connect`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path

from insync_proxy.proxy.config.settings import ConfigError, ProxyConfig

#: Ports below this need root or CAP_NET_BIND_SERVICE (Linux's default net.ipv4.ip_unprivileged_port_start).
PRIVILEGED_PORTS_BELOW = 1024


def check_places(config: ProxyConfig) -> None:
    """ConfigError, naming the setting, when `run` could not bind its hosts or write its directories."""
    ports = [(f"listener[{i + 1}].{name}", port) for i, listener in enumerate(config.listeners)
             for name, port in (("bootstrap_port", listener.bootstrap_port),
                                ("broker_port_base", listener.broker_port_base))]
    _check_host("bind_host", config.bind_host, ports)
    _check_host("admin_host", config.admin_host, [("admin_port", config.admin_port)])
    if config.audit.enabled:
        _check_directory("audit.directory", config.audit.directory)
    if config.debug_capture_dir:
        _check_directory("debug_capture_dir", config.debug_capture_dir)


def _addresses(host: str) -> list[tuple[int, str]]:
    """(family, address) of each socket asyncio's start_server would bind for `host` ("" is every address)."""
    infos = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return [(family, str(address[0])) for family, _, _, _, address in infos]


def _check_host(setting: str, host: str, ports: list[tuple[str, int]]) -> None:
    try:
        addresses = _addresses(host)
    except socket.gaierror as exc:
        raise ConfigError(f"{setting} = {host!r}: the name does not resolve ({exc.strerror})") from None
    # A name with an address of a family this machine has disabled (localhost's ::1 without IPv6) still
    # starts on Python 3.12+ (start_server skips that address): refused only when no address is local.
    unavailable = [e for family, address in addresses if (e := _bind_error(family, address, 0)) is not None
                   and e.errno == errno.EADDRNOTAVAIL]
    if unavailable and len(unavailable) == len(addresses):
        raise ConfigError(f"{setting} = {host!r}: not an address of this machine ({unavailable[0].strerror})")
    for family, address in addresses:
        for port_setting, port in [(s, p) for s, p in ports if 0 < p < PRIVILEGED_PORTS_BELOW]:
            error = _bind_error(family, address, port)
            if error is not None and error.errno == errno.EACCES:
                raise ConfigError(f"{port_setting} = {port}: permission denied (a port below "
                                  f"{PRIVILEGED_PORTS_BELOW} needs root or CAP_NET_BIND_SERVICE)")


def _bind_error(family: int, address: str, port: int) -> OSError | None:
    """The error binding (address, port) gives, as start_server binds it; None when it binds, when the
    port is in use (a runtime matter) or when this machine has no such address family."""
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return None  # start_server skips a family the machine lacks too
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            return None if exc.errno == errno.EADDRINUSE else exc
    return None


def _check_directory(setting: str, value: str) -> None:
    """The directory `run` creates (with its parents) and writes files in: not a file, and writable here."""
    path = Path(value)
    existing = next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), Path("."))
    if not existing.is_dir():
        what = "it is a file" if existing == path else f"{str(existing)!r} is a file"
        raise ConfigError(f"{setting} = {value!r}: not a directory ({what}): name a directory, or remove the file")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "it" if existing == path else f"{str(existing)!r}, where it would be created,"
        raise ConfigError(f"{setting} = {value!r}: {what} is not writable by this user (uid {os.getuid()})")
