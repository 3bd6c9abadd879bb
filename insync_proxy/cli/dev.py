"""The development commands: `demo` (a local Kafka and the proxy in front of it), `dev-cluster` (a detached local
Kafka), `kafka-cli` (Kafka's own tools) and `chaos`. The dev tooling (insync_proxy.devcluster) is imported only
inside them: `run` never loads it."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import tomllib
import typing
from pathlib import Path
from typing import Any

from insync_proxy.proxy.config.settings import ENV_PREFIX, ProxyConfig

from .configuration import add_run_flags, configuration, install_loop, log, setup_logging
from .interrupts import Interrupts

#: The settings `demo` sets itself (the brokers it starts): not flags of `demo`.
DEMO_OWN_SETTINGS = ("bootstrap_servers", "upstream_tls.", "control_sasl.")

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

def cmd_dev_cluster(args: argparse.Namespace, interrupts: Interrupts) -> int:
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
                       proxy_bootstrap, complain=lambda line: print(f"insync-proxy: {line}", file=sys.stderr),
                       interrupted=lambda: interrupts.requested)

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
    the command line names the dev tooling only inside its commands); None without `security`, or after printing why
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

def cmd_demo(args: argparse.Namespace, interrupts: Interrupts) -> int:
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
        checked = configuration(args, extra={**upstream("127.0.0.1:9092"), **_demo_audit(args)}, logs=True)
        if checked is None:
            return 2
        setup_logging(checked[0].log_level, checked[0].log_format, checked[0].log_summary_interval_seconds)
        for warning in checked[1]:
            log.warning("configuration: %s", warning)
        return _demo(args, setup, upstream, interrupts)
    finally:
        shutil.rmtree(security_dir, ignore_errors=True)

def _demo(args: argparse.Namespace, setup: Any, upstream: typing.Callable[[str], dict[str, Any]],
          interrupts: Interrupts) -> int:
    kind = f" with {setup.security.upper()} listeners" if setup else ""
    idp = setup.identity_provider if setup else None
    if idp is not None:
        idp.start()  # the brokers read its JWKS as they start
        print(f"Identity provider (OAuth 2.0, client-credentials grant) at {idp.issuer}", flush=True)
    try:
        return _demo_cluster(args, setup, upstream, kind, interrupts)
    finally:
        if idp is not None:
            idp.stop()
        if setup is not None and setup.kdc is not None:
            setup.kdc.stop()

def _demo_cluster(args: argparse.Namespace, setup: Any, upstream: typing.Callable[[str], dict[str, Any]],
                  kind: str, interrupts: Interrupts) -> int:
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
        interrupts.raise_if_requested()  # a Ctrl-C swallowed while Kafka started (an at-fork callback drops it)
        cluster.create_topic("demo", 3, 3, {"min.insync.replicas": "2"})
        interrupts.raise_if_requested()
        loaded = configuration(args, extra={**upstream(setup.upstream_servers(cluster) if setup
                                                        else cluster.bootstrap_servers), **_demo_audit(args)},
                                logs=True)
        if loaded is None:
            return 2
        config = loaded[0]
        install_loop(config.use_uvloop)
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

        from insync_proxy.proxy.lifecycle import serve

        interrupts.raise_if_requested()
        # Once serve() runs, Ctrl-C stops the proxy (its loop takes the signal); before the proxy is up that is an
        # interrupted start, as a Ctrl-C while Kafka starts is
        if not asyncio.run(serve(config, message, stop_requested=lambda: interrupts.requested)):
            raise KeyboardInterrupt
    finally:
        print("Stopping Kafka ...", flush=True)
        cluster.stop()
        cluster.cleanup()
    return 0


def interruptible(command: typing.Callable[[argparse.Namespace, Interrupts], int]
                  ) -> typing.Callable[[argparse.Namespace], int]:
    """`command` with Ctrl-C while Kafka starts turned into one line and exit 130: what was started is stopped
    on the way out. The command is given the `Interrupts` that remember a Ctrl-C, for its checkpoints."""

    def run(args: argparse.Namespace) -> int:
        try:
            with Interrupts() as interrupts:
                return command(args, interrupts)
        except KeyboardInterrupt:
            print(f"\ninsync-proxy {args.command}: interrupted; what it had started is stopped", file=sys.stderr,
                  flush=True)
            return 130

    return run


def cmd_chaos(args: argparse.Namespace) -> int:
    from insync_proxy.devcluster.chaos import main as chaos_main  # not loaded by the proxy itself

    return chaos_main(args.bounces, args.kafka_version, args.throughput)


def add_commands(sub: typing.Any) -> None:
    """`demo`, `dev-cluster`, `chaos` and `kafka-cli` on the command line's subparsers."""
    demo = sub.add_parser(
        "demo", help="start a local 3-broker Kafka and the proxy in front of it (Ctrl-C stops both)",
        description="Starts Apache Kafka's own jars (fetched once with Maven into ~/.cache/insync-proxy) as a "
                    "local 3-broker KRaft cluster, then the proxy in front of it. The demo sets the upstream "
                    "settings itself (bootstrap_servers, [upstream_tls], [control_sasl]): --security picks them.",
    )
    add_run_flags(demo, skip=DEMO_OWN_SETTINGS)
    demo.add_argument("--kafka-version", help="Kafka version (default: newest 4.x; or set INSYNC_PROXY_KAFKA_VERSION)")
    demo.add_argument("--security", choices=SECURITY_CHOICES, help=SECURITY_HELP)
    demo.set_defaults(handler=interruptible(cmd_demo))

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
    dev.set_defaults(handler=interruptible(cmd_dev_cluster))

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
    chaos.set_defaults(handler=cmd_chaos)

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
    kafka.set_defaults(handler=cmd_kafka_cli)
