"""The report's one pass over the parsed events: every table's input aggregated in a single scan.

Parsing and validating JSON is most of a report's cost, and every table needs a different grouping of
the same events. Instead of keeping a parsed copy of every line for the tables to read again, the
scan that parses the lines also adds them into one hash aggregation whose result every table is cut
from. Each line gives one or a few *aggregate rows*, and the aggregation sums them per row kind and
key (Spark aggregates partially before the shuffle, so the shuffle carries sums, not lines; the
result is bounded by keys, not by lines):

===============  ==================================================  ===================================
row kind          key (the other key columns are null)                values
===============  ==================================================  ===================================
TRAFFIC (every    date, topic, partition, acks_requested, acks_sent,  requests, lines, records, record
line)             decision, error_code, latency bucket, event kind;   bytes, first/last time, bucket
                  for a rejected line only its reason, source and     count, latency sum/min/max
                  raw text
TIMELINE          timeline granule, decision                          requests
(produce traffic)
OBSERVATION       topic, partition, minute, below min ISR or not,     lines, first/last time, lowest
                  proxy_id (below only)                               ISR, highest min ISR
CLIENT (proxy-    date, topic, partition, client_id, decision         requests, first/last time
answered)
===============  ==================================================  ===================================

The traffic cube, latency histograms and accounting are all cut from the TRAFFIC rows: one row
carries a request's bytes and its latency bucket at once, so a line costs one hash update there, not
one per table. The timeline has rows of its own: with a time in the TRAFFIC key, summaries that
already cover one granule each (a fleet's, rolled up) would not aggregate at all. Everything is
exact as from the events one by one: sums add, histograms add bucket by bucket (fixed bounds), min
and max merge. A v2 summary's latency buckets are exploded first (one row per bucket); only its
first bucket's row carries its other values.

**Timeline.** Its requests are summed per ``timeline_seconds`` granule, a divisor of every timeline
bucket the report could pick for the data's time span (the buckets form a chain of multiples):
:func:`timeline_granule` picks it from a lower bound of the span (the first and last lines of the
input files, the time range of staged events), so summing the granules into the report's bucket is exact; the report checks it and
counts the timeline from the events again otherwise.

**Below-min intervals** need the observations in time order, which an aggregation does not keep.
Per (topic, partition) and :data:`GRANULE_SECONDS` granule, the observations that were below min ISR
and those that were not are aggregated apart (count, first and last time). A granule whose
observations all agree is one *run* (below) or one *separator* (not below: only its first time can
end an interval); a granule whose below observations all come strictly before (or strictly after)
its others is a run and a separator in that order. Only a granule where the two kinds interleave (or
share a timestamp) needs its observations one by one: those granules' observations are read again
from the input in a second scan, which the report runs only when such a granule exists (ISR
flapping, or sidecars disagreeing, within one granule). Runs and separators, ordered by time, then
give the intervals by the same gaps-and-islands pass as the observations themselves would
(:func:`pipeline.tables.isr_below_min_intervals_from_runs`): exact, with per-item work instead of
per-observation work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from insync_proxy.audit.events import (
    EVENT_ISR_CHANGE,
    EVENT_KINDS_BY_VERSION,
    EVENT_PARTITION_READINESS,
    EVENT_PRODUCE_DECISION,
    EVENT_PRODUCE_SUMMARY,
    PROXY_ANSWERED_DECISIONS,
)
from insync_proxy.pipeline.schema import BUCKETS_TYPE, bucket_index
from insync_proxy.pipeline.tables import (
    LATENCY_KEYS,
    PARTITION_KEYS,
    TIMELINE_BUCKETS_S,
    timeline_bucket_seconds,
)

#: Time granule of the below-min observations' aggregation (seconds). Intervals are exact whatever it
#: is; a granule only needs a second look when below and not-below observations interleave in it.
GRANULE_SECONDS = 60

#: The kinds of aggregate row (see the module's docstring).
SET_TRAFFIC = 0
SET_OBSERVATION = 1
SET_CLIENT = 2
SET_TIMELINE = 3

#: The (schema_version, event) kinds a TRAFFIC row's ``kind`` numbers (an int key hashes cheaper).
KINDS: tuple[tuple[int, str], ...] = tuple(
    (version, event) for version, events in EVENT_KINDS_BY_VERSION.items() for event in events
)
#: The kinds that are produce traffic: v1 decisions, v2 summaries (v2 decisions are debug detail,
#: counted in that proxy's summaries already).
TRAFFIC_KINDS = (KINDS.index((1, EVENT_PRODUCE_DECISION)), KINDS.index((2, EVENT_PRODUCE_SUMMARY)))

#: Key columns of the aggregate, and the row kinds that use each (null in the others).
KEYS: dict[str, tuple[int, ...]] = {
    "set": (SET_TRAFFIC, SET_OBSERVATION, SET_CLIENT, SET_TIMELINE),
    "date": (SET_TRAFFIC, SET_CLIENT),
    "topic": (SET_TRAFFIC, SET_OBSERVATION, SET_CLIENT),
    "partition": (SET_TRAFFIC, SET_OBSERVATION, SET_CLIENT),
    "acks_requested": (SET_TRAFFIC,),
    "acks_sent": (SET_TRAFFIC,),
    "decision": (SET_TRAFFIC, SET_CLIENT, SET_TIMELINE),
    "error_code": (SET_TRAFFIC,),
    "bucket": (SET_TRAFFIC,),
    "timeline_start": (SET_TIMELINE,),
    "kind": (SET_TRAFFIC,),
    "reason": (SET_TRAFFIC,),
    "source": (SET_TRAFFIC,),
    "line": (SET_TRAFFIC,),
    "client_id": (SET_CLIENT,),
    "granule": (SET_OBSERVATION,),
    "below": (SET_OBSERVATION,),
    "proxy_id": (SET_OBSERVATION,),
}


#: How each value column of the aggregate combines.
VALUE_AGGREGATES: dict[str, Callable[[str], Column]] = {
    "requests": F.sum, "lines": F.sum, "records": F.sum, "record_bytes": F.sum, "first_us": F.min,
    "last_us": F.max, "bucket_count": F.sum, "latency_sum_ms": F.sum, "latency_min_ms": F.min,
    "latency_max_ms": F.max, "lowest_isr": F.min, "min_isr": F.max,
}


def _epoch_seconds(micros: Column) -> Column:
    return F.floor(micros / F.lit(1_000_000))


def _granule_start(seconds: Column, granule: int) -> Column:
    return seconds - F.pmod(seconds, F.lit(granule))


def aggregate(parsed: DataFrame, timeline_seconds: int = 1) -> DataFrame:
    """The one pass: the parsed lines (valid and rejected) summed per aggregate row kind and key."""
    valid = F.col("reject_reason").isNull()
    version, event = F.col("schema_version"), F.col("event")
    is_summary = valid & (version == 2) & (event == EVENT_PRODUCE_SUMMARY)
    is_v1_decision = valid & (version == 1) & (event == EVENT_PRODUCE_DECISION)
    traffic = is_summary | is_v1_decision
    lat = F.col("latency_ms")
    readiness = valid & (event == EVENT_PARTITION_READINESS) & F.col("ready").isNotNull()
    with_isr = (valid & event.isin(EVENT_ISR_CHANGE, EVENT_PRODUCE_DECISION)
                & F.col("isr_size").isNotNull() & F.col("min_isr").isNotNull())
    answered = traffic & F.col("decision").isin(*PROXY_ANSWERED_DECISIONS)
    # One row per latency bucket of a summary (the first carries the summary's other values), one
    # row for any other line (_pos null); then the extra OBSERVATION and CLIENT rows.
    with_buckets = parsed.select(
        "*", F.posexplode_outer(F.when(is_summary & (F.col("latency_count") > 0), F.col("latency_buckets")))
        .alias("_pos", "_pair"),
    )
    first = F.col("_pos").isNull() | (F.col("_pos") == 0)
    sets = F.array(F.lit(SET_TRAFFIC), F.when(first & traffic, F.lit(SET_TIMELINE)),
                   F.when(first & (readiness | with_isr), F.lit(SET_OBSERVATION)),
                   F.when(first & answered, F.lit(SET_CLIENT)))
    rows = with_buckets.select("*", F.explode(sets).alias("set")).filter(F.col("set").isNotNull())

    def pick(v2: Column, v1: Column) -> Column:
        return F.when(is_summary, v2).otherwise(v1)

    row_set = F.col("set")
    start_us = F.unix_micros(pick(F.col("interval_start"), F.col("ts")))
    ts_seconds = F.unix_seconds(F.col("ts"))
    below = F.when(event == EVENT_PARTITION_READINESS, ~F.col("ready")).otherwise(F.col("isr_size") < F.col("min_isr"))
    kind: Column = F.lit(None)
    for i, (v, e) in enumerate(KINDS):
        kind = F.when(valid & (version == v) & (event == e), F.lit(i)).otherwise(kind)
    keys = {
        "set": row_set,
        "date": F.when(valid, F.col("date")),
        "topic": F.when(valid, F.col("topic")),
        "partition": F.when(valid, F.col("partition")),
        "acks_requested": F.when(traffic, F.col("acks_requested")),
        "acks_sent": F.when(traffic, F.col("acks_sent")),
        "decision": F.when(traffic, F.col("decision")),
        "error_code": F.when(traffic, F.col("error_code")),
        "bucket": F.when(is_summary, F.col("_pair")[0].cast("int")).when(is_v1_decision & lat.isNotNull(),
                                                                          bucket_index(lat)),
        "timeline_start": F.when(traffic, _granule_start(_epoch_seconds(start_us), timeline_seconds)),
        "kind": kind,
        "reason": F.col("reject_reason"),
        "source": F.col("source"),
        "line": F.col("line"),
        "client_id": F.col("client_id"),
        "granule": _granule_start(ts_seconds, GRANULE_SECONDS),
        "below": below,
        # Only a run lists its proxies: observations that were not below need no proxy key.
        "proxy_id": F.when(below, F.col("proxy_id")),
    }

    def only(c: Column, *sets: int) -> Column:
        if len(sets) == len(KEYS["set"]):
            return c
        cond = row_set == sets[0] if len(sets) == 1 else row_set.isin(*sets)
        return F.when(cond, c)

    on_first = F.when(first, F.lit(1)).cast("long")
    values = {
        "requests": F.when(first & traffic, pick(F.col("requests"), F.lit(1).cast("long"))),
        "lines": on_first,
        "records": F.when(first & traffic, F.col("records")),
        "record_bytes": F.when(first & traffic, F.col("record_bytes")),
        "first_us": F.when(valid, start_us),
        "last_us": F.when(valid, F.unix_micros(F.col("ts"))),
        "bucket_count": F.when(is_summary, F.col("_pair")[1]).when(is_v1_decision & lat.isNotNull(), F.lit(1).cast("long")),
        "latency_sum_ms": F.when(first, pick(F.col("latency_sum_ms"), lat)),
        "latency_min_ms": F.when(first, pick(F.col("latency_min_ms"), lat)),
        "latency_max_ms": F.when(first, pick(F.col("latency_max_ms"), lat)),
        "lowest_isr": F.col("isr_size"),
        "min_isr": F.col("min_isr"),
    }
    keyed = rows.select(*[only(c, *KEYS[name]).alias(name) for name, c in keys.items()],
                        *[c.alias(name) for name, c in values.items()])
    return keyed.groupBy(*KEYS).agg(*[VALUE_AGGREGATES[name](name).alias(name) for name in values])


def timeline_granule(span_lower_bound_s: float | None) -> int:
    """The timeline granule for data whose time span is at least ``span_lower_bound_s``: the bucket
    the report would pick for that span, which divides the bucket it picks for any longer span."""
    if not span_lower_bound_s or span_lower_bound_s <= 0:
        return TIMELINE_BUCKETS_S[0]
    return timeline_bucket_seconds(span_lower_bound_s)


def time_range(events: DataFrame) -> list[float]:
    """The valid events' first interval start and last time, in epoch seconds ([] if there is none)."""
    valid = F.col("reject_reason").isNull()
    row = events.agg(
        F.min(F.when(valid, F.unix_micros(F.coalesce("interval_start", "ts")))).alias("first"),
        F.max(F.when(valid, F.unix_micros(F.col("ts")))).alias("last"),
    ).collect()[0]
    return [] if row["first"] is None else [row["first"] / 1e6, row["last"] / 1e6]


def _of(agg: DataFrame, row_set: int) -> DataFrame:
    return agg.filter(F.col("set") == row_set)


def _traffic(agg: DataFrame) -> DataFrame:
    return _of(agg, SET_TRAFFIC).filter(F.col("kind").isin(*TRAFFIC_KINDS))


def _ts(micros: str) -> Column:
    return F.timestamp_micros(F.col(micros))


#: The traffic keys :func:`cube` keeps.
CUBE_KEYS = ("date", "topic", "partition", "acks_requested", "acks_sent", "decision", "error_code")


def cube(agg: DataFrame) -> DataFrame:
    """Traffic per (date, topic, partition, acks_requested, acks_sent, decision, error_code): requests,
    records, record bytes, first interval start and last end, summed over the traffic rows."""
    return _traffic(agg).groupBy(*CUBE_KEYS).agg(
        F.sum("requests").alias("requests"), F.sum("records").alias("records"),
        F.sum("record_bytes").alias("record_bytes"), _ts_min("first_us").alias("first_seen"),
        _ts_max("last_us").alias("last_seen"),
    )


def _ts_min(micros: str) -> Column:
    return F.timestamp_micros(F.min(micros))


def _ts_max(micros: str) -> Column:
    return F.timestamp_micros(F.max(micros))


def clients(agg: DataFrame) -> DataFrame:
    """Proxy-answered requests per (date, topic, partition, client_id, decision), in the columns
    :func:`tables.top_clients` reads."""
    return _of(agg, SET_CLIENT).select(
        "date", *PARTITION_KEYS, "client_id", "decision", "requests",
        _ts("first_us").alias("first_seen"), _ts("last_us").alias("last_seen"),
    )


def histograms(agg: DataFrame) -> DataFrame:
    """Merged latency histograms per :data:`tables.LATENCY_KEYS` of the requests with a measured latency:
    latency count, sum, min, max and ``hist``, the sparse (bucket, count) array sorted by bucket, from
    the traffic rows' buckets (the latency count is the sum of the bucket counts: validation checks that
    a summary's buckets add up to it)."""
    per_bucket = _traffic(agg).filter(F.col("bucket").isNotNull()).groupBy(*LATENCY_KEYS, "bucket").agg(
        F.sum("bucket_count").alias("count"), F.sum("latency_sum_ms").alias("latency_sum_ms"),
        F.min("latency_min_ms").alias("latency_min_ms"), F.max("latency_max_ms").alias("latency_max_ms"),
    )
    return per_bucket.groupBy(*LATENCY_KEYS).agg(
        F.sum("count").cast("long").alias("latency_count"),
        F.sum("latency_sum_ms").alias("latency_sum_ms"),
        F.min("latency_min_ms").alias("latency_min_ms"),
        F.max("latency_max_ms").alias("latency_max_ms"),
        F.array_sort(F.collect_list(F.struct("bucket", "count"))).cast(BUCKETS_TYPE).alias("hist"),
    )


def timeline_summaries(agg: DataFrame) -> DataFrame:
    """Requests per timeline granule and decision, in the shape :func:`tables.decisions_timeline` reads."""
    return _of(agg, SET_TIMELINE).select(
        F.timestamp_seconds(F.col("timeline_start")).alias("interval_start"), "decision", "requests",
    )


def line_counts(agg: DataFrame) -> list[dict[str, Any]]:
    """Lines per (schema_version, event) of the valid ones and per reason of the rejected ones, with
    the valid lines' first and last time (epoch microseconds): the report's accounting."""
    rows = _of(agg, SET_TRAFFIC).groupBy("kind", "reason").agg(
        F.sum("lines").alias("lines"), F.min("first_us").alias("first_us"), F.max("last_us").alias("last_us"),
    ).collect()
    out = []
    for r in rows:
        version, event = KINDS[r["kind"]] if r["kind"] is not None else (None, None)
        out.append({"schema_version": version, "event": event, "reason": r["reason"], "lines": r["lines"],
                    "first_us": r["first_us"], "last_us": r["last_us"]})
    return out


def rejected_lines(agg: DataFrame) -> DataFrame:
    """The rejected lines (reason, source, line), each as often as it was read."""
    row = F.struct("reason", "source", "line")
    rejected = _of(agg, SET_TRAFFIC).filter(F.col("reason").isNotNull())
    return rejected.select(F.explode(F.array_repeat(row, F.col("lines").cast("int"))).alias("r")).select("r.*")


def granule_summaries(agg: DataFrame) -> DataFrame:
    """Per (topic, partition, granule): the below and the not-below observations' counts and time ranges."""
    obs = _of(agg, SET_OBSERVATION)
    is_below = F.col("below")

    def when_below(c: Column, below: bool = True) -> Column:
        return F.when(is_below if below else ~is_below, c)

    return obs.groupBy(*PARTITION_KEYS, "granule").agg(
        F.sum(when_below(F.col("lines"))).alias("below_n"),
        F.min(when_below(F.col("first_us"))).alias("below_first"),
        F.max(when_below(F.col("last_us"))).alias("below_last"),
        F.min(when_below(F.col("lowest_isr"))).alias("lowest_isr"),
        F.max(when_below(F.col("min_isr"))).alias("min_isr"),
        F.array_sort(F.collect_set(when_below(F.col("proxy_id")))).alias("proxies"),
        F.sum(when_below(F.col("lines"), False)).alias("above_n"),
        F.min(when_below(F.col("first_us"), False)).alias("above_first"),
        F.max(when_below(F.col("last_us"), False)).alias("above_last"),
    )


def interleaved() -> Column:
    """True for a granule whose below and not-below observations interleave (or share a time)."""
    both = F.col("below_n").isNotNull() & F.col("above_n").isNotNull()
    ordered = (F.col("below_last") < F.col("above_first")) | (F.col("above_last") < F.col("below_first"))
    return both & ~ordered


def below_min_runs(granules: DataFrame) -> DataFrame:
    """Runs (below) and separators (not below) of the granules that need no second look."""
    clean = granules.filter(~interleaved())
    run = F.struct(
        _ts("below_first").alias("ts"), F.lit(True).alias("below"), _ts("below_last").alias("last_ts"),
        F.col("below_n").alias("n"), F.col("min_isr").alias("min_isr"), F.col("lowest_isr").alias("lowest_isr"),
        F.col("proxies").alias("proxies"),
    )
    separator = F.struct(
        _ts("above_first").alias("ts"), F.lit(False).alias("below"), _ts("above_first").alias("last_ts"),
        F.col("above_n").alias("n"), F.lit(None).cast("int").alias("min_isr"),
        F.lit(None).cast("int").alias("lowest_isr"), F.array().cast("array<string>").alias("proxies"),
    )
    items = F.array(F.when(F.col("below_n").isNotNull(), run), F.when(F.col("above_n").isNotNull(), separator))
    return clean.select(*PARTITION_KEYS, F.explode(items).alias("i")).filter(F.col("i").isNotNull()).select(
        *PARTITION_KEYS, "i.ts", F.lit(None).cast("string").alias("proxy_id"), F.lit(None).cast("string").alias("event"),
        F.lit(None).cast("int").alias("isr_size"), "i.below", "i.last_ts", F.col("i.n").cast("long").alias("n"),
        "i.min_isr", "i.lowest_isr", "i.proxies",
    )


def observation_runs(observations: DataFrame) -> DataFrame:
    """Observations (:data:`schema.OBSERVATION_COLUMNS`) one by one, as runs of one."""
    below = F.col("below")
    return observations.select(
        *PARTITION_KEYS, "ts", "proxy_id", "event", "isr_size", "below", F.col("ts").alias("last_ts"),
        F.lit(1).cast("long").alias("n"), F.when(below, F.col("min_isr")).alias("min_isr"),
        F.when(below, F.col("isr_size")).alias("lowest_isr"),
        F.when(below, F.array(F.col("proxy_id"))).otherwise(F.array().cast("array<string>")).alias("proxies"),
    )


def observations_in(observations: DataFrame, granules: DataFrame) -> DataFrame:
    """The observations that fall in ``granules`` (topic, partition, granule)."""
    seconds = F.unix_seconds(F.col("ts"))
    keyed = observations.withColumn("granule", _granule_start(seconds, GRANULE_SECONDS))
    return keyed.join(F.broadcast(granules.select(*PARTITION_KEYS, "granule")), [*PARTITION_KEYS, "granule"],
                      "left_semi").drop("granule")
