"""The audit event schemas (v1 and v2) as Spark sees them, the parse/validate step shared by batch and
streaming, and the normalisation of both versions into one aggregate shape.

The authoritative schemas are ``audit/schema-v1.json`` and ``audit/schema-v2.json``
(documented in ``docs/audit-events.md``); this module mirrors their union with an explicit Spark
schema so nothing is inferred. Every input line ends up either as a typed, valid event or as a
rejected record carrying a reason: nothing is dropped silently.

Tables are computed from two normalised views of the valid events (:func:`summaries` and
:func:`observations`): v2 ``produce_summary`` rows as they are, v1 ``produce_decision`` rows as
summaries of one request each, so no table cares which version a line was.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from insync_proxy.audit import buckets, events
from insync_proxy.audit.events import (
    DECISIONS,
    EVENT_ISR_CHANGE,
    EVENT_KINDS_BY_VERSION,
    EVENT_PARTITION_READINESS,
    EVENT_PRODUCE_DECISION,
    EVENT_PRODUCE_SUMMARY,
    SCHEMA_VERSIONS,
)

# Name of the column Spark's JSON parser fills with the raw text when a line does not fit the schema.
_CORRUPT = "_corrupt_record"

#: The Spark type of each audit field type (`insync_proxy.audit.events`).
_SPARK_TYPES: dict[str, T.DataType] = {
    events.INT32: T.IntegerType(),
    events.INT64: T.LongType(),
    events.FLOAT64: T.DoubleType(),
    events.STRING: T.StringType(),
    events.BOOLEAN: T.BooleanType(),
    events.BUCKETS: T.ArrayType(T.ArrayType(T.LongType())),
}

#: Fields of schemas v1 and v2 (their union: `insync_proxy.audit.events.FIELDS`), with their Spark types.
#: ``ts`` and ``interval_start`` are read as strings and converted afterwards so that a malformed
#: timestamp has its own reason.
AUDIT_FIELDS: tuple[tuple[str, T.DataType], ...] = tuple((f.name, _SPARK_TYPES[f.type]) for f in events.FIELDS)
_TIMESTAMP_FIELDS = ("ts", "interval_start")

#: Required keys that must be non-null in every event of every version.
REQUIRED_NON_NULL = ("schema_version", "event", "ts", "proxy_id", "topic", "partition")
#: Further non-null keys per (schema_version, event).
REQUIRED_NON_NULL_BY_KIND: dict[tuple[int, str], tuple[str, ...]] = {
    (2, EVENT_PRODUCE_SUMMARY): (
        "interval_start", "interval_seconds", "listener", "acks_requested", "decision", "requests", "records",
        "record_bytes", "latency_count", "latency_sum_ms", "latency_buckets",
    ),
    (2, EVENT_PARTITION_READINESS): ("ready", "isr_size", "min_isr"),
}
#: Keys that must be present but may be null ("unknown"), per (schema_version, event): only their
#: absence is an error (and only where the raw text is at hand, see :func:`read_audit_json`).
REQUIRED_NULLABLE_BY_KIND: dict[tuple[int, str], tuple[str, ...]] = {
    (1, EVENT_PRODUCE_DECISION): ("isr_size", "min_isr"),
    (1, EVENT_ISR_CHANGE): ("isr_size", "min_isr"),
    (2, EVENT_PRODUCE_DECISION): ("isr_size", "min_isr"),
    (2, EVENT_ISR_CHANGE): ("isr_size", "min_isr"),
}

#: The JSON parsing schema: the v1+v2 fields plus the parser's corrupt-record column.
RAW_SCHEMA = T.StructType(
    [T.StructField(name, dtype, True) for name, dtype in AUDIT_FIELDS] + [T.StructField(_CORRUPT, T.StringType())]
)

#: Columns of a valid, typed event as produced by :func:`parse_audit_events`.
EVENT_COLUMNS = tuple(name for name, _ in AUDIT_FIELDS) + ("date",)

#: Columns and types of :func:`parse_audit_events` output: what a staged (compacted) copy holds.
PARSED_SCHEMA = T.StructType(
    [T.StructField(name, T.TimestampType() if name in _TIMESTAMP_FIELDS else dtype, True) for name, dtype in AUDIT_FIELDS]
    + [T.StructField(name, dtype, True) for name, dtype in
       (("date", T.DateType()), ("reject_reason", T.StringType()), ("source", T.StringType()), ("line", T.StringType()))]
)

#: Reject reasons (a field name follows the colon where one applies).
REASON_EMPTY_LINE = "empty_line"
REASON_BAD_JSON = "bad_json"
REASON_UNKNOWN_SCHEMA_VERSION = "unknown_schema_version"
REASON_MISSING_FIELD = "missing_field"
REASON_WRONG_TYPE = "wrong_type"
REASON_UNKNOWN_EVENT = "unknown_event"
REASON_INVALID_VALUE = "invalid_value"


#: How the parse step reaches a parsed field: ``F.col("j.<name>")`` (from_json's struct) or
#: ``F.col(name)`` (the JSON file reader's own columns: no struct is built per line).
Field = Callable[[str], Column]


def _struct_fields(j: str) -> Field:
    return lambda name: F.col(f"{j}.{name}")


def _kind_is(col: Field, kinds: list[tuple[int, str]]) -> Column:
    """True when the event's (schema_version, event) is one of ``kinds``."""
    cond: Column = F.lit(False)
    for version, event in kinds:
        cond = cond | ((col("schema_version") == version) & (col("event") == event))
    return cond


def _known_event(col: Field) -> Column:
    return _kind_is(col, [(v, e) for v, kinds in EVENT_KINDS_BY_VERSION.items() for e in kinds])


def _kinds_requiring(table: dict[tuple[int, str], tuple[str, ...]], name: str) -> list[tuple[int, str]]:
    return [kind for kind, names in table.items() if name in names]


def _first_named(conditions: list[tuple[Column, str]]) -> Column:
    """The label of the first condition that holds, else null (a SQL CASE in list order)."""
    expr: Column | None = None
    for cond, label in conditions:
        expr = F.when(cond, F.lit(label)) if expr is None else expr.when(cond, F.lit(label))
    assert expr is not None
    return expr


def parsed_timestamp(col: Field, name: str) -> Column:
    """The RFC 3339 text of field ``name`` as a timestamp (null when it does not parse)."""
    return F.try_to_timestamp(col(name))


def _reject_reason(col: Field, value: Column | None) -> Column:
    """Why a parsed line is rejected, or null for a valid event; the first failing check wins.

    Checks in order: empty line, not a JSON object, unknown schema_version, missing required field,
    wrong JSON type, unknown event kind (for its version), invalid value (timestamps, negative
    counts, unknown decision, histogram buckets). A cheap test over the already-parsed struct clears
    the common (valid) line first; the key-presence and per-field type probes, which re-read the
    JSON text, run only for lines that failed it.

    ``value=None`` means the records come from Spark's JSON file reader, which keeps the raw text
    only for lines it could not fit to the schema: the probes then read that text, and an absent
    nullable key (``isr_size``/``min_isr``) cannot be told from a null (it is read as "unknown").
    """

    corrupt = col(_CORRUPT).isNotNull()
    raw = value if value is not None else col(_CORRUPT)
    keys = F.json_object_keys(raw)
    nullable_names = sorted({n for names in REQUIRED_NULLABLE_BY_KIND.values() for n in names})

    def has_key(name: str) -> Column:
        if value is None:
            # Only the non-null requirement can be checked; a null in a line the reader flagged as
            # corrupt is a mistyped value (the wrong_type probe names it), not a missing key.
            return F.lit(True) if name in nullable_names else corrupt
        return F.coalesce(F.array_contains(keys, name), F.lit(False))

    summary = _kind_is(col, [(2, EVENT_PRODUCE_SUMMARY)])
    bucket_pairs = col("latency_buckets")
    bad_pair = F.exists(
        bucket_pairs,
        lambda x: (F.size(x) != 2) | x[0].isNull() | x[1].isNull() | (x[0] < 0) | (x[0] > buckets.OVERFLOW)
        | (x[1] <= 0),
    )
    bucket_total = F.aggregate(bucket_pairs, F.lit(0).cast("long"), lambda acc, x: acc + x[1])
    # Value checks every kind shares, then those of summaries only; the first failing one names the reason.
    shared_checks = [
        (parsed_timestamp(col, "ts").isNull(), "ts"),
        (col("interval_start").isNotNull() & parsed_timestamp(col, "interval_start").isNull(), "interval_start"),
        (col("partition") < 0, "partition"),
        (col("record_bytes") < 0, "record_bytes"),
        (col("requests") < 0, "requests"),
        (col("records") < 0, "records"),
        (col("latency_count") < 0, "latency_count"),
        (col("interval_seconds") < 0, "interval_seconds"),
        (col("decision").isNotNull() & ~col("decision").isin(*DECISIONS), "decision"),
    ]
    summary_checks = [
        (col("latency_count") > col("requests"), "latency_count"),
        (bad_pair, "latency_buckets"),
        (bucket_total != col("latency_count"), "latency_buckets"),
    ]
    invalid = _first_named(shared_checks + [(summary & cond, name) for cond, name in summary_checks])

    def passes(checks: list[tuple[Column, str]]) -> Column:
        # A check passes unless it holds (a null, from an absent value, passes as in ``invalid``).
        out: Column = F.lit(True)
        for cond, _ in checks:
            out = out & ~F.coalesce(cond, F.lit(False))
        return out

    # The cheap test that clears the common (valid) line: the checks every line shares, then a
    # dispatch on (schema_version, event) to that kind's own required fields and checks only. It
    # holds exactly when the reason below would be null.
    looks_valid = ~corrupt
    for name in REQUIRED_NON_NULL:
        looks_valid = looks_valid & col(name).isNotNull()
    looks_valid = looks_valid & passes(shared_checks)
    kind_ok: Column | None = None
    for version, kinds in EVENT_KINDS_BY_VERSION.items():
        for kind in kinds:
            ok: Column = F.lit(True)
            for name in REQUIRED_NON_NULL_BY_KIND.get((version, kind), ()):
                ok = ok & col(name).isNotNull()
            for name in REQUIRED_NULLABLE_BY_KIND.get((version, kind), ()):
                # Or short-circuits: the JSON key list is only computed when the value is null.
                ok = ok & (col(name).isNotNull() | has_key(name))
            if (version, kind) == (2, EVENT_PRODUCE_SUMMARY):
                ok = ok & passes(summary_checks)
            is_kind = (col("schema_version") == version) & (col("event") == kind)
            kind_ok = F.when(is_kind, ok) if kind_ok is None else kind_ok.when(is_kind, ok)
    assert kind_ok is not None
    looks_valid = looks_valid & kind_ok.otherwise(F.lit(False))
    versions = col("schema_version").isin(*SCHEMA_VERSIONS)

    missing_conditions: list[tuple[Column, str]] = [
        (col(name).isNull() & ~has_key(name), name) for name in REQUIRED_NON_NULL
    ]
    for name in nullable_names:
        needed = _kind_is(col, _kinds_requiring(REQUIRED_NULLABLE_BY_KIND, name))
        missing_conditions.append((needed & col(name).isNull() & ~has_key(name), name))
    missing_conditions += [(col(name).isNull() & ~corrupt, name) for name in REQUIRED_NON_NULL]
    for name in dict.fromkeys(n for names in REQUIRED_NON_NULL_BY_KIND.values() for n in names):
        needed = _kind_is(col, _kinds_requiring(REQUIRED_NON_NULL_BY_KIND, name))
        missing_conditions.append((needed & col(name).isNull() & (~corrupt | ~has_key(name)), name))
    missing = _first_named(missing_conditions)
    # With partial results (Spark's default) only the mistyped field is null; a raw probe finds it.
    wrong_type = _first_named(
        [(col(name).isNull() & F.get_json_object(raw, f"$.{name}").isNotNull(), name) for name, _ in AUDIT_FIELDS]
    )
    return (
        F.when(looks_valid, F.lit(None).cast("string"))
        .when((value.isNull() | (F.trim(value) == "")) if value is not None else F.lit(False), F.lit(REASON_EMPTY_LINE))
        .when(corrupt & keys.isNull() if value is None else keys.isNull(), F.lit(REASON_BAD_JSON))
        .when(
            col("schema_version").isNotNull() & ~versions,
            F.lit(REASON_UNKNOWN_SCHEMA_VERSION),
        )
        .when(missing.isNotNull(), F.concat(F.lit(REASON_MISSING_FIELD + ":"), missing))
        .when(corrupt, F.concat(F.lit(REASON_WRONG_TYPE + ":"), F.coalesce(wrong_type, F.lit("?"))))
        .when(~_known_event(col), F.lit(REASON_UNKNOWN_EVENT))
        .when(invalid.isNotNull(), F.concat(F.lit(REASON_INVALID_VALUE + ":"), invalid))
        .otherwise(F.lit(REASON_INVALID_VALUE))
    )


def _finish(parsed: DataFrame, layout: str, col: Field, raw: Callable[[], Column], value: Column | None) -> DataFrame:
    """Typed event columns, ``date``, ``reject_reason``, and source/line kept for rejected lines only.

    ``col`` reaches the parsed fields; ``raw()`` (the line's text) is only computed for rejected
    lines: on the file reader's path it is rebuilt with ``to_json``, far too dear to run on every
    valid line. One projection: the reason and the timestamps appear in several output columns but
    are computed once per line (Spark's common subexpression elimination), and no intermediate row
    is copied between steps. ``layout`` names the way ``col``, ``raw`` and ``value`` read a line: the
    projection is built once per layout and JVM (:func:`_built_once`).
    """

    def build() -> list[Column]:
        typed = {name: parsed_timestamp(col, name) if name in _TIMESTAMP_FIELDS else col(name)
                 for name, _ in AUDIT_FIELDS}
        reason = _reject_reason(col, value)
        rejected = reason.isNotNull()
        return [
            *[typed[name].alias(name) for name, _ in AUDIT_FIELDS],
            # A summary belongs to the date its interval started on; any other event to its ts's date.
            F.to_date(F.coalesce(typed["interval_start"], typed["ts"])).alias("date"),
            reason.alias("reject_reason"),
            # Source and raw text matter only for rejected lines; nulls keep a staged parse small.
            F.when(rejected, F.col("source")).alias("source"),
            F.when(rejected, raw()).alias("line"),
        ]

    return parsed.select(*_built_once(f"parse:{layout}", build))


#: Column expressions built once per JVM (:func:`_built_once`): the gateway they live in, and them by name.
_BUILT: tuple[object, dict[str, list[Column]]] = (None, {})


def _built_once(name: str, build: Callable[[], list[Column]]) -> list[Column]:
    """``build()``'s columns, built once per JVM and reused by every query that selects them.

    A column expression is built in the JVM one call at a time: the validation's is some 12,000
    calls, about 2.5 s on two busy cores, for a report or a stream that selects it more than once.
    An expression names columns and is resolved by each query, so one built is valid in any query
    of any session on the same JVM; a new JVM (another gateway) starts afresh.
    """
    from pyspark import SparkContext

    global _BUILT
    gateway = SparkContext._gateway
    if gateway is None:  # no classic JVM (Spark Connect): nothing to keep
        return build()
    if _BUILT[0] is not gateway:
        _BUILT = (gateway, {})
    built = _BUILT[1]
    if name not in built:
        built[name] = build()
    return built[name]


def parse_audit_events(lines: DataFrame, value_col: str = "value", source_col: str | None = None) -> DataFrame:
    """Parse raw audit lines (v1 or v2) into typed events, tagging each with a reject reason (null when valid).

    ``lines`` has one string column ``value_col`` per audit line (a text file line or a Kafka record
    value cast to string) and optionally ``source_col`` (file path or topic/partition/offset).
    The result has the columns of :data:`EVENT_COLUMNS` (``ts`` and ``interval_start`` as UTC
    timestamps, ``date`` the UTC date of ``interval_start`` or else ``ts``) plus ``reject_reason``,
    ``source`` and ``line`` (source and raw text are kept only for rejected lines). Works on batch
    and streaming DataFrames. Assumes the session time zone is UTC (see
    :func:`pipeline.spark_env.configure_session`).
    """
    value = F.col(value_col)
    parsed = lines.select(
        value.alias("_line"),
        (F.col(source_col) if source_col else F.lit(None).cast("string")).alias("source"),
        F.from_json(value, RAW_SCHEMA, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}).alias("j"),
    )
    return _finish(parsed, "text", _struct_fields("j"), lambda: F.col("_line"), F.col("_line"))


def _parse_records(records: DataFrame, source: Column) -> DataFrame:
    """The file reader's rows (one column per field, no struct) through the validation."""

    def raw() -> Column:
        # The text of a rejected line: the reader's own copy, or rebuilt from the parsed fields.
        fields = [F.col(name) for name, _ in AUDIT_FIELDS]
        return F.coalesce(F.col(_CORRUPT), F.to_json(F.struct(*fields)))

    return _finish(records.withColumn("source", source), "records", F.col, raw, None)


def read_audit_json(spark: SparkSession, paths: list[str], **options: str) -> DataFrame:
    """Parse audit JSON Lines files with Spark's JSON reader: :func:`parse_audit_events`'s output.

    About 2.5x faster than reading text and calling ``from_json`` (the file reader parses straight
    from the file's bytes). Differences, documented in docs/pipeline.md: blank lines are skipped by
    the reader, an absent ``isr_size``/``min_isr`` key reads as null, and the ``line`` of a record
    rejected for a reason other than its JSON types is rebuilt from the parsed fields.
    ``paths=[]`` gives an empty frame with the same columns (an empty audit directory).
    """
    if not paths:
        return _parse_records(spark.createDataFrame([], RAW_SCHEMA), F.lit(None).cast("string"))
    records = (
        spark.read.schema(RAW_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", _CORRUPT)
        .options(**options)
        .json(paths)
    )
    return _parse_records(records, F.col("_metadata.file_path"))


def valid_events(parsed: DataFrame) -> DataFrame:
    """The valid events of :func:`parse_audit_events` output, with only the event columns (those present)."""
    return parsed.filter(F.col("reject_reason").isNull()).select(*[c for c in EVENT_COLUMNS if c in parsed.columns])


def rejected_events(parsed: DataFrame) -> DataFrame:
    """The rejected lines of :func:`parse_audit_events` output: reason, source and raw line."""
    return parsed.filter(F.col("reject_reason").isNotNull()).select(
        F.col("reject_reason").alias("reason"), "source", "line"
    )


# --------------------------------------------------------------------------- normalised views

#: The histogram column of :func:`summaries`: sparse (bucket, count) pairs.
BUCKETS_TYPE = T.ArrayType(
    T.StructType([T.StructField("bucket", T.IntegerType(), True), T.StructField("count", T.LongType(), True)])
)

#: Columns of :func:`summaries`, in order, with their types: the aggregate shape every table reads. A
#: `produce_summary` event's fields (its interval's length aside) after the date, the interval and the
#: envelope, typed as :func:`parse_audit_events` gives them but for the histogram's pairs.
SUMMARY_FIELDS: tuple[tuple[str, T.DataType], ...] = (
    ("date", T.DateType()),
    ("interval_start", T.TimestampType()),
    ("ts", T.TimestampType()),
    ("proxy_id", T.StringType()),
    *((name, BUCKETS_TYPE if name == "latency_buckets" else _SPARK_TYPES[events.FIELDS_BY_NAME[name].type])
      for name in events.PRODUCE_SUMMARY_FIELDS if name not in ("interval_start", "interval_seconds")),
)
SUMMARY_COLUMNS = tuple(name for name, _ in SUMMARY_FIELDS)

#: Columns of :func:`observations`.
OBSERVATION_COLUMNS = ("topic", "partition", "ts", "proxy_id", "event", "isr_size", "min_isr", "below")


def bucket_bounds() -> Column:
    """The latency buckets' upper bounds (``insync_proxy.audit.buckets.BOUNDS_MS``) as one array literal.

    Written as SQL text: one call into the JVM instead of one per bound. A double's ``repr`` is the
    shortest text that reads back as the same double, in Python and in Spark (a ``D`` literal).
    """
    return F.expr("array(" + ", ".join(f"{bound!r}D" for bound in buckets.BOUNDS_MS) + ")")


def bucket_index(latency_ms: Column) -> Column:
    """The latency bucket of ``latency_ms`` (see ``insync_proxy.audit.buckets``) as a Spark column.

    The smallest i with latency <= BOUNDS_MS[i] (0 at or below the first bound, OVERFLOW above the
    last): a logarithm gives the index, then one comparison with the bounds on each side corrects
    floating-point rounding, so the result is exactly the bucket the bounds define.
    """
    bounds = bucket_bounds()
    last = buckets.LAST_BOUNDED
    log_step = 1.0 / buckets.STEPS_PER_DOUBLING
    guess = F.least(
        F.greatest(F.ceil(F.log2(latency_ms / F.lit(buckets.BASE_MS)) / F.lit(log_step)), F.lit(0)),
        F.lit(last + 1),
    ).cast("int")
    # element_at is 1-based.
    up = F.when((guess <= last) & (latency_ms > F.element_at(bounds, guess + 1)), guess + 1).otherwise(guess)
    down = F.when((up > 0) & (latency_ms <= F.element_at(bounds, F.least(up, F.lit(last + 1)))), up - 1).otherwise(up)
    return F.when(latency_ms <= F.lit(buckets.BASE_MS), F.lit(0)).otherwise(down)


def summaries(events: DataFrame, extra_columns: tuple[str, ...] = ()) -> DataFrame:
    """Produce traffic in the aggregate shape (:data:`SUMMARY_COLUMNS`) from valid v1 and v2 events.

    v2 ``produce_summary`` events are taken as they are. v1 ``produce_decision`` events become
    summaries of one request each: requests 1, records null (v1 carries no record count), the
    latency (if any) as a count of 1 in its bucket, ``interval_start`` = ``ts``. v2
    ``produce_decision`` events (``audit.detail = "every_request"``) are *not* counted again: the
    same requests are in that proxy's summaries. ``extra_columns`` of ``events`` are kept as they are.
    """
    is_v1_decision = (F.col("schema_version") == 1) & (F.col("event") == EVENT_PRODUCE_DECISION)
    is_summary = (F.col("schema_version") == 2) & (F.col("event") == EVENT_PRODUCE_SUMMARY)
    lat = F.col("latency_ms")
    has_lat = lat.isNotNull()
    v2_buckets = F.transform(
        F.col("latency_buckets"),
        lambda x: F.struct(x[0].cast("int").alias("bucket"), x[1].alias("count")),
    )
    v1_buckets = F.when(has_lat, F.array(F.struct(bucket_index(lat).alias("bucket"), F.lit(1).cast("long").alias("count"))))
    v1_buckets = v1_buckets.otherwise(F.array().cast(BUCKETS_TYPE))

    def pick(v2: Column, v1: Column) -> Column:
        return F.when(is_summary, v2).otherwise(v1)

    columns = {
        "date": F.col("date"),
        "interval_start": pick(F.col("interval_start"), F.col("ts")),
        "ts": F.col("ts"),
        "requests": pick(F.col("requests"), F.lit(1).cast("long")),
        "records": pick(F.col("records"), F.lit(None).cast("long")),
        "record_bytes": F.col("record_bytes"),
        "latency_count": pick(F.col("latency_count"), F.when(has_lat, 1).otherwise(0).cast("long")),
        "latency_sum_ms": pick(F.col("latency_sum_ms"), F.coalesce(lat, F.lit(0.0))),
        "latency_min_ms": pick(F.col("latency_min_ms"), lat),
        "latency_max_ms": pick(F.col("latency_max_ms"), lat),
        "latency_buckets": pick(v2_buckets, v1_buckets),
    }
    return events.filter(is_v1_decision | is_summary).select(
        *[(columns[name] if name in columns else F.col(name)).cast(dtype).alias(name) for name, dtype in SUMMARY_FIELDS],
        *extra_columns,
    )


def observations(events: DataFrame) -> DataFrame:
    """The proxies' views of partitions' ISR health (:data:`OBSERVATION_COLUMNS`), from v1 and v2 events.

    ``partition_readiness`` (v2): ``below`` = not ready (the proxy's own verdict). ``isr_change``
    (v1, v2) and ``produce_decision`` (v1, v2 detail) with both ISR size and min ISR known:
    ``below`` = ``isr_size < min_isr``. Summaries carry no ISR and are no observation.
    """
    readiness = F.col("event") == EVENT_PARTITION_READINESS
    known = F.col("isr_size").isNotNull() & F.col("min_isr").isNotNull()
    with_isr = F.col("event").isin(EVENT_ISR_CHANGE, EVENT_PRODUCE_DECISION) & known
    below = F.when(readiness, ~F.col("ready")).otherwise(F.col("isr_size") < F.col("min_isr"))
    return events.filter((readiness & F.col("ready").isNotNull()) | with_isr).select(
        "topic", "partition", "ts", "proxy_id", "event", "isr_size", "min_isr", below.alias("below")
    )
