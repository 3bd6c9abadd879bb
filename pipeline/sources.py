"""Where audit lines come from: JSON Lines files (directories or globs) or the audit Kafka topic.

Every source yields the same two columns, ``value`` (the raw line) and ``source`` (where it came
from), so :func:`pipeline.schema.parse_audit_events` is the single parse/validate step for all of them.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from insync_proxy.pipeline.spark_env import PipelineError

_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")


def _is_local(path: str) -> bool:
    return not _URI.match(path) or path.startswith("file://")


def _local(raw: str) -> str:
    return raw[len("file://"):] if raw.startswith("file://") else raw


def resolve_inputs(inputs: Sequence[str]) -> list[str]:
    """The audit files to read: local inputs expanded here, remote URIs passed on to Spark as they are.

    A directory stands for every ``*.jsonl`` file under it (recursively; an empty directory for no
    file). A glob is expanded with Python's rules, so ``**`` also matches no directory at all:
    ``'audit/**/*.jsonl'`` finds the proxy's flat ``audit/audit-<proxy_id>-<time>.jsonl`` files as
    well as ``audit/<sidecar>/...`` (Hadoop's glob, which Spark would use, reads ``**`` as ``*`` and
    then needs a subdirectory). A file named explicitly is read whatever its name. Non-local URIs
    (hdfs://, s3a://, ...) are left to Spark, which expands their globs its own way.

    Raises :class:`PipelineError` naming the first local input that does not exist or, for a glob,
    matches no file.
    """
    files: list[str] = []
    for raw in inputs:
        if not _is_local(raw):
            files.append(raw)
            continue
        path = _local(raw)
        if glob.has_magic(path):
            matched = sorted(m for m in glob.glob(path, recursive=True) if os.path.isfile(m))
            if not matched:
                raise PipelineError(f"input {raw!r} matches no file")
            files += matched
        elif not os.path.exists(path):
            raise PipelineError(f"input {raw!r} does not exist")
        elif os.path.isdir(path):
            files += sorted(
                os.path.join(root, name)
                for root, _, names in os.walk(path)
                for name in names
                if name.endswith(".jsonl")
            )
        else:
            files.append(path)
    # One file reached through two inputs is read once.
    return list(dict.fromkeys(os.path.abspath(f) if _is_local(f) else f for f in files))


_HADOOP_GLOB_CHARS = re.compile(r"([\\{}\[\]*?])")


def spark_path(path: str) -> str:
    """A resolved local file as Spark must be given it: Spark reads every path as a Hadoop glob, so
    glob characters in a real file name (``[``, ``{``, ``*``, ...) are escaped."""
    return _HADOOP_GLOB_CHARS.sub(r"\\\1", path) if _is_local(path) else path


#: How far from a file's end :func:`sample_times` looks for its last line.
_TAIL_BYTES = 64 * 1024


def _line_time(line: bytes) -> float | None:
    """The epoch seconds of an audit line's ``ts`` (None if it is no JSON object with an RFC 3339 ts)."""
    try:
        event = json.loads(line)
        ts = event["ts"] if isinstance(event, dict) else None
        return datetime.fromisoformat(ts).timestamp() if isinstance(ts, str) else None
    except (ValueError, KeyError, TypeError, OverflowError):
        return None


def _first_and_last_times(path: str) -> list[float]:
    """The times of a plain local file's first and last lines that carry one (compressed files: none)."""
    times: list[float] = []
    try:
        with open(path, "rb") as f:
            head = f.read(_TAIL_BYTES)
            if head[:2] == b"\x1f\x8b":  # gzip: Spark reads it, this quick look does not
                return times
            lines = head.split(b"\n")
            first = _line_time(lines[0]) if len(lines) > 1 or len(head) < _TAIL_BYTES else None
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL_BYTES))
            tail = [line for line in f.read().split(b"\n") if line.strip()]
    except OSError:
        return times
    last = _line_time(tail[-1]) if tail else None
    return [t for t in (first, last) if t is not None]


def sample_times(files: Sequence[str]) -> list[float]:
    """Epoch seconds of the local files' first and last lines (those that carry a time).

    Any two events' times bound the input's time span from below; the report picks its timeline
    granule from that bound (:func:`pipeline.single_pass.timeline_granule`) and checks it against the
    real span afterwards."""
    return [t for f in files if _is_local(f) for t in _first_and_last_times(_local(f))]


def read_audit_files(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """Parsed, validated audit events (see :func:`pipeline.schema.parse_audit_events`) from resolved
    files (:func:`resolve_inputs`); no file gives an empty frame with the same columns."""
    from insync_proxy.pipeline.schema import read_audit_json

    return read_audit_json(spark, [spark_path(f) for f in files])


def _kafka_options(bootstrap: str, topic: str) -> dict[str, str]:
    # A comma-separated list subscribes to several topics; a pattern would need subscribePattern.
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}


def _kafka_lines(df: DataFrame) -> DataFrame:
    return df.select(
        F.col("value").cast("string").alias("value"),
        F.format_string("kafka:%s/%d@%d", F.col("topic"), F.col("partition"), F.col("offset")).alias("source"),
    )


def read_audit_kafka(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    starting_offsets: str = "earliest",
    ending_offsets: str = "latest",
    extra_options: dict[str, str] | None = None,
) -> DataFrame:
    """Raw audit lines from the audit topic, as a batch read between two offsets (needs the Kafka jars)."""
    reader = spark.read.format("kafka").options(**_kafka_options(bootstrap, topic))
    reader = reader.option("startingOffsets", starting_offsets).option("endingOffsets", ending_offsets)
    return _kafka_lines(reader.options(**(extra_options or {})).load())


def stream_audit_kafka(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    starting_offsets: str = "latest",
    max_offsets_per_trigger: int | None = None,
    extra_options: dict[str, str] | None = None,
) -> DataFrame:
    """Raw audit lines from the audit topic as a streaming DataFrame (needs the Kafka jars)."""
    reader = spark.readStream.format("kafka").options(**_kafka_options(bootstrap, topic))
    reader = reader.option("startingOffsets", starting_offsets).option("failOnDataLoss", "false")
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return _kafka_lines(reader.options(**(extra_options or {})).load())
