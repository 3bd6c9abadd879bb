"""`insync-proxy`: run the proxy, try it on a local Kafka, manage that local Kafka, analyse audits (`report`,
`stream`): every command's command line is here; the jobs take the options it parsed."""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
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
from typing import TYPE_CHECKING, Any

from insync_proxy.proxy import __version__
from insync_proxy.proxy.config.broker_ports import bootstrap_host
from insync_proxy.proxy.config.files import check_files
from insync_proxy.proxy.config.loader import explain_empty_secrets, load_config
from insync_proxy.proxy.config.places import check_places
from insync_proxy.proxy.config.reference import effective_toml
from insync_proxy.proxy.config.schema import Entry, default_text, schema
from insync_proxy.proxy.config.settings import DOCS, ENV_PREFIX, ConfigError, ProxyConfig
from insync_proxy.proxy.observability.compiled import compiled_modules, describe
from insync_proxy.proxy.observability.logsetup import JsonLogFormatter, setup_logging

if TYPE_CHECKING:  # the pipeline is loaded by `report` and `stream` only, never by `run`
    from insync_proxy.pipeline.report import ReportOptions
    from insync_proxy.pipeline.stream import StreamOptions

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
    the files they name, loaded as `run` loads them (files.check_files), then the hosts and directories
    they name on this machine (places.check_places: what `run` would otherwise meet only at start)."""
    warnings: list[str] = []
    config = config_from_args(args, extra=extra, warnings=warnings)
    try:
        warnings += check_files(config)
    except ConfigError as exc:  # an encrypted key, its password's variable set but empty
        raise explain_empty_secrets(exc) from None
    check_places(config)
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

    from insync_proxy.proxy.observability.logs import flush_all
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
            print(ready_message.format(bootstrap=f"{bootstrap_host(config.advertised_host, config.bind_host)}:"
                                                 f"{proxy.bootstrap_port}",
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

    from insync_proxy.proxy.config.tls import TlsReloadError

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
    loaded = _configuration(args)
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
    from insync_proxy.client.preflight import check_connection  # loaded only here: `run` never needs it

    _setup_logging(config.log_level, config.log_format, config.log_summary_interval_seconds)
    return 0 if check_connection(config, lambda line: print(line, flush=True)) else 1


#: Kept here (not imported from devcluster.secured): the parser is built without loading the dev tooling.
SECURITY_CHOICES = ("sasl_ssl", "mtls", "oauthbearer", "gssapi")
SECURITY_HELP = ("also give the brokers a secured listener and put the proxy on it: sasl_ssl (SCRAM-SHA-512 "
                 "over TLS), mtls (TLS, client certificate required; certificates made with openssl), "
                 "oauthbearer (OAuth 2.0 JWTs from a local identity provider, validated by the brokers) or gssapi "
                 "(Kerberos: a local MIT KDC, a principal per broker; needs krb5-kdc and root for /etc/hosts)")
#: The dev cluster's first port (its controller; the brokers take the next three), as devcluster.detached says.
DEV_PORT_BASE = 19090
#: The tools `kafka-cli` runs (devcluster.kafka_tools.KAFKA_TOOLS holds their classes; a test keeps the two equal).
KAFKA_TOOL_NAMES = ("console-producer", "console-consumer", "topics", "configs", "consumer-groups", "acls",
                    "get-offsets", "broker-api-versions", "producer-perf-test", "consumer-perf-test",
                    "verifiable-producer", "verifiable-consumer")


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    from insync_proxy.devcluster import detached

    if args.action == "fetch":
        from insync_proxy.devcluster.distribution import (
            SUPPORTED_KAFKA_VERSIONS,
            DistributionError,
            kafka_libs,
        )

        versions = [args.kafka_version] if args.kafka_version else list(SUPPORTED_KAFKA_VERSIONS)
        try:
            for version in versions:
                print(f"Kafka {version}: {kafka_libs(version)}")
        except DistributionError as exc:
            print(f"insync-proxy: {exc}", file=sys.stderr)
            return 1
        return 0
    directory = detached.cluster_directory(args.dir)
    if args.action == "status":
        return detached.status(directory)
    if args.action == "down":
        return detached.down(directory)
    if args.broker_heap and not re.fullmatch(r"[1-9][0-9]*[mMgG]", args.broker_heap):
        print(f"insync-proxy: --broker-heap {args.broker_heap!r}: a size like 1g or 1500m", file=sys.stderr)
        return 2
    if not 1 <= args.port_base <= 65535 - detached.BROKERS:
        print(f"insync-proxy: --port-base {args.port_base}: a port from 1 to {65535 - detached.BROKERS}",
              file=sys.stderr)
        return 2
    proxy_bootstrap = f"127.0.0.1:{ProxyConfig().listeners[0].bootstrap_port}"
    return detached.up(directory, args.kafka_version, args.security, args.broker_heap, args.port_base,
                       proxy_bootstrap, complain=lambda line: print(f"insync-proxy: {line}", file=sys.stderr))


def cmd_kafka_cli(args: argparse.Namespace) -> int:
    """Kafka's own tool, from the jars the dev cluster fetched; replaces this process (stdin, exit code)."""
    from insync_proxy.devcluster.distribution import DistributionError, cache_dir, kafka_libs
    from insync_proxy.devcluster.kafka_tools import (
        KafkaToolError,
        java_command,
        tool_class,
        write_log_configuration,
    )

    try:
        libs = kafka_libs(args.kafka_version)
        main_class = tool_class(libs, args.tool)
    except (DistributionError, KafkaToolError) as exc:
        print(f"insync-proxy kafka-cli: {exc}", file=sys.stderr)
        return 1
    log_dir = cache_dir() / "kafka-cli"
    write_log_configuration(log_dir)
    command = java_command(libs, main_class, args.args, log_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(command[0], command)


def _secured_setup(security: str | None, directory: Path) -> Any:
    """The certificates and passwords of a secured dev cluster, a devcluster.secured.SecuredSetup (typed Any:
    cli.py names the dev tooling only inside its commands); None without `security`, or after printing why
    openssl could not make them."""
    if not security:
        return None
    from insync_proxy.devcluster.certificates import CertificateError
    from insync_proxy.devcluster.kerberos import KdcError
    from insync_proxy.devcluster.secured import secured_setup

    try:
        return secured_setup(security, directory)
    except (CertificateError, KdcError) as exc:
        print(f"insync-proxy: {exc}", file=sys.stderr)
        return None


def _demo_audit(args: argparse.Namespace) -> dict[str, Any]:
    """`demo` writes its audit files into the cache (never into the working directory, which may be a checkout)
    unless a flag, the environment or the TOML file names a directory."""
    if vars(args).get("setting:audit.directory") or os.environ.get(f"{ENV_PREFIX}AUDIT_DIRECTORY"):
        return {}
    path = getattr(args, "config", None)
    if path:
        try:
            if "directory" in tomllib.loads(Path(path).read_text()).get("audit", {}):
                return {}
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
            return {}  # the configuration's own check says what is wrong with the file
    from insync_proxy.devcluster.distribution import cache_dir

    return {"audit.directory": str(cache_dir() / "demo-audit")}


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
        checked = _configuration(args, extra={**upstream("127.0.0.1:9092"), **_demo_audit(args)}, logs=True)
        if checked is None:
            return 2
        _setup_logging(checked[0].log_level, checked[0].log_format, checked[0].log_summary_interval_seconds)
        for warning in checked[1]:
            log.warning("configuration: %s", warning)
        return _demo(args, setup, upstream)
    finally:
        shutil.rmtree(security_dir, ignore_errors=True)


def _demo(args: argparse.Namespace, setup: Any, upstream: typing.Callable[[str], dict[str, Any]]) -> int:
    kind = f" with {setup.security.upper()} listeners" if setup else ""
    idp = setup.identity_provider if setup else None
    if idp is not None:
        idp.start()  # the brokers read its JWKS as they start
        print(f"Identity provider (OAuth 2.0, client-credentials grant) at {idp.issuer}", flush=True)
    try:
        return _demo_cluster(args, setup, upstream, kind)
    finally:
        if idp is not None:
            idp.stop()
        if setup is not None and setup.kdc is not None:
            setup.kdc.stop()


def _demo_cluster(args: argparse.Namespace, setup: Any, upstream: typing.Callable[[str], dict[str, Any]],
                  kind: str) -> int:
    from insync_proxy.devcluster.cluster import ClusterError, ClusterSettings, LocalKafkaCluster
    from insync_proxy.devcluster.distribution import DistributionError

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
        loaded = _configuration(args, extra={**upstream(setup.upstream_servers(cluster) if setup
                                                        else cluster.bootstrap_servers), **_demo_audit(args)},
                                logs=True)
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


REPORT_DESCRIPTION = """\
Durability report over insync-proxy audit events (schema v1 and v2, mixed): per topic and partition, requests,
records and record bytes, decisions by kind and by acks asked/sent, intervals with ISR below min ISR, produce
latency p50/p95/p99 by acks mode, bytes written with acks 0/1, and the clients the proxy answered with errors.
Writes date-partitioned Parquet tables, rejected/ (lines that failed validation, with the reason), report.html
(self-contained) and summary.json. Needs the pipeline extra: pip install 'insync-proxy[pipeline]' (and Java 17+).
"""

REPORT_EPILOG = """\
examples:
  insync-proxy report --input '/var/log/insync/**/*.jsonl' --output /tmp/durability
  insync-proxy report --kafka-bootstrap localhost:9092 --topic insync-audit --output out/
  spark-submit --master yarn insync_proxy/__main__.py report --input hdfs:///audit/ --output hdfs:///report/
exit status: 0 done, 2 bad arguments/missing input/no Java/no pipeline extra, 1 Spark job failed
"""

STREAM_DESCRIPTION = """\
Structured Streaming reads the audit topic (Spark's Kafka source) or a directory that sidecars write to
(--input-dir, Spark's file source), parses and validates every line with the same function as the batch
report, and keeps per (window, topic, partition, decision) counts, record bytes and latency percentiles.
Windows are written to Parquet (partitioned by date) once the watermark passes their end, so each window row
is written exactly once; rejected lines go to rejected/ as JSON. Both queries checkpoint under --checkpoint
and resume where they stopped. With --available-now the job processes what the source holds and stops, and
the end of that input closes the windows still open, so a finished run's windows are all written. Needs the
pipeline extra: pip install 'insync-proxy[pipeline]' (and Java 17+).
"""

STREAM_EPILOG = """\
examples:
  insync-proxy stream --kafka-bootstrap localhost:9092 --topic insync-audit --output out/ --checkpoint ckpt/
  insync-proxy stream --input-dir /var/log/insync --output out/ --checkpoint ckpt/ --available-now
output: OUTPUT/windows (Parquet, partitioned by date), OUTPUT/rejected (JSON Lines)
exit status: 0 done, 2 bad arguments/missing input/no Java/no pipeline extra, 1 a streaming query failed
"""

COMPACT_DESCRIPTION = """\
Parses and validates audit JSON Lines once and keeps them as Parquet (partitioned by date): exactly what the
report's own parse step produces, rejected lines included with their reason. Compact a fleet's files as
they rotate (--mode append), then `insync-proxy report --staged DIR` reads typed columns and parses nothing.
Needs the pipeline extra: pip install 'insync-proxy[pipeline]' (and Java 17+).

example:
  insync-proxy compact --input 'audit/**/*.jsonl' --output /data/audit-staged --rollup-seconds 900
exit status: 0 done, 2 bad arguments/missing input/no Java/no pipeline extra
"""

#: spark.sql.shuffle.partitions of the report's session and of a new stream checkpoint's state store (a
#: checkpoint keeps the number it started with). Spark's own 200 means 200 state-store tasks per micro-batch
#: and up to 200 Parquet files per batch: a finished 150 s stream run (1,833 lines) took 76 s and wrote 41
#: files for 45 window rows with 200, 21 s with 8.
PIPELINE_SHUFFLE_PARTITIONS = 8
#: The stream's window and watermark; the same as pipeline.stream's DEFAULT_WINDOW and DEFAULT_WATERMARK
#: (written out here: the command line loads no pipeline module until `report` or `stream` runs).
STREAM_WINDOW = "1 minute"
STREAM_WATERMARK = "5 minutes"


def _add_report_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", nargs="+", action="extend", default=[], metavar="PATH",
                   help="audit JSON Lines: files, directories (read recursively for *.jsonl) or globs "
                        "(quote them); repeatable; may be hdfs:// or s3a:// URIs")
    p.add_argument("--staged", nargs="+", action="extend", default=[], metavar="DIR",
                   help="directories of events already parsed by `insync-proxy compact` "
                        "(Parquet); combined with --input and the topic")
    p.add_argument("--output", "-o", required=True, metavar="DIR",
                   help="output directory (tables, rejected/, report.html, summary.json); tables in it are replaced")
    p.add_argument("--master", default=None,
                   help="Spark master: local[*] (default when not under spark-submit), local[N], spark://HOST:PORT, yarn")
    p.add_argument("--kafka-bootstrap", metavar="HOST:PORT[,...]",
                   help="read the audit topic too (Spark's Kafka source; jars resolved with Maven into "
                        "~/.cache/insync-proxy/spark-jars/)")
    p.add_argument("--topic", help="audit topic (comma-separated list allowed) with --kafka-bootstrap")
    p.add_argument("--starting-offsets", default="earliest", help="Kafka startingOffsets (default earliest)")
    p.add_argument("--ending-offsets", default="latest", help="Kafka endingOffsets (default latest)")
    p.add_argument("--shuffle-partitions", type=int, default=PIPELINE_SHUFFLE_PARTITIONS,
                   help=f"spark.sql.shuffle.partitions (default {PIPELINE_SHUFFLE_PARTITIONS}; raise it on a cluster)")
    p.add_argument("--driver-memory", default="2g", help="spark.driver.memory when started from Python (default 2g)")
    p.add_argument("--staging", choices=("parquet", "memory"), default="parquet",
                   help="where the one pass's aggregate is kept for the table jobs (default parquet, under "
                        "OUTPUT/aggregate-staging, deleted at the end; memory: Spark's cache)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines, only the summary")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show Spark's own log (WARN and up) and full traces on failure (like INSYNC_DEBUG=1)")


def _add_stream_flags(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--kafka-bootstrap", metavar="HOST:PORT[,...]", help="read the audit topic (needs --topic)")
    source.add_argument("--input-dir", metavar="DIR", help="or watch a directory for new *.jsonl files")
    p.add_argument("--topic", help="audit topic with --kafka-bootstrap")
    p.add_argument("--output", "-o", required=True, help="output directory")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (keep it across restarts)")
    p.add_argument("--master", default=None, help="Spark master (default local[*] unless under spark-submit)")
    p.add_argument("--window", default=STREAM_WINDOW, help=f"window length (default {STREAM_WINDOW!r})")
    p.add_argument("--watermark", default=STREAM_WATERMARK,
                   help=f"how late events may arrive (default {STREAM_WATERMARK!r}); a window is written this long "
                        "after it ends")
    p.add_argument("--trigger", default="30 seconds", help="micro-batch interval (default '30 seconds')")
    p.add_argument("--available-now", action="store_true",
                   help="process what is available, then stop; the end of that input closes the open windows")
    p.add_argument("--starting-offsets", default=None,
                   help="Kafka startingOffsets for a new checkpoint (default earliest with --available-now, else latest)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap records per micro-batch")
    p.add_argument("--shuffle-partitions", type=int, default=PIPELINE_SHUFFLE_PARTITIONS,
                   help=f"spark.sql.shuffle.partitions for a new checkpoint (default {PIPELINE_SHUFFLE_PARTITIONS}: "
                        "a task and a state-store partition each per micro-batch; raise it on a cluster)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show Spark's own log (WARN and up) and full traces on failure (like INSYNC_DEBUG=1)")


def report_options(args: argparse.Namespace) -> ReportOptions:
    """The report's options from `insync-proxy report`'s parsed arguments (checked by :func:`cmd_report`)."""
    from insync_proxy.pipeline.report import KafkaInput, ReportOptions

    kafka = KafkaInput(args.kafka_bootstrap, args.topic, args.starting_offsets, args.ending_offsets) \
        if args.kafka_bootstrap else None
    return ReportOptions(inputs=tuple(args.input), output=args.output, staged=tuple(args.staged), kafka=kafka,
                         master=args.master, shuffle_partitions=args.shuffle_partitions,
                         driver_memory=args.driver_memory, staging=args.staging, quiet=args.quiet,
                         verbose=args.verbose)


def stream_options(args: argparse.Namespace) -> StreamOptions:
    """The stream's options from `insync-proxy stream`'s parsed arguments (checked by :func:`cmd_stream`)."""
    from insync_proxy.pipeline.stream import StreamOptions

    return StreamOptions(kafka_bootstrap=args.kafka_bootstrap, topic=args.topic, input_dir=args.input_dir,
                         output=args.output, checkpoint=args.checkpoint, master=args.master, window=args.window,
                         watermark=args.watermark, trigger=args.trigger, available_now=args.available_now,
                         starting_offsets=args.starting_offsets,
                         max_offsets_per_trigger=args.max_offsets_per_trigger,
                         shuffle_partitions=args.shuffle_partitions, verbose=args.verbose)


def _add_compact_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", nargs="+", action="extend", required=True, metavar="PATH",
                   help="audit JSON Lines files, directories or globs (as for the report)")
    p.add_argument("--output", "-o", required=True, metavar="DIR", help="Parquet directory (partitioned by date)")
    p.add_argument("--mode", choices=("append", "overwrite"), default="append",
                   help="append to DIR (default; compact each batch of rotated files once) or replace it")
    p.add_argument("--rollup-seconds", type=int, default=0, metavar="N",
                   help="merge each key's v2 summaries per N-second granule (e.g. 900; 0: keep every "
                        "interval); exact for every table, only the timeline's resolution becomes N")
    p.add_argument("--master", default=None, help="Spark master (default local[*] unless under spark-submit)")
    p.add_argument("--verbose", "-v", action="store_true", help="Spark's own log and full traces")


def _without_pipeline_extra(command: str) -> bool:
    """True, after one line saying how to install it, when PySpark (the pipeline extra) is missing. Checked
    after the arguments, so `--help` and usage errors need no Spark."""
    try:
        import pyspark  # noqa: F401 - only whether it is installed; the job imports what it uses
    except ImportError as exc:
        print(f"insync-proxy {command} needs the pipeline extra: pip install 'insync-proxy[pipeline]' ({exc})",
              file=sys.stderr)
        return True
    return False


def cmd_report(args: argparse.Namespace) -> int:
    usage: argparse.ArgumentParser = args.command_parser
    if bool(args.kafka_bootstrap) != bool(args.topic):
        usage.error("--kafka-bootstrap and --topic go together")
    if not args.input and not args.kafka_bootstrap and not args.staged:
        usage.error("give --input, --staged and/or --kafka-bootstrap with --topic")
    if _without_pipeline_extra("report"):
        return 2
    from insync_proxy.pipeline.report import report_command

    return report_command(report_options(args))


def cmd_stream(args: argparse.Namespace) -> int:
    usage: argparse.ArgumentParser = args.command_parser
    if args.kafka_bootstrap and not args.topic:
        usage.error("--kafka-bootstrap needs --topic")
    if args.shuffle_partitions < 1:
        usage.error("--shuffle-partitions must be at least 1")
    if _without_pipeline_extra("stream"):
        return 2
    from insync_proxy.pipeline.stream import stream_command

    return stream_command(stream_options(args))


def cmd_compact(args: argparse.Namespace) -> int:
    usage: argparse.ArgumentParser = args.command_parser
    if args.rollup_seconds < 0:
        usage.error("--rollup-seconds must be 0 (keep every interval) or more")
    if _without_pipeline_extra("compact"):
        return 2
    from insync_proxy.pipeline.compact import CompactOptions, compact_command

    return compact_command(CompactOptions(inputs=tuple(args.input), output=args.output, mode=args.mode,
                                          rollup_seconds=args.rollup_seconds, master=args.master,
                                          verbose=args.verbose))


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
                       help="connect to the brokers as `run` would (TLS, SASL, Metadata, DescribeConfigs, ...), one "
                            "line per step, instead of printing the settings")
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

    dev = sub.add_parser(
        "dev-cluster", help="a local 3-broker Kafka for development (up, down, status)",
        description="A detached local Kafka (a KRaft controller and 3 brokers on 127.0.0.1), one per directory: "
                    "its state, data, logs and, with --security, the proxy's TOML and the clients' properties live "
                    "in --dir. down and status act on that directory's cluster only.")
    dev.add_argument("action", choices=["up", "down", "status", "fetch"],
                     help="up: start (detached); down: stop and delete its data; status: show; "
                          "fetch: only download the Kafka jars (every supported version)")
    dev.add_argument("--dir", metavar="DIR",
                     help="the cluster's directory (default: $INSYNC_PROXY_DEV_CLUSTER_DIR, else "
                          "~/.cache/insync-proxy/dev-cluster)")
    dev.add_argument("--port-base", type=int, default=DEV_PORT_BASE, metavar="PORT",
                     help=f"up: the controller's port; the brokers take the next three (default {DEV_PORT_BASE}: "
                          f"brokers on {DEV_PORT_BASE + 1}-{DEV_PORT_BASE + 3})")
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

    kafka = sub.add_parser(
        "kafka-cli", help="run one of Kafka's own command-line tools (console-producer, console-consumer, topics, "
                          "...) from the jars the dev cluster fetched",
        description="Runs Kafka's own tool TOOL (what kafka-TOOL.sh runs in a Kafka download) with ARGS, from the "
                    "jars in ~/.cache/insync-proxy (fetched with Maven on first use; Java 17+). Options of this "
                    "command go before TOOL; everything after TOOL is the tool's own (its --help lists them).",
        epilog="Example, through the proxy: echo hello | insync-proxy kafka-cli console-producer "
               "--bootstrap-server 127.0.0.1:9092 --topic quickstart")
    kafka.add_argument("--kafka-version", help="Kafka version (default: newest 4.x; or set INSYNC_PROXY_KAFKA_VERSION)")
    kafka.add_argument("tool", metavar="TOOL", help="one of: " + ", ".join(KAFKA_TOOL_NAMES))
    kafka.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the tool's own arguments")

    report = sub.add_parser("report", help="PySpark durability report over audit files or the audit topic (needs "
                                           "insync-proxy[pipeline])", description=REPORT_DESCRIPTION,
                            epilog=REPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_report_flags(report)

    stream = sub.add_parser("stream", help="PySpark streaming: 1-minute durability windows kept up to date from the "
                                           "audit topic or a directory (needs insync-proxy[pipeline])",
                            description=STREAM_DESCRIPTION, epilog=STREAM_EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_stream_flags(stream)
    compact = sub.add_parser("compact", help="PySpark: parse audit files once into Parquet for later reports "
                                             "(`report --staged`; needs insync-proxy[pipeline])",
                             description=COMPACT_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_compact_flags(compact)
    for command in sub.choices.values():
        # a command's usage errors name it and its --help: a wrong flag, and what only the whole line can tell
        command.set_defaults(command_parser=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, unrecognized = parser.parse_known_args(argv)
    if unrecognized:
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unrecognized)}")
    if args.command == "run":
        return cmd_run(args)
    if args.command == "check-config":
        return cmd_check_config(args)
    if args.command in ("demo", "dev-cluster"):
        try:
            return cmd_demo(args) if args.command == "demo" else cmd_dev_cluster(args)
        except KeyboardInterrupt:  # Ctrl-C while Kafka starts: what was started is stopped on the way out
            print(f"\ninsync-proxy {args.command}: interrupted; what it had started is stopped", file=sys.stderr,
                  flush=True)
            return 130
    if args.command == "kafka-cli":
        return cmd_kafka_cli(args)
    if args.command == "report":
        return cmd_report(args)
    if args.command == "stream":
        return cmd_stream(args)
    if args.command == "compact":
        return cmd_compact(args)
    if args.command == "chaos":
        from insync_proxy.devcluster.chaos import main as chaos_main  # not loaded by the proxy itself

        return chaos_main(args.bounces, args.kafka_version, args.throughput)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
