"""`insync-proxy`: run the proxy, try it on a local Kafka, manage that local Kafka, analyse audits."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from insync_proxy.proxy import __version__
from insync_proxy.proxy.compiled import compiled_modules, describe
from insync_proxy.proxy.config import ConfigError, ProxyConfig, load_config

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

RUN_EPILOG = """\
Settings come from (lowest to highest priority): defaults, the TOML file (--config), INSYNC_PROXY_*
environment variables (e.g. INSYNC_PROXY_BOOTSTRAP_SERVERS, INSYNC_PROXY_ADMIN_PORT,
INSYNC_PROXY_CONTROL_SASL_PASSWORD), then these flags. See README.md "Configuration".

Ports: each listener has a bootstrap port and one port per broker at broker_port_base + node id;
clients are only ever told these addresses (advertised_host), never a broker's.
"""


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _install_loop(use_uvloop: bool) -> str:
    if use_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            return "uvloop"
        except ImportError:
            log.warning("uvloop is not installed: using the default asyncio loop (about half the throughput)")
    return "asyncio"


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", help="the real brokers to bootstrap from")
    p.add_argument("--bind-host", help="address the client listeners bind (default 127.0.0.1)")
    p.add_argument("--advertised-host", help="host clients are told to connect to (default 127.0.0.1)")
    p.add_argument("--bootstrap-port", type=int, help="bootstrap port of the first listener (default 9092)")
    p.add_argument("--broker-port-base", type=int,
                   help="per-broker ports of the first listener are this + node id (default 9100)")
    p.add_argument("--metadata-schema", choices=["tagged", "kip637"],
                   help="first listener: 'tagged' (default, safe for every client) or 'kip637' "
                        "(KIP-637 literal Metadata v10: NEVER for real Metadata v10+ clients)")
    p.add_argument("--hide-unready-partitions", action="store_true", default=None,
                   help="first listener: present partitions below min ISR as leaderless (producer-only listeners)")
    p.add_argument("--admin-host", help="address of the admin HTTP port (default 127.0.0.1)")
    p.add_argument("--admin-port", type=int, help="admin HTTP port: /metrics /healthz /readyz (default 9190)")
    p.add_argument("--proxy-id", help="name of this sidecar in audit events (default: host name)")
    p.add_argument("--audit-directory", help="where audit JSON Lines files go (default ./audit)")
    p.add_argument("--no-audit", action="store_true", help="do not write audit events")
    p.add_argument("--audit-interval-seconds", type=float,
                   help="seconds each produce_summary audit event covers (default 10)")
    p.add_argument("--audit-detail", choices=("summary", "every_request"),
                   help="summary (default): per-interval summaries; every_request: also one event per partition "
                        "per request (debugging: its volume grows with traffic)")
    p.add_argument("--drain-timeout-seconds", type=float, help="on SIGTERM, wait this long for in-flight requests")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    p.add_argument("--no-uvloop", action="store_true", help="use the default asyncio event loop")


def config_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> ProxyConfig:
    """Merge file, environment and flags into a validated configuration."""
    from dataclasses import replace

    overrides: dict[str, Any] = {
        "bootstrap_servers": args.bootstrap_servers,
        "bind_host": args.bind_host,
        "advertised_host": args.advertised_host,
        "admin_host": args.admin_host,
        "admin_port": args.admin_port,
        "proxy_id": args.proxy_id,
        "drain_timeout_seconds": args.drain_timeout_seconds,
        "log_level": args.log_level,
    }
    if args.no_uvloop:
        overrides["use_uvloop"] = False
    config = load_config(args.config, env=env, overrides=overrides)
    listener = config.listeners[0]
    listener_changes: dict[str, Any] = {}
    if args.bootstrap_port is not None:
        listener_changes["bootstrap_port"] = args.bootstrap_port
    if args.broker_port_base is not None:
        listener_changes["broker_port_base"] = args.broker_port_base
    if args.metadata_schema is not None:
        listener_changes["metadata_schema"] = args.metadata_schema
    if args.hide_unready_partitions:
        listener_changes["hide_unready_partitions"] = True
    if listener_changes:
        config = replace(config, listeners=(replace(listener, **listener_changes), *config.listeners[1:]))
    audit = config.audit
    if args.audit_directory:
        audit = replace(audit, directory=args.audit_directory)
    if args.no_audit:
        audit = replace(audit, enabled=False)
    if args.audit_interval_seconds is not None:
        audit = replace(audit, interval_seconds=args.audit_interval_seconds)
    if args.audit_detail is not None:
        audit = replace(audit, detail=args.audit_detail)
    config = replace(config, audit=audit)
    return config.validate()


async def serve(config: ProxyConfig, ready_message: str | None = None) -> None:
    """Run the proxy until SIGTERM or SIGINT, then drain and stop."""
    from insync_proxy.proxy.server import InsyncProxy

    proxy = InsyncProxy(config)
    await proxy.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("insync-proxy %s ready: bootstrap %s:%d, admin %s", __version__, config.advertised_host,
             proxy.bootstrap_port, proxy.admin.url)
    if ready_message:
        print(ready_message.format(bootstrap=f"{config.advertised_host}:{proxy.bootstrap_port}",
                                   admin=proxy.admin.url), flush=True)
    await stop.wait()
    await proxy.stop()


def cmd_run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"insync-proxy: configuration error: {exc}", file=sys.stderr)
        return 2
    _setup_logging(config.log_level)
    loop_name = _install_loop(config.use_uvloop)
    log.info("starting on the %s event loop; upstream %s", loop_name, ",".join(config.bootstrap_servers))
    build = compiled_modules()
    (log.warning if any(m.stale for m in build) else log.info)("data path: %s", describe(build))
    try:
        asyncio.run(serve(config))
    except OSError as exc:
        log.error("cannot start: %s (is another process using the port?)", exc)
        return 1
    return 0


def _state_file() -> Path:
    from insync_proxy.proxy.devcluster.distribution import cache_dir

    return cache_dir() / "dev-cluster" / "state.json"


DEV_BROKER_PORTS = [19091, 19092, 19093]
DEV_CONTROLLER_PORT = 19090


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    from insync_proxy.proxy.devcluster.cluster import (
        ClusterError,
        ClusterSettings,
        LocalKafkaCluster,
        kill_pids,
        write_state,
    )
    from insync_proxy.proxy.devcluster.distribution import DistributionError, cache_dir

    state_file = _state_file()
    if args.action == "fetch":
        from insync_proxy.proxy.devcluster.distribution import SUPPORTED_KAFKA_VERSIONS, kafka_libs

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
    data_dir = cache_dir() / "dev-cluster" / "data"
    import shutil

    shutil.rmtree(data_dir, ignore_errors=True)
    cluster = LocalKafkaCluster(ClusterSettings(
        version=args.kafka_version, broker_ports=DEV_BROKER_PORTS, controller_port=DEV_CONTROLLER_PORT,
        data_dir=data_dir, die_with_parent=False,
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
    from insync_proxy.proxy.devcluster.cluster import ClusterError, ClusterSettings, LocalKafkaCluster
    from insync_proxy.proxy.devcluster.distribution import DistributionError

    _setup_logging(args.log_level or "INFO")
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
        args.bootstrap_servers = cluster.bootstrap_servers
        try:
            config = config_from_args(args)
        except ConfigError as exc:
            print(f"insync-proxy: configuration error: {exc}", file=sys.stderr)
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
    parser = argparse.ArgumentParser(
        prog="insync-proxy", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"insync-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the proxy in front of real brokers", epilog=RUN_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_run_flags(run)

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
    if args.command == "demo":
        return cmd_demo(args)
    if args.command == "dev-cluster":
        return cmd_dev_cluster(args)
    if args.command == "chaos":
        from insync_proxy.proxy.devcluster.chaos import main as chaos_main  # not loaded by the proxy itself

        return chaos_main(args.bounces, args.kafka_version, args.throughput)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
