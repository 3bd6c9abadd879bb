"""`python -m tests.timeline`: a run's timeline (INSYNC_TEST_TIMELINE) printed per worker and group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import timeline


def test_each_workers_groups_are_printed_in_order_with_their_wall_and_cpu_seconds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given two workers' records: gw0 ran two tests of one group then one of another, gw1 one test
    records = [
        {"worker": "gw0", "unit": "kafka:4.3.1", "test": "a", "start": 100.0, "end": 110.0, "machine_cpu": 4.0},
        {"worker": "gw0", "unit": "kafka:4.3.1", "test": "b", "start": 110.0, "end": 130.0, "machine_cpu": 6.5},
        {"worker": "gw0", "unit": "spark", "test": "c", "start": 130.0, "end": 131.0, "machine_cpu": 1.0},
        {"worker": "gw1", "unit": "own:year", "test": "d", "start": 101.0, "end": 401.0, "machine_cpu": 350.0},
    ]
    path = tmp_path / "timeline.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    # When it is printed
    assert timeline.main([str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    # Then the span, each worker's busy time, and its groups merged in the order they ran, with their sums
    assert out[0] == "span of the tests: 301 s, 4 tests, 2 worker(s)"
    gw0 = out.index("gw0: busy 31 s, done at +31 s")
    assert out[gw0 + 1].split() == ["+", "0", "s", "30.0", "s", "2", "tests", "machine", "CPU", "10.5", "s",
                                    "kafka:4.3.1"]
    assert out[gw0 + 2].split()[-1] == "spark" and out[gw0 + 2].split()[1] == "30"
    assert "gw1: busy 300 s, done at +301 s" in out


def test_an_empty_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    assert timeline.main([str(tmp_path / "empty.jsonl")]) == 1
    assert "no test recorded" in capsys.readouterr().err
