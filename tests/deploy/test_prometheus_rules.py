"""Alert rules (deploy/prometheus/alerts.yml): promtool checks, unit tests, and a real Prometheus run; the
Prometheus Operator's copy (deploy/kubernetes/prometheusrule.yaml) is what make-prometheusrule makes of them.

Without promtool (Debian's `prometheus` package; ./scripts/test installs it) the promtool tests skip, saying so."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from harness.waiting import wait_until
from tests.deploy.tools import (
    ALERTS,
    DEPLOY,
    REPO,
    STARTING_ERRORS,
    exported_metric_names,
    find_tool,
    http_get_json,
    metric_names_in,
)

PROMETHEUS_DIR = DEPLOY / "prometheus"
OPERATIONS = REPO / "docs" / "operations.md"
REQUIRED_ANNOTATIONS = ("summary", "description", "runbook", "runbook_url")


def _promtool() -> str:
    path, reason = find_tool("promtool")
    if path is None:
        pytest.skip(reason)
    return path


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=PROMETHEUS_DIR)


def _alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def test_promtool_check_rules_accepts_alerts() -> None:
    result = _run([_promtool(), "check", "rules", str(ALERTS)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_of_alerts_pass() -> None:
    result = _run([_promtool(), "test", "rules", str(PROMETHEUS_DIR / "alerts_test.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_config_accepts_example_prometheus_yml() -> None:
    result = _run([_promtool(), "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_severity_and_runbook_annotations_linked_to_operations_doc() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in _alert_rules():
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in ("critical", "warning", "info"), name
        missing = [a for a in REQUIRED_ANNOTATIONS if not rule.get("annotations", {}).get(a)]
        assert not missing, f"{name}: missing annotations {missing}"
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"{name}: runbook_url anchor #{anchor} has no heading in docs/operations.md"


SET_RUNBOOK_URL = PROMETHEUS_DIR / "set-runbook-url"
RUNBOOK_URL_LINE = re.compile(r'runbook_url:\s*"([^"]*)"')


def test_every_runbook_url_is_absolute_and_points_at_one_document() -> None:
    """Alertmanager links runbook_url only when it is absolute; set-runbook-url changes them all at once."""
    urls = [rule["annotations"]["runbook_url"] for rule in _alert_rules()]
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        assert parts.scheme == "https" and parts.netloc and parts.fragment, f"runbook_url {url!r} is not absolute"
    documents = {url.split("#", 1)[0] for url in urls}
    assert len(documents) == 1 and next(iter(documents)).endswith("/docs/operations.md"), documents
    expected = {url for url in RUNBOOK_URL_LINE.findall((PROMETHEUS_DIR / "alerts_test.yml").read_text())}
    assert expected <= set(urls), f"alerts_test.yml expects other runbook URLs: {sorted(expected - set(urls))}"


def _script(path: Path) -> ModuleType:
    """One of deploy/prometheus's scripts (files without .py) as a module, to call its functions."""
    loader = importlib.machinery.SourceFileLoader(path.name.replace("-", "_"), str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


OTHER_DOCUMENT = "https://git.example.com/platform/insync-proxy/blob/main/docs/operations.md"


def _rewritten_copies(tmp_path: Path) -> list[Path]:
    """Copies of alerts.yml, alerts_test.yml and prometheusrule.yaml in `tmp_path`, after set-runbook-url
    pointed them at OTHER_DOCUMENT."""
    copies = [tmp_path / "alerts.yml", tmp_path / "alerts_test.yml", tmp_path / "prometheusrule.yaml"]
    for source, copy in zip((ALERTS, PROMETHEUS_DIR / "alerts_test.yml", PROMETHEUS_RULE), copies, strict=True):
        shutil.copy(source, copy)
    result = subprocess.run([sys.executable, str(SET_RUNBOOK_URL), OTHER_DOCUMENT, *map(str, copies)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return copies


def test_set_runbook_url_rewrites_the_rules_their_unit_tests_and_the_prometheusrule(tmp_path: Path) -> None:
    """Given copies of alerts.yml, alerts_test.yml and prometheusrule.yaml, when set-runbook-url points them at
    another document, then every runbook_url there is that document with its anchor kept, the PrometheusRule is
    still what make-prometheusrule makes of the rules; a relative or fragment URL is refused with exit 2. By
    default it rewrites those three files."""
    before = RUNBOOK_URL_LINE.findall(ALERTS.read_text())
    alerts, alerts_test, prometheus_rule = _rewritten_copies(tmp_path)
    after = RUNBOOK_URL_LINE.findall(alerts.read_text())
    assert after == [OTHER_DOCUMENT + "#" + url.split("#", 1)[1] for url in before]
    assert all(u.startswith(OTHER_DOCUMENT + "#") for u in RUNBOOK_URL_LINE.findall(alerts_test.read_text()))
    assert prometheus_rule.read_text() == _script(MAKE_PROMETHEUS_RULE).prometheus_rule(alerts.read_text())
    for source, copy in ((ALERTS, alerts), (PROMETHEUS_DIR / "alerts_test.yml", alerts_test)):
        # Only the runbook_url lines change: blank lines and the final newline stay
        old_lines, new_lines = source.read_text().split("\n"), copy.read_text().split("\n")
        assert len(old_lines) == len(new_lines), copy.name
        assert [a for a in old_lines if "runbook_url:" not in a] == [b for b in new_lines if "runbook_url:" not in b]
    for bad in ("docs/operations.md", "https://docs.example.com/ops.md#x"):
        refused = subprocess.run([sys.executable, str(SET_RUNBOOK_URL), bad, str(alerts)],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "absolute" in refused.stderr, refused.stderr
    assert _script(SET_RUNBOOK_URL).DEFAULT_FILES == (ALERTS, PROMETHEUS_DIR / "alerts_test.yml", PROMETHEUS_RULE)


def test_the_rewritten_unit_tests_still_pass(tmp_path: Path) -> None:
    promtool = _promtool()
    _rewritten_copies(tmp_path)
    tested = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


MAKE_PROMETHEUS_RULE = PROMETHEUS_DIR / "make-prometheusrule"
PROMETHEUS_RULE = DEPLOY / "kubernetes" / "prometheusrule.yaml"


def test_the_committed_prometheusrule_is_what_make_prometheusrule_writes() -> None:
    """Regenerating changes nothing: the committed file is the script's output for today's alerts.yml (run
    `deploy/prometheus/make-prometheusrule` after editing alerts.yml), and its spec is alerts.yml's rules."""
    made = _script(MAKE_PROMETHEUS_RULE).prometheus_rule(ALERTS.read_text())
    assert PROMETHEUS_RULE.read_text() == made, "stale: run deploy/prometheus/make-prometheusrule"
    checked = subprocess.run([sys.executable, str(MAKE_PROMETHEUS_RULE), "--check"], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())


def test_make_prometheusrule_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    """--check is exit 1 when alerts.yml changed and the PrometheusRule was not made again (a copied tree)."""
    prometheus, kubernetes = tmp_path / "prometheus", tmp_path / "kubernetes"
    prometheus.mkdir()
    kubernetes.mkdir()
    for name in ("make-prometheusrule", "alerts.yml"):
        shutil.copy(PROMETHEUS_DIR / name, prometheus / name)
    shutil.copy(PROMETHEUS_RULE, kubernetes / PROMETHEUS_RULE.name)
    script = [sys.executable, str(prometheus / "make-prometheusrule")]
    assert subprocess.run([*script, "--check"], capture_output=True, timeout=60).returncode == 0
    alerts = prometheus / "alerts.yml"
    alerts.write_text(alerts.read_text().replace("for: 2m", "for: 3m", 1))
    stale = subprocess.run([*script, "--check"], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "stale" in stale.stderr, stale.stderr
    assert subprocess.run(script, capture_output=True, timeout=60).returncode == 0
    assert "for: 3m" in (kubernetes / PROMETHEUS_RULE.name).read_text()
    assert subprocess.run([*script, "--check"], capture_output=True, timeout=60).returncode == 0


def test_promtool_check_rules_accepts_the_prometheusrule_spec(tmp_path: Path) -> None:
    spec = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]
    rule_file = tmp_path / "prometheusrule-spec.yml"
    rule_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _run([_promtool(), "check", "rules", str(rule_file)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len([r for g in spec['groups'] for r in g['rules']])} rules found" in result.stdout, \
        result.stdout


def test_alerts_use_only_metrics_the_proxy_exports() -> None:
    exported = exported_metric_names()
    for rule in _alert_rules():
        unknown = metric_names_in(rule["expr"]) - exported
        assert not unknown, f"{rule['alert']}: {sorted(unknown)} not in proxy/observability/metrics.py"


def test_every_alert_has_a_firing_unit_test() -> None:
    tests = yaml.safe_load((PROMETHEUS_DIR / "alerts_test.yml").read_text())["tests"]
    fired = {case["alertname"] for t in tests for case in t["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for t in tests for case in t["alert_rule_test"] if not case["exp_alerts"]}
    names = {rule["alert"] for rule in _alert_rules()}
    assert names - fired == set(), f"alerts never expected to fire in alerts_test.yml: {names - fired}"
    assert names - quiet == set(), f"alerts never expected to stay quiet in alerts_test.yml: {names - quiet}"


def test_alert_rules_evaluate_healthy_in_a_real_prometheus(sample_prometheus: str) -> None:
    """Given Prometheus scraping ProxyMetrics with alerts.yml loaded, every rule evaluates without error."""
    url = sample_prometheus

    def evaluated_rules() -> list[dict[str, Any]] | None:
        groups = http_get_json(f"{url}/api/v1/rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        done = rules and all(not rule["lastEvaluation"].startswith("0001-") for rule in rules)
        return rules if done else None

    rules = wait_until(evaluated_rules, timeout=30, what="every alert rule to be evaluated once",
                       retry_on=STARTING_ERRORS)
    assert {rule["name"] for rule in rules} == {rule["alert"] for rule in _alert_rules()}
    unhealthy = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
    assert not unhealthy, unhealthy
