"""`insync-proxy`: run the proxy, try it on a local Kafka, manage that local Kafka, analyse audits."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import json
import logging
import os
import re
import signal
import socket
import ssl
import sys
import time
import tomllib
import typing
from pathlib import Path
from typing import Any

from insync_proxy.proxy import __version__
from insync_proxy.proxy.compiled import compiled_modules, describe
from insync_proxy.proxy.config import DOCS, ENV_PREFIX, ConfigError, ProxyConfig
from insync_proxy.proxy.config_files import check_files
from insync_proxy.proxy.config_loader import load_config
from insync_proxy.proxy.config_reference import effective_toml
from insync_proxy.proxy.config_schema import Entry, default_text, schema
from insync_proxy.proxy.logsetup import JsonLogFormatter, setup_logging

log = logging.getLogger("insync_proxy")

DESCRIPTION = """\
insync-proxy: a Kafka sidecar that makes producers durability-aware, for any broker and any client.

Producers point bootstrap.servers at the proxy; it forwards everything to the real brokers and adds:
  - KIP-637: each topic's min.insync.replicas in Metadata responses (tagged field 637, v9+);
  - KIP-926: acks=-2 ("acks=min.insync.replicas"), answered NOT_ENOUGH_REPLICAS by the proxy when a
    partition's ISR is below its min ISR, forwarded as acks=-1 otherwise;
  - KIP-1: INVALID_REQUIRED_ACKS for acks outside -2/-1/0/1;
  - Prometheus metrics on the admin port, and an audit stream of every acks decision.
"""

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


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit 2), like configuration errors. Flags are never abbreviated: an
    abbreviation would let `--control-sasl-password x` (no such flag: a secret) pass as
    `--control-sasl-password-file x`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {_without_values(message)} (`{self.prog} --help` lists the flags)\n")


def _without_values(message: str) -> str:
    """argparse's "unrecognized arguments: --x value" without the values: a mistyped secret's flag must not
    print the secret."""
    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
        return message
    flags = [word.split("=", 1)[0] for word in message[len(prefix):].split() if word.startswith("-")]
    text = prefix + (" ".join(flags) if flags else "(values without a flag)")
    if any("password" in flag for flag in flags):
        text += f"; secrets have no flag (a flag shows in `ps`): use {ENV_PREFIX}..._PASSWORD or a *_password_file"
    return text


_setup_logging = setup_logging


def _install_loop(use_uvloop: bool) -> str:
    import asyncio  # here, not at the top: a configuration error or --help exits without loading it

    if use_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            return "uvloop"
        except ImportError:
            log.warning("uvloop is not installed: using the default asyncio loop (about half the throughput)")
    return "asyncio"


def _dest(entry: Entry) -> str:
    return "setting:" + entry.key


def _metavar(entry: Entry) -> str | None:
    name = entry.path[-1]
    if entry.meta.choices:
        return "{" + ",".join(str(c) for c in entry.meta.choices) + "}"
    if entry.meta.format == "host:port":
        return "HOST:PORT[,...]"
    if name.endswith("_seconds"):
        return "SECONDS"
    if name.endswith("_ms"):
        return "MS"
    if name.endswith(("_file", "_dir", "directory")):
        return "PATH"
    if name.endswith(("_port", "_bytes", "_size", "_limit", "_base")):
        return "N"
    return name.rsplit("_", 1)[-1].upper()


#: The settings `demo` sets itself (the brokers it starts): not flags of `demo`.
DEMO_OWN_SETTINGS = ("bootstrap_servers", "upstream_tls.", "control_sasl.")


def _add_run_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """--config, and one flag per setting of the schema that has one (values are checked by the schema),
    except the settings whose key starts with one of `skip`."""
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    groups: dict[str, Any] = {}
    for entry in schema():
        if not entry.flag or entry.key.startswith(skip):
            continue
        title = entry.table or ""
        if title not in groups:
            groups[title] = p if not title else p.add_argument_group(
                f"[[{title}]] (the first listener)" if entry.in_array else f"[{title}]")
        default = "" if entry.default in (None, ()) and not entry.meta.default_text else default_text(entry)
        help_text = entry.meta.meaning.replace("%", "%%") + (f" (default {default})" if default else "")
        if entry.is_bool:
            groups[title].add_argument(entry.flag, dest=_dest(entry), action=argparse.BooleanOptionalAction,
                                       default=None, help=help_text)
        else:
            groups[title].add_argument(entry.flag, dest=_dest(entry), metavar=_metavar(entry), help=help_text)


def config_from_args(args: argparse.Namespace, env: dict[str, str] | None = None,
                     extra: dict[str, Any] | None = None, warnings: list[str] | None = None) -> ProxyConfig:
    """Merge file, environment and flags (and `extra` settings, by TOML key) into a validated configuration;
    `warnings` receives what works but should not be so."""
    given = vars(args)
    overrides: dict[str, Any] = {e.key: given.get(_dest(e)) for e in schema() if e.flag}
    overrides.update(extra or {})
    return load_config(getattr(args, "config", None), env=env, overrides=overrides, warnings=warnings)


def checked_configuration(args: argparse.Namespace, extra: dict[str, Any] | None = None
                          ) -> tuple[ProxyConfig, list[str]]:
    """What `run` and `check-config` both refuse (ConfigError) or warn about: the values (config_from_args),
    then the files they name, loaded as `run` loads them (config_files.check_files)."""
    warnings: list[str] = []
    config = config_from_args(args, extra=extra, warnings=warnings)
    warnings += check_files(config)
    return config, warnings


def _configuration(args: argparse.Namespace, extra: dict[str, Any] | None = None, logs: bool = False
                   ) -> tuple[ProxyConfig, list[str]] | None:
    """The configuration and its warnings, or None after printing the one-line error (`logs`: as the log
    would, one JSON object when log_format = "json")."""
    try:
        return checked_configuration(args, extra=extra)
    except ConfigError as exc:
        message = f"configuration error: {exc}"
        if logs and _intended_log_format(args) == "json":
            print(JsonLogFormatter().format(logging.LogRecord(
                log.name, logging.ERROR, __file__, 0, message, None, None)), file=sys.stderr)
        else:
            print(f"insync-proxy: {message}", file=sys.stderr)
        return None


def _intended_log_format(args: argparse.Namespace) -> str:
    """log_format as the sources give it when the configuration as a whole is invalid: the flag, the
    variable, then the TOML file (so that with log_format = "json" even a configuration error is JSON)."""
    flag = vars(args).get("setting:log_format")
    if flag:
        return str(flag).strip().lower()
    variable = os.environ.get(f"{ENV_PREFIX}LOG_FORMAT")
    if variable:
        return variable.strip().lower()
    path = getattr(args, "config", None)
    if path:
        try:
            value = tomllib.loads(Path(path).read_text()).get("log_format")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return "text"
        return str(value).lower() if isinstance(value, str) else "text"
    return "text"


async def serve(config: ProxyConfig, ready_message: str | None = None,
                load: typing.Callable[[], ProxyConfig] | None = None, config_file: str | None = None) -> None:
    """Run the proxy until SIGTERM or SIGINT, then drain and stop; SIGHUP reloads (`load` re-reads the settings),
    and so does a change of `config_file`'s content (seen every tls_reload_seconds).

    The proxy logs "listening" once its ports are bound and "ready" when /readyz turns ready.
    """
    import asyncio

    from insync_proxy.proxy.logs import flush_all
    from insync_proxy.proxy.server import InsyncProxy

    proxy = InsyncProxy(config, load=load, config_file=config_file)
    # The stop signals are taken before the start: /readyz may answer 200 while the start still runs, and a
    # start can wait a whole control timeout on a silent broker. A SIGTERM then (a rollout, a test) ends the
    # start and drains: exit 0, not the signal's default (killed).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = loop.create_task(proxy.start())
    stopping = loop.create_task(stop.wait())
    await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
    else:
        if starting.exception() is not None:
            stopping.cancel()
        starting.result()  # a failed start raises here, as before
        # What the start made (modules, settings, listeners) lives as long as the process: out of the garbage
        # collector's way, a full collection walks only what traffic made (measured: a 3,000-topic Metadata
        # answer's worst hold of the loop 24 -> 2.3 ms; benchmarks/metadata_bench.py freezes the same way).
        gc.collect()
        gc.freeze()
        loop.add_signal_handler(signal.SIGHUP, lambda: proxy.reloads.reload("SIGHUP"))
        if ready_message:
            print(ready_message.format(bootstrap=f"{config.advertised_host}:{proxy.bootstrap_port}",
                                       admin=proxy.admin.url), flush=True)
    await stopping
    try:
        await proxy.stop()
    finally:
        flush_all()  # repeated lines held back since their last summary: counted before the process exits


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
    loaded = _configuration(args, logs=True)
    if loaded is None:
        return 2
    config, warnings = loaded
    _setup_logging(config.log_level, config.log_format, config.log_summary_interval_seconds)
    for warning in warnings:
        log.warning("configuration: %s", warning)
    loop_name = _install_loop(config.use_uvloop)
    log.info("insync-proxy %s starting on the %s event loop; upstream %s", __version__, loop_name,
             ",".join(config.bootstrap_servers))
    build = compiled_modules()
    (log.warning if any(m.stale for m in build) else log.info)("data path: %s", describe(build))
    import asyncio

    from insync_proxy.proxy.tls import TlsReloadError

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
    if isinstance(exc, ssl.SSLError):  # config_files.check_files loaded them: the files changed since
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
    """Validate, print the effective configuration (secrets masked); --connect: try the brokers too."""
    loaded = _configuration(args)
    if loaded is None:
        return 2
    config, warnings = loaded
    for warning in warnings:
        print(f"insync-proxy: configuration warning: {warning}", file=sys.stderr)
    sys.stdout.write(effective_toml(config))
    print(f"# configuration valid ({DOCS} describes every setting)", flush=True)
    if not args.connect:
        return 0
    from insync_proxy.proxy.preflight import check_connection  # loaded only here: `run` never needs it

    _setup_logging(config.log_level, config.log_format, config.log_summary_interval_seconds)
    return 0 if check_connection(config, lambda line: print(line, flush=True)) else 1


def _state_file() -> Path:
    from insync_proxy.devcluster.distribution import cache_dir

    return cache_dir() / "dev-cluster" / "state.json"


#: Kept here (not imported from devcluster.secured): the parser is built without loading the dev tooling.
SECURITY_CHOICES = ("sasl_ssl", "mtls")
SECURITY_HELP = ("also give the brokers a secured listener and put the proxy on it: sasl_ssl (SCRAM-SHA-512 "
                 "over TLS) or mtls (TLS, client certificate required); certificates made with openssl")

DEV_BROKER_PORTS = [19091, 19092, 19093]
DEV_CONTROLLER_PORT = 19090


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    from insync_proxy.devcluster.cluster import (
        ClusterError,
        ClusterSettings,
        LocalKafkaCluster,
        kill_pids,
        write_state,
    )
    from insync_proxy.devcluster.distribution import DistributionError, cache_dir

    state_file = _state_file()
    if args.action == "fetch":
        from insync_proxy.devcluster.distribution import SUPPORTED_KAFKA_VERSIONS, kafka_libs

        versions = [args.kafka_version] if args.kafka_version else list(SUPPORTED_KAFKA_VERSIONS)
        try:
            for version in versions:
                print(f"Kafka {version}: {kafka_libs(version)}")
        except DistributionError as exc:
            print(f"insync-proxy: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.action == "status":
        if not state_file.exists():
            print("no dev cluster (start one with: insync-proxy dev-cluster up)")
            return 1
        state = json.loads(state_file.read_text())
        alive = [n for n in state["nodes"] if n["pid"] and _pid_alive(n["pid"])]
        print(f"Kafka {state['version']} dev cluster: {len(alive)}/{len(state['nodes'])} processes running")
        for n in state["nodes"]:
            status = "running" if n in alive else "stopped"
            print(f"  {n['role']:<10} node {n['node_id']}: 127.0.0.1:{n['port']} pid {n['pid']} {status}  log {n['log']}")
        print(f"bootstrap.servers={state['bootstrap_servers']}")
        if state.get("security"):
            print(f"{state['security'].upper()} listener: {state['secured_bootstrap_servers']} "
                  f"(proxy TOML and client properties in {state['security_dir']})")
        return 0 if len(alive) == len(state["nodes"]) else 1
    if args.action == "down":
        if not state_file.exists():
            print("no dev cluster running")
            return 0
        state = json.loads(state_file.read_text())
        kill_pids([n["pid"] for n in state["nodes"] if n["pid"] and _pid_alive(n["pid"])])
        import shutil

        shutil.rmtree(state["data_dir"], ignore_errors=True)
        if state.get("security_dir"):
            shutil.rmtree(state["security_dir"], ignore_errors=True)
        state_file.unlink()
        print("dev cluster stopped and its data removed")
        return 0
    # up
    if state_file.exists():
        state = json.loads(state_file.read_text())
        if any(n["pid"] and _pid_alive(n["pid"]) for n in state["nodes"]):
            print(f"a dev cluster is already running: bootstrap.servers={state['bootstrap_servers']} "
                  "(stop it with: insync-proxy dev-cluster down)")
            return 1
    if args.broker_heap and not re.fullmatch(r"[1-9][0-9]*[mMgG]", args.broker_heap):
        print(f"insync-proxy: --broker-heap {args.broker_heap!r}: a size like 1g or 1500m", file=sys.stderr)
        return 2
    data_dir = cache_dir() / "dev-cluster" / "data"
    security_dir = cache_dir() / "dev-cluster" / "security"
    import shutil

    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.rmtree(security_dir, ignore_errors=True)
    base: dict[str, Any] = {"version": args.kafka_version, "broker_ports": DEV_BROKER_PORTS,
                            "controller_port": DEV_CONTROLLER_PORT, "data_dir": data_dir, "die_with_parent": False,
                            **({"broker_heap": args.broker_heap} if args.broker_heap else {})}
    setup = _secured_setup(args.security, security_dir)
    if args.security and setup is None:
        return 1
    cluster = LocalKafkaCluster(setup.cluster_settings(**base) if setup else ClusterSettings(**base))
    try:
        cluster.start()
    except (ClusterError, DistributionError) as exc:
        print(f"insync-proxy: dev cluster did not start: {exc}", file=sys.stderr)
        return 1
    write_state(state_file, cluster)
    print(f"bootstrap.servers={cluster.bootstrap_servers}")
    if setup:
        servers = setup.upstream_servers(cluster)
        state = {**cluster.state(), "security": setup.security, "secured_bootstrap_servers": servers,
                 "security_dir": str(security_dir)}
        state_file.write_text(json.dumps(state, indent=2))
        toml_file, properties_file = security_dir / "proxy.toml", security_dir / "client.properties"
        toml_file.write_text(setup.proxy_toml(servers))
        proxy_bootstrap = f"127.0.0.1:{ProxyConfig().listeners[0].bootstrap_port}"
        properties_file.write_text(setup.client_properties(proxy_bootstrap))
        print(f"{setup.security.upper()} listener: {servers}")
        print(f"\nproxy configuration: {toml_file}\n")
        print(toml_file.read_text())
        print(f"client properties (clients through the proxy at {proxy_bootstrap}): {properties_file}\n")
        print(properties_file.read_text())
        print(f"check it:  insync-proxy check-config --config {toml_file} --connect")
        print(f"run it:    insync-proxy run --config {toml_file}")
    print("stop it with: insync-proxy dev-cluster down")
    return 0


def _secured_setup(security: str | None, directory: Path) -> Any:
    """The certificates and passwords of a secured dev cluster, a devcluster.secured.SecuredSetup (typed Any:
    cli.py names the dev tooling only inside its commands); None without `security`, or after printing why
    openssl could not make them."""
    if not security:
        return None
    from insync_proxy.devcluster.certificates import CertificateError
    from insync_proxy.devcluster.secured import secured_setup

    try:
        return secured_setup(security, directory)
    except CertificateError as exc:
        print(f"insync-proxy: {exc}", file=sys.stderr)
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmd_demo(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    security_dir = Path(tempfile.mkdtemp(prefix="insync-demo-security-"))
    try:
        setup = _secured_setup(args.security, security_dir)
        if args.security and setup is None:
            return 1

        def upstream(servers: str) -> dict[str, Any]:
            return setup.proxy_settings(servers) if setup else {"bootstrap_servers": servers}

        # Checked before Kafka starts: a wrong setting costs no cluster start (the brokers come later).
        checked = _configuration(args, extra=upstream("127.0.0.1:9092"), logs=True)
        if checked is None:
            return 2
        _setup_logging(checked[0].log_level, checked[0].log_format, checked[0].log_summary_interval_seconds)
        for warning in checked[1]:
            log.warning("configuration: %s", warning)
        return _demo(args, setup, upstream)
    finally:
        shutil.rmtree(security_dir, ignore_errors=True)


def _demo(args: argparse.Namespace, setup: Any, upstream: typing.Callable[[str], dict[str, Any]]) -> int:
    from insync_proxy.devcluster.cluster import ClusterError, ClusterSettings, LocalKafkaCluster
    from insync_proxy.devcluster.distribution import DistributionError

    kind = f" with {setup.security.upper()} listeners" if setup else ""
    print(f"Starting a local 3-broker Apache Kafka (KRaft){kind} on 127.0.0.1 ...", flush=True)
    started = time.monotonic()
    settings = setup.cluster_settings(version=args.kafka_version) if setup else ClusterSettings(version=args.kafka_version)
    cluster = LocalKafkaCluster(settings)
    try:
        try:
            cluster.start()
        except (ClusterError, DistributionError) as exc:
            print(f"insync-proxy demo: Kafka did not start: {exc}", file=sys.stderr)
            return 1
        cluster.create_topic("demo", 3, 3, {"min.insync.replicas": "2"})
        loaded = _configuration(args, extra=upstream(setup.upstream_servers(cluster) if setup
                                                     else cluster.bootstrap_servers), logs=True)
        if loaded is None:
            return 2
        config = loaded[0]
        _install_loop(config.use_uvloop)
        clients = ""
        if setup:  # "{bootstrap}": serve() fills in the address once the proxy listens
            properties = setup.client_properties("{bootstrap}").splitlines()
            clients = "  Client properties:\n" + "".join(f"    {line}\n" for line in properties)
        message = (
            f"\nKafka {cluster.version} and insync-proxy are up ({time.monotonic() - started:.0f}s).\n"
            "  Point producers at:  bootstrap.servers={bootstrap}\n"
            f"{clients}"
            "  Metrics:             {admin}/metrics   (also /healthz, /readyz)\n"
            "  A topic to try:      demo (3 partitions, replication factor 3, min.insync.replicas=2)\n"
            f"  Audit events:        {Path(config.audit.directory).resolve()}\n"
            "Ctrl-C stops the proxy and Kafka.\n"
        )
        import asyncio

        try:
            asyncio.run(serve(config, message))
        except KeyboardInterrupt:
            pass
    finally:
        print("Stopping Kafka ...", flush=True)
        cluster.stop()
        cluster.cleanup()
    return 0


def cmd_report(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        from insync_proxy.pipeline.report import main as report_main
    except ImportError as exc:
        print(f"insync-proxy report needs the pipeline extra: pip install 'insync-proxy[pipeline]' ({exc})",
              file=sys.stderr)
        return 2
    result: int = report_main(rest, prog="insync-proxy report")
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="insync-proxy", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"insync-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the proxy in front of real brokers", epilog=RUN_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_run_flags(run)

    check = sub.add_parser(
        "check-config", help="check a configuration and print it (secrets masked) without starting; exit 0 valid, "
                             "2 invalid, 1 when --connect fails",
        description="Validates the configuration (the same sources and flags as `run`) and prints the effective "
                    "settings as TOML, secrets masked. --connect also bootstraps from the brokers with the "
                    "configured TLS and SASL, reads Metadata and one DescribeConfigs, one line per step: exit 0 when "
                    "every step works, 1 otherwise.", epilog=CHECK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--connect", action="store_true",
                       help="also connect to the brokers (TLS, SASL, Metadata, DescribeConfigs)")
    _add_run_flags(check)

    demo = sub.add_parser(
        "demo", help="start a local 3-broker Kafka and the proxy in front of it (Ctrl-C stops both)",
        description="Starts Apache Kafka's own jars (fetched once with Maven into ~/.cache/insync-proxy) as a "
                    "local 3-broker KRaft cluster, then the proxy in front of it. The demo sets the upstream "
                    "settings itself (bootstrap_servers, [upstream_tls], [control_sasl]): --security picks them.",
    )
    _add_run_flags(demo, skip=DEMO_OWN_SETTINGS)
    demo.add_argument("--kafka-version", help="Kafka version (default: newest 4.x; or set INSYNC_PROXY_KAFKA_VERSION)")
    demo.add_argument("--security", choices=SECURITY_CHOICES, help=SECURITY_HELP)

    dev = sub.add_parser("dev-cluster", help="a local 3-broker Kafka for development (up, down, status)")
    dev.add_argument("action", choices=["up", "down", "status", "fetch"],
                     help="up: start (detached); down: stop and delete its data; status: show; "
                          "fetch: only download the Kafka jars (every supported version)")
    dev.add_argument("--kafka-version", help="Kafka version (default: newest 4.x; or set INSYNC_PROXY_KAFKA_VERSION)")
    dev.add_argument("--security", choices=SECURITY_CHOICES,
                     help=SECURITY_HELP + "; `up` prints the proxy's TOML and the clients' properties and writes "
                                          "them beside the certificates")
    dev.add_argument("--broker-heap", metavar="SIZE",
                     help="each broker's -Xmx, e.g. 1g (default 384m: a few hundred partitions; about 1g for 3,000 "
                          "topics x 2 partitions, 2500m for 10,000)")

    chaos = sub.add_parser(
        "chaos", help="VerifiableProducer through the proxy while brokers are killed and restarted; checks no "
                      "acknowledged record is lost",
        description="Starts a local 3-broker Kafka of its own and the proxy, runs Kafka's VerifiableProducer "
                    "(idempotent, acks=all) through the proxy while brokers are SIGKILLed and restarted, then "
                    "reads every record back. Prints bounces, acked, consumed, lost, duplicates; exits 1 on loss.",
    )
    chaos.add_argument("--bounces", type=int, default=5, help="brokers killed and restarted, one at a time (default 5)")
    chaos.add_argument("--throughput", type=int, default=300, help="records per second the producer aims at (300)")
    chaos.add_argument("--kafka-version", help="Kafka version (default: newest 4.x; or set INSYNC_PROXY_KAFKA_VERSION)")

    sub.add_parser("report", help="PySpark durability report over audit files (needs insync-proxy[pipeline]); "
                                  "`insync-proxy report --help` for its options", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "report":
        return cmd_report(argparse.Namespace(), argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "check-config":
        return cmd_check_config(args)
    if args.command == "demo":
        return cmd_demo(args)
    if args.command == "dev-cluster":
        return cmd_dev_cluster(args)
    if args.command == "chaos":
        from insync_proxy.devcluster.chaos import main as chaos_main  # not loaded by the proxy itself

        return chaos_main(args.bounces, args.kafka_version, args.throughput)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
