"""The durability report's tables: pure DataFrame -> DataFrame functions.

Traffic tables read the aggregate shape of :func:`pipeline.schema.summaries` (v2 summaries as they
are, v1 decisions as summaries of one request), the below-min intervals read
:func:`pipeline.schema.observations`. Every table carries a ``date`` column (UTC) so it can be
written partitioned by date, and has a fixed schema (:data:`TABLE_SCHEMAS`) so an empty table is
still written with its columns. Keeping the functions pure makes every table testable on a handful
of hand-built events.

The traffic tables are cut from one small intermediate, the traffic *cube* (summaries summed per
date, partition, acks mode, decision and error code: :func:`pipeline.single_pass.cube`), the latency
tables from merged histograms (bucket counts per :data:`LATENCY_KEYS`:
:func:`pipeline.single_pass.histograms`), the below-min intervals from time-ordered runs
(:func:`isr_below_min_intervals_from_runs`). The one pass builds those intermediates
(:mod:`pipeline.single_pass`); tests/pipeline/reference.py says what they are from the events one by one.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from insync_proxy.audit import buckets
from insync_proxy.audit.events import (
    DECISION_ANSWERED_INVALID_REQUIRED_ACKS,
    DECISION_ANSWERED_NOT_ENOUGH_REPLICAS,
    PROXY_ANSWERED_DECISIONS,
)
from insync_proxy.pipeline.schema import BUCKETS_TYPE, bucket_bounds

PERCENTILES = (0.5, 0.95, 0.99)
#: The largest relative error of a latency percentile read from merged buckets (+18.9%).
PERCENTILE_RELATIVE_ERROR = buckets.RELATIVE_ERROR

#: Time buckets tried for the decisions-over-time table, smallest first; the first one giving at most
#: :data:`MAX_TIMELINE_BUCKETS` buckets over the data's time span is used.
TIMELINE_BUCKETS_S = (1, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600, 86400)
MAX_TIMELINE_BUCKETS = 120

PARTITION_KEYS = ("topic", "partition")
ACKS_KEYS = ("acks_requested", "acks_sent")

_S, _I, _L, _D, _TS, _B = T.StringType(), T.IntegerType(), T.LongType(), T.DoubleType(), T.TimestampType(), T.BooleanType()
_DATE = T.DateType()


def _schema(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, dtype, True) for name, dtype in fields])


_LATENCY_FIELDS = (("requests", _L), ("p50_ms", _D), ("p95_ms", _D), ("p99_ms", _D), ("min_ms", _D),
                   ("max_ms", _D), ("mean_ms", _D))

#: Every table's columns and types, in order. Written as is even when a table has no row.
TABLE_SCHEMAS: dict[str, T.StructType] = {
    "partition_traffic": _schema(
        ("date", _DATE), ("topic", _S), ("partition", _I), ("requests", _L), ("records", _L), ("record_bytes", _L),
        ("written_requests", _L), ("written_records", _L), ("written_record_bytes", _L),
        ("answered_by_proxy_requests", _L), ("failed_requests", _L),
    ),
    "decisions_by_kind": _schema(
        ("date", _DATE), ("topic", _S), ("partition", _I), ("decision", _S), ("requests", _L), ("records", _L),
        ("record_bytes", _L),
    ),
    "decisions_by_acks": _schema(
        ("date", _DATE), ("topic", _S), ("partition", _I), ("acks_requested", _I), ("acks_sent", _I),
        ("requests", _L), ("records", _L), ("record_bytes", _L),
    ),
    "isr_below_min_intervals": _schema(
        ("date", _DATE), ("topic", _S), ("partition", _I), ("start", _TS), ("end", _TS), ("duration_s", _D),
        ("min_isr", _I), ("lowest_isr", _I), ("open", _B), ("observations", _L), ("proxies", T.ArrayType(_S)),
    ),
    "latency_by_acks": _schema(
        ("date", _DATE), ("topic", _S), ("partition", _I), ("acks_requested", _I), ("acks_sent", _I),
        *_LATENCY_FIELDS,
    ),
    "durability_exposure": _schema(
        ("date", _DATE), ("topic", _S), ("partition", _I), ("bytes_acks_all", _L), ("bytes_acks_1", _L),
        ("bytes_acks_0", _L), ("bytes_acks_other", _L), ("bytes_sent", _L), ("bytes_answered_by_proxy", _L),
        ("exposed_share", _D),
    ),
    "top_clients": _schema(
        ("date", _DATE), ("client_id", _S), ("topic", _S), ("partition", _I), ("not_enough_replicas", _L),
        ("invalid_required_acks", _L), ("answered_errors", _L), ("first_seen", _TS), ("last_seen", _TS),
    ),
    "decisions_timeline": _schema(
        ("bucket_start", _TS), ("decision", _S), ("requests", _L), ("date", _DATE), ("bucket_seconds", _I),
    ),
}
#: The Parquet tables the batch report writes, all partitioned by ``date``.
TABLES = tuple(TABLE_SCHEMAS)
#: Not written; the report's overall latency per acks mode.
LATENCY_OVERALL_SCHEMA = _schema(("acks_requested", _I), ("acks_sent", _I), *_LATENCY_FIELDS)


def conform(frame: DataFrame, schema: T.StructType) -> DataFrame:
    """``frame`` with exactly the columns of ``schema``, in its order and types."""
    # As SQL text: one call into the JVM for the whole projection, where building it from functions took
    # some 18 a column.
    return frame.selectExpr(*[f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`" for f in schema.fields])


def empty_table(spark: SparkSession, name: str) -> DataFrame:
    """An empty frame with table ``name``'s schema."""
    return spark.createDataFrame([], TABLE_SCHEMAS[name])


def _sum0(column: Column) -> Column:
    return F.coalesce(F.sum(column), F.lit(0)).cast("long")


# --------------------------------------------------------------------------- traffic


def _traffic_sums() -> list[Column]:
    return [_sum0(F.col("requests")).alias("requests"), F.sum("records").alias("records"),
            _sum0(F.col("record_bytes")).alias("record_bytes")]


def partition_traffic(cube: DataFrame) -> DataFrame:
    """Per (date, topic, partition): requests, records and record bytes the proxies saw, and the part
    written to the log.

    ``written_*`` counts what was forwarded (``acks_sent`` not null) and acknowledged without error
    (``error_code`` 0, or null for acks=0): for a partition produced to only through proxies, its
    ``written_records`` is what its log end offset grew by. ``answered_by_proxy_requests`` never
    reached the broker; ``failed_requests`` were forwarded and got a broker error.
    """
    sent = F.col("acks_sent").isNotNull()
    ok = sent & (F.coalesce(F.col("error_code"), F.lit(0)) == 0)
    return conform(
        cube.groupBy("date", *PARTITION_KEYS).agg(
            *_traffic_sums(),
            _sum0(F.when(ok, F.col("requests"))).alias("written_requests"),
            F.sum(F.when(ok, F.col("records"))).alias("written_records"),
            _sum0(F.when(ok, F.col("record_bytes"))).alias("written_record_bytes"),
            _sum0(F.when(~sent, F.col("requests"))).alias("answered_by_proxy_requests"),
            _sum0(F.when(sent & ~ok, F.col("requests"))).alias("failed_requests"),
        ),
        TABLE_SCHEMAS["partition_traffic"],
    )


def decisions_by_kind(cube: DataFrame) -> DataFrame:
    """Produce requests per (date, topic, partition, decision): requests, records and record bytes."""
    return conform(cube.groupBy("date", *PARTITION_KEYS, "decision").agg(*_traffic_sums()),
                   TABLE_SCHEMAS["decisions_by_kind"])


def decisions_by_acks(cube: DataFrame) -> DataFrame:
    """Produce requests per (date, topic, partition, acks_requested, acks_sent): requests, records, bytes.

    ``acks_sent`` is null where the proxy answered the client itself (nothing went upstream).
    """
    return conform(cube.groupBy("date", *PARTITION_KEYS, *ACKS_KEYS).agg(*_traffic_sums()),
                   TABLE_SCHEMAS["decisions_by_acks"])


def _bytes_when(cond: Column) -> Column:
    return _sum0(F.when(cond, F.col("record_bytes")))


def durability_exposure(cube: DataFrame) -> DataFrame:
    """Record bytes by acks mode per (date, topic, partition) and the share exposed to data loss.

    ``exposed_share`` = bytes sent upstream with acks 0 or 1 / all bytes sent upstream (acks_sent
    not null); null when nothing was sent. Bytes the proxy answered itself were never written and
    are reported separately as ``bytes_answered_by_proxy``.
    """
    sent = F.col("acks_sent")
    grouped = cube.groupBy("date", *PARTITION_KEYS).agg(
        _bytes_when(sent == -1).alias("bytes_acks_all"),
        _bytes_when(sent == 1).alias("bytes_acks_1"),
        _bytes_when(sent == 0).alias("bytes_acks_0"),
        _bytes_when(sent.isNotNull() & ~sent.isin(-1, 0, 1)).alias("bytes_acks_other"),
        _bytes_when(sent.isNotNull()).alias("bytes_sent"),
        _bytes_when(sent.isNull()).alias("bytes_answered_by_proxy"),
    )
    exposed = F.col("bytes_acks_0") + F.col("bytes_acks_1")
    return conform(
        grouped.withColumn("exposed_share", F.when(F.col("bytes_sent") > 0, exposed / F.col("bytes_sent"))),
        TABLE_SCHEMAS["durability_exposure"],
    )


def top_clients(cube: DataFrame) -> DataFrame:
    """Proxy-answered requests per (date, client_id, topic, partition), most affected first.

    Counts requests ``answered_not_enough_replicas`` (error 19) and ``answered_invalid_required_acks``
    (error 21); ``client_id`` may be null (anonymous client). ``first_seen``/``last_seen`` are the
    start and end of the first and last summary interval holding one (a v1 decision's own time).
    """
    decision = F.col("decision")
    answered = cube.filter(decision.isin(*PROXY_ANSWERED_DECISIONS))
    return conform(
        answered.groupBy("date", "client_id", *PARTITION_KEYS)
        .agg(
            _sum0(F.when(decision == DECISION_ANSWERED_NOT_ENOUGH_REPLICAS, F.col("requests"))).alias("not_enough_replicas"),
            _sum0(F.when(decision == DECISION_ANSWERED_INVALID_REQUIRED_ACKS, F.col("requests"))).alias("invalid_required_acks"),
            _sum0(F.col("requests")).alias("answered_errors"),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
        )
        .orderBy(F.desc("answered_errors"), "client_id", *PARTITION_KEYS),
        TABLE_SCHEMAS["top_clients"],
    )


def timeline_bucket_seconds(span_seconds: float) -> int:
    """The smallest bucket of :data:`TIMELINE_BUCKETS_S` giving at most :data:`MAX_TIMELINE_BUCKETS` buckets."""
    for bucket in TIMELINE_BUCKETS_S:
        if span_seconds / bucket < MAX_TIMELINE_BUCKETS:
            return bucket
    return TIMELINE_BUCKETS_S[-1]


def decisions_timeline(summaries: DataFrame, bucket_seconds: int) -> DataFrame:
    """Produce requests per time bucket and decision kind (all partitions), for the report's plot.

    A summary counts in the bucket its interval started in (a v1 decision in its own time's).
    """
    seconds = F.unix_seconds(F.col("interval_start"))
    bucket = F.timestamp_seconds(seconds - F.pmod(seconds, F.lit(bucket_seconds)))
    return conform(
        summaries.groupBy(bucket.alias("bucket_start"), "decision")
        .agg(_sum0(F.col("requests")).alias("requests"))
        .withColumn("date", F.to_date("bucket_start"))
        .withColumn("bucket_seconds", F.lit(bucket_seconds)),
        TABLE_SCHEMAS["decisions_timeline"],
    )


# --------------------------------------------------------------------------- latency

LATENCY_KEYS = ("date", *PARTITION_KEYS, *ACKS_KEYS)


def _histograms(rows: DataFrame, keys: tuple[str, ...], buckets_col: str) -> DataFrame:
    """One aggregation for stats and buckets: each row's buckets are exploded, and its latency stats
    are carried by its first bucket only (so they are counted once), then summed per ``keys``."""
    exploded = rows.select(*keys, "latency_count", "latency_sum_ms", "latency_min_ms", "latency_max_ms",
                           F.posexplode(buckets_col).alias("pos", "b"))
    first = F.col("pos") == 0
    per_bucket = exploded.groupBy(*keys, F.col("b.bucket").alias("bucket")).agg(
        F.sum("b.count").alias("count"),
        F.sum(F.when(first, F.col("latency_count"))).alias("latency_count"),
        F.sum(F.when(first, F.col("latency_sum_ms"))).alias("latency_sum_ms"),
        F.min(F.when(first, F.col("latency_min_ms"))).alias("latency_min_ms"),
        F.max(F.when(first, F.col("latency_max_ms"))).alias("latency_max_ms"),
    )
    return per_bucket.groupBy(*keys).agg(
        F.sum("latency_count").cast("long").alias("latency_count"),
        F.sum("latency_sum_ms").alias("latency_sum_ms"),
        F.min("latency_min_ms").alias("latency_min_ms"),
        F.max("latency_max_ms").alias("latency_max_ms"),
        F.array_sort(F.collect_list(F.struct("bucket", "count"))).cast(BUCKETS_TYPE).alias("hist"),
    )


def merge_histograms(histograms: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    """Re-group merged histograms (:func:`pipeline.single_pass.histograms`: per :data:`LATENCY_KEYS`,
    latency count/sum/min/max and ``hist``, the sparse (bucket, count) array) by fewer ``keys``
    (e.g. over all dates and partitions): bucket bounds are fixed, so merging is adding counts."""
    return _histograms(histograms, keys, "hist")


def percentile_from_buckets(hist: Column, p: float, min_ms: Column, max_ms: Column) -> Column:
    """Percentile ``p`` of a merged histogram: the upper bound of the bucket holding rank ceil(p*n),
    kept within the observed [min, max].

    The exact (nearest-rank) percentile v lies in that bucket, (bound(b-1), bound(b)], so the value
    returned is >= v and at most v * 2^(1/4) (+18.9%, :data:`PERCENTILE_RELATIVE_ERROR`); in bucket 0
    (<= 0.01 ms) the error is at most 0.01 ms; in the overflow bucket (> ~336 s) it is the max.

    One pass over ``hist`` per percentile, and a small expression: the query planner walks it again for
    every micro-batch of the stream (a running sum per bucket read in slices was O(buckets^2) work and an
    expression the planner took seconds over).
    """
    bounds = bucket_bounds()
    total = F.aggregate(hist, F.lit(0).cast("long"), lambda acc, x: acc + x["count"])
    rank = F.greatest(F.ceil(total * F.lit(p)), F.lit(1))
    start = F.struct(F.lit(0).cast("long").alias("cum"), F.lit(None).cast("int").alias("bucket"))
    bucket = F.aggregate(hist, start, lambda acc, x: F.struct(
        (acc["cum"] + x["count"]).alias("cum"),
        F.when(acc["bucket"].isNull() & (acc["cum"] + x["count"] >= rank), x["bucket"])
        .otherwise(acc["bucket"]).alias("bucket"),
    ))["bucket"]
    upper = F.when(bucket > buckets.LAST_BOUNDED, max_ms).otherwise(F.element_at(bounds, bucket + 1))
    return F.greatest(F.least(upper, max_ms), min_ms)


def _latency_columns() -> list[Column]:
    lo, hi = F.col("latency_min_ms"), F.col("latency_max_ms")
    return [
        F.col("latency_count").alias("requests"),
        *[percentile_from_buckets(F.col("hist"), p, lo, hi).alias(f"p{round(p * 100)}_ms") for p in PERCENTILES],
        lo.alias("min_ms"),
        hi.alias("max_ms"),
        (F.col("latency_sum_ms") / F.col("latency_count")).alias("mean_ms"),
    ]


def latency_by_acks(histograms: DataFrame) -> DataFrame:
    """Produce latency p50/p95/p99 per (date, topic, partition, acks_requested, acks_sent) from the
    merged histograms (:func:`pipeline.single_pass.histograms`); ``requests`` counts requests with a measured
    latency (acks=0 requests have none)."""
    return conform(histograms.select(*LATENCY_KEYS, *_latency_columns()), TABLE_SCHEMAS["latency_by_acks"])


def latency_overall(histograms: DataFrame) -> DataFrame:
    """Produce latency per (acks_requested, acks_sent) over all topics and dates (the report's plot)."""
    merged = merge_histograms(histograms, ACKS_KEYS)
    return conform(merged.select(*ACKS_KEYS, *_latency_columns()), LATENCY_OVERALL_SCHEMA)


# --------------------------------------------------------------------------- below min ISR


def isr_below_min_intervals_from_runs(runs: DataFrame) -> DataFrame:
    """Intervals during which the proxies saw a partition's ISR below its effective min ISR.

    The observations (:func:`pipeline.schema.observations`: v2 ``partition_readiness``, and
    ``isr_change``/``produce_decision`` with a known ISR), merged across sidecars and ordered by time
    per (topic, partition). Gaps and islands: a run of consecutive below-min observations is one
    interval. It starts at the run's first observation and ends at the first observation after it
    that is not below min (when the proxy saw it recover); a run still below min at the partition's
    last observation ends there and is flagged ``open``. ``min_isr`` is the highest effective min ISR
    seen in the run, ``lowest_isr`` the smallest ISR. ``date`` is the start's date.

    The observations come as *runs*: time-ordered items that are either a run of below-min
    observations (``below``; first and last time ``ts``/``last_ts``, count ``n``, highest ``min_isr``,
    ``lowest_isr``, ``proxies``) or a separator (not below: only its first time ``ts`` matters).

    A single observation is a run of one (:func:`pipeline.single_pass.observation_runs`); the report's
    one pass gives one run or separator per time granule (:func:`pipeline.single_pass.below_min_runs`).
    Items are ordered by (ts, proxy_id, event, isr_size); ties are broken deterministically so that
    reruns give the same intervals.
    """
    order = ("ts", "proxy_id", "event", "isr_size")
    ordered = Window.partitionBy(*PARTITION_KEYS).orderBy(*order)
    running = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # One sorted pass: the below items of one run have seen the same number of items that were not
    # below (an interval ends at the first one), so that count names the interval's island.
    islands = runs.select(
        *PARTITION_KEYS, "ts", "last_ts", "n", "min_isr", "lowest_isr", "proxies", "below",
        F.lead("below").over(ordered).alias("next_below"),
        F.lead("ts").over(ordered).alias("next_ts"),
        F.sum(F.when(F.col("below"), 0).otherwise(1)).over(running).alias("island"),
    ).filter(F.col("below"))
    intervals = islands.groupBy(*PARTITION_KEYS, "island").agg(
        F.min("ts").alias("start"),
        F.max("last_ts").alias("last_below"),
        # Exactly one item per island is followed by a separator (or by none: open).
        F.max(F.when(F.col("next_below") == F.lit(False), F.col("next_ts"))).alias("recovered_at"),
        F.max("min_isr").alias("min_isr"),
        F.min("lowest_isr").alias("lowest_isr"),
        F.sum("n").alias("observations"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("proxies")))).alias("proxies"),
    )
    end = F.coalesce(F.col("recovered_at"), F.col("last_below"))
    return conform(
        intervals.select(
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
        ),
        TABLE_SCHEMAS["isr_below_min_intervals"],
    )
