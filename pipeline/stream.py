"""Streaming mode: 1-minute windowed durability aggregates kept up to date from the audit topic.

    python -m insync_proxy.pipeline.stream --kafka-bootstrap localhost:9092 --topic insync-audit \\
        --output /data/durability-stream --checkpoint /data/durability-stream-checkpoint

Structured Streaming reads the audit topic (Spark's Kafka source) or a directory that sidecars write
to (``--input-dir``, Spark's file source), parses and validates every line with the same function as
the batch report, and keeps per (window, topic, partition, decision) counts, record bytes and
latency percentiles. Windows are written to Parquet (partitioned by date) once the watermark passes
their end, so each window row is written exactly once; rejected lines go to ``rejected/`` as JSON.
Both queries checkpoint under ``--checkpoint`` and resume where they stopped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from insync_proxy.pipeline.spark_env import PipelineError, Progress

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

DEFAULT_WINDOW = "1 minute"
DEFAULT_WATERMARK = "5 minutes"


def _bucket_count(i: int) -> Column:
    """Requests in latency bucket ``i`` of one summary row (0 when it has none)."""
    from pyspark.sql import functions as F

    return F.aggregate(
        F.col("latency_buckets"), F.lit(0).cast("long"),
        lambda acc, x: acc + F.when(x["bucket"] == i, x["count"]).otherwise(F.lit(0).cast("long")),
    )


def windowed_aggregates(events: DataFrame, window: str = DEFAULT_WINDOW, watermark: str = DEFAULT_WATERMARK) -> DataFrame:
    """Produce requests per (window, topic, partition, decision): requests, records, bytes, latency.

    ``events`` are valid typed events (:func:`pipeline.schema.valid_events`), v1 or v2, batch or
    streaming; they are turned into summaries (:func:`pipeline.schema.summaries`) and a summary
    falls in the window its interval started in. Rows later than ``watermark`` behind the newest
    one seen are dropped by Spark's watermark (state stays bounded). Latency percentiles come from
    the merged histogram (one running sum per bucket: a single aggregation, so it streams), read as
    in the batch report (at most +18.9%). ``below_min_decisions`` counts v1 decisions taken while
    the ISR was below min ISR (v2 summaries carry no ISR: see the readiness events for that).
    """
    from pyspark.sql import functions as F

    from insync_proxy.audit.buckets import OVERFLOW
    from insync_proxy.audit.events import EVENT_PRODUCE_DECISION, PROXY_ANSWERED_DECISIONS
    from insync_proxy.pipeline.schema import BUCKETS_TYPE, summaries
    from insync_proxy.pipeline.tables import PERCENTILES, percentile_from_buckets

    below = (F.col("event") == EVENT_PRODUCE_DECISION) & (F.col("isr_size") < F.col("min_isr"))
    flagged = events.withColumn("_below", F.when(below, 1).otherwise(0).cast("long"))
    rows = summaries(flagged, extra_columns=("_below",)).withWatermark("interval_start", watermark)
    requests = F.col("requests")
    grouped = rows.groupBy(F.window("interval_start", window).alias("window"), "topic", "partition", "decision").agg(
        F.coalesce(F.sum(requests), F.lit(0)).cast("long").alias("requests"),
        F.sum("records").alias("records"),
        F.coalesce(F.sum("record_bytes"), F.lit(0)).alias("record_bytes"),
        F.coalesce(F.sum(F.when(F.col("acks_sent").isin(0, 1), F.col("record_bytes"))), F.lit(0)).alias("exposed_bytes"),
        F.coalesce(F.sum(F.when(F.col("decision").isin(*PROXY_ANSWERED_DECISIONS), requests)), F.lit(0))
        .cast("long").alias("proxy_answered"),
        F.coalesce(F.sum("_below"), F.lit(0)).cast("long").alias("below_min_decisions"),
        F.coalesce(F.sum("latency_count"), F.lit(0)).cast("long").alias("latency_n"),
        F.min("latency_min_ms").alias("latency_min_ms"),
        F.max("latency_max_ms").alias("latency_max_ms"),
        *[F.sum(_bucket_count(i)).alias(f"_b{i}") for i in range(OVERFLOW + 1)],
    )
    hist = F.filter(
        F.array(*[F.struct(F.lit(i).alias("bucket"), F.col(f"_b{i}").alias("count")) for i in range(OVERFLOW + 1)]),
        lambda x: x["count"] > 0,
    ).cast(BUCKETS_TYPE)
    lo, hi = F.col("latency_min_ms"), F.col("latency_max_ms")
    return grouped.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        F.to_date(F.col("window.start")).alias("date"),
        "topic", "partition", "decision", "requests", "records", "record_bytes", "exposed_bytes", "proxy_answered",
        "below_min_decisions", "latency_n",
        *[F.when(F.col("latency_n") > 0, percentile_from_buckets(hist, p, lo, hi)).alias(f"latency_p{round(p * 100)}_ms")
          for p in PERCENTILES],
        "latency_max_ms",
    )


def start_streams(
    spark: SparkSession,
    lines: DataFrame,
    output: str | Path,
    checkpoint: str | Path,
    *,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
    trigger: str | None = "30 seconds",
    available_now: bool = False,
) -> list[StreamingQuery]:
    """Start the aggregate and rejected-lines queries over raw streaming ``lines`` (value, source).

    ``available_now=True`` processes what is there and stops (tests, backfills); otherwise a
    micro-batch runs every ``trigger``. Returns the started queries (aggregates first).
    """
    from insync_proxy.pipeline.schema import parse_audit_events, rejected_events, valid_events
    from insync_proxy.pipeline.spark_env import configure_session

    configure_session(spark)
    parsed = parse_audit_events(lines, source_col="source")
    out, ckpt = Path(output), Path(checkpoint)

    def with_trigger(writer: DataStreamWriter) -> DataStreamWriter:
        if available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=trigger) if trigger else writer

    aggregates = with_trigger(
        windowed_aggregates(valid_events(parsed), window, watermark)
        .writeStream.queryName("insync_durability_windows")
        .outputMode("append")  # with a watermark each window is emitted once, when it is final
        .format("parquet")
        .partitionBy("date")
        .option("path", str(out / "windows"))
        .option("checkpointLocation", str(ckpt / "windows"))
    ).start()
    rejected = with_trigger(
        rejected_events(parsed)
        .writeStream.queryName("insync_rejected")
        .outputMode("append")
        .format("json")
        .option("path", str(out / "rejected"))
        .option("checkpointLocation", str(ckpt / "rejected"))
    ).start()
    return [aggregates, rejected]


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface of ``python -m insync_proxy.pipeline.stream``."""
    parser = argparse.ArgumentParser(
        prog="python -m insync_proxy.pipeline.stream",
        description=__doc__.split("\n\n")[2] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="output: OUTPUT/windows (Parquet, partitioned by date), OUTPUT/rejected (JSON Lines)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kafka-bootstrap", metavar="HOST:PORT[,...]", help="read the audit topic (needs --topic)")
    source.add_argument("--input-dir", metavar="DIR", help="or watch a directory for new *.jsonl files")
    parser.add_argument("--topic", help="audit topic with --kafka-bootstrap")
    parser.add_argument("--output", "-o", required=True, help="output directory")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (keep it across restarts)")
    parser.add_argument("--master", default=None, help="Spark master (default local[*] unless under spark-submit)")
    parser.add_argument("--window", default=DEFAULT_WINDOW, help=f"window length (default {DEFAULT_WINDOW!r})")
    parser.add_argument("--watermark", default=DEFAULT_WATERMARK,
                        help=f"how late events may arrive (default {DEFAULT_WATERMARK!r}); a window is written this long after it ends")
    parser.add_argument("--trigger", default="30 seconds", help="micro-batch interval (default '30 seconds')")
    parser.add_argument("--available-now", action="store_true", help="process what is available, then stop")
    parser.add_argument("--starting-offsets", default="latest", help="Kafka startingOffsets for a new checkpoint")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap records per micro-batch")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: start the streaming queries and wait for them; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.kafka_bootstrap and not args.topic:
        parser.error("--kafka-bootstrap needs --topic")
    progress = Progress()
    try:
        from insync_proxy.pipeline import sources
        from insync_proxy.pipeline.spark_env import build_session, check_master

        if args.master:
            check_master(args.master)
        jars = None
        if args.kafka_bootstrap:
            from insync_proxy.pipeline.jars import kafka_jars

            progress.stage("resolving Spark's Kafka connector jars")
            jars = kafka_jars()
        elif not Path(args.input_dir).is_dir():
            raise PipelineError(f"--input-dir {args.input_dir!r} is not a directory")
        progress.stage(f"starting Spark ({args.master or 'default master'})")
        spark = build_session(args.master, "insync-proxy durability stream", jars=jars)
        if args.kafka_bootstrap:
            lines = sources.stream_audit_kafka(spark, args.kafka_bootstrap, args.topic, args.starting_offsets,
                                               args.max_offsets_per_trigger)
        else:
            from pyspark.sql import functions as F

            lines = (spark.readStream.option("pathGlobFilter", "*.jsonl").option("recursiveFileLookup", "true")
                     .text(args.input_dir).select("value", F.col("_metadata.file_path").alias("source")))
        queries = start_streams(spark, lines, args.output, args.checkpoint, window=args.window,
                                watermark=args.watermark, trigger=args.trigger, available_now=args.available_now)
        progress.stage(f"streaming to {args.output} (checkpoint {args.checkpoint}); Ctrl-C stops")
        try:
            for query in queries:
                query.awaitTermination()
        except KeyboardInterrupt:
            for query in queries:
                query.stop()
        for query in queries:
            progress_info: dict[str, Any] = dict(query.lastProgress or {})
            progress.stage(f"{query.name}: last batch {progress_info.get('numInputRows', 0)} rows")
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
