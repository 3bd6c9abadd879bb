"""What the run leaves behind: the invariants' table (printed), summary.json (the table and every figure behind it),
and the timeline of the proxy's RSS and fds, the added latency's 10-second p99 both ways and the event windows,
drawn by matplotlib as timeline.svg and timeline.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.scenario.findings import Findings
from benchmarks.scenario.latency import histogram_percentile, merge_histograms
from benchmarks.scenario.oracle import Verdict


def summary(verdict: Verdict, oracle: dict[str, Any], found: Findings, *, minutes: float, kafka: str, mv_bump: str,
            compiled: str, build: str) -> dict[str, Any]:
    """summary.json: the invariants as rows, whether they held, and the figures behind them."""
    f = found
    return {
        "minutes": minutes,
        "kafka": kafka,
        "metadata_version_bump": mv_bump,
        "compiled": compiled,
        "build": build,
        "rotations": f.rotations,
        "slow_consumers": f.slow,
        "share_received": f.share_received,
        "invariants": [{"invariant": name, "ok": ok, "detail": detail} for name, ok, detail in verdict.rows],
        "ok": verdict.ok,
        "oracle": oracle,
        "latency": verdict.latency,
        "trends": verdict.trends,
        "rates_per_minute": verdict.rates_per_minute,
        "events": [{"name": w.name, "start": round(w.start, 1), "end": round(w.end or 0, 1), "detail": w.detail,
                    "failed": w.failed} for w in f.windows],
        "errors": f.errors[:50],
        "acks2_violations": verdict.acks2_violations[:20],
        "ready_but_not_serving_at": [round(t, 1) for t in verdict.ready_but_not_serving_at[:50]],
        "outages": [{"broker": n, "start": round(a, 1), "end": round(b, 1)} for n, a, b in f.outages],
        "tag_wrong": f.tag_wrong[:20],
        "address_leaks": f.address_leaks[:20],
    }


def table(summary: dict[str, Any]) -> str:
    width = max(len(row["invariant"]) for row in summary["invariants"])
    lines = [f"{'invariant':<{width}}  result  detail", "-" * (width + 60)]
    for row in summary["invariants"]:
        mark = "PASS" if row["ok"] else "FAIL"
        lines.append(f"{row['invariant']:<{width}}  {mark:<6}  {row['detail']}")
    return "\n".join(lines)


def p99_by_10_seconds(found: Findings, kind: str) -> list[tuple[float, float]]:
    """(middle of each 10-second span, p99 ms) of one latency producer's histograms; a span without any (nothing
    acknowledged: a stall) is NaN, a gap in the line rather than a slope across it."""
    spans: dict[int, list[dict[int, int]]] = {}
    for t, counts in found.latency[kind]:
        spans.setdefault(int(t // 10), []).append(counts)
    if not spans:
        return []
    return [(b * 10 + 5, histogram_percentile(merge_histograms(spans[b]), 0.99) if b in spans else float("nan"))
            for b in range(min(spans), max(spans) + 1)]


def draw_timeline(found: Findings, elapsed: float, summary: dict[str, Any], paths: list[Path]) -> None:
    """One figure over the run's minutes, saved to each of `paths` (the format by its suffix): the proxy's RSS and
    open fds, the 10-second p99 latency through the proxy and direct (log scale), and each event's windows on a row
    of its own, in the order they first began (red when it failed)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(w.name for w in sorted(found.windows, key=lambda w: w.start)))  # by first start
    figure, (rss, fds, latency, events) = plt.subplots(
        4, 1, sharex=True, figsize=(12, 10), height_ratios=[1, 1, 1, max(1.0, 0.22 * len(names))],
        layout="constrained")
    figure.suptitle(f"insync-proxy, a year in an hour: {summary['minutes']:g} min, Kafka {summary['kafka']}")
    minutes = [s.t / 60 for s in found.samples]
    rss.plot(minutes, [s.rss_mib for s in found.samples], color="#1f77b4", linewidth=1)
    rss.set_ylabel("RSS (MiB)")
    fds.plot(minutes, [float(s.fds) for s in found.samples], color="#2ca02c", linewidth=1)
    fds.set_ylabel("open fds")
    for kind, colour in (("direct", "#888888"), ("proxy", "#d62728")):
        points = p99_by_10_seconds(found, kind)
        # a marker a span: one between two stalls is no line segment, but still a point
        latency.plot([t / 60 for t, _ in points], [v for _, v in points], color=colour, linewidth=1, marker=".",
                     markersize=3, label=f"{kind} (Java producer, acks=all)")
    latency.set_ylabel("p99 latency (ms),\n10-second spans")
    latency.set_yscale("log")  # milliseconds when quiet, tens of seconds when a broker is away: both readable
    latency.legend(loc="best", fontsize="small", framealpha=0.9)
    for axes in (rss, fds):
        axes.set_ylim(bottom=0)
    for axes in (rss, fds, latency):
        axes.grid(True, color="#e0e0e0", linewidth=0.5)
    total = max(elapsed, 1.0)
    for window in found.windows:
        end = window.end if window.end is not None else total
        events.broken_barh([(window.start / 60, max((end - window.start) / 60, total / 60 / 500))],
                           (names.index(window.name) - 0.4, 0.8), color="#d62728" if window.failed else "#ff7f0e")
    events.set_yticks(range(len(names)), names, fontsize="small")
    events.set_ylim(len(names) - 0.5, -0.5)
    events.set_ylabel("events")
    events.grid(True, axis="x", color="#e0e0e0", linewidth=0.5)
    events.set_xlabel("minutes since the producers started")
    events.set_xlim(0, total / 60)
    for path in paths:
        figure.savefig(path, dpi=100)
    plt.close(figure)


def write_outputs(found: Findings, elapsed: float, summary: dict[str, Any], out: Path, json_file: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    svg, png = out / "timeline.svg", out / "timeline.png"
    draw_timeline(found, elapsed, summary, [svg, png])
    summary["timeline_svg"], summary["timeline_png"] = str(svg), str(png)
    text = json.dumps(summary, indent=2, default=str)
    (out / "summary.json").write_text(text)
    if json_file is not None:
        json_file.write_text(text)
