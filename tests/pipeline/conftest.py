"""Shared fixtures for the pipeline tests: one real local Spark session for the whole run."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

if importlib.util.find_spec("pyspark") is None:
    # One line in the output says why the whole directory was skipped.
    pytest.skip("pyspark is not installed (pip install 'insync-proxy[pipeline]')", allow_module_level=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] session sized for a shared 2-core machine: 4 shuffle partitions, no UI."""
    from insync_proxy.pipeline.spark_env import build_session

    session = build_session(
        "local[2]",
        "insync-proxy pipeline tests",
        shuffle_partitions=4,
        driver_memory="1g",
        extra_conf={
            "spark.ui.enabled": "false",
            "spark.sql.adaptive.enabled": "true",
            # Small tests: do not wait for locality or broadcast big tables.
            "spark.locality.wait": "0s",
        },
    )
    yield session
    session.stop()
