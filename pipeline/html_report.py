"""The self-contained HTML durability report: inline SVG plots and HTML tables, no external assets.

Plots are hand-written SVG rather than matplotlib: the report must open offline (no CDN), SVG keeps
the text selectable and crisp at any zoom, a few hundred lines of code are cheaper than a plotting
dependency in the pipeline image, and tests can assert on the markup. Input is plain Python data
(lists of dicts), so rendering needs no Spark and is testable on its own.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

Row = Mapping[str, Any]

# Colour per decision kind, chosen to read as good (forwarded), adjusted, and two kinds of refusal.
DECISION_COLOURS = {
    "forwarded": "#4c9a2a",
    "raised_by_floor": "#2a6f9a",
    "answered_not_enough_replicas": "#d1495b",
    "answered_invalid_required_acks": "#edae49",
}
OTHER_COLOUR = "#888888"
PERCENTILE_COLOURS = {"p50_ms": "#7fb3d5", "p95_ms": "#2e86c1", "p99_ms": "#1b4f72"}

_FONT = "font-family='sans-serif' font-size='11'"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt_ts(value: object) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    return "" if value is None else str(value)


def _fmt_cell(value: object) -> str:
    if value is None:
        return "<span class='null'>–</span>"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return _e(_fmt_ts(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return _e(f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}")
    if isinstance(value, int):
        return _e(f"{value:,}")
    if isinstance(value, list | tuple):
        return _e(", ".join(str(v) for v in value))
    return _e(value)


def acks_label(requested: object, sent: object) -> str:
    """Human label of an acks mode, e.g. ``asked -2 → sent -1`` or ``asked -1 → answered by proxy``."""
    asked = "?" if requested is None else str(requested)
    return f"asked {asked} → " + ("answered by proxy" if sent is None else f"sent {sent}")


def html_table(rows: Sequence[Row], columns: Sequence[str], caption: str, limit: int = 50) -> str:
    """An HTML table of ``rows`` (first ``limit``), with a note when rows were left out."""
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_fmt_cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows[:limit]
    )
    note = f"<p class='note'>{len(rows) - limit:,} more rows in the Parquet table.</p>" if len(rows) > limit else ""
    if not rows:
        body = f"<tr><td colspan='{len(columns)}' class='null'>none</td></tr>"
    return f"<table><caption>{_e(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def _epoch(value: datetime) -> float:
    return value.timestamp()


def svg_isr_timeline(intervals: Sequence[Row], start: datetime | None, end: datetime | None, max_rows: int = 40) -> str:
    """Per-partition timeline of ISR-below-min intervals (open intervals hatched), as inline SVG."""
    if not intervals or start is None or end is None:
        return "<p class='null'>Below-min-ISR intervals: none (no partition was seen below its min ISR).</p>"
    per_partition: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for row in intervals:
        per_partition[(row["topic"], row["partition"])].append(row)
    # The partitions that spent the longest below min ISR come first.
    keys = sorted(per_partition, key=lambda k: (-sum(r["duration_s"] or 0 for r in per_partition[k]), k))
    shown = keys[:max_rows]
    t0, t1 = _epoch(start), max(_epoch(end), _epoch(start) + 1e-3)
    left, right, row_h, top = 170, 20, 18, 24
    width = 900
    plot_w = width - left - right
    height = top + row_h * len(shown) + 40

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    parts = [
        f"<svg width='{width}' height='{height}' role='img' "
        f"aria-label='ISR below min ISR timeline per partition'>",
        "<defs><pattern id='open-hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
        "patternTransform='rotate(45)'><rect width='6' height='6' fill='#d1495b' opacity='0.35'/>"
        "<line x1='0' y1='0' x2='0' y2='6' stroke='#d1495b' stroke-width='3'/></pattern></defs>",
        f"<text x='{left}' y='14' {_FONT}>time (UTC) →  solid: closed interval, hatched: still open at end of data</text>",
    ]
    for i, key in enumerate(shown):
        y = top + i * row_h
        fill = "#f4f4f4" if i % 2 == 0 else "#ffffff"
        parts.append(f"<rect x='{left}' y='{y}' width='{plot_w}' height='{row_h}' fill='{fill}'/>")
        parts.append(f"<text x='{left - 6}' y='{y + 13}' text-anchor='end' {_FONT}>{_e(key[0])}-{key[1]}</text>")
        for row in per_partition[key]:
            xs, xe = x(_epoch(row["start"])), x(_epoch(row["end"]))
            bar_fill = "url(#open-hatch)" if row["open"] else "#d1495b"
            title = (
                f"{key[0]}-{key[1]}: {_fmt_ts(row['start'])} → {_fmt_ts(row['end'])} "
                f"({row['duration_s']:.3f} s), ISR {row['lowest_isr']} < min {row['min_isr']}"
                + (" (open)" if row["open"] else "")
            )
            parts.append(
                f"<rect x='{xs:.1f}' y='{y + 3}' width='{max(xe - xs, 2):.1f}' height='{row_h - 6}' "
                f"fill='{bar_fill}'><title>{_e(title)}</title></rect>"
            )
    axis_y = top + row_h * len(shown)
    parts.append(f"<line x1='{left}' y1='{axis_y}' x2='{left + plot_w}' y2='{axis_y}' stroke='#333'/>")
    for tick in _nice_ticks(t0, t1, 6):
        tx = x(tick)
        label = datetime.fromtimestamp(tick, UTC).strftime("%m-%d %H:%M:%S")
        parts.append(f"<line x1='{tx:.1f}' y1='{axis_y}' x2='{tx:.1f}' y2='{axis_y + 4}' stroke='#333'/>")
        parts.append(f"<text x='{tx:.1f}' y='{axis_y + 16}' text-anchor='middle' {_FONT}>{label}</text>")
    parts.append("</svg>")
    note = f"<p class='note'>{len(keys) - len(shown)} more partitions not drawn.</p>" if len(keys) > len(shown) else ""
    return "".join(parts) + note


def _legend(items: Iterable[tuple[str, str]], x0: int, y: int) -> str:
    out, x = [], x0
    for label, colour in items:
        out.append(f"<rect x='{x}' y='{y - 9}' width='10' height='10' fill='{colour}'/>")
        out.append(f"<text x='{x + 14}' y='{y}' {_FONT}>{_e(label)}</text>")
        x += 24 + 7 * len(label)
    return "".join(out)


def svg_decisions_over_time(timeline: Sequence[Row]) -> str:
    """Stacked bars of produce requests per time bucket, coloured by decision kind, as inline SVG."""
    if not timeline:
        return "<p class='null'>Produce requests: none.</p>"
    buckets: dict[datetime, dict[str, int]] = defaultdict(dict)
    for row in timeline:
        buckets[row["bucket_start"]][row["decision"] or "unknown"] = row["requests"]
    bucket_s = int(timeline[0]["bucket_seconds"])
    starts = sorted(buckets)
    t0 = _epoch(starts[0])
    n = int((_epoch(starts[-1]) - t0) // bucket_s) + 1
    kinds = [k for k in DECISION_COLOURS if any(k in b for b in buckets.values())]
    kinds += sorted({k for b in buckets.values() for k in b} - set(kinds))
    peak = max(sum(b.values()) for b in buckets.values())
    left, right, top, plot_h, width = 70, 20, 30, 220, 900
    plot_w = width - left - right
    bar_w = plot_w / n

    def y(v: float) -> float:
        return top + plot_h - v / peak * plot_h

    parts = [
        f"<svg width='{width}' height='{top + plot_h + 45}' role='img' "
        f"aria-label='Produce requests over time by decision'>",
        _legend(((k, DECISION_COLOURS.get(k, OTHER_COLOUR)) for k in kinds), left, 14),
    ]
    for tick in _nice_ticks(0, peak, 4):
        parts.append(f"<line x1='{left}' y1='{y(tick):.1f}' x2='{left + plot_w}' y2='{y(tick):.1f}' stroke='#ddd'/>")
        parts.append(f"<text x='{left - 6}' y='{y(tick) + 4:.1f}' text-anchor='end' {_FONT}>{tick:,.0f}</text>")
    for start in starts:
        i = int((_epoch(start) - t0) // bucket_s)
        base = 0
        for kind in kinds:
            count = buckets[start].get(kind, 0)
            if not count:
                continue
            y_top, y_base = y(base + count), y(base)
            parts.append(
                f"<rect x='{left + i * bar_w:.1f}' y='{y_top:.1f}' width='{max(bar_w - 1, 1):.1f}' "
                f"height='{y_base - y_top:.1f}' fill='{DECISION_COLOURS.get(kind, OTHER_COLOUR)}'>"
                f"<title>{_e(_fmt_ts(start))} {_e(kind)}: {count:,}</title></rect>"
            )
            base += count
    axis_y = top + plot_h
    parts.append(f"<line x1='{left}' y1='{axis_y}' x2='{left + plot_w}' y2='{axis_y}' stroke='#333'/>")
    for tick in _nice_ticks(t0, t0 + n * bucket_s, 6):
        tx = left + (tick - t0) / (n * bucket_s) * plot_w
        label = datetime.fromtimestamp(tick, UTC).strftime("%m-%d %H:%M:%S")
        parts.append(f"<text x='{tx:.1f}' y='{axis_y + 16}' text-anchor='middle' {_FONT}>{label}</text>")
    parts.append(
        f"<text x='{left}' y='{axis_y + 34}' {_FONT}>requests per {bucket_s:,} s bucket (UTC), by decision</text></svg>"
    )
    return "".join(parts)


def svg_latency_by_acks(latency: Sequence[Row]) -> str:
    """Grouped bars of latency p50/p95/p99 per acks mode (log scale when the spread is wide), as SVG."""
    rows = [r for r in latency if r.get("p50_ms") is not None]
    if not rows:
        return "<p class='null'>Latency: none measured.</p>"
    rows = sorted(rows, key=lambda r: (r["acks_requested"] is None, r["acks_requested"] or 0, r["acks_sent"] is None))
    values = [float(r[p]) for r in rows for p in PERCENTILE_COLOURS]
    peak = max(values) or 1.0
    floor = min(v for v in values if v > 0) if any(v > 0 for v in values) else 1.0
    log = peak / floor > 50  # a linear axis would flatten the fast modes to nothing
    left, top, plot_h, group_w, width = 70, 30, 220, 150, max(420, 90 + 150 * len(rows))

    def y(v: float) -> float:
        if log:
            lo, hi = math.log10(floor / 2), math.log10(peak * 1.1)
            return top + plot_h - (math.log10(max(v, floor / 2)) - lo) / (hi - lo) * plot_h
        return top + plot_h - v / (peak * 1.1) * plot_h

    parts = [
        f"<svg width='{width}' height='{top + plot_h + 50}' role='img' "
        f"aria-label='Produce latency by acks mode'>",
        _legend(((p.replace("_ms", ""), c) for p, c in PERCENTILE_COLOURS.items()), left, 14),
        f"<text x='{width - 10}' y='14' text-anchor='end' {_FONT}>ms{' (log scale)' if log else ''}</text>",
    ]
    ticks = [10.0**k for k in range(math.floor(math.log10(floor / 2)), math.ceil(math.log10(peak * 1.1)) + 1)] if log \
        else _nice_ticks(0, peak * 1.1, 4)
    for tick in ticks:
        ty = y(tick)
        if top - 1 <= ty <= top + plot_h + 1:
            parts.append(f"<line x1='{left}' y1='{ty:.1f}' x2='{width - 10}' y2='{ty:.1f}' stroke='#ddd'/>")
            parts.append(f"<text x='{left - 6}' y='{ty + 4:.1f}' text-anchor='end' {_FONT}>{tick:g}</text>")
    for i, row in enumerate(rows):
        gx = left + 10 + i * group_w
        for j, (pct, colour) in enumerate(PERCENTILE_COLOURS.items()):
            v = float(row[pct])
            bx, by = gx + j * 36, y(v)
            parts.append(
                f"<rect x='{bx}' y='{by:.1f}' width='32' height='{top + plot_h - by:.1f}' fill='{colour}'>"
                f"<title>{_e(acks_label(row['acks_requested'], row['acks_sent']))} {pct[:-3]}: {v:.3f} ms</title></rect>"
            )
        parts.append(
            f"<text x='{gx + 54}' y='{top + plot_h + 16}' text-anchor='middle' {_FONT}>"
            f"{_e(acks_label(row['acks_requested'], row['acks_sent']))}</text>"
            f"<text x='{gx + 54}' y='{top + plot_h + 30}' text-anchor='middle' {_FONT}>n={row['requests']:,}</text>"
        )
    parts.append(f"<line x1='{left}' y1='{top + plot_h}' x2='{width - 10}' y2='{top + plot_h}' stroke='#333'/></svg>")
    return "".join(parts)


_CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 0;font-size:12px}caption{text-align:left;font-weight:bold;padding:4px 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#eee}
td:first-child,th:first-child{text-align:left}.null{color:#999}.note{color:#666;font-size:12px}
.kpi{display:inline-block;border:1px solid #ccc;border-radius:4px;padding:8px 14px;margin:4px;min-width:120px}
.kpi b{display:block;font-size:20px}
"""


def render_html(
    *,
    counts: Mapping[str, int],
    rejected_by_reason: Mapping[str, int],
    tables: Mapping[str, Sequence[Row]],
    summary: Mapping[str, Any],
    inputs: Sequence[str],
) -> str:
    """The whole report page. ``tables`` holds the collected tables (see ``ReportResult.tables``)."""
    intervals = tables.get("isr_below_min_intervals", [])
    kpis = [
        ("audit lines read", counts.get("lines", 0)),
        ("valid events", counts.get("valid", 0)),
        ("rejected lines", counts.get("rejected", 0)),
        ("produce requests", summary.get("requests", 0)),
        ("records", summary.get("records", 0)),
        ("proxy-answered errors", summary.get("proxy_answered_errors", 0)),
        ("below-min intervals", len(intervals)),
    ]
    exposure = summary.get("exposed_share")
    kpi_html = "".join(f"<div class='kpi'>{_e(label)}<b>{value:,}</b></div>" for label, value in kpis)
    kpi_html += (
        f"<div class='kpi'>bytes sent with acks 0/1<b>{'–' if exposure is None else f'{exposure:.1%}'}</b></div>"
    )
    rejected_rows = [{"reason": k, "lines": v} for k, v in sorted(rejected_by_reason.items(), key=lambda kv: -kv[1])]
    sections = [
        f"<h1>insync-proxy durability report</h1><p class='note'>Inputs: {_e(', '.join(inputs))}<br>"
        f"Events from {_e(_fmt_ts(summary.get('first_ts')))} to {_e(_fmt_ts(summary.get('last_ts')))} · "
        f"{summary.get('topic_partitions', 0):,} topic-partitions · generated {_e(_fmt_ts(datetime.now(UTC)))}"
        "</p>",
        kpi_html,
        "<h2>Partitions below min ISR</h2>",
        svg_isr_timeline(intervals, summary.get("first_ts"), summary.get("last_ts")),
        html_table(
            tables.get("below_min_by_partition", []),
            ["topic", "partition", "intervals", "open_intervals", "below_min_s", "lowest_isr", "min_isr"],
            "Time below min ISR per partition",
        ),
        html_table(
            sorted(intervals, key=lambda r: -(r["duration_s"] or 0)),
            ["topic", "partition", "start", "end", "duration_s", "min_isr", "lowest_isr", "open", "observations", "proxies"],
            "Longest intervals",
            limit=30,
        ),
        "<h2>Produce decisions</h2>",
        svg_decisions_over_time(tables.get("decisions_timeline", [])),
        html_table(tables.get("decisions_by_partition", []),
                   ["topic", "partition", "forwarded", "raised_by_floor", "answered_not_enough_replicas",
                    "answered_invalid_required_acks", "total", "records", "record_bytes", "written_records"],
                   "Requests per partition by decision, records and record bytes (records: counted by v2 summaries)"),
        html_table(tables.get("acks_matrix", []), ["acks_mode", "acks_requested", "acks_sent", "requests", "record_bytes"],
                   "Acks asked for and acks sent upstream"),
        "<h2>Latency by acks mode</h2>",
        svg_latency_by_acks(tables.get("latency_overall", [])),
        html_table(
            [dict(r, acks_mode=acks_label(r["acks_requested"], r["acks_sent"])) for r in tables.get("latency_overall", [])],
            ["acks_mode", "requests", "p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms"],
            f"Produce latency from merged log-scale histograms: each percentile is its bucket's upper bound, "
            f"at most +{summary.get('latency_relative_error', 0.189):.1%} above the exact value",
        ),
        "<h2>Durability exposure</h2>",
        html_table(tables.get("exposure_by_topic", []),
                   ["topic", "bytes_sent", "bytes_acks_all", "bytes_acks_1", "bytes_acks_0", "bytes_answered_by_proxy",
                    "exposed_share"],
                   "Record bytes by acks sent upstream (exposed = acks 0 or 1)"),
        "<h2>Clients affected</h2>",
        html_table(tables.get("top_clients_overall", []),
                   ["client_id", "answered_errors", "not_enough_replicas", "invalid_required_acks", "partitions"],
                   "Top clients by proxy-answered errors", limit=20),
        "<h2>Rejected input</h2>",
        html_table(rejected_rows, ["reason", "lines"], "Lines that did not match audit schema v1 or v2 (see rejected/)"),
    ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>insync-proxy durability report</title><style>{_CSS}</style></head><body>"
        + "\n".join(sections)
        + "</body></html>\n"
    )
