"""Starting Spark for the pipeline: preflight checks (Java, master URL), session settings, Kafka jars.

Everything that can fail before Spark starts is checked here first so the user gets one clear line
saying what is wrong and how to fix it, instead of a JVM stack trace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

#: Spark's log configuration without --verbose.
QUIET_LOG_CONFIG = Path(__file__).with_name("log4j2-quiet.properties")

#: Let the JIT compile methods above 8 KB of bytecode. Whole-stage code generation fuses the JSON
#: reader's row conversion, the validation and the aggregation of the report's one pass into one
#: generated method far above that size, which the JVM would otherwise run interpreted for every
#: line (10M v1 lines: the parse and validation alone ~20% faster with it).
JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods"

#: Spark 4 needs Java 17 or newer.
MIN_JAVA_MAJOR = 17

_MASTER_PATTERNS = (
    r"local",
    r"local\[(\*|[1-9][0-9]*)\]",
    r"local\[(\*|[1-9][0-9]*),\s*[0-9]+\]",
    r"local-cluster\[[0-9]+,\s*[0-9]+,\s*[0-9]+\]",
    r"spark://[^\s/:,]+(:[0-9]+)?(,[^\s/:,]+(:[0-9]+)?)*",
    r"yarn",
    r"k8s://\S+",
)


class PipelineError(Exception):
    """A problem the user can fix (bad argument, missing input, no Java); printed without a traceback."""


def check_master(master: str) -> str:
    """Return ``master`` if it is a Spark master URL Spark accepts, else raise :class:`PipelineError`."""
    if any(re.fullmatch(p, master) for p in _MASTER_PATTERNS):
        return master
    raise PipelineError(
        f"bad --master {master!r}: expected local, local[N], local[*], spark://HOST:PORT, yarn or k8s://URL"
    )


def java_executable() -> Path | None:
    """The java binary Spark will use: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        return candidate if candidate.exists() else None
    found = shutil.which("java")
    return Path(found) if found else None


def check_java() -> int:
    """Check that a Java runtime Spark can use is installed; return its major version.

    Raises :class:`PipelineError` with the fix (install a JDK 17+, or set JAVA_HOME) otherwise.
    """
    fix = (
        "install a Java 17+ runtime (e.g. `apt-get install openjdk-17-jre-headless`) "
        "or point JAVA_HOME at one"
    )
    java = java_executable()
    if java is None:
        where = f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java" if os.environ.get("JAVA_HOME") else "no `java` on PATH"
        raise PipelineError(f"Spark needs Java, but {where}: {fix}")
    try:
        proc = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PipelineError(f"`{java} -version` failed ({exc}): {fix}") from exc
    # `java -version` prints to stderr, e.g. 'openjdk version "17.0.15" 2025-04-15' or '"1.8.0_392"'.
    match = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if proc.returncode != 0 or not match:
        raise PipelineError(f"`{java} -version` did not report a version: {fix}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # Java 8 and older report 1.x
        major = int(match.group(2))
    if major < MIN_JAVA_MAJOR:
        raise PipelineError(f"Spark 4 needs Java {MIN_JAVA_MAJOR}+, but {java} is Java {major}: {fix}")
    return major


def spark_version() -> str:
    """The installed PySpark version (raises :class:`PipelineError` if PySpark is missing)."""
    try:
        import pyspark
    except ImportError as exc:
        raise PipelineError(
            "PySpark is not installed: `pip install 'insync-proxy[pipeline]'` (or `pip install pyspark`)"
        ) from exc
    return str(pyspark.__version__)


def configure_session(spark: SparkSession) -> None:
    """Runtime settings the pipeline relies on, applied to any session (also one from spark-submit)."""
    # Dates, date partitions and time buckets are UTC, like the audit timestamps.
    spark.conf.set("spark.sql.session.timeZone", "UTC")


def build_session(
    master: str | None,
    app_name: str,
    *,
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    jars: list[Path] | None = None,
    extra_conf: dict[str, str] | None = None,
    verbose: bool = True,
) -> SparkSession:
    """Create (or reuse) a SparkSession after the preflight checks.

    ``master=None`` keeps what spark-submit configured, or falls back to ``local[*]`` when the
    script is run directly. ``driver_memory`` only applies when this call starts the JVM.
    ``verbose=False`` keeps Spark's own log quiet (ERROR and up, task failures not at all; see
    ``pipeline/log4j2-quiet.properties``) from the JVM's first line on, for the command line.
    """
    spark_version()
    check_java()
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf()
    if master is not None:
        conf.setMaster(check_master(master))
    elif not conf.contains("spark.master"):
        conf.setMaster("local[*]")
    conf.setAppName(app_name)
    conf.set("spark.sql.session.timeZone", "UTC")
    # Our own stage lines replace Spark's console progress bar, which garbles piped output.
    conf.set("spark.ui.showConsoleProgress", "false")
    if shuffle_partitions:
        conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if driver_memory:
        conf.set("spark.driver.memory", driver_memory)
    if jars:
        existing = [j for j in conf.get("spark.jars", "").split(",") if j]
        conf.set("spark.jars", ",".join(existing + [str(j) for j in jars]))
    java_options = [JIT_HUGE_METHODS]
    if not verbose:
        java_options.append(f"-Dlog4j2.configurationFile={QUIET_LOG_CONFIG.as_uri()}")
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        conf.set(key, " ".join(filter(None, [conf.get(key, ""), *java_options])))
    for key, value in (extra_conf or {}).items():
        conf.set(key, value)
    try:
        if not verbose:
            _start_quiet_jvm(conf)
        spark = SparkSession.builder.config(conf=conf).getOrCreate()
    except Exception as exc:  # the JVM's own message is the useful part
        log = keep_spark_log()
        where = f" (Spark's log: {log})" if log else ""
        raise PipelineError(f"could not start Spark (master {conf.get('spark.master')}): {exc}{where}") from exc
    spark.sparkContext.setLogLevel(os.environ.get("INSYNC_SPARK_LOG_LEVEL", "WARN" if verbose else "ERROR"))
    configure_session(spark)
    return spark


#: Where the JVM's own output went when :func:`build_session` started it quietly (else None). Removed when
#: the process exits, unless a failure named it (:func:`keep_spark_log`): a report run every hour must not
#: leave a file in the temporary directory each time.
spark_log_path: Path | None = None
_spark_log_kept = False


def keep_spark_log() -> Path | None:
    """The JVM's log file, kept after the process exits because a failure line names it (None: there is none)."""
    global _spark_log_kept
    _spark_log_kept = spark_log_path is not None
    return spark_log_path


def spark_log_hint() -> str:
    """``"Spark's log: <file>; "`` for a command's failure line (the file is then kept), or "" without one."""
    kept = keep_spark_log()
    return f"Spark's log: {kept}; " if kept else ""


def _remove_spark_log() -> None:
    if spark_log_path is not None and not _spark_log_kept:
        spark_log_path.unlink(missing_ok=True)


def _start_quiet_jvm(conf: SparkConf) -> None:
    """Start the driver JVM with its stdout/stderr in a log file, unless a SparkContext runs already.

    Even with a quiet log4j configuration the JVM launcher prints lines of its own (module warnings,
    the shell's "Setting default log level"): the command line shows none of them, and names this
    file when something fails. Uses ``launch_gateway(popen_kwargs=...)``, PySpark's documented hook
    for capturing the gateway JVM's output.
    """
    global spark_log_path
    import atexit
    import logging
    import tempfile

    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._active_spark_context is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    # py4j logs a broken connection at ERROR through Python's logging: the failure line says it all.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    handle, name = tempfile.mkstemp(prefix="insync-spark-", suffix=".log")
    spark_log_path = Path(name)
    atexit.register(_remove_spark_log)
    with os.fdopen(handle, "ab") as log:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})  # type: ignore[no-untyped-call]
    SparkContext(conf=conf, gateway=gateway)


class Progress:
    """Console progress for long runs: numbered stage names with elapsed time and counts."""

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        """``enabled=False`` silences it (tests); output goes to stderr unless ``stream`` is given."""
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()

    def stage(self, message: str) -> None:
        """Print one progress line prefixed with the elapsed time since the run started."""
        if self.enabled:
            elapsed = time.monotonic() - self.started
            print(f"[{elapsed:7.1f}s] {message}", file=self.stream, flush=True)
