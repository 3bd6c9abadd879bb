"""Spark's Kafka source jars, resolved with Maven from Maven Central into a local cache.

Spark can fetch ``--packages`` itself through Ivy, but that needs Ivy's own internet access at every
session start. Instead ``pipeline/pom.xml`` is resolved once with ``mvn dependency:copy-dependencies``
into ``~/.cache/insync-proxy/spark-jars/<version>/`` and the jars are handed to Spark via ``spark.jars``.

Environment overrides:
  INSYNC_SPARK_KAFKA_VERSION     connector version (default: the installed PySpark's version)
  INSYNC_SPARK_TOKEN_PROVIDER_VERSION  version of spark-token-provider-kafka (default: same)
  INSYNC_SPARK_JARS_DIR          use this directory of jars as is (no Maven run)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from insync_proxy.pipeline.spark_env import PipelineError, spark_version

POM = Path(__file__).with_name("pom.xml")
MAVEN_SETTINGS = Path(__file__).with_name("maven-settings.xml")
CONNECTOR = "spark-sql-kafka-0-10"


def cache_root() -> Path:
    """Where resolved jar directories live (``$XDG_CACHE_HOME`` or ``~/.cache``)/insync-proxy/spark-jars."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "insync-proxy" / "spark-jars"


def _artifact(jar: Path) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``: the name without its version."""
    return re.sub(r"-\d[\w.\-]*$", "", jar.stem)


def _pyspark_jar_artifacts() -> set[str]:
    """Artifacts already on PySpark's own classpath (its wheel's jars/ directory)."""
    import pyspark

    jars_dir = Path(pyspark.__file__).parent / "jars"
    return {_artifact(j) for j in jars_dir.glob("*.jar")}


def _connector_jars(directory: Path) -> list[Path]:
    """The jars of ``directory`` minus those PySpark already ships (two copies of a class clash)."""
    shipped = _pyspark_jar_artifacts()
    return sorted(j for j in directory.glob("*.jar") if _artifact(j) not in shipped)


def kafka_jars(version: str | None = None, *, resolve: bool = True) -> list[Path]:
    """Jars to add to ``spark.jars`` for the Kafka source, resolving them with Maven if not cached.

    Raises :class:`PipelineError` with instructions when they are neither cached nor resolvable.
    """
    override_dir = os.environ.get("INSYNC_SPARK_JARS_DIR")
    if override_dir:
        jars = _connector_jars(Path(override_dir))
        if not any(_artifact(j).startswith(CONNECTOR) for j in jars):
            raise PipelineError(f"INSYNC_SPARK_JARS_DIR={override_dir} holds no {CONNECTOR} jar")
        return jars
    version = version or os.environ.get("INSYNC_SPARK_KAFKA_VERSION") or spark_version()
    target = cache_root() / version
    if not list(target.glob(f"{CONNECTOR}_*.jar")):
        if not resolve:
            raise PipelineError(f"Kafka connector jars for Spark {version} are not in {target}")
        resolve_with_maven(version, target)
    return _connector_jars(target)


def maven_command(version: str, target: Path) -> list[str]:
    """The ``mvn`` command line that copies the connector and its dependencies into ``target``."""
    token_version = os.environ.get("INSYNC_SPARK_TOKEN_PROVIDER_VERSION", version)
    return [
        "mvn", "-B", "-q", "-s", str(MAVEN_SETTINGS), "-f", str(POM),
        f"-Dspark.version={version}", f"-Dtoken.provider.version={token_version}",
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={target}",
    ]


def resolve_with_maven(version: str, target: Path) -> None:
    """Run Maven to fill ``target``; raise :class:`PipelineError` saying how to fix a failure."""
    if shutil.which("mvn") is None:
        raise PipelineError(
            "the Kafka source needs Spark's Kafka connector jars, resolved with Maven: install Maven "
            "(`apt-get install maven`) or set INSYNC_SPARK_JARS_DIR to a directory holding them"
        )
    target.mkdir(parents=True, exist_ok=True)
    cmd = maven_command(version, target)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if "ERROR" in line]
        for stale in target.glob("*.jar"):  # a half-filled directory would look cached next time
            stale.unlink()
        raise PipelineError(
            f"Maven could not resolve {CONNECTOR} {version}: {' '.join(errors[:1]) or proc.stderr[-500:]}\n"
            "If your Maven repository lacks this version, set INSYNC_SPARK_KAFKA_VERSION (and, for the "
            "small token-provider module, INSYNC_SPARK_TOKEN_PROVIDER_VERSION) to a version it has, e.g. "
            "INSYNC_SPARK_KAFKA_VERSION=4.2.0 INSYNC_SPARK_TOKEN_PROVIDER_VERSION=4.0.0.\n"
            f"Command: {' '.join(cmd)}"
        )
