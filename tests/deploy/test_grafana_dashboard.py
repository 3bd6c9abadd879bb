"""Grafana dashboard (deploy/grafana/insync-proxy.json): structure, metric names, and every panel
expression run against a real Prometheus scraping the proxy's metrics."""

from __future__ import annotations

import json
import time
from typing import Any

from harness.waiting import wait_until
from tests.deploy.tools import (
    DASHBOARD,
    STARTING_ERRORS,
    dashboard_targets,
    dashboard_variable_queries,
    exported_metric_families,
    exported_metric_names,
    iter_panels,
    metric_names_in,
    prometheus_query,
    render_grafana_variables,
)

REQUIRED_PANELS = (
    "Requests/s by API",
    "Client-observed latency p50 / p99 by API",
    "Network bytes/s by direction",
    "Client connections open by listener",
    "Produce partitions/s by acks requested",
    "Produce partitions/s by acks sent upstream",
    "Proxy-answered errors/s by topic and error code",
    "Partitions below min ISR by proxy",
    "min.insync cache hit ratio",
    "min.insync cache age and entries",
    "DescribeConfigs latency p50 / p99",
    "Audit events written/s by sink",
    "Audit events dropped/s by reason",
)


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def test_dashboard_structure_is_importable() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "insync-proxy" and dashboard["title"]
    panels = list(iter_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        ref_ids = [t["refId"] for t in panel.get("targets", [])]
        assert len(ref_ids) == len(set(ref_ids)), f"{panel['title']}: duplicate refIds"
        if panel["type"] != "row":
            assert panel.get("targets"), f"{panel['title']}: no query"
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    titles = {p["title"] for p in panels}
    assert not set(REQUIRED_PANELS) - titles, set(REQUIRED_PANELS) - titles


def test_dashboard_uses_only_exported_metrics_and_shows_every_metric() -> None:
    """Every insync_proxy_* name is exported by proxy/observability/metrics.py, and every exported metric has a panel."""
    exported = exported_metric_names()
    used: set[str] = set()
    for target in dashboard_targets():
        names = metric_names_in(target.expr)
        unknown = names - exported
        assert not unknown, f"{target}: {sorted(unknown)} not exported by proxy/observability/metrics.py"
        used |= names
    families = exported_metric_families()
    missing = {family for family in families if not any(name.startswith(family) for name in used)}
    assert not missing, (
        f"metrics without a dashboard panel (add one to deploy/grafana/insync-proxy.json): {missing}"
    )


def test_every_dashboard_expression_returns_data_from_a_real_prometheus(sample_prometheus: str) -> None:
    """Given Prometheus scraping ProxyMetrics with sample traffic, every panel query succeeds with data."""
    url = sample_prometheus
    # rate() needs two samples in its window: wait for a few scrapes.
    wait_until(
        lambda: _scalar(prometheus_query(url, 'count_over_time(up{job="insync-proxy"}[1m])')) >= 3,
        timeout=30,
        what="three scrapes of the sample target",
        retry_on=STARTING_ERRORS,
    )
    expressions = [(str(t), t.expr) for t in dashboard_targets()]
    expressions += [(f"variable query {q}", q) for q in dashboard_variable_queries()]
    assert len(expressions) > 30
    failures = []
    for where, expr in expressions:
        answer = _answer_with_data(url, render_grafana_variables(expr))
        if answer.get("status") != "success":
            failures.append(f"{where}: {answer.get('errorType')}: {answer.get('error')}\n    {expr}")
        elif not answer["data"]["result"]:
            failures.append(f"{where}: no data (misspelt metric or label?)\n    {expr}")
    assert not failures, "\n".join(failures)


def _answer_with_data(url: str, query: str, timeout: float = 20.0) -> dict[str, Any]:
    """The query's answer once it has data, or the last answer after `timeout`: on a loaded machine a scrape can
    miss its 250 ms timeout, and Prometheus then marks the target's series stale, so an instant query of a gauge
    finds nothing until the next scrape succeeds (rates over a window keep their earlier samples)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = prometheus_query(url, query)
        if answer.get("status") != "success" or answer["data"]["result"] or time.monotonic() > deadline:
            return answer
        time.sleep(0.25)


def _scalar(answer: dict[str, Any]) -> float:
    result = answer.get("data", {}).get("result", [])
    return float(result[0]["value"][1]) if result else 0.0
