"""The metrics reference: docs/metrics.md's table, made from the metrics proxy/observability/metrics.py defines.

`python -m insync_proxy.proxy.observability.metrics_reference` prints the table; `--write` puts it into docs/metrics.md
between its markers. A module of its own because proxy/observability/metrics.py runs compiled (setup.py:
COMPILED_MODULES), and `python -m` cannot run a compiled module ("No code object available").
"""

from __future__ import annotations

import sys
from pathlib import Path

from insync_proxy.proxy.config.reference import page_command
from insync_proxy.proxy.observability.metrics import ProxyMetrics

#: The page the table lives on, from the source tree's root; the table stands between the two markers.
PAGE = "docs/metrics.md"
START = "<!-- metrics-reference:start -->"
END = "<!-- metrics-reference:end -->"


def reference_table() -> str:
    """The metrics reference as a Markdown table, one row per metric a proxy exports."""
    rows = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    metrics = ProxyMetrics()
    label_names = {
        getattr(v, "_name", ""): tuple(getattr(v, "_labelnames", ()))
        for v in (getattr(metrics, a) for a in dir(metrics) if not a.startswith("__"))  # compiled: no __dict__
    }
    for family in metrics.registry.collect():
        name = family.name
        kind = family.type
        if kind == "counter":
            name += "_total"
        elif kind == "info":
            name += "_info"
        labels: set[str] = set()
        for sample in family.samples:
            labels.update(k for k in sample.labels if k != "le")
        labels.update(label_names.get(family.name, ()))
        rows.append(f"| `{name}` | {kind} | {', '.join(sorted(labels)) or '-'} | {family.documentation} |")
    return "\n".join(rows)


def reference_path() -> Path:
    """docs/metrics.md of the source tree this module is in."""
    return Path(__file__).resolve().parents[2] / PAGE


def table_on_page(page: str) -> str:
    """The table between the page's markers, as written there."""
    return page[page.index(START) + len(START):page.index(END)].strip()


def with_table(page: str, table: str) -> str:
    """The page with `table` between its markers instead of the one there."""
    return page[:page.index(START) + len(START)] + "\n" + table.strip() + "\n" + page[page.index(END):]


def main(argv: list[str] | None = None) -> int:
    """Print the table, or write it into docs/metrics.md (`--write`)."""
    return page_command(argv, module="insync_proxy.proxy.observability.metrics_reference", text=reference_table,
                        description=f"Print the metrics reference table made from the code; --write puts it into "
                                    f"{PAGE} between its markers.", path=reference_path(), page=with_table)


if __name__ == "__main__":
    sys.exit(main())
