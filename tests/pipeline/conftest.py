"""Shared fixtures for the pipeline tests: one real local Spark session for the whole run.

Spark sessions the tests start in child processes (`python -m insync_proxy.pipeline.stream`, the report
command, the standalone cluster's driver) read spark-defaults.conf from SPARK_CONF_DIR, set here for the
run: the shared session's 4 shuffle partitions instead of Spark's 200. The report and stream commands set
their own (`--shuffle-partitions`, default 8); with Spark's 200 the stream's stateful window aggregate ran
200 state-store tasks per micro-batch (test_stream.py's command test, back to back on the 2 shared cores:
323 s with 200, 51 s with 4 at load 7-10; at load 22-27, over 600 s (timed out) with 200, 198 s with 4).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

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
    conf_dir = Path(tempfile.mkdtemp(prefix="insync-spark-conf-"))
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in CHILD_SPARK_DEFAULTS.items()))
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)


_spark_defaults_for_child_sessions()  # before the test modules build their child processes' environments


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
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
