"""The batch report end to end on a small directory: tables, rejected/, a self-contained HTML page."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from insync_proxy.cli import main
from insync_proxy.pipeline import report
from insync_proxy.pipeline.spark_env import PipelineError, Progress, check_java, check_master

from .events import decision, isr_change, write_jsonl


@pytest.fixture(scope="module")
def report_result(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> report.ReportResult:
    # Two sidecars' directories; traffic crosses midnight UTC so two date partitions are written.
    root = tmp_path_factory.mktemp("audit")
    a: list[dict[str, Any] | str] = [decision(t) for t in range(0, 20)]
    a += [isr_change(20, 1), *(decision(t, decision="answered_not_enough_replicas", acks_sent=None, isr_size=1,
                                        client_id="billing", error_code=19) for t in range(21, 25))]
    a += [isr_change(30, 3), decision(31, acks_requested=1, acks_sent=1, record_bytes=500)]
    b: list[dict[str, Any] | str] = [decision(17 * 3600 + t, topic="payments", proxy_id="sidecar-b", acks_requested=0, acks_sent=0,
                  latency_ms=None) for t in range(5)]
    b += ["{truncated", json.dumps({**decision(3), "schema_version": 9})]
    write_jsonl(root / "sidecar-a" / "audit-sidecar-a-20261121T070000Z.jsonl", a)
    write_jsonl(root / "sidecar-b" / "audit-sidecar-b-20261121T070000Z.jsonl", b)
    (root / "sidecar-b" / "README.txt").write_text("not audit data")
    return report.run_report(spark, [str(root)], tmp_path_factory.mktemp("out"), progress=Progress(enabled=False))


def test_report_counts_inputs_and_rejects(report_result: report.ReportResult) -> None:
    assert report_result.counts == {"lines": 34, "valid": 32, "rejected": 2, "v1_events": 32, "v2_events": 0,
                                    "produce_decisions": 30, "produce_summaries": 0, "isr_changes": 2,
                                    "partition_readiness": 0}
    assert report_result.rejected_by_reason == {"bad_json": 1, "unknown_schema_version": 1}
    rejected = [json.loads(line) for p in (report_result.output_dir / "rejected").glob("*.json")
                for line in p.read_text().splitlines()]
    assert sorted(r["reason"] for r in rejected) == ["bad_json", "unknown_schema_version"]
    assert all(r["source"].endswith(".jsonl") for r in rejected)


def test_report_writes_date_partitioned_parquet_tables(report_result: report.ReportResult) -> None:
    for name, path in report_result.table_paths.items():
        assert (path / "date=2026-11-21").is_dir(), name
    assert (report_result.table_paths["decisions_by_kind"] / "date=2026-11-22").is_dir()
    (interval,) = report_result.tables["isr_below_min_intervals"]
    assert (interval["duration_s"], interval["lowest_isr"], interval["open"]) == (10.0, 1, False)
    assert report_result.tables["top_clients_overall"][0]["client_id"] == "billing"
    assert report_result.summary["exposed_share"] == pytest.approx((500 + 500) / (20 * 100 + 500 + 500))


def test_html_report_is_self_contained_with_plots_and_tables(report_result: report.ReportResult) -> None:
    page = report_result.html_path.read_text(encoding="utf-8")
    assert not re.search(r"https?://", page)  # nothing to fetch: works offline
    assert "<script" not in page and "<link" not in page
    assert page.count("<svg") == 3  # ISR timeline, requests over time, latency by acks mode
    for heading in ("Partitions below min ISR", "Produce decisions", "Latency by acks mode",
                    "Durability exposure", "Clients affected", "Rejected input"):
        assert heading in page
    assert "billing" in page and "<table>" in page
    summary = json.loads(report_result.summary_path.read_text())
    assert summary["counts"]["valid"] == 32


def test_console_summary_mentions_the_key_numbers(report_result: report.ReportResult) -> None:
    text = report.console_summary(report_result)
    assert "rejected: 2" in text and "orders-0: 10.0 s below min ISR" in text and "client billing" in text


def test_main_reports_missing_input_without_starting_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--input", str(tmp_path / "nope"), "--output", str(tmp_path / "out")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["report", "--input", str(tmp_path / "*.jsonl"), "--output", str(tmp_path / "out")]) == 2
    assert "matches no file" in capsys.readouterr().err


def test_main_rejects_a_bad_master_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_jsonl(tmp_path / "a.jsonl", [decision(0)])
    assert main(["report", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "--master", "locl[2]"]) == 2
    assert "bad --master" in capsys.readouterr().err
    for good in ("local", "local[2]", "local[*]", "spark://h1:7077,h2:7077", "yarn", "k8s://https://k:443"):
        assert check_master(good) == good


def test_missing_java_is_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(PipelineError, match="JAVA_HOME=.*no bin/java.*openjdk-17"):
        check_java()


def test_help_describes_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--kafka-bootstrap" in out and "spark-submit" in out
