"""Compaction: parse and validate audit JSON Lines once, keep them as Parquet for later reports.

    insync-proxy compact --input 'audit/**/*.jsonl' --output /data/audit-staged
    insync-proxy report --staged /data/audit-staged --output out/

Parsing JSON is most of a report's cost (see docs/pipeline.md, "Scale"). A fleet's files can be
compacted as they rotate (each hour, say, into the same directory: ``--mode append``), so that the
daily report reads columnar, typed events and parses nothing. The output holds exactly what the
report's own parse step produces (``pipeline.schema.PARSED_SCHEMA``, rejected lines included with
their reason), partitioned by ``date``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from insync_proxy.pipeline.spark_env import PipelineError, Progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Keys a v2 summary is rolled up by (with its time granule): everything that tells summaries apart.
ROLLUP_KEYS = ("date", "proxy_id", "listener", "client_id", "topic", "partition", "acks_requested", "acks_sent",
               "decision", "error_code")


def rollup_summaries(parsed: DataFrame, seconds: int) -> DataFrame:
    """``parsed`` events with the v2 ``produce_summary`` rows of each key merged per ``seconds`` granule.

    Exact for every table of the report: counts and bytes add, histograms add bucket by bucket (the
    bounds are fixed), min/max merge; the merged row's ``interval_start`` is the granule's start (the
    first interval's start when it is later) and ``ts`` the last interval's end. Only the timeline's
    resolution becomes ``seconds`` (the report's own timeline bucket is 900 s for a day). Every other
    event (v1, readiness, ISR changes, rejected lines) is kept as it is.
    """
    from pyspark.sql import functions as F

    from insync_proxy.audit.events import EVENT_PRODUCE_SUMMARY
    from insync_proxy.pipeline.schema import PARSED_SCHEMA

    is_summary = (F.col("reject_reason").isNull() & (F.col("schema_version") == 2)
                  & (F.col("event") == EVENT_PRODUCE_SUMMARY))
    summaries = parsed.filter(is_summary)
    others = parsed.filter(~is_summary | is_summary.isNull())
    start = F.unix_seconds(F.col("interval_start"))
    granule = F.timestamp_seconds(start - F.pmod(start, F.lit(seconds))).alias("_granule")
    keyed = summaries.select("*", granule)
    keys = [*ROLLUP_KEYS, "_granule"]
    stats = keyed.groupBy(*keys).agg(
        F.min("interval_start").alias("interval_start"), F.max("ts").alias("ts"),
        F.sum("interval_seconds").alias("interval_seconds"), F.sum("requests").alias("requests"),
        F.sum("records").alias("records"), F.sum("record_bytes").alias("record_bytes"),
        F.sum("latency_count").alias("latency_count"), F.sum("latency_sum_ms").alias("latency_sum_ms"),
        F.min("latency_min_ms").alias("latency_min_ms"), F.max("latency_max_ms").alias("latency_max_ms"),
    )
    buckets = (keyed.select(*keys, F.explode("latency_buckets").alias("b"))
               .groupBy(*keys, F.col("b")[0].alias("bucket")).agg(F.sum(F.col("b")[1]).alias("n"))
               .groupBy(*keys).agg(F.array_sort(F.collect_list(F.array("bucket", "n"))).alias("latency_buckets")))
    s, b = stats.alias("s"), buckets.alias("b")
    joined = s.join(b, [F.col(f"s.{k}").eqNullSafe(F.col(f"b.{k}")) for k in keys], "left")
    constants = {"schema_version": F.lit(2), "event": F.lit(EVENT_PRODUCE_SUMMARY),
                 "latency_buckets": F.coalesce(F.col("b.latency_buckets"), F.array().cast("array<array<bigint>>")),
                 "interval_seconds": F.lit(float(seconds))}
    stat_columns = {"interval_start", "ts", "requests", "records", "record_bytes", "latency_count", "latency_sum_ms",
                    "latency_min_ms", "latency_max_ms", *ROLLUP_KEYS}
    rolled = joined.select(*[
        (constants[f.name] if f.name in constants
         else F.col(f"s.{f.name}") if f.name in stat_columns
         else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in PARSED_SCHEMA.fields
    ])
    return rolled.unionByName(others.select(*[f.name for f in PARSED_SCHEMA.fields]))


@dataclass(frozen=True)
class CompactOptions:
    """What `insync-proxy compact` was asked for (insync_proxy/cli.py parses the command line)."""

    inputs: tuple[str, ...]
    output: str
    mode: str = "append"
    rollup_seconds: int = 0
    master: str | None = None
    verbose: bool = False


def compact_command(options: CompactOptions) -> int:
    """Compact the inputs into Parquet; returns the exit status (0 done, 2 bad input or no Java)."""
    progress = Progress()
    try:
        from insync_proxy.pipeline import sources
        from insync_proxy.pipeline.report import verbose_requested
        from insync_proxy.pipeline.spark_env import build_session

        files = sources.resolve_inputs(list(options.inputs))
        spark = build_session(options.master, "insync-proxy audit compaction",
                              verbose=verbose_requested(options.verbose))
        progress.stage(f"compacting {len(files):,} file(s) into {options.output}")
        parsed = sources.read_audit_files(spark, files)
        if options.rollup_seconds > 0:
            parsed = rollup_summaries(parsed, options.rollup_seconds)
        parsed.write.mode(options.mode).partitionBy("date").parquet(options.output)
        progress.stage("done")
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
