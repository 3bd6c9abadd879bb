"""README's metrics reference is the one the code exports."""

from __future__ import annotations

from pathlib import Path

from insync_proxy.proxy.metrics import reference_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_metrics_reference_matches_the_code() -> None:
    text = README.read_text()
    start = text.index("<!-- metrics-reference:start -->") + len("<!-- metrics-reference:start -->")
    end = text.index("<!-- metrics-reference:end -->")
    assert text[start:end].strip() == reference_table().strip(), (
        "README's metrics table is stale: regenerate it with `python -m insync_proxy.proxy.metrics`"
    )
