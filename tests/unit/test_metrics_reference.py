"""docs/metrics.md's metrics reference is the one the code exports."""

from __future__ import annotations

from pathlib import Path

from insync_proxy.proxy.observability.metrics_reference import (
    END,
    START,
    reference_path,
    reference_table,
    table_on_page,
    with_table,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_metrics_page_matches_the_code() -> None:
    assert reference_path() == PAGE
    assert table_on_page(PAGE.read_text()) == reference_table().strip(), (
        "docs/metrics.md's metrics table is stale: regenerate it with "
        "`python -m insync_proxy.proxy.observability.metrics_reference --write`"
    )


def test_writing_the_table_replaces_only_what_stands_between_the_markers() -> None:
    # Given a page with text around a stale table
    page = f"# Metrics\n\nintro\n\n{START}\n| stale |\n{END}\n\nafter\n"
    # When the table is written into it
    written = with_table(page, "| metric |\n| --- |")
    # Then the text around it stays, the stale table is gone, and writing again changes nothing
    assert written == f"# Metrics\n\nintro\n\n{START}\n| metric |\n| --- |\n{END}\n\nafter\n"
    assert with_table(written, "| metric |\n| --- |") == written
