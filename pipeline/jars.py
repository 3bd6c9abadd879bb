"""Spark's Kafka source jars, resolved with Maven from Maven Central into a local cache.

Spark can fetch ``--packages`` itself through Ivy, but that needs Ivy's own internet access at every
session start. Instead ``pipeline/pom.xml`` is resolved once with ``mvn dependency:copy-dependencies``
into ``~/.cache/insync-proxy/spark-jars/<version>/`` and the jars are handed to Spark via ``spark.jars``.

The connector's version is the installed PySpark's when the repository serves it; PyPI can be ahead
of Maven Central (PySpark 4.3.0 on PyPI, connector 4.2.0 on Central), and then the newest connector
of the same major version that Central serves is taken, with one log line (:func:`connector_version`).

Environment overrides:
  INSYNC_SPARK_KAFKA_VERSION     connector version (default: see above)
  INSYNC_SPARK_TOKEN_PROVIDER_VERSION  version of spark-token-provider-kafka (default: likewise)
  INSYNC_SPARK_JARS_DIR          use this directory of jars as is (no Maven run)
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path

from insync_proxy.pipeline.spark_env import PipelineError, spark_version

POM = Path(__file__).with_name("pom.xml")
MAVEN_SETTINGS = Path(__file__).with_name("maven-settings.xml")
CONNECTOR = "spark-sql-kafka-0-10"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10"
SCALA_BINARY_VERSION = "2.13"

log = logging.getLogger(__name__)


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


def kafka_jars(version: str | None = None, *, resolve: bool = True,
               note: Callable[[str], None] | None = None) -> list[Path]:
    """Jars to add to ``spark.jars`` for the Kafka source, resolving them with Maven if not cached.

    ``version`` (or ``INSYNC_SPARK_KAFKA_VERSION``) pins the connector; by default it is
    :func:`connector_version`'s choice, which ``note`` (default: this module's logger) is told about
    when it is not the installed PySpark's. Raises :class:`PipelineError` with instructions when the
    jars are neither cached nor resolvable.
    """
    override_dir = os.environ.get("INSYNC_SPARK_JARS_DIR")
    if override_dir:
        jars = _connector_jars(Path(override_dir))
        if not any(_artifact(j).startswith(CONNECTOR) for j in jars):
            raise PipelineError(f"INSYNC_SPARK_JARS_DIR={override_dir} holds no {CONNECTOR} jar")
        return jars
    pinned = version or os.environ.get("INSYNC_SPARK_KAFKA_VERSION")
    token_version = os.environ.get("INSYNC_SPARK_TOKEN_PROVIDER_VERSION")
    if pinned:
        version = pinned
    elif _cached(cache_root() / spark_version()):
        version = spark_version()
    else:
        version, fallback_token_version = connector_version(spark_version(), note=note, cached_only=not resolve)
        token_version = token_version or fallback_token_version
    target = cache_root() / version
    if not _cached(target):
        if not resolve:
            raise PipelineError(f"Kafka connector jars for Spark {version} are not in {target}")
        resolve_with_maven(version, target, token_version)
    return _connector_jars(target)


def _cached(directory: Path) -> bool:
    return any(directory.glob(f"{CONNECTOR}_*.jar"))


def repository_url() -> str:
    """The Maven repository the jars come from: the mirror of ``pipeline/maven-settings.xml``."""
    mirror = ET.parse(MAVEN_SETTINGS).find(".//{http://maven.apache.org/SETTINGS/1.0.0}mirror/"
                                           "{http://maven.apache.org/SETTINGS/1.0.0}url")
    if mirror is None or not mirror.text:
        raise PipelineError(f"{MAVEN_SETTINGS} names no mirror url")
    return mirror.text.strip().rstrip("/")


def served_versions(artifact: str, timeout: float = 30.0) -> list[str]:
    """The versions of ``org.apache.spark:<artifact>_2.13`` the repository lists in its maven-metadata.xml.

    Raises :class:`OSError` (``urllib.error.URLError`` included) when the repository cannot be read.
    """
    url = f"{repository_url()}/org/apache/spark/{artifact}_{SCALA_BINARY_VERSION}/maven-metadata.xml"
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (an https URL from our settings)
        metadata = ET.fromstring(response.read())
    return [v.text.strip() for v in metadata.iter("version") if v.text]


def _release(version: str) -> tuple[int, ...] | None:
    """``"4.2.0"`` -> ``(4, 2, 0)``; None for a preview or any other non-release version."""
    return tuple(int(p) for p in version.split(".")) if re.fullmatch(r"\d+(\.\d+)*", version) else None


def pick_served(wanted: str, served: Iterable[str]) -> str | None:
    """``wanted`` if served, else the newest served release of its major version not newer than it
    (a connector newer than Spark itself may use APIs it lacks), else None."""
    served = list(served)
    if wanted in served:
        return wanted
    want = _release(wanted)
    if want is None:
        return None
    candidates = [(r, v) for v in served if (r := _release(v)) is not None and r[0] == want[0] and r <= want]
    return max(candidates)[1] if candidates else None


def _pointer(installed: str) -> Path:
    """Where the connector version chosen for PySpark ``installed`` is remembered (no lookup next time)."""
    return cache_root() / f"connector-for-pyspark-{installed}"


def connector_version(installed: str, *, note: Callable[[str], None] | None = None,
                      cached_only: bool = False) -> tuple[str, str | None]:
    """The connector version for PySpark ``installed`` and the token provider's (None: the same).

    The installed version if the repository serves it, else the newest release of the same major
    version it serves, said in one line through ``note``. The choice is remembered in the cache, so
    the repository is asked once. If it cannot be asked (offline, ``cached_only``), the installed
    version is returned and Maven's own error says what is missing.
    """
    say = note or log.warning
    pointer = _pointer(installed)
    if pointer.is_file():
        version, _, token = pointer.read_text().strip().partition(" ")
        if _cached(cache_root() / version):
            say(f"Spark's Kafka connector {version} (the repository serves none for PySpark {installed})")
            return version, token or None
    if cached_only:
        return installed, None
    try:
        connector = pick_served(installed, served_versions(CONNECTOR))
        token_provider = pick_served(connector, served_versions(TOKEN_PROVIDER)) if connector else None
    except (OSError, ET.ParseError) as exc:
        log.debug("could not list the served connector versions: %s", exc)
        return installed, None
    if connector is None or connector == installed:
        return installed, None if token_provider in (None, installed) else token_provider
    say(f"Spark's Kafka connector {connector}: {repository_url()} serves no {CONNECTOR}_{SCALA_BINARY_VERSION} "
        f"{installed} (PySpark's version); {connector} is the newest {installed.split('.')[0]}.x it serves")
    token = token_provider if token_provider not in (None, connector) else ""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(f"{connector} {token}".strip() + "\n")
    return connector, token or None


def maven_command(version: str, target: Path, token_version: str | None = None) -> list[str]:
    """The ``mvn`` command line that copies the connector and its dependencies into ``target``."""
    token_version = token_version or os.environ.get("INSYNC_SPARK_TOKEN_PROVIDER_VERSION") or version
    return [
        "mvn", "-B", "-q", "-s", str(MAVEN_SETTINGS), "-f", str(POM),
        f"-Dspark.version={version}", f"-Dtoken.provider.version={token_version}",
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={target}",
    ]


def resolve_with_maven(version: str, target: Path, token_version: str | None = None) -> None:
    """Run Maven to fill ``target``; raise :class:`PipelineError` saying how to fix a failure."""
    if shutil.which("mvn") is None:
        raise PipelineError(
            "the Kafka source needs Spark's Kafka connector jars, resolved with Maven: install Maven "
            "(`apt-get install maven`) or set INSYNC_SPARK_JARS_DIR to a directory holding them"
        )
    target.mkdir(parents=True, exist_ok=True)
    cmd = maven_command(version, target, token_version)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if "ERROR" in line]
        for stale in target.glob("*.jar"):  # a half-filled directory would look cached next time
            stale.unlink()
        raise PipelineError(
            f"Maven could not resolve {CONNECTOR} {version}: {' '.join(errors[:1]) or proc.stderr[-500:]}\n"
            "If your Maven repository lacks this version, set INSYNC_SPARK_KAFKA_VERSION (and, for the "
            "small token-provider module, INSYNC_SPARK_TOKEN_PROVIDER_VERSION) to a version it has, e.g. "
            "INSYNC_SPARK_KAFKA_VERSION=4.2.0.\n"
            f"Command: {' '.join(cmd)}"
        )
