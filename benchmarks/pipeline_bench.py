"""Benchmark: the durability report job in Spark local[2] versus the same aggregation in DuckDB,
and the report over one day of a v2 fleet.

    python benchmarks/pipeline_bench.py --events 1000000
    python benchmarks/pipeline_bench.py --events 10000000 --files 16
    python benchmarks/pipeline_bench.py --fleet --hours 24                  # staged (Parquet) v2 fleet day
    python benchmarks/pipeline_bench.py --fleet --hours 1 --fleet-format json   # the same as JSON Lines

v1 mode (default):

Synthetic audit events (schema v1, JSON Lines, several files as from several sidecars) are generated
with DuckDB (vectorised SQL, seconds for millions of lines) and cached under ``--cache-dir``. Both
engines then read the JSON, validate/type it, compute the report's tables (decisions by kind and by
acks, below-min-ISR intervals with window functions, latency percentiles, exposure, top clients,
timeline) and write them as date-partitioned Parquet. Spark runs the real job
(:func:`pipeline.report.run_report`, which also writes the HTML); DuckDB runs equivalent SQL.
Prints events/s for each and the ratio. Needs ``pip install pyspark duckdb``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Two days of traffic so that date partitioning has more than one partition to write.
SPAN_SECONDS = 2 * 86400
START = "2026-11-21 00:00:00"

_GENERATE = """
WITH base AS (
    SELECT i,
           hash(i) AS h,
           hash(i * 7 + 3) AS h2,
           TIMESTAMP '{start}' + to_microseconds(CAST(i * {step_us} AS BIGINT)) AS t,
           (i % 50 = 0) AS is_isr
    FROM range({lo}, {hi}) r(i)
), keyed AS (
    SELECT *, 'topic-' || CAST(h % 10 AS VARCHAR) AS topic, CAST(h2 % 12 AS INTEGER) AS part,
           h % 100 AS acks_pick
    FROM base
), state AS (
    -- A partition is below min ISR for whole minutes picked by a hash of (partition, minute).
    SELECT *, (hash(topic, part, CAST(epoch(t) / 60 AS BIGINT)) % 20 = 0) AS below,
           CASE WHEN acks_pick < 60 THEN -1 WHEN acks_pick < 80 THEN 1 WHEN acks_pick < 90 THEN 0
                WHEN acks_pick < 97 THEN -2 ELSE 3 END AS acks
    FROM keyed
), decided AS (
    SELECT *, CASE WHEN acks = 3 THEN 'answered_invalid_required_acks'
                   WHEN acks IN (-1, -2) AND below THEN 'answered_not_enough_replicas'
                   WHEN acks = 1 AND h2 % 10 = 0 THEN 'raised_by_floor'
                   ELSE 'forwarded' END AS decision
    FROM state
)
SELECT 1 AS schema_version,
       CASE WHEN is_isr THEN 'isr_change' ELSE 'produce_decision' END AS event,
       strftime(t, '%Y-%m-%dT%H:%M:%S.%fZ') AS ts,
       'sidecar-{file}' AS proxy_id,
       CASE WHEN is_isr THEN NULL ELSE 'broker-' || CAST(h % 3 AS VARCHAR) END AS listener,
       CASE WHEN is_isr THEN NULL ELSE 'client-' || CAST(h2 % 200 AS VARCHAR) END AS client_id,
       topic,
       part AS "partition",
       CASE WHEN is_isr THEN NULL ELSE acks END AS acks_requested,
       CASE WHEN is_isr OR decision LIKE 'answered%' THEN NULL
            WHEN decision = 'raised_by_floor' OR acks = -2 THEN -1 ELSE acks END AS acks_sent,
       CASE WHEN below THEN 1 ELSE 3 END AS isr_size,
       2 AS min_isr,
       CASE WHEN is_isr THEN NULL ELSE decision END AS decision,
       CASE WHEN is_isr OR acks = 0 THEN NULL WHEN decision = 'answered_invalid_required_acks' THEN 21
            WHEN decision = 'answered_not_enough_replicas' THEN 19 ELSE 0 END AS error_code,
       CASE WHEN is_isr OR acks = 0 THEN NULL WHEN decision LIKE 'answered%' THEN 0.05 + (h % 10) / 100.0
            WHEN acks IN (-1, -2) OR decision = 'raised_by_floor' THEN 2.0 + (h % 3000) / 100.0
            ELSE 1.0 + (h % 1000) / 100.0 END AS latency_ms,
       CASE WHEN is_isr THEN NULL ELSE CAST(100 + h2 % 16000 AS BIGINT) END AS record_bytes,
       CASE WHEN is_isr THEN NULL ELSE 11 END AS api_version,
       CASE WHEN is_isr THEN NULL ELSE CAST(i % 2147483647 AS INTEGER) END AS correlation_id,
       CASE WHEN is_isr THEN CAST(h % 3 AS INTEGER) ELSE NULL END AS leader_id
FROM decided
ORDER BY i
"""


def generate(events: int, files: int, cache_dir: Path) -> Path:
    """Generate (or reuse) ``events`` synthetic audit lines split over ``files`` JSON Lines files."""
    import duckdb

    target = cache_dir / f"events-{events}-{files}"
    done = target / "_COMPLETE"
    if done.exists():
        print(f"using cached events in {target}")
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    started = time.monotonic()
    con = duckdb.connect()
    con.execute("SET threads = 2")
    step_us = SPAN_SECONDS * 1_000_000 / events
    per_file = -(-events // files)
    for f in range(files):
        lo, hi = f * per_file, min(events, (f + 1) * per_file)
        sql = _GENERATE.format(start=START, step_us=step_us, lo=lo, hi=hi, file=f)
        path = target / f"audit-sidecar-{f}-20261121T000000Z.jsonl"
        con.execute(f"COPY ({sql}) TO '{path}' (FORMAT JSON)")
    done.write_text(str(events))
    size = sum(p.stat().st_size for p in target.glob("*.jsonl"))
    print(f"generated {events:,} events ({size / 1e6:,.0f} MB) in {time.monotonic() - started:.1f} s into {target}")
    return target


_COLUMNS = {
    "schema_version": "INTEGER", "event": "VARCHAR", "ts": "VARCHAR", "proxy_id": "VARCHAR", "listener": "VARCHAR",
    "client_id": "VARCHAR", "topic": "VARCHAR", "partition": "INTEGER", "acks_requested": "INTEGER",
    "acks_sent": "INTEGER", "isr_size": "INTEGER", "min_isr": "INTEGER", "decision": "VARCHAR",
    "error_code": "INTEGER", "latency_ms": "DOUBLE", "record_bytes": "BIGINT", "api_version": "INTEGER",
    "correlation_id": "INTEGER", "leader_id": "INTEGER",
}

_DUCKDB_TABLES = {
    "partition_traffic": """
        SELECT date, topic, "partition", count(*) AS requests, sum(record_bytes) AS record_bytes,
               count(*) FILTER (acks_sent IS NOT NULL AND coalesce(error_code, 0) = 0) AS written_requests,
               count(*) FILTER (acks_sent IS NULL) AS answered_by_proxy_requests
        FROM pd GROUP BY ALL""",
    "decisions_by_kind": """
        SELECT date, topic, "partition", decision, count(*) AS decisions, sum(record_bytes) AS record_bytes
        FROM pd GROUP BY ALL""",
    "decisions_by_acks": """
        SELECT date, topic, "partition", acks_requested, acks_sent, count(*) AS decisions,
               sum(record_bytes) AS record_bytes
        FROM pd GROUP BY ALL""",
    "isr_below_min_intervals": """
        WITH obs AS (
            SELECT topic, "partition", ts, proxy_id, event, isr_size, min_isr, isr_size < min_isr AS below
            FROM ev WHERE isr_size IS NOT NULL AND min_isr IS NOT NULL
        ), marked AS (
            SELECT *, lag(below) OVER w AS prev_below, lead(below) OVER w AS next_below, lead(ts) OVER w AS next_ts
            FROM obs WINDOW w AS (PARTITION BY topic, "partition" ORDER BY ts, proxy_id, event, isr_size)
        ), islands AS (
            SELECT *, sum(CASE WHEN coalesce(prev_below, false) THEN 0 ELSE 1 END) OVER (
                PARTITION BY topic, "partition" ORDER BY ts, proxy_id, event, isr_size
                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
            FROM marked WHERE below
        ), agg AS (
            SELECT topic, "partition", island, min(ts) AS start, max(ts) AS last_below,
                   max(CASE WHEN next_below = false THEN next_ts END) AS recovered_at,
                   max(min_isr) AS min_isr, min(isr_size) AS lowest_isr, count(*) AS observations,
                   list_sort(list_distinct(list(proxy_id))) AS proxies
            FROM islands GROUP BY ALL
        )
        SELECT CAST(start AS DATE) AS date, topic, "partition", start, coalesce(recovered_at, last_below) AS "end",
               (epoch_us(coalesce(recovered_at, last_below)) - epoch_us(start)) / 1e6 AS duration_s,
               min_isr, lowest_isr, recovered_at IS NULL AS open, observations, proxies
        FROM agg""",
    "latency_by_acks": """
        SELECT date, topic, "partition", acks_requested, acks_sent, count(*) AS requests,
               approx_quantile(latency_ms, 0.5) AS p50_ms, approx_quantile(latency_ms, 0.95) AS p95_ms,
               approx_quantile(latency_ms, 0.99) AS p99_ms, max(latency_ms) AS max_ms, avg(latency_ms) AS mean_ms
        FROM pd WHERE latency_ms IS NOT NULL GROUP BY ALL""",
    "durability_exposure": """
        SELECT date, topic, "partition",
               coalesce(sum(record_bytes) FILTER (acks_sent = -1), 0) AS bytes_acks_all,
               coalesce(sum(record_bytes) FILTER (acks_sent = 1), 0) AS bytes_acks_1,
               coalesce(sum(record_bytes) FILTER (acks_sent = 0), 0) AS bytes_acks_0,
               coalesce(sum(record_bytes) FILTER (acks_sent IS NOT NULL), 0) AS bytes_sent,
               coalesce(sum(record_bytes) FILTER (acks_sent IS NULL), 0) AS bytes_answered_by_proxy,
               (bytes_acks_0 + bytes_acks_1) / nullif(bytes_sent, 0) AS exposed_share
        FROM pd GROUP BY ALL""",
    "top_clients": """
        SELECT date, client_id, topic, "partition",
               count(*) FILTER (decision = 'answered_not_enough_replicas') AS not_enough_replicas,
               count(*) FILTER (decision = 'answered_invalid_required_acks') AS invalid_required_acks,
               count(*) AS answered_errors, min(ts) AS first_seen, max(ts) AS last_seen
        FROM pd WHERE decision IN ('answered_not_enough_replicas', 'answered_invalid_required_acks')
        GROUP BY ALL""",
    "decisions_timeline": """
        SELECT time_bucket(INTERVAL '{bucket} seconds', ts) AS bucket_start, decision, count(*) AS decisions,
               CAST(time_bucket(INTERVAL '{bucket} seconds', ts) AS DATE) AS date
        FROM pd GROUP BY ALL""",
}


def run_duckdb(data: Path, out: Path, threads: int) -> float:
    """The report's aggregation in DuckDB: read+validate JSON, compute the tables, write Parquet. Seconds."""
    import duckdb

    from insync_proxy.pipeline.tables import timeline_bucket_seconds

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute("SET TimeZone = 'UTC'")
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in _COLUMNS.items()) + "}"
    # Parsed and validated once into a temporary table, as the Spark job caches its parsed events.
    con.execute(f"""
        CREATE TEMP TABLE ev AS
        SELECT * REPLACE (CAST(ts AS TIMESTAMPTZ) AS ts), CAST(CAST(ts AS TIMESTAMPTZ) AS DATE) AS date
        FROM read_json('{data}/*.jsonl', format = 'newline_delimited', columns = {columns})
        WHERE schema_version = 1 AND event IN ('produce_decision', 'isr_change') AND ts IS NOT NULL
          AND proxy_id IS NOT NULL AND topic IS NOT NULL AND "partition" >= 0
    """)
    con.execute("CREATE TEMP VIEW pd AS SELECT * FROM ev WHERE event = 'produce_decision'")
    # Epoch arithmetic in SQL: fetching TIMESTAMPTZ values would need pytz on the Python side.
    (span_us,) = con.execute("SELECT epoch_us(max(ts)) - epoch_us(min(ts)) FROM ev").fetchone()  # type: ignore[misc]
    bucket = timeline_bucket_seconds(span_us / 1e6)
    for name, sql in _DUCKDB_TABLES.items():
        con.execute(f"COPY ({sql.format(bucket=bucket)}) TO '{out / name}' (FORMAT PARQUET, PARTITION_BY (date))")
    overall = con.execute(
        "SELECT acks_requested, acks_sent, approx_quantile(latency_ms, 0.99) FROM pd "
        "WHERE latency_ms IS NOT NULL GROUP BY ALL"
    ).fetchall()
    assert overall
    return time.monotonic() - started


def run_spark(data: Path, out: Path, driver_memory: str, shuffle_partitions: int, *, staged: bool = False,
              staging: str = "parquet") -> tuple[float, float]:
    """The real report job in Spark local[2]; returns (session start seconds, job seconds)."""
    from insync_proxy.pipeline.report import run_report
    from insync_proxy.pipeline.spark_env import Progress, build_session

    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    spark = build_session("local[2]", "pipeline bench", shuffle_partitions=shuffle_partitions,
                          driver_memory=driver_memory, extra_conf={"spark.ui.enabled": "false"})
    spark.range(1).count()  # JVM warm-up is not the job's cost
    session_s = time.monotonic() - started
    started = time.monotonic()
    if staged:
        result = run_report(spark, [], out, progress=Progress(), staged=[str(data)])
    else:
        result = run_report(spark, [str(data)], out, progress=Progress(), staging=staging)
    job_s = time.monotonic() - started
    print(f"spark: {result.counts['valid']:,} valid events, {result.summary['requests']:,} requests, "
          f"{len(result.tables['isr_below_min_intervals']):,} intervals")
    spark.stop()
    return session_s, job_s


# --------------------------------------------------------------------------- v2 fleet

#: Latency buckets of a generated summary: five buckets around 2-6 ms (indexes 44..52).
_FLEET_SQL = """
WITH base AS (
    SELECT i, i // {keys} AS k, i % {keys} AS sp, hash(i) % 1000 AS h
    FROM range({lo}, {hi}) r(i)
), rows AS (
    SELECT *, sp // {partitions} AS s, sp % {partitions} AS p, {merged} * (50 + hash(i * 3) % 100) AS req,
           TIMESTAMPTZ '{start}' + to_microseconds(CAST(k AS BIGINT) * {interval_us}) AS t0
    FROM base
)
SELECT 2 AS schema_version, 'produce_summary' AS event,
       t0 + to_microseconds({interval_us}) AS ts, 'sidecar-' || CAST(s AS VARCHAR) AS proxy_id,
       'broker-' || CAST(p % 3 AS VARCHAR) AS listener, 'client-' || CAST(s AS VARCHAR) AS client_id,
       'fleet-' || CAST(sp // 10 AS VARCHAR) AS topic, CAST(p % 10 AS INTEGER) AS "partition",
       CAST(CASE WHEN p % 10 < 7 THEN -1 WHEN p % 10 < 9 THEN 1 ELSE -2 END AS INTEGER) AS acks_requested,
       CAST(CASE WHEN h = 0 THEN NULL WHEN p % 10 < 7 THEN -1 WHEN p % 10 < 9 THEN 1 ELSE -1 END AS INTEGER) AS acks_sent,
       CAST(NULL AS INTEGER) AS isr_size, CAST(NULL AS INTEGER) AS min_isr,
       CASE WHEN h = 0 THEN 'answered_not_enough_replicas' ELSE 'forwarded' END AS decision,
       CAST(CASE WHEN h = 0 THEN 19 ELSE 0 END AS INTEGER) AS error_code,
       CAST(NULL AS DOUBLE) AS latency_ms, CAST(req * 16000 AS BIGINT) AS record_bytes,
       CAST(NULL AS INTEGER) AS api_version, CAST(NULL AS INTEGER) AS correlation_id, CAST(NULL AS INTEGER) AS leader_id,
       t0 AS interval_start, CAST({interval_s} AS DOUBLE) AS interval_seconds, CAST(req AS BIGINT) AS requests,
       CAST(req * 16 AS BIGINT) AS records, CAST(req AS BIGINT) AS latency_count,
       CAST(req * 3.5 AS DOUBLE) AS latency_sum_ms, CAST(1.9 AS DOUBLE) AS latency_min_ms,
       CAST(6.1 AS DOUBLE) AS latency_max_ms,
       [[44, req // 5], [46, req // 5], [48, req // 5], [50, req // 5], [52, req - 4 * (req // 5)]]::BIGINT[][]
           AS latency_buckets,
       CAST(NULL AS BOOLEAN) AS ready, CAST(t0 AS DATE) AS date, CAST(NULL AS VARCHAR) AS reject_reason,
       CAST(NULL AS VARCHAR) AS source, CAST(NULL AS VARCHAR) AS line
FROM rows
"""

#: One unready/ready pair per (sidecar, hour) on that sidecar's first partition.
_FLEET_READINESS_SQL = """
SELECT 2 AS schema_version, 'partition_readiness' AS event,
       TIMESTAMPTZ '{start}' + to_microseconds(CAST(hr * 3600 + 60 + 30 * flip AS BIGINT) * 1000000) AS ts,
       'sidecar-' || CAST(s AS VARCHAR) AS proxy_id, CAST(NULL AS VARCHAR) AS listener,
       CAST(NULL AS VARCHAR) AS client_id, 'fleet-' || CAST(s * {partitions} // 10 AS VARCHAR) AS topic,
       0 AS "partition", CAST(NULL AS INTEGER) AS acks_requested, CAST(NULL AS INTEGER) AS acks_sent,
       CAST(1 + 2 * flip AS INTEGER) AS isr_size, 2 AS min_isr, CAST(NULL AS VARCHAR) AS decision,
       CAST(NULL AS INTEGER) AS error_code, CAST(NULL AS DOUBLE) AS latency_ms, CAST(NULL AS BIGINT) AS record_bytes,
       CAST(NULL AS INTEGER) AS api_version, CAST(NULL AS INTEGER) AS correlation_id, 1 AS leader_id,
       CAST(NULL AS TIMESTAMPTZ) AS interval_start, CAST(NULL AS DOUBLE) AS interval_seconds,
       CAST(NULL AS BIGINT) AS requests, CAST(NULL AS BIGINT) AS records, CAST(NULL AS BIGINT) AS latency_count,
       CAST(NULL AS DOUBLE) AS latency_sum_ms, CAST(NULL AS DOUBLE) AS latency_min_ms,
       CAST(NULL AS DOUBLE) AS latency_max_ms, CAST(NULL AS BIGINT[][]) AS latency_buckets,
       flip = 1 AS ready, CAST(TIMESTAMPTZ '{start}' + to_microseconds(CAST(hr * 3600 AS BIGINT) * 1000000) AS DATE) AS date,
       CAST(NULL AS VARCHAR) AS reject_reason, CAST(NULL AS VARCHAR) AS source, CAST(NULL AS VARCHAR) AS line
FROM range(0, {sidecars}) a(s), range(0, {hours}) b(hr), range(0, 2) c(flip)
"""

_FLEET_JSON_COLUMNS = (
    "schema_version, event, strftime(ts, '%Y-%m-%dT%H:%M:%S.%fZ') AS ts, proxy_id, "
    "strftime(interval_start, '%Y-%m-%dT%H:%M:%S.%fZ') AS interval_start, interval_seconds, listener, client_id, "
    "topic, \"partition\", acks_requested, acks_sent, decision, error_code, requests, records, record_bytes, "
    "latency_count, latency_sum_ms, latency_min_ms, latency_max_ms, latency_buckets"
)


def generate_fleet(sidecars: int, partitions: int, interval_s: int, hours: float, fmt: str, cache_dir: Path,
                   rollup_s: int = 0) -> Path:
    """Generate (or reuse) the summaries a fleet emits over ``hours``: one per sidecar, busy partition
    and interval, plus readiness events; ``fmt`` "staged" (Parquet, the parse step's output, as
    ``insync-proxy compact`` writes it) or "json" (JSON Lines as the proxy writes them, one file per
    sidecar-hour group)."""
    import duckdb

    keys = sidecars * partitions
    # Rolled up (insync-proxy compact --rollup-seconds): one row per key and granule carrying the sums of
    # rollup_s / interval_s intervals, as the compaction writes it.
    merged = max(1, rollup_s // interval_s) if rollup_s else 1
    interval_s = interval_s * merged
    intervals = int(hours * 3600 / interval_s)
    rows = keys * intervals
    suffix = f"-rollup{rollup_s}s" if rollup_s else ""
    target = cache_dir / f"fleet-{sidecars}x{partitions}-{interval_s}s-{hours}h-{fmt}{suffix}"
    done = target / "_COMPLETE"
    if done.exists():
        print(f"using cached fleet data in {target} ({rows:,} summaries)")
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    started = time.monotonic()
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET TimeZone = 'UTC'")
    chunk = keys * max(1, int(3600 / interval_s))  # an hour of the fleet per file
    for n, lo in enumerate(range(0, rows, chunk)):
        sql = _FLEET_SQL.format(keys=keys, partitions=partitions, lo=lo, hi=min(rows, lo + chunk), start=START,
                                interval_us=interval_s * 1_000_000, interval_s=float(interval_s), merged=merged)
        if fmt == "staged":
            con.execute(f"COPY ({sql}) TO '{target}/part-{n:05d}.parquet' (FORMAT PARQUET, ROW_GROUP_SIZE 1000000)")
        else:
            con.execute(f"COPY (SELECT {_FLEET_JSON_COLUMNS} FROM ({sql})) TO '{target}/audit-fleet-{n:05d}.jsonl' "
                        "(FORMAT JSON)")
    readiness = _FLEET_READINESS_SQL.format(start=START, sidecars=sidecars, hours=max(1, int(hours)),
                                            partitions=partitions)
    if fmt == "staged":
        con.execute(f"COPY ({readiness}) TO '{target}/readiness.parquet' (FORMAT PARQUET)")
    else:
        con.execute(f"COPY (SELECT schema_version, event, strftime(ts, '%Y-%m-%dT%H:%M:%S.%fZ') AS ts, proxy_id, topic, "
                    f"\"partition\", ready, isr_size, min_isr, leader_id FROM ({readiness})) TO "
                    f"'{target}/audit-readiness.jsonl' (FORMAT JSON)")
    done.write_text(str(rows))
    size = sum(p.stat().st_size for p in target.iterdir())
    print(f"generated {rows:,} fleet summaries ({size / 1e6:,.0f} MB {fmt}) in {time.monotonic() - started:.1f} s "
          f"into {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    """Generate data, run both engines, print events/s and the Spark/DuckDB time ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="number of audit events (default 1M)")
    parser.add_argument("--files", type=int, default=8, help="number of JSON Lines files, one per 'sidecar'")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/insync-pipeline-bench"),
                        help="where generated events and outputs go (default /tmp/insync-pipeline-bench)")
    parser.add_argument("--threads", type=int, default=2, help="DuckDB threads (default 2, like local[2])")
    parser.add_argument("--driver-memory", default="3g", help="Spark driver memory (default 3g)")
    parser.add_argument("--shuffle-partitions", type=int, default=8, help="spark.sql.shuffle.partitions (default 8)")
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--skip-duckdb", action="store_true")
    parser.add_argument("--staging", choices=("parquet", "memory"), default="parquet",
                        help="v1 mode: how the Spark job keeps parsed events between its table jobs")
    parser.add_argument("--fleet", action="store_true", help="v2 fleet mode instead of the v1 comparison")
    parser.add_argument("--sidecars", type=int, default=200, help="fleet mode: sidecars (default 200)")
    parser.add_argument("--partitions", type=int, default=100, help="fleet mode: busy partitions per sidecar (100)")
    parser.add_argument("--interval", type=int, default=10, help="fleet mode: audit.interval_seconds (default 10)")
    parser.add_argument("--hours", type=float, default=24.0, help="fleet mode: hours of data (default 24)")
    parser.add_argument("--rollup", type=int, default=0, metavar="SECONDS",
                        help="fleet mode, staged: data as `insync-proxy compact --rollup-seconds SECONDS` leaves it")
    parser.add_argument("--fleet-format", choices=("staged", "json"), default="staged",
                        help="fleet mode: Parquet as insync-proxy compact writes it (default) or JSON Lines")
    args = parser.parse_args(argv)

    if args.fleet:
        data = generate_fleet(args.sidecars, args.partitions, args.interval, args.hours, args.fleet_format,
                              args.cache_dir, args.rollup)
        rows = args.sidecars * args.partitions * int(args.hours * 3600 / args.interval)
        session_s, spark_s = run_spark(data, args.cache_dir / "out-fleet", args.driver_memory, args.shuffle_partitions,
                                       staged=args.fleet_format == "staged")
        stored = rows // (max(1, args.rollup // args.interval) if args.rollup else 1)
        print(f"fleet ({args.sidecars} sidecars x {args.partitions} partitions, {args.interval} s interval, "
              f"{args.hours:g} h, {args.fleet_format}{f', rolled up per {args.rollup} s' if args.rollup else ''}): "
              f"spark local[2] {spark_s:.1f} s for {rows:,} summaries ({stored:,} rows read), "
              f"{rows / spark_s:,.0f} summaries/s (session start {session_s:.1f} s)")
        return 0

    data = generate(args.events, args.files, args.cache_dir)
    results: dict[str, float] = {}
    if not args.skip_duckdb:
        duck_s = run_duckdb(data, args.cache_dir / "out-duckdb", args.threads)
        results["duckdb"] = duck_s
        print(f"duckdb ({args.threads} threads): {duck_s:.1f} s, {args.events / duck_s:,.0f} events/s")
    if not args.skip_spark:
        session_s, spark_s = run_spark(data, args.cache_dir / "out-spark", args.driver_memory, args.shuffle_partitions,
                                       staging=args.staging)
        results["spark"] = spark_s
        print(f"spark local[2]: {spark_s:.1f} s, {args.events / spark_s:,.0f} events/s (session start {session_s:.1f} s)")
    if len(results) == 2:
        print(f"ratio spark/duckdb time: {results['spark'] / results['duckdb']:.2f}x (goal: within 3x at 10M)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
