"""`insync-proxy`: run the proxy, try it on a local Kafka, manage that local Kafka, analyse audits. The command
line, a room per kind of command: run.py (`run`, `check-config`), dev.py (`demo`, `dev-cluster`, `kafka-cli`,
`chaos`) and pipeline_commands.py (`report`, `stream`, `compact`), over configuration.py (the settings' flags).
The proxy process's life is insync_proxy.proxy.lifecycle's; the jobs take the options parsed here."""

from __future__ import annotations

import argparse
import sys

from insync_proxy.proxy import __version__

from . import dev, pipeline_commands, run
from .configuration import JsonLogFormatter, Parser, config_from_args
from .dev import DEV_PORT_BASE, KAFKA_TOOL_NAMES
from .pipeline_commands import PIPELINE_SHUFFLE_PARTITIONS, report_options, stream_options
from .run import start_failure

__all__ = ["DEV_PORT_BASE", "KAFKA_TOOL_NAMES", "PIPELINE_SHUFFLE_PARTITIONS", "JsonLogFormatter", "build_parser",
           "config_from_args", "main", "report_options", "start_failure", "stream_options"]

DESCRIPTION = """\
insync-proxy: a Kafka sidecar that makes producers durability-aware, for any broker and any client.

Producers point bootstrap.servers at the proxy; it forwards everything to the real brokers and adds:
  - KIP-637: each topic's min.insync.replicas in Metadata responses (tagged field 637, v9+);
  - KIP-926: acks=-2 ("acks=min.insync.replicas"), answered NOT_ENOUGH_REPLICAS by the proxy when a
    partition's ISR is below its min ISR, forwarded as acks=-1 otherwise;
  - KIP-1: INVALID_REQUIRED_ACKS for acks outside -2/-1/0/1;
  - Prometheus metrics on the admin port, and an audit stream of every acks decision.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="insync-proxy", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"insync-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run.add_commands(sub)
    dev.add_commands(sub)
    pipeline_commands.add_commands(sub)
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
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    code: int = handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
