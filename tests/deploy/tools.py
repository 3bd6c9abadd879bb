"""Helpers of the deploy tests: locating tools, polling, Prometheus HTTP API, dashboard expressions."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "insync-proxy.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"


def find_tool(name: str, pip_package: str | None = None) -> tuple[str | None, str]:
    """Path of an executable, installing `pip_package` first if it is missing; else (None, why not)."""
    path = shutil.which(name)
    if path is None and Path(f"/usr/bin/{name}").is_file():
        path = f"/usr/bin/{name}"
    if path is None and pip_package is not None:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", pip_package],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"{name} not found and `pip install {pip_package}` failed: {last}"
        path = shutil.which(name) or _next_to_python(name)
    if path is None:
        how = f"pip install {pip_package}" if pip_package else "apt-get install -y prometheus"
        return None, f"{name} not found on PATH (install it: {how})"
    return path, ""


def _next_to_python(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.is_file() else None


#: What polling a starting server may raise: connection refused, not ready, bad JSON while starting.
STARTING_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError)


def http_get_json(url: str, timeout: float = 5.0) -> Any:
    """GET a URL and decode its JSON body; Prometheus' API errors (HTTP 400/422) come back as JSON too."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return json.loads(body)
        except ValueError:
            raise OSError(f"HTTP {exc.code} from {url}: {body[:200]!r}") from None


def prometheus_query(base_url: str, expr: str) -> dict[str, Any]:
    """Instant query through /api/v1/query; the whole answer (status, data or errorType/error)."""
    url = f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    answer: dict[str, Any] = http_get_json(url)
    return answer


# Grafana's built-in and our template variables, as a query against one Prometheus needs them.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "$job": ".*",
    "$instance": ".*",
    "$topic": ".*",
    "$api": ".*",
}


def render_grafana_variables(expr: str) -> str:
    """Replace Grafana variables (longest first, so $__rate_interval beats $__interval) with values."""
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    left = re.findall(r"\$\{?\w+", expr)
    if left:
        raise ValueError(f"unknown Grafana variable(s) {left} in {expr!r}: add them to GRAFANA_VARIABLES")
    return expr


@dataclass(frozen=True)
class PanelTarget:
    """One query of one dashboard panel."""

    panel: str
    ref_id: str
    expr: str

    def __str__(self) -> str:
        return f"{self.panel} [{self.ref_id}]"


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def dashboard_targets(path: Path = DASHBOARD) -> list[PanelTarget]:
    """Every panel target's PromQL `expr` of a Grafana dashboard JSON file."""
    dashboard = json.loads(path.read_text())
    targets = []
    for panel in iter_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if "expr" in target:
                targets.append(PanelTarget(panel.get("title", "?"), target.get("refId", "?"), target["expr"]))
    return targets


def dashboard_variable_queries(path: Path = DASHBOARD) -> list[str]:
    """The PromQL inside the dashboard's query variables (label_values(<expr>, label))."""
    dashboard = json.loads(path.read_text())
    queries = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", text)
        queries.append(match.group(1) if match else text)
    return queries


METRIC_NAME = re.compile(r"\binsync_proxy_[a-z0-9_]+")


def metric_names_in(expr: str) -> set[str]:
    """insync_proxy_* metric names an expression refers to."""
    return set(METRIC_NAME.findall(expr))


def exported_metric_names() -> set[str]:
    """Every sample name ProxyMetrics exports (with _total, _bucket, _sum, _count, _info suffixes)."""
    from insync_proxy.proxy.observability.metrics import ProxyMetrics
    from tests.deploy.sample_metrics import add_sample_traffic

    metrics = ProxyMetrics()
    add_sample_traffic(metrics, random.Random(1))
    return {sample.name for family in metrics.registry.collect() for sample in family.samples}


def exported_metric_families() -> set[str]:
    """Metric family names of ProxyMetrics, as Prometheus shows them (counters with _total)."""
    from insync_proxy.proxy.observability.metrics import ProxyMetrics

    names = set()
    for family in ProxyMetrics().registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "info":
            names.add(family.name + "_info")
        else:
            names.add(family.name)
    return names
