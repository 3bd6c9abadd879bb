"""The audit pipeline's commands: `report`, `stream` and `compact` (PySpark, the pipeline extra). Their command
lines are here, each flag once; the jobs take the typed options parsed here, and are loaded only when their
command runs (`run` loads no pipeline job)."""

from __future__ import annotations

import argparse
import sys
import typing
from typing import TYPE_CHECKING

from insync_proxy.pipeline.defaults import SHUFFLE_PARTITIONS, STREAM_WATERMARK, STREAM_WINDOW

if TYPE_CHECKING:  # the pipeline's jobs are loaded by their commands only, never by `run`
    from insync_proxy.pipeline.report import ReportOptions
    from insync_proxy.pipeline.stream import StreamOptions

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

#: spark.sql.shuffle.partitions' default for the report and a new stream checkpoint (pipeline/defaults.py says why).
PIPELINE_SHUFFLE_PARTITIONS = SHUFFLE_PARTITIONS

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


def add_commands(sub: typing.Any) -> None:
    """`report`, `stream` and `compact` on the command line's subparsers."""
    report = sub.add_parser("report", help="PySpark durability report over audit files or the audit topic (needs "
                                           "insync-proxy[pipeline])", description=REPORT_DESCRIPTION,
                            epilog=REPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_report_flags(report)
    report.set_defaults(handler=cmd_report)

    stream = sub.add_parser("stream", help="PySpark streaming: 1-minute durability windows kept up to date from the "
                                           "audit topic or a directory (needs insync-proxy[pipeline])",
                            description=STREAM_DESCRIPTION, epilog=STREAM_EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_stream_flags(stream)
    stream.set_defaults(handler=cmd_stream)

    compact = sub.add_parser("compact", help="PySpark: parse audit files once into Parquet for later reports "
                                             "(`report --staged`; needs insync-proxy[pipeline])",
                             description=COMPACT_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_compact_flags(compact)
    compact.set_defaults(handler=cmd_compact)
