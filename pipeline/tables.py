"""The durability report's tables: pure DataFrame -> DataFrame functions over valid audit events.

Each function takes the typed events of :func:`pipeline.schema.valid_events` and returns one table;
all tables carry a ``date`` column (UTC) so they can be written partitioned by date. Keeping them
pure makes every table testable on a handful of hand-built events.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from insync_proxy.pipeline.schema import (
    DECISION_ANSWERED_INVALID_REQUIRED_ACKS,
    DECISION_ANSWERED_NOT_ENOUGH_REPLICAS,
    EVENT_PRODUCE_DECISION,
    PROXY_ANSWERED_DECISIONS,
)

#: percentile_approx accuracy. Spark documents 1/accuracy as the relative rank error: the value
#: returned for percentile p of n values has a rank within p*n +- n/accuracy of the exact one.
PERCENTILE_ACCURACY = 10_000
PERCENTILES = (0.5, 0.95, 0.99)

#: Time buckets tried for the decisions-over-time table, smallest first; the first one giving at most
#: :data:`MAX_TIMELINE_BUCKETS` buckets over the data's time span is used.
TIMELINE_BUCKETS_S = (1, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600, 86400)
MAX_TIMELINE_BUCKETS = 120

PARTITION_KEYS = ("topic", "partition")

#: The event columns the tables read; the batch job caches only these (about 2/3 of the row).
TABLE_COLUMNS = (
    "event", "ts", "date", "proxy_id", "client_id", "topic", "partition", "acks_requested", "acks_sent",
    "isr_size", "min_isr", "decision", "latency_ms", "record_bytes",
)


def _decisions(events: DataFrame) -> DataFrame:
    return events.filter(F.col("event") == EVENT_PRODUCE_DECISION)


def decisions_by_kind(events: DataFrame) -> DataFrame:
    """Produce decisions per (date, topic, partition, decision): count and record bytes."""
    return (
        _decisions(events)
        .groupBy("date", *PARTITION_KEYS, "decision")
        .agg(F.count(F.lit(1)).alias("decisions"), F.sum("record_bytes").alias("record_bytes"))
    )


def decisions_by_acks(events: DataFrame) -> DataFrame:
    """Produce decisions per (date, topic, partition, acks_requested, acks_sent): count and bytes.

    ``acks_sent`` is null where the proxy answered the client itself (nothing went upstream).
    """
    return (
        _decisions(events)
        .groupBy("date", *PARTITION_KEYS, "acks_requested", "acks_sent")
        .agg(F.count(F.lit(1)).alias("decisions"), F.sum("record_bytes").alias("record_bytes"))
    )


def isr_below_min_intervals(events: DataFrame) -> DataFrame:
    """Intervals during which the proxies saw a partition's ISR below its effective min ISR.

    Observations are every event (``isr_change`` and ``produce_decision``) with both ``isr_size``
    and ``min_isr`` known, merged across sidecars and ordered by time per (topic, partition).
    Gaps and islands: a run of consecutive below-min observations is one interval. It starts at the
    run's first observation and ends at the first observation after it that is not below min (when
    the proxy saw it recover); a run still below min at the partition's last observation ends there
    and is flagged ``open``. ``min_isr`` is the highest effective min ISR seen in the run,
    ``lowest_isr`` the smallest ISR. ``date`` is the start's date.
    """
    obs = events.filter(F.col("isr_size").isNotNull() & F.col("min_isr").isNotNull()).select(
        *PARTITION_KEYS, "ts", "proxy_id", "event", "isr_size", "min_isr",
        (F.col("isr_size") < F.col("min_isr")).alias("below"),
    )
    # Ties on ts are broken deterministically so that reruns give the same intervals.
    ordered = Window.partitionBy(*PARTITION_KEYS).orderBy("ts", "proxy_id", "event", "isr_size")
    marked = (
        obs.withColumn("prev_below", F.lag("below").over(ordered))
        .withColumn("next_below", F.lead("below").over(ordered))
        .withColumn("next_ts", F.lead("ts").over(ordered))
        .filter(F.col("below"))
        .withColumn("starts", F.when(F.coalesce(F.col("prev_below"), F.lit(False)), 0).otherwise(1))
    )
    running = Window.partitionBy(*PARTITION_KEYS).orderBy("ts", "proxy_id", "event", "isr_size").rowsBetween(
        Window.unboundedPreceding, Window.currentRow
    )
    islands = marked.withColumn("island", F.sum("starts").over(running))
    intervals = islands.groupBy(*PARTITION_KEYS, "island").agg(
        F.min("ts").alias("start"),
        F.max("ts").alias("last_below"),
        # Exactly one row per island is followed by a non-below observation (or by none: open).
        F.max(F.when(F.col("next_below") == F.lit(False), F.col("next_ts"))).alias("recovered_at"),
        F.max("min_isr").alias("min_isr"),
        F.min("isr_size").alias("lowest_isr"),
        F.count(F.lit(1)).alias("observations"),
        F.array_sort(F.collect_set("proxy_id")).alias("proxies"),
    )
    end = F.coalesce(F.col("recovered_at"), F.col("last_below"))
    return intervals.select(
        F.to_date("start").alias("date"),
        *PARTITION_KEYS,
        "start",
        end.alias("end"),
        ((F.unix_micros(end) - F.unix_micros(F.col("start"))) / F.lit(1_000_000.0)).alias("duration_s"),
        "min_isr",
        "lowest_isr",
        F.col("recovered_at").isNull().alias("open"),
        "observations",
        "proxies",
    )


def _percentile_columns(column: str) -> list[Column]:
    pct = F.percentile_approx(column, list(PERCENTILES), PERCENTILE_ACCURACY)
    return [pct[i].alias(f"p{round(p * 100)}_ms") for i, p in enumerate(PERCENTILES)]


def _latency_agg(events: DataFrame, *keys: str) -> DataFrame:
    with_latency = _decisions(events).filter(F.col("latency_ms").isNotNull())
    return with_latency.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("requests"),
        *_percentile_columns("latency_ms"),
        F.max("latency_ms").alias("max_ms"),
        F.avg("latency_ms").alias("mean_ms"),
    )


def latency_by_acks(events: DataFrame) -> DataFrame:
    """Produce latency p50/p95/p99 per (date, topic, partition, acks_requested, acks_sent).

    Percentiles come from ``percentile_approx`` with accuracy :data:`PERCENTILE_ACCURACY`
    (rank error at most n/accuracy). Decisions without a latency (acks=0) are left out.
    """
    return _latency_agg(events, "date", *PARTITION_KEYS, "acks_requested", "acks_sent")


def latency_overall(events: DataFrame) -> DataFrame:
    """Produce latency p50/p95/p99 per (acks_requested, acks_sent) over all topics and dates (report)."""
    return _latency_agg(events, "acks_requested", "acks_sent")


def _bytes_when(cond: Column) -> Column:
    return F.coalesce(F.sum(F.when(cond, F.col("record_bytes"))), F.lit(0)).cast("long")


def durability_exposure(events: DataFrame) -> DataFrame:
    """Record bytes by acks mode per (date, topic, partition) and the share exposed to data loss.

    ``exposed_share`` = bytes sent upstream with acks 0 or 1 / all bytes sent upstream (acks_sent
    not null); null when nothing was sent. Bytes the proxy answered itself were never written and
    are reported separately as ``bytes_answered_by_proxy``.
    """
    sent = F.col("acks_sent")
    grouped = _decisions(events).groupBy("date", *PARTITION_KEYS).agg(
        _bytes_when(sent == -1).alias("bytes_acks_all"),
        _bytes_when(sent == 1).alias("bytes_acks_1"),
        _bytes_when(sent == 0).alias("bytes_acks_0"),
        _bytes_when(sent.isNotNull() & ~sent.isin(-1, 0, 1)).alias("bytes_acks_other"),
        _bytes_when(sent.isNotNull()).alias("bytes_sent"),
        _bytes_when(sent.isNull()).alias("bytes_answered_by_proxy"),
    )
    exposed = F.col("bytes_acks_0") + F.col("bytes_acks_1")
    return grouped.withColumn(
        "exposed_share", F.when(F.col("bytes_sent") > 0, exposed / F.col("bytes_sent"))
    )


def top_clients(events: DataFrame) -> DataFrame:
    """Proxy-answered errors per (date, client_id, topic, partition), most affected first.

    Counts decisions ``answered_not_enough_replicas`` (error 19) and
    ``answered_invalid_required_acks`` (error 21); ``client_id`` may be null (anonymous client).
    """
    answered = _decisions(events).filter(F.col("decision").isin(*PROXY_ANSWERED_DECISIONS))
    decision = F.col("decision")
    return (
        answered.groupBy("date", "client_id", *PARTITION_KEYS)
        .agg(
            F.count(F.when(decision == DECISION_ANSWERED_NOT_ENOUGH_REPLICAS, 1)).alias("not_enough_replicas"),
            F.count(F.when(decision == DECISION_ANSWERED_INVALID_REQUIRED_ACKS, 1)).alias("invalid_required_acks"),
            F.count(F.lit(1)).alias("answered_errors"),
            F.min("ts").alias("first_seen"),
            F.max("ts").alias("last_seen"),
        )
        .orderBy(F.desc("answered_errors"), "client_id", *PARTITION_KEYS)
    )


def timeline_bucket_seconds(span_seconds: float) -> int:
    """The smallest bucket of :data:`TIMELINE_BUCKETS_S` giving at most :data:`MAX_TIMELINE_BUCKETS` buckets."""
    for bucket in TIMELINE_BUCKETS_S:
        if span_seconds / bucket < MAX_TIMELINE_BUCKETS:
            return bucket
    return TIMELINE_BUCKETS_S[-1]


def decisions_timeline(events: DataFrame, bucket_seconds: int) -> DataFrame:
    """Produce decisions per time bucket and decision kind (all partitions), for the report's plot."""
    seconds = F.unix_seconds(F.col("ts"))
    bucket = F.timestamp_seconds(seconds - F.pmod(seconds, F.lit(bucket_seconds)))
    return (
        _decisions(events)
        .groupBy(bucket.alias("bucket_start"), "decision")
        .agg(F.count(F.lit(1)).alias("decisions"))
        .withColumn("date", F.to_date("bucket_start"))
        .withColumn("bucket_seconds", F.lit(bucket_seconds))
    )


#: The Parquet tables the batch report writes, all partitioned by ``date``.
TABLES = (
    "decisions_by_kind",
    "decisions_by_acks",
    "isr_below_min_intervals",
    "latency_by_acks",
    "durability_exposure",
    "top_clients",
    "decisions_timeline",
)
