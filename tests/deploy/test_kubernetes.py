"""Kubernetes manifests (deploy/kubernetes/): schema-valid offline, and consistent with each other
and with the proxy's configuration (ports, probes, drain time, mounted files).

The Prometheus Operator's objects (ServiceMonitor, PrometheusRule) are custom resources the Kubernetes schema
does not know: they get an explicit structural check instead (apiVersion, kind, name, required spec fields)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from insync_proxy.proxy.behaviours.acks import policy_for
from insync_proxy.proxy.budget import memory_limit_bytes
from insync_proxy.proxy.config import ProxyConfig
from insync_proxy.proxy.config_loader import load_config
from tests.deploy.tools import DEPLOY

KUBERNETES = DEPLOY / "kubernetes"
K8S_VERSION = "1.33.0"  # native sidecars (restartPolicy: Always on init containers) need >= 1.29


def _documents() -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        docs += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for _, d in _documents() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _proxy_container() -> dict[str, Any]:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    containers = pod.get("initContainers", []) + pod["containers"]
    return next(c for c in containers if c["name"] == "insync-proxy")


def _config_toml() -> str:
    text: str = _one("ConfigMap", "insync-proxy-config")["data"]["config.toml"]
    return text


def test_manifests_have_every_expected_object() -> None:
    kinds = sorted(d["kind"] for _, d in _documents())
    assert kinds == ["ConfigMap", "Deployment", "PrometheusRule", "Secret", "Secret", "Service", "ServiceMonitor"]


@pytest.mark.parametrize("path_and_doc", _documents(), ids=lambda pd: f"{pd[0].name}:{pd[1]['kind']}")
def test_manifest_is_valid_for_kubernetes(path_and_doc: tuple[Path, dict[str, Any]]) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (pip install kubernetes-validate)"
    )
    path, doc = path_and_doc
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        # a CRD: not in the core schema, checked structurally instead
        {"ServiceMonitor": _check_servicemonitor, "PrometheusRule": _check_prometheusrule}[doc["kind"]](doc)
        return
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{path.name} {doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def _check_servicemonitor(doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "ServiceMonitor"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    spec = doc["spec"]
    assert set(spec) <= {
        "selector",
        "namespaceSelector",
        "endpoints",
        "jobLabel",
        "targetLabels",
        "podTargetLabels",
    }
    assert spec["selector"]["matchLabels"], "ServiceMonitor selects no Service"
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {
            "port",
            "path",
            "interval",
            "scrapeTimeout",
            "scheme",
            "relabelings",
            "metricRelabelings",
            "honorLabels",
        }
        assert re.fullmatch(r"\d+[smh]", endpoint["interval"]) and re.fullmatch(
            r"\d+[smh]", endpoint["scrapeTimeout"]
        )
        for relabel in endpoint.get("relabelings", []):
            assert relabel.get("action", "replace") in (
                "replace",
                "keep",
                "drop",
                "labelmap",
                "labeldrop",
                "labelkeep",
            )


def _check_prometheusrule(doc: dict[str, Any]) -> None:
    """spec.groups[] (name, rules[]); each rule an alert or a record with its expr (the Operator's CRD)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    assert set(doc["spec"]) == {"groups"}
    groups = doc["spec"]["groups"]
    assert groups and len({g["name"] for g in groups}) == len(groups), "groups need distinct names"
    for group in groups:
        assert set(group) <= {"name", "interval", "rules", "partial_response_strategy", "limit"}, group["name"]
        assert isinstance(group["name"], str) and group["rules"], group["name"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert ("alert" in rule) != ("record" in rule), rule
            assert isinstance(rule["expr"], (str, int)) and str(rule["expr"]).strip(), rule
            assert "for" not in rule or re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", rule["for"]), rule
            for table in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in rule.get(table, {}).values()), (rule, table)


def test_service_monitor_scrapes_the_admin_port_of_the_service_as_job_insync_proxy() -> None:
    service, monitor = _one("Service"), _one("ServiceMonitor")
    for key, value in monitor["spec"]["selector"]["matchLabels"].items():
        assert service["metadata"]["labels"].get(key) == value, (
            "the ServiceMonitor does not select the Service"
        )
    port_names = {p["name"] for p in service["spec"]["ports"]}
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] in port_names and endpoint["path"] == "/metrics"
    assert {"targetLabel": "job", "replacement": "insync-proxy"}.items() <= endpoint["relabelings"][0].items()
    pod_labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items(), "the Service selects no pod"
    admin = next(p for p in _proxy_container()["ports"] if p["name"] == "admin")
    assert (
        next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])["targetPort"]
        == admin["name"]
    )


def test_sidecar_probes_resources_and_security() -> None:
    proxy = _proxy_container()
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert proxy["args"] == ["run", "--config", "/etc/insync-proxy/config.toml"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(proxy["resources"][kind])
    security = proxy["securityContext"]
    assert (
        security["runAsNonRoot"]
        and security["readOnlyRootFilesystem"]
        and not security["allowPrivilegeEscalation"]
    )
    assert security["runAsUser"] == 10001  # the image's user (Dockerfile)
    assert {p["containerPort"] for p in proxy["ports"]} == {9092, 9190}


def test_termination_grace_covers_prestop_plus_drain() -> None:
    """Given the ConfigMap's drain_timeout_seconds, the pod is not killed before the drain can finish."""
    pod = _one("Deployment")["spec"]["template"]["spec"]
    drain = tomllib.loads(_config_toml())["drain_timeout_seconds"]
    command = _proxy_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain


def test_sasl_password_and_tls_files_come_from_the_example_secrets() -> None:
    proxy = _proxy_container()
    env = {e["name"]: e for e in proxy["env"]}
    ref = env["INSYNC_PROXY_CONTROL_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    secret = _one("Secret", ref["name"])
    assert ref["key"] in secret["stringData"]
    assert "password" not in _config_toml(), "the password must not be in the ConfigMap"
    volumes = {v["name"]: v for v in _one("Deployment")["spec"]["template"]["spec"]["volumes"]}
    tls_secret = _one("Secret", volumes["insync-proxy-tls"]["secret"]["secretName"])
    mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
    tls = tomllib.loads(_config_toml())["upstream_tls"]
    for attr in ("ca_file", "cert_file", "key_file"):
        directory, _, filename = tls[attr].rpartition("/")
        assert directory == mounts["insync-proxy-tls"] and filename in tls_secret["stringData"], attr


def _configmap_config(tmp_path: Path) -> ProxyConfig:
    """The ConfigMap's config.toml loaded (TLS files stood in by temp files, the password from the env)."""
    raw = _config_toml()
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text("placeholder\n")
    path = tmp_path / "config.toml"
    path.write_text(raw.replace("/etc/insync-proxy/tls/", f"{tmp_path}/"))
    return load_config(str(path), env={"INSYNC_PROXY_CONTROL_SASL_PASSWORD": "secret"})


def test_the_sidecar_memory_limit_is_the_documented_formula_of_its_budget(tmp_path: Path) -> None:
    """limits.memory = 64 MiB (the process) + max_buffered_bytes + 32 MiB (docs/operations.md)."""
    config = _configmap_config(tmp_path)
    limit = _proxy_container()["resources"]["limits"]["memory"]
    assert re.fullmatch(r"\d+Mi", limit), limit
    assert int(limit[:-2]) * 1024 * 1024 == memory_limit_bytes(config.max_buffered_bytes)
    request = _proxy_container()["resources"]["requests"]["memory"]
    assert int(request[:-2]) <= int(limit[:-2])


def test_configmap_config_loads_and_matches_the_mounts(tmp_path: Path) -> None:
    """The ConfigMap's config.toml is a valid proxy configuration (TLS files stood in by temp files),
    binds all interfaces, advertises localhost, and writes audit files into the mounted volume."""
    config = _configmap_config(tmp_path)
    assert (config.bind_host, config.admin_host, config.advertised_host) == (
        "0.0.0.0",
        "0.0.0.0",
        "127.0.0.1",
    )
    assert config.control_sasl.password == "secret" and config.upstream_tls.enabled
    mounts = {m["name"]: m["mountPath"] for m in _proxy_container()["volumeMounts"]}
    assert config.audit.directory == mounts["insync-proxy-audit"]
    producer = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    bootstrap = next(e["value"] for e in producer["env"] if e["name"] == "KAFKA_BOOTSTRAP_SERVERS")
    assert bootstrap == f"{config.advertised_host}:{config.listeners[0].bootstrap_port}"


def test_producer_uses_an_acks_value_its_client_accepts_and_gets_acks_minus_two_from_the_proxy(
    tmp_path: Path,
) -> None:
    """The Java client refuses acks=-2 at start (so do librdkafka and aiokafka): the example producer
    sends acks=all, and the ConfigMap's acks policy for its topics gives it acks=-2 semantics (the ISR
    precheck for acks=-1: fast_fail; acks=1 raised to -2: acks_floor)."""
    producer = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    acks = {e["name"]: e.get("value") for e in producer["env"]}.get("KAFKA_ACKS")
    assert acks in ("all", "-1"), f"KAFKA_ACKS={acks!r}: the Java client accepts all, -1, 0 and 1 only"
    config = _configmap_config(tmp_path)
    policy = policy_for(config.acks_policies, "orders")
    assert policy is not None and policy.fast_fail and policy.acks_floor == -2, policy
