"""Streaming mode: 1-minute windowed durability aggregates kept up to date from the audit topic.

    insync-proxy stream --kafka-bootstrap localhost:9092 --topic insync-audit \\
        --output /data/durability-stream --checkpoint /data/durability-stream-checkpoint

Structured Streaming reads the audit topic (Spark's Kafka source) or a directory that sidecars write
to (``--input-dir``, Spark's file source), parses and validates every line with the same function as
the batch report, and keeps per (window, topic, partition, decision) counts, record bytes and
latency percentiles. Windows are written to Parquet (partitioned by date) once the watermark passes
their end, so each window row is written exactly once; rejected lines go to ``rejected/`` as JSON.
Both queries checkpoint under ``--checkpoint`` and resume where they stopped. With ``--available-now``
the job processes what the source holds and stops, and the end of that input closes the windows
still open (:func:`close_open_windows`), so a finished run's windows are all written.
:func:`stream_command` is what ``insync-proxy stream`` runs (insync_proxy/cli.py parses its command line).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from insync_proxy.pipeline.defaults import STREAM_WATERMARK, STREAM_WINDOW
from insync_proxy.pipeline.spark_env import PipelineError, Progress

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

DEFAULT_WINDOW = STREAM_WINDOW
DEFAULT_WATERMARK = STREAM_WATERMARK
#: Under the checkpoint: the end-of-input markers :func:`close_open_windows` writes (a file source of the
#: windows query, so each marker is read once and recorded in the checkpoint like any input).
END_OF_INPUT_DIR = "end-of-input"
WINDOWS_QUERY = "insync_durability_windows"
#: Spark's switch for the micro-batch it runs without new input when the watermark has moved, to write
#: (and evict) the windows it passed; read when a query starts.
NO_DATA_BATCHES_CONF = "spark.sql.streaming.noDataMicroBatches.enabled"
REJECTED_QUERY = "insync_rejected"


def windowed_aggregates(events: DataFrame, window: str = DEFAULT_WINDOW, watermark: str = DEFAULT_WATERMARK,
                        end_of_input: DataFrame | None = None) -> DataFrame:
    """Produce requests per (window, topic, partition, decision): requests, records, bytes, latency.

    ``events`` are valid typed events (:func:`pipeline.schema.valid_events`), v1 or v2, batch or
    streaming; they are turned into summaries (:func:`pipeline.schema.summaries`) and a summary
    falls in the window its interval started in. Rows later than ``watermark`` behind the newest
    one seen are dropped by Spark's watermark (state stays bounded). Latency percentiles come from
    the merged histogram (one running sum per bucket: a single aggregation, so it streams), read as
    in the batch report (at most +18.9%). ``below_min_decisions`` counts v1 decisions taken while
    the ISR was below min ISR (v2 summaries carry no ISR: see the readiness events for that).

    ``end_of_input`` (a frame of ``interval_start`` timestamps, :func:`end_of_input_markers`) is
    merged in before the watermark and dropped right after it: its rows only move the watermark.
    The events' count and latest ``interval_start`` (epoch µs) per micro-batch are observed as ``events``.
    """
    from pyspark.sql import functions as F

    from insync_proxy.audit.buckets import OVERFLOW
    from insync_proxy.audit.events import EVENT_PRODUCE_DECISION, PROXY_ANSWERED_DECISIONS
    from insync_proxy.pipeline.schema import BUCKETS_TYPE, summaries
    from insync_proxy.pipeline.tables import PERCENTILES, percentile_from_buckets

    below = (F.col("event") == EVENT_PRODUCE_DECISION) & (F.col("isr_size") < F.col("min_isr"))
    flagged = events.withColumn("_below", F.when(below, 1).otherwise(0).cast("long"))
    rows = summaries(flagged, extra_columns=("_below",))
    if end_of_input is not None:
        rows = rows.observe("events", F.count(F.lit(1)).alias("summaries"),
                            F.unix_micros(F.max("interval_start")).alias("last_interval_start_us"))
        markers = end_of_input.select("interval_start", F.lit(True).alias("_end_of_input"))
        rows = rows.withColumn("_end_of_input", F.lit(False)).unionByName(markers, allowMissingColumns=True)
    rows = rows.withWatermark("interval_start", watermark)
    if end_of_input is not None:
        # The markers are no traffic. The condition names the event-time column on purpose: Spark's
        # optimizer pushes a filter on other columns below the watermark, where it would drop the
        # markers before they move it.
        rows = rows.filter(F.when(F.col("_end_of_input"), F.lit(False)).otherwise(F.col("interval_start").isNotNull()))
    # A summary's latency buckets as rows of their own, so each bucket's sum is a plain sum: one row per
    # bucket (one with none for a summary without buckets), the summary's own figures on the first only.
    # Reading the bucket arrays with an expression per bucket instead made a plan the planner took
    # seconds over in every micro-batch.
    rows = rows.select("*", F.posexplode_outer("latency_buckets").alias("_position", "_bucket"))
    first = F.col("_position").isNull() | (F.col("_position") == 0)

    def once(column: Column) -> Column:
        """``column`` on a summary's first row, null on the rows of its further buckets."""
        return F.when(first, column)

    requests = once(F.col("requests"))
    grouped = rows.groupBy(F.window("interval_start", window).alias("window"), "topic", "partition", "decision").agg(
        F.coalesce(F.sum(requests), F.lit(0)).cast("long").alias("requests"),
        F.sum(once(F.col("records"))).alias("records"),
        F.coalesce(F.sum(once(F.col("record_bytes"))), F.lit(0)).alias("record_bytes"),
        F.coalesce(F.sum(once(F.when(F.col("acks_sent").isin(0, 1), F.col("record_bytes")))), F.lit(0))
        .alias("exposed_bytes"),
        F.coalesce(F.sum(F.when(F.col("decision").isin(*PROXY_ANSWERED_DECISIONS), requests)), F.lit(0))
        .cast("long").alias("proxy_answered"),
        F.coalesce(F.sum(once(F.col("_below"))), F.lit(0)).cast("long").alias("below_min_decisions"),
        F.coalesce(F.sum(once(F.col("latency_count"))), F.lit(0)).cast("long").alias("latency_n"),
        F.min("latency_min_ms").alias("latency_min_ms"),
        F.max("latency_max_ms").alias("latency_max_ms"),
        # SQL text: one call into the JVM per bucket, where the same built from functions took some 50 calls
        *[F.expr(f"sum(CASE WHEN _bucket.bucket = {i} THEN _bucket.count END) AS _b{i}") for i in range(OVERFLOW + 1)],
    )
    pairs = ", ".join(f"named_struct('bucket', {i}, 'count', _b{i})" for i in range(OVERFLOW + 1))
    hist = F.expr(f"filter(array({pairs}), pair -> pair.count > 0)").cast(BUCKETS_TYPE)
    lo, hi = F.col("latency_min_ms"), F.col("latency_max_ms")
    return grouped.select("*", hist.alias("_hist")).select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        F.to_date(F.col("window.start")).alias("date"),
        "topic", "partition", "decision", "requests", "records", "record_bytes", "exposed_bytes", "proxy_answered",
        "below_min_decisions", "latency_n",
        *[F.when(F.col("latency_n") > 0, percentile_from_buckets(F.col("_hist"), p, lo, hi))
          .alias(f"latency_p{round(p * 100)}_ms") for p in PERCENTILES],
        "latency_max_ms",
    )


def end_of_input_markers(spark: SparkSession, checkpoint: str | Path) -> DataFrame:
    """The end-of-input markers under ``checkpoint`` as a stream of ``interval_start`` timestamps."""
    from pyspark.sql import functions as F

    directory = Path(checkpoint) / END_OF_INPUT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    return (spark.readStream.schema("end_of_input_us long").json(str(directory))
            .select(F.timestamp_micros(F.col("end_of_input_us")).alias("interval_start")))


def write_end_of_input_marker(checkpoint: str | Path, end_us: int) -> Path:
    """Add a marker whose time is ``end_us`` (epoch microseconds); written aside and renamed, so the
    file source never reads half a file (it skips names starting with ``.``)."""
    directory = Path(checkpoint) / END_OF_INPUT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"end-of-input-{end_us}.json"
    partial = directory / f".{path.name}.partial"
    partial.write_text(f'{{"end_of_input_us": {end_us}}}\n')
    os.replace(partial, path)
    return path


def _with_trigger(writer: DataStreamWriter, trigger: str | None, available_now: bool) -> DataStreamWriter:
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger) if trigger else writer


def start_windows(
    spark: SparkSession,
    parsed: DataFrame,
    output: str | Path,
    checkpoint: str | Path,
    *,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
    trigger: str | None = "30 seconds",
    available_now: bool = False,
) -> StreamingQuery:
    """Start the windows query over parsed lines (:func:`pipeline.schema.parse_audit_events`).

    Its sources are the lines and the end-of-input markers under ``checkpoint`` (both always, so a
    checkpoint serves either trigger). The written rows are observed as ``windows``.
    """
    from pyspark.sql import functions as F

    from insync_proxy.pipeline.schema import valid_events

    windows = windowed_aggregates(valid_events(parsed), window, watermark, end_of_input_markers(spark, checkpoint))
    return _with_trigger(
        windows.observe("windows", F.count(F.lit(1)).alias("rows"))
        .writeStream.queryName(WINDOWS_QUERY)
        .outputMode("append")  # with a watermark each window is emitted once, when it is final
        .format("parquet")
        .partitionBy("date")
        .option("path", str(Path(output) / "windows"))
        .option("checkpointLocation", str(Path(checkpoint) / "windows")),
        trigger, available_now,
    ).start()


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
    """Start the windows and rejected-lines queries over raw streaming ``lines`` (value, source).

    ``available_now=True`` processes what is there and stops (tests, backfills; then call
    :func:`close_open_windows`); otherwise a micro-batch runs every ``trigger``. Returns the started
    queries (windows first). The rejected lines are observed as ``rejected``.
    """
    from pyspark.sql import functions as F

    from insync_proxy.pipeline.schema import parse_audit_events, rejected_events
    from insync_proxy.pipeline.spark_env import configure_session

    configure_session(spark)
    parsed = parse_audit_events(lines, source_col="source")
    windows = start_windows(spark, parsed, output, checkpoint, window=window, watermark=watermark, trigger=trigger,
                            available_now=available_now)
    rejected = _with_trigger(
        rejected_events(parsed).observe("rejected", F.count(F.lit(1)).alias("rows"))
        .writeStream.queryName(REJECTED_QUERY)
        .outputMode("append")
        .format("json")
        .option("path", str(Path(output) / "rejected"))
        .option("checkpointLocation", str(Path(checkpoint) / "rejected")),
        trigger, available_now,
    ).start()
    return [windows, rejected]


def _iso_micros(text: str) -> int:
    """Spark's progress timestamp (``2026-11-21T07:10:00.000Z``) as epoch microseconds."""
    moment = datetime.fromisoformat(text)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


@dataclass
class StreamTally:
    """What the queries did, summed over their micro-batches (each batch counted once)."""

    audit_lines: int = 0
    rejected_lines: int = 0
    window_rows: int = 0
    late_rows_dropped: int = 0
    batches: int = 0
    #: Window rows in the state store after the last batch: not written yet.
    open_window_rows: int = 0
    #: The latest summary's interval start the windows query saw (epoch µs), and its last watermark.
    last_interval_start_us: int | None = None
    watermark_us: int | None = None
    _seen: set[tuple[str, int]] = field(default_factory=set)

    def take(self, query: StreamingQuery) -> None:
        """Add the query's progress updates not counted yet (``recentProgress`` keeps the last 100:
        call this at least every 100 micro-batches)."""
        for progress in query.recentProgress:
            key = (str(progress.runId), progress.batchId)
            if key in self._seen:
                continue
            self._seen.add(key)
            metrics = progress.observedMetrics or {}
            if progress.name == REJECTED_QUERY:
                self.rejected_lines += int(metrics["rejected"]["rows"]) if "rejected" in metrics else 0
                continue
            self.batches += 1
            self.audit_lines += int(progress.sources[0].numInputRows or 0) if progress.sources else 0
            self.window_rows += int(metrics["windows"]["rows"]) if "windows" in metrics else 0
            last = metrics["events"]["last_interval_start_us"] if "events" in metrics else None
            if last is not None:  # epoch microseconds: a timestamp would come as text in the JVM's own format
                self.last_interval_start_us = max(int(last), self.last_interval_start_us or int(last))
            for state in progress.stateOperators or []:
                self.late_rows_dropped += int(state.numRowsDroppedByWatermark or 0)
                self.open_window_rows = int(state.numRowsTotal or 0)
            if (progress.eventTime or {}).get("watermark"):
                self.watermark_us = _iso_micros(progress.eventTime["watermark"])


def await_queries(queries: list[StreamingQuery], tally: StreamTally, poll_seconds: int = 2) -> None:
    """Wait until every query has stopped, counting their progress as they go; a failed query's
    exception is raised (``StreamingQueryException``)."""
    try:
        while True:
            active = [q for q in queries if q.isActive]
            if not active:
                break
            for q in queries:
                tally.take(q)
            # A query may stop between the check and the wait (an available-now run ending): the wait then returns at
            # once (or raises its failure), where picking the first active one again found none (StopIteration).
            active[0].awaitTermination(poll_seconds)
    finally:
        for q in queries:
            tally.take(q)
    for q in queries:
        q.awaitTermination()  # raises the query's exception, if it failed


def _shifted_us(spark: SparkSession, base_us: int, *intervals: str) -> int:
    """``base_us`` plus Spark interval strings (``'5 minutes'``, as ``--window``/``--watermark`` take them)."""
    from pyspark.sql import functions as F

    moment = F.timestamp_micros(F.lit(base_us))
    for interval in intervals:
        moment = moment + F.expr(f"INTERVAL {interval}")
    return int(spark.range(1).select(F.unix_micros(moment)).first()[0])  # type: ignore[index]


def close_open_windows(
    spark: SparkSession,
    parsed: DataFrame,
    output: str | Path,
    checkpoint: str | Path,
    tally: StreamTally,
    *,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
) -> int:
    """After an available-now run: let the end of its input close the windows still open; returns how
    many window rows that wrote.

    The watermark trails the newest event by ``watermark``, so a finished input's last windows never
    close on their own. This adds an end-of-input marker ``window + watermark`` after the run's latest
    summary (:func:`write_end_of_input_marker`) and runs the windows query once more: the marker
    moves the watermark past the end of every window holding data, Spark writes them, and the
    marker itself is dropped (it is no traffic). It goes through the checkpoint like any input, so
    the windows are written exactly once; events that arrive later for a closed window are late and
    dropped, as for any window the watermark passed. Without an open window nothing is done.
    """
    if tally.open_window_rows == 0:
        return 0
    if tally.last_interval_start_us is not None:
        end_us = _shifted_us(spark, tally.last_interval_start_us, window, watermark)
    elif tally.watermark_us is not None:  # windows left open by an earlier run: the newest event is watermark + delay
        end_us = _shifted_us(spark, tally.watermark_us, watermark, window, watermark)
    else:
        return 0
    write_end_of_input_marker(checkpoint, end_us)
    before = tally.window_rows
    query = start_windows(spark, parsed, output, checkpoint, window=window, watermark=watermark, available_now=True)
    await_queries([query], tally)
    return tally.window_rows - before


@dataclass(frozen=True, kw_only=True)
class StreamOptions:
    """What ``insync-proxy stream`` was asked, checked by the command line (insync_proxy/cli.py): the audit
    topic (``kafka_bootstrap`` and ``topic``) or ``input_dir`` as the source."""

    kafka_bootstrap: str | None
    topic: str | None
    input_dir: str | None
    output: str
    checkpoint: str
    master: str | None
    window: str
    watermark: str
    trigger: str | None
    available_now: bool
    starting_offsets: str | None
    max_offsets_per_trigger: int | None
    shuffle_partitions: int
    verbose: bool


def stream_command(options: StreamOptions) -> int:
    """``insync-proxy stream``: start the streaming queries and wait for them; returns the exit status (0 done,
    2 missing input, bad master or no Java, 1 a streaming query failed)."""
    from insync_proxy.pipeline.report import failure_line, verbose_requested

    verbose = verbose_requested(options.verbose)
    progress = Progress()
    try:
        from insync_proxy.pipeline.spark_env import build_session, check_master

        if options.master:
            check_master(options.master)
        jars = None
        if options.kafka_bootstrap:
            from insync_proxy.pipeline.jars import kafka_jars

            progress.stage("resolving Spark's Kafka connector jars")
            jars = kafka_jars(note=progress.stage)
        elif not options.input_dir or not Path(options.input_dir).is_dir():
            raise PipelineError(f"--input-dir {options.input_dir!r} is not a directory")
        progress.stage(f"starting Spark ({options.master or 'default master'})")
        spark = build_session(options.master, "insync-proxy durability stream",
                              shuffle_partitions=options.shuffle_partitions, jars=jars, verbose=verbose)
        run = run_stream(spark, audit_lines(spark, options), options, progress)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a failed query: one line; --verbose / INSYNC_DEBUG=1 shows the whole trace
        if verbose:
            raise
        from insync_proxy.pipeline import spark_env

        log = spark_env.spark_log_hint()
        print(f"error: the streaming job failed: {failure_line(exc)} ({log}--verbose or INSYNC_DEBUG=1 shows "
              "Spark's log and the full trace)", file=sys.stderr)
        return 1
    return run


def audit_lines(spark: SparkSession, options: StreamOptions) -> DataFrame:
    """The streaming audit lines the command's options name: the audit topic (``--kafka-bootstrap``, from
    the earliest offset with ``--available-now`` unless ``--starting-offsets`` says otherwise) or the files
    of ``--input-dir``. A Kafka source needs the connector jars in ``spark`` (:func:`pipeline.jars.kafka_jars`)."""
    from insync_proxy.pipeline import sources

    if options.kafka_bootstrap:
        starting = options.starting_offsets or ("earliest" if options.available_now else "latest")
        return sources.stream_audit_kafka(spark, options.kafka_bootstrap, str(options.topic), starting,
                                          options.max_offsets_per_trigger)
    return stream_audit_files(spark, str(options.input_dir))


def stream_audit_files(spark: SparkSession, input_dir: str | Path) -> DataFrame:
    """The audit lines of every `*.jsonl` file under `input_dir` (new files as they come), with their file."""
    from pyspark.sql import functions as F

    return (spark.readStream.option("pathGlobFilter", "*.jsonl").option("recursiveFileLookup", "true")
            .text(str(input_dir)).select("value", F.col("_metadata.file_path").alias("source")))


@contextmanager
def _no_data_batches_off(spark: SparkSession) -> Iterator[None]:
    """Queries started inside skip the micro-batches without input; the session's own setting is restored."""
    before = spark.conf.get(NO_DATA_BATCHES_CONF, None)
    spark.conf.set(NO_DATA_BATCHES_CONF, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(NO_DATA_BATCHES_CONF)
        else:
            spark.conf.set(NO_DATA_BATCHES_CONF, before)


def run_stream(spark: SparkSession, lines: DataFrame, options: StreamOptions, progress: Progress) -> int:
    """Run the queries the options ask for, then print what they did."""
    from insync_proxy.pipeline.schema import parse_audit_events

    out = Path(options.output)
    # An available-now run ends by closing its open windows (close_open_windows), which writes every window
    # its data's own watermark passed as well: the extra micro-batch Spark would run for those first, with
    # no input, is a whole pass of the stateful plan for nothing (a finished run: 4 micro-batches, now 3).
    with _no_data_batches_off(spark) if options.available_now else nullcontext():
        queries = start_streams(spark, lines, out, options.checkpoint, window=options.window, watermark=options.watermark,
                                trigger=options.trigger, available_now=options.available_now)
    progress.stage(f"streaming to {out} (checkpoint {options.checkpoint})"
                   + (": what the source holds now" if options.available_now else "; Ctrl-C stops"))
    tally = StreamTally()
    started = time.monotonic()
    try:
        await_queries(queries, tally)
    except KeyboardInterrupt:
        for query in queries:
            query.stop()
        await_queries(queries, tally)
    progress.stage(f"read {tally.audit_lines:,} audit lines in {tally.batches:,} micro-batch(es) "
                   f"({time.monotonic() - started:.1f} s): {tally.rejected_lines:,} rejected, "
                   f"written to {out / 'rejected'}")
    closed = 0
    if options.available_now and tally.open_window_rows:
        progress.stage(f"end of input: closing the {tally.open_window_rows:,} window row(s) still open")
        closed = close_open_windows(spark, parse_audit_events(lines, source_col="source"), out, options.checkpoint,
                                    tally, window=options.window, watermark=options.watermark)
    progress.stage(f"wrote {tally.window_rows:,} window rows to {out / 'windows'}"
                   + (f" ({closed:,} closed by the end of input)" if closed else "")
                   + f"; {tally.late_rows_dropped:,} late rows dropped by the watermark; "
                   + (f"{tally.open_window_rows:,} window rows still open (written once the watermark passes them)"
                      if tally.open_window_rows else "no window left open"))
    return 0


if __name__ == "__main__":
    # Not a command (it was one, `python -m insync_proxy.pipeline.stream`): a scheduled job that still runs it must
    # fail, not report success having done nothing.
    sys.exit("insync_proxy.pipeline.stream is not a command: the job is `insync-proxy stream` "
             "(python -m insync_proxy stream --help)")
