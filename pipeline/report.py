"""Batch durability report over the proxy's audit stream: Parquet tables, an HTML report, a summary.

Run it as ``insync-proxy report --input 'audit/**/*.jsonl' --output out/`` (see ``--help``; the command
line is insync_proxy/cli.py's), through ``spark-submit insync_proxy/__main__.py report ...``, or from Python with
:func:`run_report` on an existing SparkSession (tests, notebooks). :func:`report_command` is what
``insync-proxy report`` runs, with the options it parsed (:class:`ReportOptions`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from insync_proxy.pipeline.spark_env import PipelineError, Progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class KafkaInput:
    """The audit topic as a batch input: everything between two offsets specs (Spark's syntax)."""

    bootstrap: str
    topic: str
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"


@dataclass
class ReportResult:
    """What a report run produced. ``tables`` holds every written table as Python rows (timestamps as
    aware UTC datetimes) plus the report's derived views; ``counts`` the input accounting."""

    output_dir: Path
    html_path: Path
    summary_path: Path
    counts: dict[str, int]
    rejected_by_reason: dict[str, int]
    tables: dict[str, list[dict[str, Any]]]
    table_paths: dict[str, Path]
    summary: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0


def _collect(df: DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts; timestamps are sent as epoch microseconds so they come back as exact UTC datetimes
    whatever the Python process's local time zone is."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    ts_cols = {f.name for f in df.schema.fields if isinstance(f.dataType, T.TimestampType)}
    selected = df.select(*[F.unix_micros(F.col(c)).alias(c) if c in ts_cols else F.col(c) for c in df.columns])
    out = []
    for row in selected.collect():
        record = row.asDict(recursive=True)
        for c in ts_cols:
            if record[c] is not None:
                record[c] = datetime.fromtimestamp(record[c] // 1_000_000, UTC).replace(
                    microsecond=record[c] % 1_000_000
                )
        out.append(record)
    return out


def _sort_key(row: dict[str, Any], keys: Sequence[str]) -> tuple[Any, ...]:
    # None sorts first, and values of one column share a type, so the tuple compares cleanly.
    return tuple((row.get(k) is not None, row.get(k) if row.get(k) is not None else 0) for k in keys)


def _derived_views(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Per-partition and overall views for the HTML report, summed over dates from the tables."""
    views: dict[str, list[dict[str, Any]]] = {}

    below: dict[tuple[str, int], dict[str, Any]] = {}
    for r in tables["isr_below_min_intervals"]:
        agg = below.setdefault(
            (r["topic"], r["partition"]),
            {"topic": r["topic"], "partition": r["partition"], "intervals": 0, "open_intervals": 0,
             "below_min_s": 0.0, "lowest_isr": r["lowest_isr"], "min_isr": r["min_isr"]},
        )
        agg["intervals"] += 1
        agg["open_intervals"] += int(bool(r["open"]))
        agg["below_min_s"] += r["duration_s"] or 0.0
        agg["lowest_isr"] = min(agg["lowest_isr"], r["lowest_isr"])
        agg["min_isr"] = max(agg["min_isr"], r["min_isr"])
    views["below_min_by_partition"] = sorted(below.values(), key=lambda a: (-a["below_min_s"], a["topic"], a["partition"]))

    by_partition: dict[tuple[str, int], dict[str, Any]] = {}
    for r in tables["decisions_by_kind"]:
        agg = by_partition.setdefault((r["topic"], r["partition"]), {"topic": r["topic"], "partition": r["partition"],
                                                                      "total": 0})
        kind = r["decision"] or "unknown"
        agg[kind] = agg.get(kind, 0) + r["requests"]
        agg["total"] += r["requests"]
    for r in tables["partition_traffic"]:
        part = by_partition.get((r["topic"], r["partition"]))
        if part is not None:
            for c in ("records", "record_bytes", "written_records"):
                part[c] = None if r[c] is None and part.get(c) is None else (part.get(c) or 0) + (r[c] or 0)
    views["decisions_by_partition"] = sorted(by_partition.values(), key=lambda a: (-a["total"], a["topic"], a["partition"]))

    from insync_proxy.pipeline.html_report import acks_label

    matrix: dict[tuple[Any, Any], dict[str, Any]] = {}
    for r in tables["decisions_by_acks"]:
        key = (r["acks_requested"], r["acks_sent"])
        agg = matrix.setdefault(key, {"acks_mode": acks_label(*key), "acks_requested": key[0], "acks_sent": key[1],
                                      "requests": 0, "record_bytes": 0})
        agg["requests"] += r["requests"]
        agg["record_bytes"] += r["record_bytes"] or 0
    views["acks_matrix"] = sorted(matrix.values(), key=lambda a: _sort_key(a, ("acks_requested", "acks_sent")))

    exposure: dict[str, dict[str, Any]] = {}
    byte_cols = ("bytes_sent", "bytes_acks_all", "bytes_acks_1", "bytes_acks_0", "bytes_acks_other",
                 "bytes_answered_by_proxy")
    for r in tables["durability_exposure"]:
        agg = exposure.setdefault(r["topic"], {"topic": r["topic"], **dict.fromkeys(byte_cols, 0)})
        for c in byte_cols:
            agg[c] += r[c]
    for agg in exposure.values():
        agg["exposed_share"] = (agg["bytes_acks_0"] + agg["bytes_acks_1"]) / agg["bytes_sent"] if agg["bytes_sent"] else None
    views["exposure_by_topic"] = sorted(exposure.values(), key=lambda a: a["topic"])

    clients: dict[str | None, dict[str, Any]] = {}
    for r in tables["top_clients"]:
        agg = clients.setdefault(r["client_id"], {"client_id": r["client_id"], "answered_errors": 0,
                                                  "not_enough_replicas": 0, "invalid_required_acks": 0,
                                                  "_partitions": set()})
        for c in ("answered_errors", "not_enough_replicas", "invalid_required_acks"):
            agg[c] += r[c]
        agg["_partitions"].add((r["topic"], r["partition"]))
    ranked = sorted(clients.values(), key=lambda a: (-a["answered_errors"], a["client_id"] is None, a["client_id"] or ""))
    views["top_clients_overall"] = [
        {**{k: v for k, v in a.items() if k != "_partitions"}, "partitions": len(a["_partitions"]), "rank": i + 1}
        for i, a in enumerate(ranked)
    ]
    return views


def _json_default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value)}")


#: Accounting counters of a report (``ReportResult.counts``) per valid event kind.
_KIND_COUNTERS = {"produce_decision": "produce_decisions", "produce_summary": "produce_summaries",
                  "isr_change": "isr_changes", "partition_readiness": "partition_readiness"}


def _from_micros(micros: int | None) -> datetime | None:
    if micros is None:
        return None
    return datetime.fromtimestamp(micros // 1_000_000, UTC).replace(microsecond=micros % 1_000_000)


def _accounting(
    line_counts: list[dict[str, Any]],
) -> tuple[dict[str, int], dict[str, int], datetime | None, datetime | None]:
    """Counts, rejected lines by reason and the valid events' first and last time, from
    :func:`pipeline.single_pass.line_counts` (lines per valid (schema_version, event) and per reject
    reason, with the valid lines' time span)."""
    from insync_proxy.audit.events import EVENT_KINDS_BY_VERSION

    counts = {"lines": 0, "valid": 0, "rejected": 0, "v1_events": 0, "v2_events": 0,
              "produce_decisions": 0, "produce_summaries": 0, "isr_changes": 0, "partition_readiness": 0}
    rejected_by_reason: dict[str, int] = defaultdict(int)
    first: int | None = None
    last: int | None = None
    for row in line_counts:
        n = int(row["lines"] or 0)
        counts["lines"] += n
        if row["reason"] is not None:
            rejected_by_reason[row["reason"]] += n
            continue
        version, kind = row["schema_version"], row["event"]
        assert kind in EVENT_KINDS_BY_VERSION.get(version, ()), (version, kind)  # validation let it through
        counts["valid"] += n
        counts[f"v{version}_events"] += n
        counts[_KIND_COUNTERS[kind]] += n
        if row["first_us"] is not None:
            first = row["first_us"] if first is None else min(first, row["first_us"])
        if row["last_us"] is not None:
            last = row["last_us"] if last is None else max(last, row["last_us"])
    counts["rejected"] = counts["lines"] - counts["valid"]
    return counts, rejected_by_reason, _from_micros(first), _from_micros(last)


#: Spark jobs the report runs side by side once the one pass is done (all read the small aggregate).
CONCURRENT_JOBS = 8


def _run_concurrently(jobs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run ``jobs`` (each submits Spark jobs) from :data:`CONCURRENT_JOBS` threads; their results by name.
    The first failure is raised once all have ended."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=CONCURRENT_JOBS, thread_name_prefix="report-job") as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
    return {name: future.result() for name, future in futures.items()}


def _write_table(spark: SparkSession, frame: DataFrame, name: str, path: Path) -> list[dict[str, Any]]:
    """Write ``frame`` as table ``name`` (Parquet, partitioned by date) and return its rows read back
    (:func:`_collect`; reading the small written table is cheaper than caching the frame).

    Spark writes no data file for an empty frame partitioned by date, which would leave a directory
    no reader can take the schema from: an empty table is written unpartitioned instead, one empty
    Parquet file carrying the table's schema (date included).
    """
    from insync_proxy.pipeline.tables import TABLE_SCHEMAS, empty_table

    frame.write.mode("overwrite").partitionBy("date").parquet(str(path))
    if not any(path.rglob("*.parquet")):
        empty_table(spark, name).coalesce(1).write.mode("overwrite").parquet(str(path))
    return _collect(spark.read.schema(TABLE_SCHEMAS[name]).parquet(str(path)))


#: The tables the report writes, each with the keys its rows are sorted by (its written order is Spark's).
TABLE_ORDER: dict[str, tuple[str, ...]] = {
    "partition_traffic": ("date", "topic", "partition"),
    "decisions_by_kind": ("date", "topic", "partition", "decision"),
    "decisions_by_acks": ("date", "topic", "partition", "acks_requested", "acks_sent"),
    "isr_below_min_intervals": ("topic", "partition", "start"),
    "latency_by_acks": ("date", "topic", "partition", "acks_requested", "acks_sent"),
    "durability_exposure": ("date", "topic", "partition"),
    "top_clients": ("date", "topic", "partition", "client_id"),
    "decisions_timeline": ("bucket_start", "decision"),
}


def run_report(
    spark: SparkSession,
    inputs: Sequence[str] | str,
    output_dir: str | Path,
    *,
    kafka: KafkaInput | None = None,
    progress: Progress | None = None,
    staging: str = "parquet",
    staged: Sequence[str] = (),
) -> ReportResult:
    """Read audit events (v1 and v2), write the Parquet tables, ``rejected/``, ``report.html`` and ``summary.json``.

    ``inputs`` are JSON Lines files, directories (read recursively for ``*.jsonl``) or globs; with
    ``kafka`` the audit topic is read as well (or alone, with ``inputs=[]``); ``staged`` are
    directories of already parsed events written by `insync-proxy compact` (Parquet). Each table directory
    under ``output_dir`` is replaced as a whole. Raises :class:`PipelineError` for a missing input.

    The input is read once (:mod:`pipeline.single_pass`): parsed, validated and aggregated in one
    scan into a small aggregate every table is cut from, kept as Parquet under
    ``output_dir/aggregate-staging`` (``staging="parquet"``, deleted at the end) or in Spark's cache
    (``"memory"``). A second scan runs only for ISR observations that interleave within a minute
    (their intervals need them one by one) or when the timeline granule does not fit the data's span.
    """
    from insync_proxy.pipeline.spark_env import configure_session

    started = time.monotonic()
    progress = progress or Progress()
    inputs = [inputs] if isinstance(inputs, str) else list(inputs)
    if not inputs and kafka is None and not staged:
        raise PipelineError("no input: give --input paths, --staged directories and/or --kafka-bootstrap with --topic")
    if staging not in ("parquet", "memory"):
        raise ValueError(f"staging must be 'parquet' or 'memory', not {staging!r}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    configure_session(spark)

    parsed, files = _read_events(spark, inputs, kafka, staged, progress)
    granule = _timeline_granule(spark, files, staged)
    tables = _ReportTables(spark, out, progress)
    try:
        agg = tables.one_pass(parsed, granule, staging)
        tables.cut(agg)
        tables.cut_what_follows_the_accounting(agg, parsed, granule)
    finally:
        tables.release()
    collected = tables.sorted_rows()
    summary = _summary(collected, tables.first_ts, tables.last_ts, tables.timeline_bucket)
    html_path, summary_path = _write_report_files(out, tables, collected, summary,
                                                  inputs + ([f"kafka:{kafka.topic}"] if kafka else []), progress)
    return ReportResult(
        output_dir=out, html_path=html_path, summary_path=summary_path, counts=tables.counts,
        rejected_by_reason=dict(tables.rejected_by_reason), tables=collected, table_paths=tables.paths,
        summary=summary, elapsed_s=time.monotonic() - started,
    )


def _read_events(spark: SparkSession, inputs: list[str], kafka: KafkaInput | None, staged: Sequence[str],
                 progress: Progress) -> tuple[DataFrame, list[str]]:
    """Every input as parsed, validated events (one frame, not read yet), and the input files."""
    from insync_proxy.pipeline import schema, sources

    progress.stage(f"reading audit events from {', '.join(inputs) or '-'}" + (f" + kafka topic {kafka.topic}" if kafka else ""))
    frames = []
    files: list[str] = []
    if inputs:
        files = sources.resolve_inputs(inputs)
        progress.stage(f"  {len(files):,} input file(s)" if files else "  no audit file in the input: empty report")
        frames.append(sources.read_audit_files(spark, files))
    if kafka is not None:
        lines = sources.read_audit_kafka(spark, kafka.bootstrap, kafka.topic, kafka.starting_offsets,
                                         kafka.ending_offsets)
        frames.append(schema.parse_audit_events(lines, source_col="source"))
    if staged:
        progress.stage(f"reading staged (already parsed) events from {', '.join(staged)}")
        frames.append(spark.read.schema(schema.PARSED_SCHEMA).parquet(*staged))
    parsed = frames[0]
    for frame in frames[1:]:
        parsed = parsed.unionByName(frame)
    return parsed, files


def _timeline_granule(spark: SparkSession, files: list[str], staged: Sequence[str]) -> int:
    """The timeline granule from a lower bound of the span: the files' first and last lines, and the
    staged events' exact first and last times (a cheap query on two Parquet columns)."""
    from insync_proxy.pipeline import schema, single_pass, sources

    times = sources.sample_times(files)
    if staged:
        times += single_pass.time_range(spark.read.schema(schema.PARSED_SCHEMA).parquet(*staged))
    return single_pass.timeline_granule(max(times) - min(times) if len(times) >= 2 else None)


class _ReportTables:
    """The tables of one report run, cut from the one pass's aggregate, and what they need on the way."""

    def __init__(self, spark: SparkSession, out: Path, progress: Progress) -> None:
        self.spark = spark
        self.progress = progress
        self.paths = {name: out / name for name in TABLE_ORDER}
        self.staging_dir = out / "aggregate-staging"  # not "_...": Spark skips such paths as hidden
        self.rejected_dir = out / "rejected"
        self.done: dict[str, Any] = {}
        self.cached: list[DataFrame] = []
        self.counts: dict[str, int] = {}
        self.rejected_by_reason: dict[str, int] = {}
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None
        self.timeline_bucket = 0

    def one_pass(self, parsed: DataFrame, granule: int, staging: str) -> DataFrame:
        """One scan: the JSON is parsed and validated once, and every table's input is aggregated from
        it in the same job (pipeline.single_pass), the accounting (lines by kind and reason, time span)
        included. Only the small aggregate is kept: as Parquet under OUTPUT/aggregate-staging, or in
        Spark's cache."""
        from pyspark import StorageLevel

        from insync_proxy.pipeline import single_pass

        aggregate = single_pass.aggregate(parsed, timeline_seconds=granule)
        self.progress.stage("parsing, validating (audit schema v1 and v2) and aggregating in one pass")
        if staging == "parquet":
            aggregate.write.mode("overwrite").parquet(str(self.staging_dir))
            return self.spark.read.parquet(str(self.staging_dir))
        agg = aggregate.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(agg)
        agg.count()
        return agg

    def _write(self, name: str, frame: DataFrame) -> Callable[[], list[dict[str, Any]]]:
        def write() -> list[dict[str, Any]]:
            rows = _write_table(self.spark, frame, name, self.paths[name])
            self.progress.stage(f"  wrote {len(rows):,} rows to {self.paths[name]}")
            return rows

        return write

    def cut(self, agg: DataFrame) -> None:
        """The accounting, the interleaved-granule count and every table that needs neither, side by
        side (Spark schedules concurrent jobs; each is mostly fixed overhead, which a sequence would pay
        one by one): every job reads the small aggregate."""
        from pyspark import StorageLevel

        from insync_proxy.pipeline import single_pass, tables

        self.progress.stage("  one pass done; cutting the tables from its aggregate")
        cube = single_pass.cube(agg)
        histograms = single_pass.histograms(agg)
        self.granules = single_pass.granule_summaries(agg).persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(self.granules)
        self.interleaved = self.granules.filter(single_pass.interleaved())
        frames = {
            "partition_traffic": tables.partition_traffic(cube),
            "decisions_by_kind": tables.decisions_by_kind(cube),
            "decisions_by_acks": tables.decisions_by_acks(cube),
            "latency_by_acks": tables.latency_by_acks(histograms),
            "durability_exposure": tables.durability_exposure(cube),
            "top_clients": tables.top_clients(single_pass.clients(agg)),
        }
        self.progress.stage(f"computing and writing {len(self.paths)} tables, rejected lines and overall latency")
        self.done = _run_concurrently({
            "line_counts": lambda: single_pass.line_counts(agg),
            "interleaved": self.interleaved.count,
            "latency_overall": lambda: _collect(tables.latency_overall(histograms)),
            **{name: self._write(name, frame) for name, frame in frames.items()},
        })
        self.counts, self.rejected_by_reason, self.first_ts, self.last_ts = _accounting(self.done["line_counts"])
        c = self.counts
        self.progress.stage(
            f"  {c['lines']:,} lines: {c['valid']:,} valid ({c['v1_events']:,} v1, "
            f"{c['v2_events']:,} v2; {c['produce_summaries']:,} produce summaries, "
            f"{c['produce_decisions']:,} produce decisions, {c['isr_changes']:,} isr changes, "
            f"{c['partition_readiness']:,} readiness changes), {c['rejected']:,} rejected"
            + (f" {dict(self.rejected_by_reason)}" if self.rejected_by_reason else "")
        )

    def cut_what_follows_the_accounting(self, agg: DataFrame, parsed: DataFrame, granule: int) -> None:
        """The intervals, the timeline (its bucket follows the span) and the rejected lines."""
        from insync_proxy.pipeline import schema, single_pass, tables

        span = (self.last_ts - self.first_ts).total_seconds() if self.first_ts and self.last_ts else 0.0
        self.timeline_bucket = bucket = tables.timeline_bucket_seconds(span)
        runs = single_pass.below_min_runs(self.granules)
        if self.done["interleaved"]:
            # Below and not-below observations interleave within these granules: their observations
            # are read again, one by one (a second scan of the input, only for them).
            self.progress.stage(f"  {self.done['interleaved']:,} time granule(s) with interleaved ISR observations: "
                                "reading their observations again")
            detail = single_pass.observations_in(schema.observations(schema.valid_events(parsed)), self.interleaved)
            runs = runs.unionByName(single_pass.observation_runs(detail))
        if bucket % granule == 0:
            timeline = single_pass.timeline_summaries(agg)
        else:  # the span estimate was wrong (cannot happen with valid first/last lines): per event
            self.progress.stage(f"  timeline: {granule} s granules do not divide {bucket} s buckets; "
                                "reading the events again")
            timeline = schema.summaries(schema.valid_events(parsed))
        self.done |= _run_concurrently({
            "isr_below_min_intervals": self._write("isr_below_min_intervals",
                                                   tables.isr_below_min_intervals_from_runs(runs)),
            "decisions_timeline": self._write("decisions_timeline", tables.decisions_timeline(timeline, bucket)),
            "rejected": lambda: self._write_rejected(agg),
        })

    def _write_rejected(self, agg: DataFrame) -> None:
        """The rejected lines as JSON Lines, so an operator can read them and their reasons without Spark."""
        from insync_proxy.pipeline import single_pass

        if self.counts["rejected"]:
            single_pass.rejected_lines(agg).coalesce(1).write.mode("overwrite").json(str(self.rejected_dir))
        else:  # known from the counts: no Spark job, an empty JSON Lines file as Spark would leave it
            shutil.rmtree(self.rejected_dir, ignore_errors=True)
            self.rejected_dir.mkdir(parents=True)
            (self.rejected_dir / "part-00000.json").touch()
            (self.rejected_dir / "_SUCCESS").touch()
        self.progress.stage(f"  wrote {self.counts['rejected']:,} rejected lines to {self.rejected_dir}")

    def release(self) -> None:
        """Drop what the run cached and staged."""
        for frame in self.cached:
            frame.unpersist()
        shutil.rmtree(self.staging_dir, ignore_errors=True)

    def sorted_rows(self) -> dict[str, list[dict[str, Any]]]:
        """Every table's rows in its order (:data:`TABLE_ORDER`), plus the report's derived views."""
        collected: dict[str, list[dict[str, Any]]] = {name: self.done[name] for name in (*TABLE_ORDER, "latency_overall")}
        for name, keys in {**TABLE_ORDER, "latency_overall": ("acks_requested", "acks_sent")}.items():
            collected[name].sort(key=lambda r, k=keys: _sort_key(r, k))  # type: ignore[misc]
        collected.update(_derived_views(collected))
        return collected


def _summary(collected: dict[str, list[dict[str, Any]]], first_ts: datetime | None, last_ts: datetime | None,
             timeline_bucket: int) -> dict[str, Any]:
    """The report's headline figures (summary.json's ``summary``)."""
    from insync_proxy.pipeline import tables

    exposure = collected["exposure_by_topic"]
    bytes_sent = sum(r["bytes_sent"] for r in exposure)
    traffic = collected["partition_traffic"]
    intervals = collected["isr_below_min_intervals"]
    return {
        "first_ts": first_ts,
        "last_ts": last_ts,
        "topic_partitions": len({(r["topic"], r["partition"]) for r in traffic}
                                | {(r["topic"], r["partition"]) for r in intervals}),
        "requests": sum(r["requests"] for r in traffic),
        "records": sum(r["records"] for r in traffic if r["records"] is not None),
        "record_bytes": sum(r["record_bytes"] for r in traffic),
        "proxy_answered_errors": sum(r["answered_errors"] for r in collected["top_clients_overall"]),
        "exposed_share": (sum(r["bytes_acks_0"] + r["bytes_acks_1"] for r in exposure) / bytes_sent) if bytes_sent else None,
        "below_min_intervals": len(intervals),
        "open_intervals": sum(1 for r in intervals if r["open"]),
        "timeline_bucket_seconds": timeline_bucket,
        "latency_relative_error": tables.PERCENTILE_RELATIVE_ERROR,
    }


def _write_report_files(out: Path, run: _ReportTables, collected: dict[str, list[dict[str, Any]]],
                        summary: dict[str, Any], inputs: list[str], progress: Progress) -> tuple[Path, Path]:
    """report.html and summary.json."""
    from insync_proxy.pipeline import html_report

    html_path = out / "report.html"
    progress.stage(f"rendering {html_path}")
    html_path.write_text(
        html_report.render_html(counts=run.counts, rejected_by_reason=run.rejected_by_reason, tables=collected,
                                summary=summary, inputs=inputs),
        encoding="utf-8",
    )
    summary_path = out / "summary.json"
    summary_path.write_text(
        json.dumps({"counts": run.counts, "rejected_by_reason": run.rejected_by_reason, "summary": summary,
                    "latency_overall": collected["latency_overall"], "top_clients": collected["top_clients_overall"][:20],
                    "below_min_by_partition": collected["below_min_by_partition"]},
                   indent=2, default=_json_default),
        encoding="utf-8",
    )
    return html_path, summary_path


def console_summary(result: ReportResult) -> str:
    """A short plain-text summary of a report run for the terminal ("none" where there is nothing)."""
    from insync_proxy.pipeline.html_report import acks_label

    c, s = result.counts, result.summary
    lines = [
        f"audit lines: {c['lines']:,}  valid: {c['valid']:,} (v1: {c['v1_events']:,}, v2: {c['v2_events']:,})  "
        f"rejected: {c['rejected']:,}"
        + (f" ({', '.join(f'{k}: {v:,}' for k, v in sorted(result.rejected_by_reason.items()))})" if c["rejected"] else ""),
        (f"events from {s['first_ts']} to {s['last_ts']} over {s['topic_partitions']:,} topic-partitions"
         if s["first_ts"] else "events: none"),
        f"produce requests: {s['requests']:,} ({s['records']:,} records counted, {s['record_bytes']:,} record bytes)"
        if s["requests"] else "produce requests: none",
        f"below-min-ISR intervals: {s['below_min_intervals']:,} ({s['open_intervals']:,} still open)"
        if s["below_min_intervals"] else "below-min-ISR intervals: none",
    ]
    for r in result.tables["below_min_by_partition"][:5]:
        lines.append(f"  {r['topic']}-{r['partition']}: {r['below_min_s']:.1f} s below min ISR in {r['intervals']} intervals"
                     f" (lowest ISR {r['lowest_isr']}, min ISR {r['min_isr']})")
    if not result.tables["latency_overall"]:
        lines.append("latency: none measured")
    for r in result.tables["latency_overall"]:
        lines.append(f"latency {acks_label(r['acks_requested'], r['acks_sent'])}: p50 {r['p50_ms']:.2f} ms, "
                     f"p95 {r['p95_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms (n={r['requests']:,}; bucket error "
                     f"at most +{s['latency_relative_error']:.1%})")
    share = s["exposed_share"]
    lines.append("bytes sent with acks 0/1: " + ("none sent" if share is None else f"{share:.1%}"))
    if not result.tables["top_clients_overall"]:
        lines.append("proxy-answered errors: none")
    for r in result.tables["top_clients_overall"][:5]:
        lines.append(f"  client {r['client_id']}: {r['answered_errors']:,} proxy-answered errors")
    lines.append(f"report: {result.html_path}  (tables under {result.output_dir}, {result.elapsed_s:.1f} s)")
    return "\n".join(lines)


def verbose_requested(flag: bool = False) -> bool:
    """True with ``--verbose`` or ``INSYNC_DEBUG`` set (to anything but empty or 0)."""
    return flag or os.environ.get("INSYNC_DEBUG", "") not in ("", "0")


def failure_line(exc: BaseException) -> str:
    """One line saying why a Spark job failed: the JVM exception's own message, not py4j's frame."""
    message = ""
    java = getattr(exc, "java_exception", None)
    if java is not None:  # py4j's Py4JJavaError: its str() starts with "An error occurred while calling o12.x"
        try:
            message = str(java.getMessage() or java.toString())
        except Exception:  # the JVM may be gone
            message = ""
    if not message:
        message = getattr(exc, "getMessage", lambda: "")() if hasattr(exc, "getMessage") else ""
    if not message:
        message = str(exc)
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("An error occurred while calling", "JVM stacktrace"))]
    return (useful or lines or [type(exc).__name__])[0]


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """What ``insync-proxy report`` was asked, checked by the command line (insync_proxy/cli.py)."""

    inputs: tuple[str, ...]
    output: str
    staged: tuple[str, ...]
    kafka: KafkaInput | None
    master: str | None
    shuffle_partitions: int
    driver_memory: str
    staging: str
    quiet: bool
    verbose: bool


def report_command(options: ReportOptions) -> int:
    """``insync-proxy report``: start Spark, run the report, print the summary; returns the exit status (0 done,
    2 missing input, bad master or no Java, 1 the Spark job failed)."""
    verbose = verbose_requested(options.verbose)
    progress = Progress(enabled=not options.quiet)
    try:
        from insync_proxy.pipeline import sources
        from insync_proxy.pipeline.spark_env import build_session, check_master

        if options.master:
            check_master(options.master)
        sources.resolve_inputs(list(options.inputs))  # fail fast, before paying for a JVM start
        jars = None
        if options.kafka:
            from insync_proxy.pipeline.jars import kafka_jars

            progress.stage("resolving Spark's Kafka connector jars")
            jars = kafka_jars(note=progress.stage)
        progress.stage(f"starting Spark ({options.master or 'default master'})")
        spark = build_session(options.master, "insync-proxy durability report",
                              shuffle_partitions=options.shuffle_partitions, driver_memory=options.driver_memory,
                              jars=jars, verbose=verbose)
        result = run_report(spark, options.inputs, options.output, kafka=options.kafka, progress=progress,
                            staging=options.staging, staged=options.staged)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a failed Spark job: one line; --verbose / INSYNC_DEBUG=1 shows the whole trace
        if verbose:
            raise
        from insync_proxy.pipeline import spark_env

        log = spark_env.spark_log_hint()
        print(f"error: the report job failed: {failure_line(exc)} ({log}--verbose or INSYNC_DEBUG=1 shows "
              "Spark's log and the full trace)", file=sys.stderr)
        return 1
    print(console_summary(result))
    return 0


if __name__ == "__main__":
    # Not a command (it was one, `python -m insync_proxy.pipeline.report`): a scheduled job that still runs it must
    # fail, not report success having done nothing.
    sys.exit("insync_proxy.pipeline.report is not a command: the job is `insync-proxy report` "
             "(python -m insync_proxy report --help)")
