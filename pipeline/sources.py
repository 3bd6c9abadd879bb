"""Where audit lines come from: JSON Lines files (directories or globs) or the audit Kafka topic.

Every source yields the same two columns, ``value`` (the raw line) and ``source`` (where it came
from), so :func:`pipeline.schema.parse_audit_events` is the single parse/validate step for all of them.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from insync_proxy.pipeline.spark_env import PipelineError

_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")


def _is_local(path: str) -> bool:
    return not _URI.match(path) or path.startswith("file://")


def check_inputs(inputs: Sequence[str]) -> list[str]:
    """Return the inputs with local ones checked to exist (directory, file or a glob matching something).

    Non-local URIs (hdfs://, s3a://, ...) are passed through: only Spark can see them.
    Raises :class:`PipelineError` naming the first local input that matches nothing.
    """
    checked: list[str] = []
    for raw in inputs:
        path = raw[len("file://"):] if raw.startswith("file://") else raw
        if _is_local(raw):
            if glob.has_magic(path):
                if not glob.glob(path, recursive=True):
                    raise PipelineError(f"input {raw!r} matches no file")
            elif not os.path.exists(path):
                raise PipelineError(f"input {raw!r} does not exist")
            elif os.path.isdir(path) and not any(
                name.endswith(".jsonl") or name.endswith(".json") for _, _, names in os.walk(path) for name in names
            ):
                raise PipelineError(f"input directory {raw!r} holds no .jsonl file")
        checked.append(raw)
    return checked


def read_audit_file_events(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """Parsed, validated audit events (see :func:`pipeline.schema.parse_audit_events`) from JSON Lines
    files, directories (read recursively for ``*.jsonl``) and globs."""
    from insync_proxy.pipeline.schema import read_audit_json

    paths = check_inputs(inputs)
    dirs = [p for p in paths if not glob.has_magic(p) and _is_local(p) and os.path.isdir(p.removeprefix("file://"))]
    files = [p for p in paths if p not in dirs]
    frames: list[DataFrame] = []
    if dirs:
        # Audit directories also hold other files (rotation temp files, READMEs): only *.jsonl counts.
        frames.append(read_audit_json(spark, dirs, recursiveFileLookup="true", pathGlobFilter="*.jsonl"))
    if files:
        frames.append(read_audit_json(spark, files))
    events = frames[0]
    for frame in frames[1:]:
        events = events.unionByName(frame)
    return events


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
