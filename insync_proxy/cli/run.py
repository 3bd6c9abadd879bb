"""`insync-proxy run` and `insync-proxy check-config`: the proxy in front of real brokers, and its configuration
checked (with --connect, the way into the cluster, step by step)."""

from __future__ import annotations

import argparse
import errno
import re
import socket
import ssl
import sys
import typing

from insync_proxy.proxy import __version__
from insync_proxy.proxy.config.reference import effective_toml
from insync_proxy.proxy.config.settings import DOCS, ProxyConfig
from insync_proxy.proxy.observability.compiled import compiled_modules, describe

from .configuration import (
    add_run_flags,
    config_from_args,
    configuration,
    install_loop,
    log,
    setup_logging,
)

RUN_EPILOG = f"""\
Settings come from (lowest to highest priority): defaults, the TOML file (--config), INSYNC_PROXY_*
environment variables (e.g. INSYNC_PROXY_BOOTSTRAP_SERVERS, INSYNC_PROXY_AUDIT_DIRECTORY,
INSYNC_PROXY_CONTROL_SASL_PASSWORD), then these flags. Every setting, its variable and its flag:
{DOCS}. Arrays of tables ([[listener]], [[acks_policy]]) are TOML only; the listener flags set the
first listener.

Ports: each listener has a bootstrap port and one port per broker: the node ids of node_id_ranges, in the
order written, take consecutive ports from broker_port_base (by default node id n gets broker_port_base + n).
Clients are only ever told these addresses (advertised_host), never a broker's.

Exit codes: 0 stopped by SIGTERM/SIGINT; 2 the configuration is at fault (one line naming the setting);
1 anything else, e.g. a port another process holds.
"""

CHECK_EPILOG = RUN_EPILOG.split("\n\nExit codes:")[0] + """

Exit codes: 0 valid (warnings, if any, on stderr); 2 invalid (one line naming the setting); with
--connect, 1 when a step towards the brokers fails.
"""

def _reload_source(args: argparse.Namespace) -> typing.Callable[[], ProxyConfig]:
    """What a reload (SIGHUP, POST /reload) reads: the sources and the schema `run` read, its warnings logged.
    The TLS files are the reload's own to check (proxy/reload.py): new files that do not load keep the working
    material, and the other settings still apply."""

    def load() -> ProxyConfig:
        warnings: list[str] = []
        config = config_from_args(args, warnings=warnings)
        for warning in warnings:
            log.warning("configuration: %s", warning)
        return config

    return load

def cmd_run(args: argparse.Namespace) -> int:
    loaded = configuration(args, logs=True)
    if loaded is None:
        return 2
    config, warnings = loaded
    setup_logging(config.log_level, config.log_format, config.log_summary_interval_seconds)
    for warning in warnings:
        log.warning("configuration: %s", warning)
    loop_name = install_loop(config.use_uvloop)
    log.info("insync-proxy %s starting on the %s event loop; upstream %s", __version__, loop_name,
             ",".join(config.bootstrap_servers))
    build = compiled_modules()
    (log.warning if any(m.stale for m in build) else log.info)("data path: %s", describe(build))
    import asyncio

    from insync_proxy.proxy.config.tls import TlsReloadError
    from insync_proxy.proxy.lifecycle import serve

    try:
        asyncio.run(serve(config, load=_reload_source(args), config_file=getattr(args, "config", None)))
    except TlsReloadError as exc:
        log.error("cannot start: %s", exc)
        return 2
    except OSError as exc:
        code, why = start_failure(config, exc)
        log.error("cannot start: %s", why)
        return code
    return 0

_BIND_ADDRESS = re.compile(r"address \('([^']*)', (\d+)")

def start_failure(config: ProxyConfig, exc: OSError) -> tuple[int, str]:
    """Exit code and one line for an OSError that stopped the start: 2 naming the setting when the
    configuration is at fault, 1 when the machine is (a port another process holds)."""
    if isinstance(exc, ssl.SSLError):  # files.check_files loaded them: the files changed since
        return 2, f"upstream_tls/downstream_tls: cannot load the TLS files ({exc.reason or exc})"
    if isinstance(exc, socket.gaierror):
        for setting in ("bind_host", "admin_host"):
            host = getattr(config, setting)
            try:
                socket.getaddrinfo(host, None)
            except socket.gaierror:
                return 2, f"{setting} = {host!r}: the name does not resolve ({exc.strerror})"
        return 2, f"bind_host or admin_host: the name does not resolve ({exc.strerror})"
    bound = _BIND_ADDRESS.search(str(exc))
    if bound is not None:
        host, port = bound.group(1), int(bound.group(2))
        setting = _port_setting(config, port)
        if exc.errno == errno.EADDRINUSE:
            return 1, f"{setting} = {port}: the port is in use (is another process using the port?)"
        if exc.errno == errno.EADDRNOTAVAIL:
            which = "admin_host" if setting == "admin_port" else "bind_host"
            if port == 0:  # admin_port and bootstrap_port may both be 0 (any free port): the address says which
                which = next((s for s in ("bind_host", "admin_host") if _resolves_to(getattr(config, s), host)), which)
            return 2, f"{which} = {host!r}: not an address of this machine ({exc.strerror})"
        if exc.errno == errno.EACCES:
            return 2, (f"{setting} = {port}: permission denied (a port below 1024 needs root or "
                       "CAP_NET_BIND_SERVICE)")
    if exc.filename is not None:
        path = str(exc.filename)
        for setting in ("audit.directory", "debug_capture_dir"):
            value = config.audit.directory if setting == "audit.directory" else config.debug_capture_dir
            if value and path.startswith(str(value)):
                return 2, f"{setting} = {value!r}: {exc.strerror} ({path})"
        return 1, f"{path}: {exc.strerror}"
    return 1, str(exc)

def _resolves_to(name: str, address: str) -> bool:
    try:
        return any(info[4][0] == address for info in socket.getaddrinfo(name or None, 0, type=socket.SOCK_STREAM))
    except socket.gaierror:
        return False

def _port_setting(config: ProxyConfig, port: int) -> str:
    """The setting that names `port`: admin_port, a listener's bootstrap_port, or a broker port."""
    if port == config.admin_port:
        return "admin_port"
    for i, listener in enumerate(config.listeners):
        if port == listener.bootstrap_port:
            return f"listener[{i + 1}].bootstrap_port"
    below = [(listener.broker_port_base, i) for i, listener in enumerate(config.listeners)
             if listener.broker_port_base <= port]
    if below:  # a broker port: the listener whose broker ports start closest below it
        return f"listener[{max(below)[1] + 1}].broker_port_base (port {port})"
    return "port"

def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate and print the effective configuration (secrets masked); --connect: one line per step into the cluster
    instead."""
    loaded = configuration(args)
    if loaded is None:
        return 2
    config, warnings = loaded
    for warning in warnings:
        print(f"insync-proxy: configuration warning: {warning}", file=sys.stderr)
    if not args.connect:
        sys.stdout.write(effective_toml(config))
        print(f"# configuration valid ({DOCS} describes every setting)", flush=True)
        return 0
    # --connect: one line per step, as the README promises (without --connect the settings are printed)
    print(f"ok   config: configuration valid (check-config without --connect prints every setting; {DOCS})",
          flush=True)
    from insync_proxy.cli.preflight import check_connection  # loaded only here: `run` never needs it

    setup_logging(config.log_level, config.log_format, config.log_summary_interval_seconds)
    return 0 if check_connection(config, lambda line: print(line, flush=True)) else 1


def add_commands(sub: typing.Any) -> None:
    """`run` and `check-config` on the command line's subparsers."""
    run = sub.add_parser("run", help="run the proxy in front of real brokers", epilog=RUN_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_flags(run)
    run.set_defaults(handler=cmd_run)

    check = sub.add_parser(
        "check-config", help="check a configuration and print it (secrets masked) without starting; exit 0 valid, "
                             "2 invalid, 1 when --connect fails",
        description="Validates the configuration (the same sources and flags as `run`) and prints the effective "
                    "settings as TOML, secrets masked. --connect also bootstraps from the brokers with the "
                    "configured TLS and SASL, reads Metadata and one DescribeConfigs, one line per step: exit 0 when "
                    "every step works, 1 otherwise.", epilog=CHECK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--connect", action="store_true",
                       help="connect to the brokers as `run` would (TLS, SASL, Metadata, DescribeConfigs, ...), one "
                            "line per step, instead of printing the settings")
    add_run_flags(check)
    check.set_defaults(handler=cmd_check_config)
