"""`insync-proxy`: run the proxy, try it on a local Kafka, manage that local Kafka, analyse audits."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import re
import signal
import sys
import time
import typing
from pathlib import Path
from typing import Any

from insync_proxy.proxy import __version__
from insync_proxy.proxy.compiled import compiled_modules, describe
from insync_proxy.proxy.config import DOCS, ConfigError, ProxyConfig
from insync_proxy.proxy.config_loader import load_config
from insync_proxy.proxy.config_reference import effective_toml
from insync_proxy.proxy.config_schema import Entry, default_text, schema

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

Ports: each listener has a bootstrap port and one port per broker at broker_port_base + node id;
clients are only ever told these addresses (advertised_host), never a broker's.
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit 2), like configuration errors."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the flags)\n")


class JsonLogFormatter(logging.Formatter):
    """log_format = "json": one JSON object a line with time (UTC, ISO 8601), level, logger and message."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def _setup_logging(level: str, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if log_format == "json"
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler], force=True)


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


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """--config, and one flag per setting of the schema that has one (values are checked by the schema)."""
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    groups: dict[str, Any] = {}
    for entry in schema():
        if not entry.flag:
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
                     extra: dict[str, Any] | None = None) -> ProxyConfig:
    """Merge file, environment and flags (and `extra` settings, by TOML key) into a validated configuration."""
    given = vars(args)
    overrides: dict[str, Any] = {e.key: given.get(_dest(e)) for e in schema() if e.flag}
    overrides.update(extra or {})
    return load_config(getattr(args, "config", None), env=env, overrides=overrides)


def _configuration(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> ProxyConfig | None:
    """The configuration, or None after printing the one-line error."""
    try:
        return config_from_args(args, extra=extra)
    except ConfigError as exc:
        print(f"insync-proxy: configuration error: {exc}", file=sys.stderr)
        return None


async def serve(config: ProxyConfig, ready_message: str | None = None) -> None:
    """Run the proxy until SIGTERM or SIGINT, then drain and stop.

    The proxy logs "listening" once its ports are bound and "ready" when /readyz turns ready.
    """
    import asyncio

    from insync_proxy.proxy.server import InsyncProxy

    proxy = InsyncProxy(config)
    await proxy.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_message:
        print(ready_message.format(bootstrap=f"{config.advertised_host}:{proxy.bootstrap_port}",
                                   admin=proxy.admin.url), flush=True)
    await stop.wait()
    await proxy.stop()


def cmd_run(args: argparse.Namespace) -> int:
    config = _configuration(args)
    if config is None:
        return 2
    _setup_logging(config.log_level, config.log_format)
    loop_name = _install_loop(config.use_uvloop)
    log.info("insync-proxy %s starting on the %s event loop; upstream %s", __version__, loop_name,
             ",".join(config.bootstrap_servers))
    build = compiled_modules()
    (log.warning if any(m.stale for m in build) else log.info)("data path: %s", describe(build))
    import asyncio

    try:
        asyncio.run(serve(config))
    except OSError as exc:
        log.error("cannot start: %s (is another process using the port?)", exc)
        return 1
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate, print the effective configuration (secrets masked); --connect: try the brokers too."""
    config = _configuration(args)
    if config is None:
        return 2
    sys.stdout.write(effective_toml(config))
    print(f"# configuration valid ({DOCS} describes every setting)", flush=True)
    if not args.connect:
        return 0
    from insync_proxy.proxy.preflight import check_connection  # loaded only here: `run` never needs it

    _setup_logging(config.log_level, config.log_format)
    return 0 if check_connection(config, lambda line: print(line, flush=True)) else 1


def _state_file() -> Path:
    from insync_proxy.devcluster.distribution import cache_dir

    return cache_dir() / "dev-cluster" / "state.json"


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
        return 0 if len(alive) == len(state["nodes"]) else 1
    if args.action == "down":
        if not state_file.exists():
            print("no dev cluster running")
            return 0
        state = json.loads(state_file.read_text())
        kill_pids([n["pid"] for n in state["nodes"] if n["pid"] and _pid_alive(n["pid"])])
        import shutil

        shutil.rmtree(state["data_dir"], ignore_errors=True)
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
    import shutil

    shutil.rmtree(data_dir, ignore_errors=True)
    cluster = LocalKafkaCluster(ClusterSettings(
        version=args.kafka_version, broker_ports=DEV_BROKER_PORTS, controller_port=DEV_CONTROLLER_PORT,
        data_dir=data_dir, die_with_parent=False, **({"broker_heap": args.broker_heap} if args.broker_heap else {}),
    ))
    try:
        cluster.start()
    except (ClusterError, DistributionError) as exc:
        print(f"insync-proxy: dev cluster did not start: {exc}", file=sys.stderr)
        return 1
    write_state(state_file, cluster)
    print(f"bootstrap.servers={cluster.bootstrap_servers}")
    print("stop it with: insync-proxy dev-cluster down")
    return 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmd_demo(args: argparse.Namespace) -> int:
    from insync_proxy.devcluster.cluster import ClusterError, ClusterSettings, LocalKafkaCluster
    from insync_proxy.devcluster.distribution import DistributionError

    # Checked before Kafka starts: a wrong setting costs no cluster start (the brokers come later).
    checked = _configuration(args, extra={"bootstrap_servers": "127.0.0.1:9092"})
    if checked is None:
        return 2
    _setup_logging(checked.log_level, checked.log_format)
    print("Starting a local 3-broker Apache Kafka (KRaft) on 127.0.0.1 ...", flush=True)
    started = time.monotonic()
    cluster = LocalKafkaCluster(ClusterSettings(version=args.kafka_version))
    try:
        try:
            cluster.start()
        except (ClusterError, DistributionError) as exc:
            print(f"insync-proxy demo: Kafka did not start: {exc}", file=sys.stderr)
            return 1
        cluster.create_topic("demo", 3, 3, {"min.insync.replicas": "2"})
        config = _configuration(args, extra={"bootstrap_servers": cluster.bootstrap_servers})
        if config is None:
            return 2
        _install_loop(config.use_uvloop)
        message = (
            f"\nKafka {cluster.version} and insync-proxy are up ({time.monotonic() - started:.0f}s).\n"
            "  Point producers at:  bootstrap.servers={bootstrap}\n"
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
    result: int = report_main(rest)
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
        "check-config", help="check a configuration and print it (secrets masked) without starting; exit 0 or 2",
        description="Validates the configuration (the same sources and flags as `run`) and prints the effective "
                    "settings as TOML, secrets masked. --connect also bootstraps from the brokers with the "
                    "configured TLS and SASL, reads Metadata and one DescribeConfigs, one line per step: exit 0 when "
                    "every step works, 1 otherwise.", epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--connect", action="store_true",
                       help="also connect to the brokers (TLS, SASL, Metadata, DescribeConfigs)")
    _add_run_flags(check)

    demo = sub.add_parser(
        "demo", help="start a local 3-broker Kafka and the proxy in front of it (Ctrl-C stops both)",
        description="Starts Apache Kafka's own jars (fetched once with Maven into ~/.cache/insync-proxy) as a "
                    "local 3-broker KRaft cluster, then the proxy in front of it.",
    )
    _add_run_flags(demo)
    demo.add_argument("--kafka-version", help="Kafka version (default: newest 4.x; or set INSYNC_PROXY_KAFKA_VERSION)")

    dev = sub.add_parser("dev-cluster", help="a local 3-broker Kafka for development (up, down, status)")
    dev.add_argument("action", choices=["up", "down", "status", "fetch"],
                     help="up: start (detached); down: stop and delete its data; status: show; "
                          "fetch: only download the Kafka jars (every supported version)")
    dev.add_argument("--kafka-version", help="Kafka version (default: newest 4.x; or set INSYNC_PROXY_KAFKA_VERSION)")
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
