"""Shared fixtures for the pipeline tests: one real local Spark session for the whole run.

Spark sessions the tests start in child processes (`python -m insync_proxy stream`, the report
command, the standalone cluster's driver) read spark-defaults.conf from SPARK_CONF_DIR, set here for the
run: the shared session's 4 shuffle partitions instead of Spark's 200. The report and stream commands set
their own (`--shuffle-partitions`, default 8); with Spark's 200 the stream's stateful window aggregate ran
200 state-store tasks per micro-batch (test_stream.py's command test, back to back on the 2 shared cores:
323 s with 200, 51 s with 4 at load 7-10; at load 22-27, over 600 s (timed out) with 200, 198 s with 4).

The shared session carries Spark's Kafka connector when a selected test reads the audit topic
(`spark_kafka_source`), resolved as the commands resolve it: that test runs the stream and the report in
this session instead of two child processes, each starting a JVM of its own.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.scratch import scratch_directory
from tests.cluster_fixtures import *  # noqa: F403  the fixtures that start clusters, proxies, the Java client

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

if importlib.util.find_spec("pyspark") is None:
    # One line in the output says why the whole directory was skipped.
    pytest.skip("pyspark is not installed (pip install 'insync-proxy[pipeline]')", allow_module_level=True)

#: What the child processes' Spark sessions get (the shared session's sizing); a SPARK_CONF_DIR of the
#: developer's own is left alone.
CHILD_SPARK_DEFAULTS = {"spark.sql.shuffle.partitions": "4"}


def _spark_defaults_for_child_sessions() -> None:
    if "SPARK_CONF_DIR" in os.environ:
        return
    conf_dir = scratch_directory("insync-spark-conf-")
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in CHILD_SPARK_DEFAULTS.items()))
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)


_spark_defaults_for_child_sessions()  # before the test modules build their child processes' environments


#: The fixture that asks for the shared session with Spark's Kafka connector in it.
KAFKA_SOURCE_FIXTURE = "spark_kafka_source"
#: Why the shared session has no Kafka connector (None: it has it, or no selected test needs it).
_kafka_connector_missing: str | None = None


def _kafka_connector_jars(session: pytest.Session) -> list[Path]:
    """The connector jars as the commands resolve them (PySpark's version, else the newest the repository
    serves; a developer's INSYNC_SPARK_*_VERSION pins left out), when a selected test reads the audit topic.

    Resolved under a lock: on a fresh machine both pytest-xdist workers may resolve at once, and Maven
    filling one directory twice, or a worker taking a half-filled one for cached, fails the run."""
    global _kafka_connector_missing
    if not any(KAFKA_SOURCE_FIXTURE in getattr(item, "fixturenames", ()) for item in session.items):
        return []
    from insync_proxy.pipeline.jars import cache_root, kafka_jars
    from insync_proxy.pipeline.spark_env import PipelineError

    cache_root().mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as env, open(cache_root() / ".resolve.lock", "w") as lock:
        env.delenv("INSYNC_SPARK_KAFKA_VERSION", raising=False)
        env.delenv("INSYNC_SPARK_TOKEN_PROVIDER_VERSION", raising=False)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return kafka_jars()
        except PipelineError as exc:  # the other Spark tests need no connector: only the Kafka source's fails
            _kafka_connector_missing = str(exc)
            return []


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    """A local[2] session sized for a shared 2-core machine and the tests' tiny inputs: 2 shuffle partitions
    (more than one, so merges across partitions are exercised), no UI, no adaptive re-planning and no code
    generation (interpreted expressions): compiling Java for each plan costs more than running it on a few
    hundred rows (test_tables + test_v2_report: 166 -> 119 s). The docs' commands, run in their own processes
    by the CLI tests, keep Spark's defaults (code generation included)."""
    from insync_proxy.pipeline.spark_env import build_session

    session = build_session(
        "local[2]",
        "insync-proxy pipeline tests",
        shuffle_partitions=2,
        driver_memory="1g",
        jars=_kafka_connector_jars(request.session),
        extra_conf={
            "spark.ui.enabled": "false",
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            # Small tests: do not wait for locality or broadcast big tables.
            "spark.locality.wait": "0s",
        },
    )
    yield session
    session.stop()
    # py4j's connections say "Closing down clientserver connection" (INFO) from __del__ as the worker exits, after
    # the streams of the handlers a test installed are closed: a "--- Logging error ---" traceback in every run's
    # output, about nothing.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def spark_kafka_source(spark: SparkSession) -> SparkSession:
    """The shared session, with Spark's Kafka connector on its classpath (`format("kafka")` works)."""
    if _kafka_connector_missing is not None:
        pytest.fail(f"Spark's Kafka connector: {_kafka_connector_missing}")
    return spark
