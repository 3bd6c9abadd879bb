"""The suite's hooks: how tests are marked, grouped and ordered, the timeline, the end-of-run checks.

Clusters: one real Kafka cluster for the whole run, a fresh topic per test. Backend:
INSYNC_PROXY_KAFKA_BACKEND=local (default: Apache Kafka's jars as local JVMs) or testcontainers (the apache/kafka
image; needs a Docker engine). Version: INSYNC_PROXY_KAFKA_VERSION (default the newest 4.x); tests marked
`kafka39` get the 3.9.x cluster. The core checks (CORE_CHECKS, or the `every_kafka_version` marker) run once per
supported version: 4.x, 3.9, an older 3.x (KRaft) and 2.8 (ZooKeeper). A process runs one cluster at a time: the
pool stops one before starting another.

The fixtures that start clusters, proxies and the Java client live where the tests that use them are: the
conftests of tests/integration, tests/pipeline and tests/deploy take them from tests/cluster_fixtures.py (with its
cluster and proxy pools). This conftest imports no dev cluster, so the codec's tests (`pytest tests/protocol`) load
none; a hook that needs a version fact reads it from the dev cluster when a test asks for a version.

Tests are grouped by the cluster they need (`work_unit`): `./scripts/test` spreads the groups over three
pytest-xdist workers (`-n 3`; `-n 0` runs them in one process), so at most three clusters run at once, each
starts once per run, and a worker that finishes its group takes the next: the 5-minute scenario first (on a
worker of its own, beside the rest), then the biggest.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from harness.scratch import remove_scratch_directories
from insync_proxy.proxy.config.defaults import SUMMARY_INTERVAL_SECONDS
from insync_proxy.proxy.observability.compiled import compiled_modules, describe
from insync_proxy.proxy.observability.logs import forget_all, set_summary_interval
from tests import jvm_census

#: JVM options for every JVM the suite starts (brokers, the Java client, Spark, through JAVA_TOOL_OPTIONS):
#: the serial collector and the client compiler only. The suite's JVMs are short-lived and share 2 cores:
#: a 3-broker cluster starts on 10.7 CPU seconds instead of 18.1, the Spark tests take 30 % less CPU.
#: Tests check behaviour, not JVM speed; `INSYNC_TEST_JVM_OPTIONS=""` runs the JVMs' defaults.
TEST_JVM_OPTIONS = os.environ.get("INSYNC_TEST_JVM_OPTIONS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
if TEST_JVM_OPTIONS and TEST_JVM_OPTIONS not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join(filter(None, [os.environ.get("JAVA_TOOL_OPTIONS"), TEST_JVM_OPTIONS]))


#: The module of the cluster and proxy pools and of the fixtures that start them: loaded by the conftests of the
#: folders whose tests use clusters, never by this one.
CLUSTER_FIXTURES = "tests.cluster_fixtures"


def _cluster_pools() -> ModuleType | None:
    """The pools' module when this run loaded it (it collected a test of a folder with clusters), else None: no
    cluster or proxy of this process to stop, or to keep the logs of."""
    return sys.modules.get(CLUSTER_FIXTURES)


def _selected_version() -> str:
    """The Kafka version the shared cluster runs (INSYNC_PROXY_KAFKA_VERSION, default the newest 4.x): read from
    the dev cluster when a test asks for a version, not before."""
    from insync_proxy.devcluster.distribution import selected_version

    return selected_version()


def _every_kafka_version() -> tuple[str | None, ...]:
    """Versions the core checks run on, in run order (the selected one first, the oldest last; None: the selected
    one)."""
    from insync_proxy.devcluster.distribution import KAFKA_3X_VERSION, KAFKA_28_VERSION, KAFKA_39_VERSION

    return (None, KAFKA_39_VERSION, KAFKA_3X_VERSION, KAFKA_28_VERSION)


#: INSYNC_TEST_TIMELINE=FILE: each test's worker, group and wall-clock span (setup to teardown), a JSON line
#: each, appended by every worker (`python -m tests.timeline FILE` prints where each worker's time went).
TIMELINE_FILE = os.environ.get("INSYNC_TEST_TIMELINE")


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (/proc/stat; 0 where there is none): a test's share
    when it runs alone (`-n 0`), the run's load when workers run beside it."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not TIMELINE_FILE:  # no /proc read per test unless asked
        yield
        return
    started, busy = time.time(), _machine_busy_seconds()
    yield
    record = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "unit": work_unit(item),
              "test": item.nodeid, "start": started, "end": time.time(),
              "machine_cpu": round(_machine_busy_seconds() - busy, 2)}
    with open(TIMELINE_FILE, "a", encoding="utf-8") as timeline:
        timeline.write(json.dumps(record) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    pools = _cluster_pools()
    if report.failed and pools is not None:
        pools.run_failed()  # the cluster's and proxy's logs are kept for the post-mortem


#: Fixtures that start JVMs: a Kafka cluster (or stop the shared one for a test's own), the Java client.
KAFKA_FIXTURES = frozenset({
    "kafka_cluster", "proxy", "cluster_pool", "exclusive_cluster_slot", "java_client", "own_clusters",
})
#: Fixtures that start a Spark session (a JVM too).
SPARK_FIXTURES = frozenset({"spark"})
#: The group of the tests that need a Kafka cluster and Spark: `kafka:<version>` + this.
SPARK_SUFFIX = "+spark"
#: The container image (tests/deploy/test_image.py), built once per process that asks for it.
IMAGE_FIXTURES = frozenset({"built_image"})
#: The group of the image's tests: one worker builds the image, once (two builds at once collide).
IMAGE_UNIT = "image"


#: The checks every supported Kafka version must pass through the proxy: produce/consume with the real
#: clients, the acks=-2 precheck and merge, KIP-1, tag 637 and the kip637 listener, address rewriting.
CORE_CHECKS = frozenset({
    "test_confluent_kafka_produce_consume_admin_through_proxy",
    "test_kafka_python_produce_consume_admin_through_proxy",
    "test_aiokafka_produce_consume_admin_through_proxy",
    "test_java_client_produce_consume_admin_through_proxy",
    "test_every_listener_group_serves_metadata_with_its_own_ports",
    "test_acks_minus_two_with_full_isr_is_appended_and_read_back",
    "test_kafka_python_puts_acks_minus_two_on_the_wire",
    "test_acks_minus_two_answers_not_enough_replicas_only_for_the_unready_partition",
    "test_invalid_acks_are_rejected_with_invalid_required_acks",
    "test_metadata_carries_each_topics_min_insync_replicas",
    "test_kip637_listener_answers_v10_in_the_kip637_layout",
})


def _version_id(version: str | None) -> str:
    return f"kafka-{version or _selected_version()}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--scenario", action="store_true",
                     help="also run the tests marked `scenario` (the scenario runner's 5-minute year): CI's own step "
                          "after the suite, ./scripts/test-scenario")


def pytest_report_header(config: pytest.Config) -> str:
    """Which build the suite tests: the interpreted source or the compiled data path (scripts/compile)."""
    return f"insync-proxy data path: {describe(compiled_modules())}"


def pytest_configure(config: pytest.Config) -> None:
    census = jvm_census.census_dir()
    if census is not None and getattr(config.option, "numprocesses", None):
        raise pytest.UsageError(f"{jvm_census.ENV} counts the JVMs each test starts in one process: add -n 0")
    if census is not None:  # INSYNC_TEST_JVM_CENSUS=DIR: count the JVMs each test starts (tests/jvm_census.py)
        jvm_census.install(census)
        config.pluginmanager.register(jvm_census.JvmCensus(census), "jvm_census")
    stale = [m.name for m in compiled_modules() if m.stale]
    if stale:
        pytest.exit(f"compiled modules older than their source would be tested instead of it: {', '.join(stale)}; "
                    "run ./scripts/compile again, or ./scripts/compile --clean", returncode=4)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kafka_version" not in metafunc.fixturenames:
        return
    if metafunc.function.__name__ in CORE_CHECKS or metafunc.definition.get_closest_marker("every_kafka_version"):
        versions = list(dict.fromkeys(v or _selected_version() for v in _every_kafka_version()))
        metafunc.parametrize("kafka_version", versions, indirect=True, ids=_version_id)


def _requested_version(item: pytest.Item) -> str | None:
    """The Kafka version a test asks for (its parameter, or 3.9 when marked kafka39), else None."""
    callspec = getattr(item, "callspec", None)
    version = callspec.params.get("kafka_version") if callspec is not None else None
    if item.get_closest_marker("kafka39"):
        from insync_proxy.devcluster.distribution import KAFKA_39_VERSION

        version = KAFKA_39_VERSION
    return None if version is None else str(version)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the xdist_group marks set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The scenario runner's run is a step of its own (./scripts/test-scenario, after the suite in CI): the suite
    # leaves it out, and says so at its end.
    if not config.getoption("--scenario"):
        scenario = [item for item in items if item.get_closest_marker("scenario")]
        if scenario:
            items[:] = [item for item in items if item not in scenario]
            config.hook.pytest_deselected(items=scenario)
            _SCENARIO_LEFT_OUT.extend(item.nodeid for item in scenario)
    # Marked from what a test uses, so no test can forget it: `-m "not needs_kafka"` starts no JVM.
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        spark = bool(fixtures & SPARK_FIXTURES)
        if spark:
            item.add_marker(pytest.mark.needs_spark)
        if spark or fixtures & KAFKA_FIXTURES or item.get_closest_marker("own_cluster") \
                or item.get_closest_marker("kafka39"):
            item.add_marker(pytest.mark.needs_kafka)
    # Grouped by the cluster (or Spark session) they need, so one process runs one cluster at a time and
    # starts each once; the biggest groups first (workers take the next group when theirs is done); within a
    # group, the tests that bounce brokers last.
    units = {item: work_unit(item) for item in items}
    order = _unit_order(set(units.values()))
    items.sort(key=lambda item: (order[units[item]], bool(item.get_closest_marker("bounces_brokers"))))
    for item in items:
        item.add_marker(pytest.mark.xdist_group(units[item]))


#: Groups of one test that runs for minutes (the scenario runner's 5-minute schedule, 320 s): started first,
#: on a worker of their own, so the rest of the suite runs beside them instead of after them. Last in the
#: queue, the year's group ran alone for its last few minutes while the other workers idled (one core of two).
LONG_UNITS = ("own:year",)


def _unit_order(units: set[str]) -> dict[str, int]:
    """The order the groups are handed to the workers in: the long groups first, then by `_unit_rank`.

    pytest-xdist gives a worker its next group as soon as it has two tests or fewer left, so a one-test group
    takes another group at once, to run after it: the first worker's is the group after the first N (N
    workers), and there goes a light one (the first without JVMs), not a cluster's group held for minutes
    behind the long one while another worker could run it."""
    ranked = sorted(units, key=lambda unit: (_unit_rank(unit), unit))
    long_units = [unit for unit in ranked if unit in LONG_UNITS]
    if long_units:
        light = [unit for unit in ranked if _unit_rank(unit) == NO_JVM_RANK][:len(long_units)]
        rest = [unit for unit in ranked if unit not in long_units and unit not in light]
        workers = max(len(long_units), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
        others = workers - len(long_units)
        ranked = long_units + rest[:others] + light + rest[others:]
    return {unit: index for index, unit in enumerate(ranked)}


#: The rank of the own clusters' groups (`_unit_rank`): after every Kafka version's.
OWN_RANK = 100
#: The rank of the groups without JVMs: the last.
NO_JVM_RANK = OWN_RANK + 1


def _unit_rank(unit: str) -> int:
    """Order of the groups (after the long ones, LONG_UNITS): the selected version's shared cluster (the
    longest), the image (its build takes minutes on a fresh machine), Spark and the pipeline's tests over that
    cluster, the other clusters (newest version first), the own clusters, then the groups without JVMs, which
    fill the workers' last minutes. Only a cluster's group reads the versions (from the dev cluster)."""
    if unit == IMAGE_UNIT:
        return 1
    if unit == "spark":
        return 2
    if unit.startswith("own:"):
        return OWN_RANK
    if not unit.startswith("kafka:"):
        return NO_JVM_RANK
    selected = _selected_version()
    if unit == f"kafka:{selected}":
        return 0
    if unit == f"kafka:{selected}{SPARK_SUFFIX}":
        return 2
    versions = [f"kafka:{v}" for v in _every_kafka_version() if v]
    if unit in versions:
        return 3 + versions.index(unit)
    return 3 + len(versions)


def work_unit(item: pytest.Item) -> str:
    """The group a test runs in when the suite is spread over workers (`./scripts/test` runs `pytest -n 3`).

    A group runs whole on one worker, in the order above: every test on one cluster shares a group, so each
    cluster still starts once per run and the tests that bounce its brokers still run last on it. The tests
    of the container image share one group, those on the shared cluster too: the image is built by one
    worker, once (two builds at once ran two apt-gets, and the loser skipped with a wrong reason). Tests
    that need Spark but no Kafka share one Spark session; every other test's group is its module.
    """
    module = item.nodeid.split("::", 1)[0]
    own = item.get_closest_marker("own_cluster")
    if own is not None:
        return f"own:{own.args[0]}" if own.args else f"own:{module}"
    fixtures = set(getattr(item, "fixturenames", ()))
    if "exclusive_cluster_slot" in fixtures:
        return f"own:{module}"
    if fixtures & IMAGE_FIXTURES:
        return IMAGE_UNIT
    version = _requested_version(item)
    if version is not None or fixtures & {"kafka_cluster", "proxy", "cluster_pool"}:
        # The pipeline's tests over a real cluster (the audit topic, the proxy's audit files) are a group of
        # their own, with a cluster of that version and a Spark session in one worker: with the shared
        # cluster's other tests they made the longest group, which alone held the run's end.
        return f"kafka:{version or _selected_version()}{SPARK_SUFFIX if fixtures & SPARK_FIXTURES else ''}"
    if fixtures & SPARK_FIXTURES:
        return "spark"
    return module


#: What the workers' own end-of-run checks found (pytest-xdist: each worker runs its clusters and proxies).
_WORKER_FAILURES: list[str] = []
#: The scenario tests this run left out (no --scenario): named in one line at its end.
_SCENARIO_LEFT_OUT: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SCENARIO_LEFT_OUT:
        terminalreporter.write_line(f"{len(_SCENARIO_LEFT_OUT)} scenario test(s) left out (the scenario runner's "
                                    "5-minute year): they run in their own step, ./scripts/test-scenario")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """The controller hears of a worker's failed end-of-run checks (sent in `workeroutput`)."""
    _WORKER_FAILURES.extend(getattr(node, "workeroutput", {}).get("insync_failures", []))
    for nodeid in getattr(node, "workeroutput", {}).get("insync_scenario_left_out", []):
        if nodeid not in _SCENARIO_LEFT_OUT:  # each worker collects (and leaves out) the same tests
            _SCENARIO_LEFT_OUT.append(nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    failures = list(_WORKER_FAILURES)
    pools = _cluster_pools()
    if pools is not None:  # the run collected tests that use clusters: stop them, and what they saw
        failures += pools.end_of_run()
    if not failures and not session.testsfailed:
        remove_scratch_directories()  # a failing run keeps them (proxies' configuration, log, audit files)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller reports it
        workeroutput["insync_failures"] = failures
        workeroutput["insync_scenario_left_out"] = list(_SCENARIO_LEFT_OUT)
        return
    for failure in failures:
        print(f"\nFAILED: {failure}", file=sys.stderr)
    if failures:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        print("\nNo Kafka JVM left running after the suite, no address leaked.", file=sys.stderr)


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _quiet_log_windows() -> None:
    """Every test starts from a quiet log: a line an earlier test said is not held back as its repeat
    (proxy/observability/logs.py keeps its windows per process), at the default interval (a reload test may change it)."""
    forget_all()
    set_summary_interval(SUMMARY_INTERVAL_SECONDS)
