"""The suite's groups (tests/conftest.py work_unit): what runs whole on one pytest-xdist worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from insync_proxy.devcluster.distribution import selected_version

ROOT = Path(__file__).resolve().parents[2]

#: A plugin for the collecting pytest: each test's xdist_group, as the conftest marked it.
_GROUPS_PLUGIN = '''
import json, os

def pytest_collection_finish(session):
    groups = {item.nodeid: item.get_closest_marker("xdist_group").args[0] for item in session.items}
    with open(os.environ["WORK_UNITS_OUT"], "w") as out:
        json.dump(groups, out)
'''


def _groups(tmp_path: Path, *paths: str, workers: int | None = None, options: tuple[str, ...] = ()) -> dict[str, str]:
    """Collects the given test files (nothing runs, no JVM starts) and returns each test's group, in the
    order the tests were sorted into (`workers`: as a pytest-xdist worker of a run with that many collects)."""
    (tmp_path / "work_units_plugin.py").write_text(_GROUPS_PLUGIN)
    out = tmp_path / "groups.json"
    env = {**os.environ, "WORK_UNITS_OUT": str(out),
           **({"PYTEST_XDIST_WORKER_COUNT": str(workers)} if workers else {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "work_units_plugin", "--collect-only", "-q",
                             "-n", "0", *options, *paths], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    groups: dict[str, str] = json.loads(out.read_text())
    return groups


def test_the_image_tests_run_in_one_group_apart_from_the_shared_cluster(tmp_path: Path) -> None:
    # Given the image's tests, two of which also use the shared cluster, and a test on that cluster
    groups = _groups(tmp_path, "tests/deploy/test_image.py", "tests/integration/test_acks.py")
    image = {nodeid: group for nodeid, group in groups.items() if nodeid.startswith("tests/deploy/test_image.py")}
    shared = {group for nodeid, group in groups.items() if nodeid.startswith("tests/integration/test_acks.py")}
    # Then all four image tests share one group (one worker builds the image, once: two builds at once
    # ran two apt-gets), and it is not the shared cluster's group
    assert len(image) == 4, image
    assert set(image.values()) == {"image"}, image
    assert shared and all(group.startswith("kafka:") for group in shared), shared


def test_the_five_minute_scenario_starts_first_and_a_group_without_jvms_waits_behind_it(tmp_path: Path) -> None:
    # Given the scenario test (one test, 320 s), tests on the shared cluster, the image's and some without JVMs
    groups = _groups(tmp_path, "tests/deploy/test_compose.py", "tests/deploy/test_dockerfile.py",
                     "tests/deploy/test_image.py", "tests/integration/test_acks.py",
                     "tests/integration/test_year_in_an_hour.py", workers=3, options=("--scenario",))
    # When three workers take the groups in order (pytest-xdist: a worker with two tests or fewer left takes
    # the next group at once, so the scenario's worker takes the fourth, to run after the scenario)
    order = list(dict.fromkeys(groups.values()))
    # Then the scenario goes first, the two other workers get the shared cluster and the image, and the group
    # queued behind the scenario is one without JVMs, not a cluster's
    assert order[0] == "own:year", order
    assert order[1:3] == [f"kafka:{selected_version()}", "image"], order
    assert order[3] == "tests/deploy/test_compose.py", order


def test_the_suite_leaves_the_scenario_out_unless_asked(tmp_path: Path) -> None:
    # Given the scenario test and a test without JVMs; When collected as ./scripts/test collects (no --scenario)
    plain = _groups(tmp_path, "tests/integration/test_year_in_an_hour.py", "tests/deploy/test_dockerfile.py")
    # Then the scenario is not in the run (./scripts/test-scenario runs it), and with --scenario it is
    assert plain and not [n for n in plain if "test_year_in_an_hour" in n], plain
    asked = _groups(tmp_path, "tests/integration/test_year_in_an_hour.py", options=("--scenario", "-m", "scenario"))
    assert list(asked.values()) == ["own:year"], asked


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    """`./scripts/test`'s `--dist loadgroup` really keeps a group on one worker with the installed pytest and
    pytest-xdist (pytest 9 with xdist 3.8 silently spread every group over the workers)."""
    # Given three tests of one group that each record their worker, and one test of no group
    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "def record(name):\n"
        "    with open(os.path.join(os.path.dirname(__file__), name), 'w') as out:\n"
        "        out.write(os.environ['PYTEST_XDIST_WORKER'])\n"
        + "".join(f"@pytest.mark.xdist_group('g')\ndef test_g{i}():\n    record('g{i}')\n" for i in range(3))
        + "def test_alone():\n    record('alone')\n")
    # When they run on two workers as the suite does
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                             "loadgroup", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # Then the group's three tests ran on the same worker
    workers = {(tmp_path / f"g{i}").read_text() for i in range(3)}
    assert len(workers) == 1, workers
