"""Benchmark: the durability report job in Spark local[2] versus the same aggregation in DuckDB.

    python benchmarks/pipeline_bench.py --events 1000000
    python benchmarks/pipeline_bench.py --events 10000000 --files 16

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


def run_spark(data: Path, out: Path, driver_memory: str, shuffle_partitions: int) -> tuple[float, float]:
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
    result = run_report(spark, [str(data)], out, progress=Progress())
    job_s = time.monotonic() - started
    print(f"spark: {result.counts['valid']:,} valid events, {len(result.tables['isr_below_min_intervals']):,} intervals")
    spark.stop()
    return session_s, job_s


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
    args = parser.parse_args(argv)

    data = generate(args.events, args.files, args.cache_dir)
    results: dict[str, float] = {}
    if not args.skip_duckdb:
        duck_s = run_duckdb(data, args.cache_dir / "out-duckdb", args.threads)
        results["duckdb"] = duck_s
        print(f"duckdb ({args.threads} threads): {duck_s:.1f} s, {args.events / duck_s:,.0f} events/s")
    if not args.skip_spark:
        session_s, spark_s = run_spark(data, args.cache_dir / "out-spark", args.driver_memory, args.shuffle_partitions)
        results["spark"] = spark_s
        print(f"spark local[2]: {spark_s:.1f} s, {args.events / spark_s:,.0f} events/s (session start {session_s:.1f} s)")
    if len(results) == 2:
        print(f"ratio spark/duckdb time: {results['spark'] / results['duckdb']:.2f}x (goal: within 3x at 10M)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
