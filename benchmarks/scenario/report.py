"""What the run leaves behind: the invariants' table (printed), summary.json (the table and every figure behind it),
and the timeline of the proxy's RSS and fds, the added latency's 10-second p99 both ways and the event windows,
as timeline.svg and timeline.png."""

from __future__ import annotations

import json
import re
import struct
import zlib
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


def timeline_svg(found: Findings, elapsed: float, summary: dict[str, Any]) -> str:
    """RSS, fds, latency (proxy and direct, 10 s p99) and the event windows on one time axis, as SVG."""
    w, h, left, top = 1000, 560, 70, 30
    total = max(elapsed, 1.0)
    samples = found.samples

    def x(t: float) -> float:
        return left + (w - left - 20) * t / total

    panels = [("RSS MiB", [(s.t, s.rss_mib) for s in samples], "#1f77b4"),
              ("open fds", [(s.t, float(s.fds)) for s in samples], "#2ca02c")]
    latency: dict[str, list[tuple[float, float]]] = {}
    for kind in ("direct", "proxy"):
        buckets: dict[int, list[dict[int, int]]] = {}
        for t, counts in found.latency[kind]:
            buckets.setdefault(int(t // 10), []).append(counts)
        latency[kind] = [(b * 10 + 5, histogram_percentile(merge_histograms(v), 0.99)) for b, v in sorted(buckets.items())]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">insync-proxy, a year in an hour: {summary["minutes"]} min, '
           f'Kafka {summary["kafka"]}</text>']
    panel_h = 120
    rows = [*panels, ("p99 latency ms (proxy red, direct grey)", latency["proxy"], "#d62728")]
    for i, (label, points, colour) in enumerate(rows):
        y0 = top + i * (panel_h + 20)
        values = [v for _, v in points] + ([v for _, v in latency["direct"]] if i == 2 else [])
        hi = max(values, default=1.0) or 1.0
        out.append(f'<rect x="{left}" y="{y0}" width="{w - left - 20}" height="{panel_h}" fill="none" stroke="#cccccc"/>')
        out.append(f'<text x="4" y="{y0 + 12}">{label}</text><text x="4" y="{y0 + 26}">max {hi:.1f}</text>')

        def poly(pts: list[tuple[float, float]], col: str, top_value: float = hi, base: int = y0) -> str:
            coords = " ".join(f"{x(t):.1f},{base + panel_h - panel_h * v / top_value:.1f}" for t, v in pts)
            return f'<polyline fill="none" stroke="{col}" stroke-width="1.2" points="{coords}"/>'

        out.append(poly(points, colour))
        if i == 2:
            out.append(poly(latency["direct"], "#888888"))
    y_events = top + 3 * (panel_h + 20)
    names = sorted({wdw.name for wdw in found.windows})
    for wdw in found.windows:
        row = names.index(wdw.name)
        y = y_events + row * 14
        colour = "#d62728" if wdw.failed else "#ff7f0e"
        end = wdw.end if wdw.end is not None else total
        out.append(f'<rect x="{x(wdw.start):.1f}" y="{y}" width="{max(2.0, x(end) - x(wdw.start)):.1f}" height="10" '
                   f'fill="{colour}" opacity="0.7"/>')
    for row, name in enumerate(names):
        out.append(f'<text x="4" y="{y_events + row * 14 + 9}">{name}</text>')
    for minute in range(0, int(total // 60) + 1, max(1, int(total // 600))):
        out.append(f'<text x="{x(minute * 60):.1f}" y="{h - 4}">{minute}m</text>')
    out.append("</svg>")
    return "\n".join(out)


def _colour(text: str) -> tuple[int, int, int] | None:
    if text in ("white",):
        return (255, 255, 255)
    if text.startswith("#") and len(text) == 7:
        return (int(text[1:3], 16), int(text[3:5], 16), int(text[5:7], 16))
    return None


def svg_to_png(svg: str, path: Path) -> None:
    """A PNG of the timeline SVG, drawn by hand (no ImageMagick, no matplotlib): its rectangles and polylines,
    not its text (the SVG has the labels)."""
    size = re.search(r'<svg[^>]* width="(\d+)" height="(\d+)"', svg)
    assert size is not None
    w, h = int(size.group(1)), int(size.group(2))
    pixels = bytearray(b"\xff" * (w * h * 3))

    def put(x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < w and 0 <= y < h:
            i = (y * w + x) * 3
            pixels[i:i + 3] = bytes(rgb)

    def line(x0: float, y0: float, x1: float, y1: float, rgb: tuple[int, int, int]) -> None:
        steps = int(max(abs(x1 - x0), abs(y1 - y0), 1))
        for k in range(steps + 1):
            put(round(x0 + (x1 - x0) * k / steps), round(y0 + (y1 - y0) * k / steps), rgb)

    for element in re.finditer(r"<(rect|polyline)([^>]*)/>", svg):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', element.group(2)))
        if element.group(1) == "rect":
            x, y = float(attrs.get("x", 0)), float(attrs.get("y", 0))
            rw, rh = float(attrs["width"]), float(attrs["height"])
            fill, stroke = _colour(attrs.get("fill", "")), _colour(attrs.get("stroke", ""))
            if fill is not None:
                for yy in range(int(y), int(y + rh)):
                    for xx in range(int(x), int(x + rw)):
                        put(xx, yy, fill)
            if stroke is not None:
                for a, b, c, d in ((x, y, x + rw, y), (x, y + rh, x + rw, y + rh), (x, y, x, y + rh),
                                   (x + rw, y, x + rw, y + rh)):
                    line(a, b, c, d, stroke)
        else:
            rgb = _colour(attrs.get("stroke", "")) or (0, 0, 0)
            points = [tuple(map(float, p.split(","))) for p in attrs.get("points", "").split()]
            for (a, b), (c, d) in zip(points, points[1:], strict=False):
                line(a, b, c, d, rgb)
    raw = b"".join(b"\x00" + bytes(pixels[y * w * 3:(y + 1) * w * 3]) for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def write_outputs(found: Findings, elapsed: float, summary: dict[str, Any], out: Path, json_file: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    svg, png = out / "timeline.svg", out / "timeline.png"
    text = timeline_svg(found, elapsed, summary)
    svg.write_text(text)
    svg_to_png(text, png)
    summary["timeline_svg"], summary["timeline_png"] = str(svg), str(png)
    text = json.dumps(summary, indent=2, default=str)
    (out / "summary.json").write_text(text)
    if json_file is not None:
        json_file.write_text(text)
