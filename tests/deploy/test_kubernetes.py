"""Kubernetes manifests (deploy/kubernetes/): schema-valid offline, and consistent with each other and with the
proxy's code (ports, probe paths, variables, the config path and the files it names, drain time).

deploy/kubernetes/ holds what both security modes share (Deployment, Service, ServiceMonitor, PrometheusRule);
sasl-ssl/ and mtls/ each hold one mode's ConfigMap and example Secrets. Every manifest is checked against the
Kubernetes schema (kubernetes-validate, offline, strict). The Prometheus Operator's objects (ServiceMonitor,
PrometheusRule) are custom resources that schema does not know: they get an explicit structural check instead
(apiVersion, kind, name, and the spec fields the Operator requires, with the values' forms).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from insync_proxy.proxy.behaviours.acks import policy_for
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.schema import entries_by
from insync_proxy.proxy.config.settings import ProxyConfig
from insync_proxy.proxy.datapath.budget import memory_limit_bytes
from insync_proxy.proxy.observability.admin import AdminServer
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from tests.deploy.tools import DEPLOY

KUBERNETES = DEPLOY / "kubernetes"
K8S_VERSION = "1.33.0"  # native sidecars (restartPolicy: Always on init containers) need >= 1.29
#: The security modes, one directory each: its ConfigMap and its example Secrets.
MODES = ("sasl-ssl", "mtls")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DURATION = re.compile(r"(\d+(ms|s|m|h|d|w|y))+")

Document = tuple[Path, dict[str, Any]]


def _documents(directory: Path) -> list[Document]:
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def _every_document() -> list[Document]:
    return _documents(KUBERNETES) + [d for mode in MODES for d in _documents(KUBERNETES / mode)]


def _one(kind: str, name: str | None = None, mode: str = "sasl-ssl") -> dict[str, Any]:
    """The one object of that kind (and name) a mode applies: the shared manifests and that mode's."""
    objects = _documents(KUBERNETES) + _documents(KUBERNETES / mode)
    found = [d for _, d in objects if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''} in {mode}, found {len(found)}"
    return found[0]


def _pod() -> dict[str, Any]:
    spec: dict[str, Any] = _one("Deployment")["spec"]["template"]["spec"]
    return spec


def _proxy_container() -> dict[str, Any]:
    pod = _pod()
    containers = pod.get("initContainers", []) + pod["containers"]
    return next(c for c in containers if c["name"] == "insync-proxy")


def _mounts() -> dict[str, dict[str, Any]]:
    """The proxy container's volume mounts by volume name."""
    return {m["name"]: m for m in _proxy_container()["volumeMounts"]}


def _volumes() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in _pod()["volumes"]}


def _config_toml(mode: str) -> str:
    text: str = _one("ConfigMap", "insync-proxy-config", mode)["data"]["config.toml"]
    return text


def test_manifests_have_every_expected_object() -> None:
    """What both modes share, and per mode its ConfigMap and Secrets; no manifest elsewhere goes unchecked."""
    assert sorted(d["kind"] for _, d in _documents(KUBERNETES)) == [
        "Deployment", "PrometheusRule", "Service", "ServiceMonitor"]
    assert sorted((d["kind"], d["metadata"]["name"]) for _, d in _documents(KUBERNETES / "sasl-ssl")) == [
        ("ConfigMap", "insync-proxy-config"), ("Secret", "insync-proxy-sasl"), ("Secret", "insync-proxy-tls")]
    assert sorted((d["kind"], d["metadata"]["name"]) for _, d in _documents(KUBERNETES / "mtls")) == [
        ("ConfigMap", "insync-proxy-config"), ("Secret", "insync-proxy-tls")]
    checked = {path for path, _ in _every_document()}
    assert set(KUBERNETES.rglob("*.y*ml")) == checked, "a manifest outside deploy/kubernetes/{,sasl-ssl,mtls}/"


@pytest.mark.parametrize("path_and_doc", _every_document(),
                         ids=lambda pd: f"{pd[0].relative_to(KUBERNETES)}:{pd[1]['kind']}")
def test_manifest_is_valid_for_kubernetes(path_and_doc: Document) -> None:
    """Core objects: the Kubernetes schema, strict. The Operator's custom resources: a structural check."""
    path, doc = path_and_doc
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        CUSTOM_RESOURCE_CHECKS[doc["kind"]](doc)
        return
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (pip install kubernetes-validate)"
    )
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{path.name} {doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def _check_metadata(doc: dict[str, Any], kind: str) -> None:
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == kind
    assert DNS_LABEL.fullmatch(doc["metadata"]["name"]), doc["metadata"]["name"]
    labels = doc["metadata"].get("labels", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()), labels


def _check_servicemonitor(doc: dict[str, Any]) -> None:
    _check_metadata(doc, "ServiceMonitor")
    spec = doc["spec"]
    assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels", "podTargetLabels"}
    assert spec["selector"]["matchLabels"], "ServiceMonitor selects no Service"
    assert spec["endpoints"], "ServiceMonitor scrapes no endpoint"
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings",
                                 "metricRelabelings", "honorLabels"}
        assert DURATION.fullmatch(endpoint["interval"]) and DURATION.fullmatch(endpoint["scrapeTimeout"])
        for relabel in endpoint.get("relabelings", []):
            assert relabel.get("action", "replace") in ("replace", "keep", "drop", "labelmap", "labeldrop",
                                                        "labelkeep")


def _check_prometheusrule(doc: dict[str, Any]) -> None:
    """spec.groups[] (name, rules[]); each rule an alert or a record with its expr (the Operator's CRD)."""
    _check_metadata(doc, "PrometheusRule")
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
            assert "for" not in rule or DURATION.fullmatch(rule["for"]), rule
            for table in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in rule.get(table, {}).values()), (rule, table)


CUSTOM_RESOURCE_CHECKS = {"ServiceMonitor": _check_servicemonitor, "PrometheusRule": _check_prometheusrule}


def test_the_custom_resource_checks_refuse_what_the_operator_would() -> None:
    """The structural checks are not empty: a rule without expr, or a ServiceMonitor selecting nothing, fail."""
    rule = _one("PrometheusRule")
    broken_rule = {**rule, "spec": {"groups": [{"name": "g", "rules": [{"alert": "A"}]}]}}
    with pytest.raises((AssertionError, KeyError)):
        _check_prometheusrule(broken_rule)
    monitor = _one("ServiceMonitor")
    with pytest.raises((AssertionError, KeyError)):
        _check_servicemonitor({**monitor, "spec": {**monitor["spec"], "selector": {"matchLabels": {}}}})


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
    assert proxy["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
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


def test_configuration_and_secrets_are_mounted_as_whole_volumes_so_edits_reach_the_proxy() -> None:
    """A subPath mount is never updated by the kubelet: a ConfigMap edit or a rotated Secret would reach the
    proxy only with the next pod. The proxy re-reads its config file and secret files by content itself."""
    for name, mount in _mounts().items():
        assert "subPath" not in mount and "subPathExpr" not in mount, name
    volumes = _volumes()
    assert volumes["insync-proxy-config"]["configMap"]["name"] == "insync-proxy-config"
    args = _proxy_container()["args"]
    assert args[:2] == ["run", "--config"]
    directory, _, filename = args[2].rpartition("/")
    assert directory == _mounts()["insync-proxy-config"]["mountPath"]
    assert filename in _one("ConfigMap", "insync-proxy-config")["data"]


def test_placeholders_are_marked_change_me() -> None:
    """Every image is a placeholder on a reserved name (registry.example never resolves), marked CHANGE ME in
    the comment just above it; so are the brokers' addresses and the placeholder Secrets' values."""
    deployment = (KUBERNETES / "deployment.yaml").read_text().splitlines()
    images = [i for i, line in enumerate(deployment) if line.strip().startswith("image:")]
    assert len(images) == 2
    for i in images:
        assert deployment[i].split("image:", 1)[1].strip().startswith("registry.example/"), deployment[i]
        comment = [line for line in deployment[max(0, i - 3):i] if line.strip().startswith("#")]
        assert any("CHANGE ME" in line for line in comment), f"deployment.yaml:{i + 1}: image not marked CHANGE ME"
    for mode in MODES:
        toml = _config_toml(mode).splitlines()
        at = next(i for i, line in enumerate(toml) if line.startswith("bootstrap_servers"))
        assert "CHANGE ME" in toml[at - 1], f"{mode}: bootstrap_servers not marked CHANGE ME"
        for _, doc in _documents(KUBERNETES / mode):
            for key, value in doc.get("stringData", {}).items():
                assert "CHANGE" in value, f"{mode} Secret {doc['metadata']['name']} {key}: an unmarked value"


def test_ports_probe_paths_and_variables_agree_with_the_code() -> None:
    """The container's ports are the configuration's, the probes and the scrape ask for paths the admin port
    serves, and every INSYNC_PROXY_* variable given is one the proxy reads."""
    proxy = _proxy_container()
    ports = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    assert ports["admin"] == ProxyConfig().admin_port == 9190  # also the image's HEALTHCHECK default
    for mode in MODES:
        toml = tomllib.loads(_config_toml(mode))
        assert toml["admin_port"] == ports["admin"] and toml["listener"][0]["bootstrap_port"] == ports["kafka"]
    admin = AdminServer(ProxyMetrics(), lambda: (False, "no broker yet"), "127.0.0.1", 0)
    assert admin._route("GET", "/healthz")[0] == "200 OK"
    assert admin._route("GET", "/readyz")[0] == "503 Service Unavailable"  # not 404: the path exists
    assert admin._route("GET", _one("ServiceMonitor")["spec"]["endpoints"][0]["path"])[0] == "200 OK"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        path = proxy[probe]["httpGet"]["path"]
        assert not admin._route("GET", path)[0].startswith("404"), (probe, path)
    known = entries_by("env")
    given = [e["name"] for e in proxy["env"] if e["name"].startswith("INSYNC_PROXY_")]
    assert given and all(name in known for name in given), [n for n in given if n not in known]


@pytest.mark.parametrize("mode", MODES)
def test_termination_grace_covers_prestop_plus_drain(mode: str) -> None:
    """Given the ConfigMap's drain_timeout_seconds, the pod is not killed before the drain can finish."""
    drain = tomllib.loads(_config_toml(mode))["drain_timeout_seconds"]
    command = _proxy_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    assert _pod()["terminationGracePeriodSeconds"] > pre_stop + drain


#: The settings that name files, and the Secret volume each must come from.
FILE_SETTINGS = {
    ("upstream_tls", "ca_file"): "insync-proxy-tls",
    ("upstream_tls", "cert_file"): "insync-proxy-tls",
    ("upstream_tls", "key_file"): "insync-proxy-tls",
    ("control_sasl", "password_file"): "insync-proxy-sasl",
}


def _files_named(mode: str) -> dict[tuple[str, str], str]:
    toml = tomllib.loads(_config_toml(mode))
    return {(table, key): toml[table][key] for table, key in FILE_SETTINGS if key in toml.get(table, {})}


@pytest.mark.parametrize("mode", MODES)
def test_every_file_the_configuration_names_is_a_key_of_that_modes_secret(mode: str) -> None:
    """Each file setting points into the mount of its Secret's volume, at a key that Secret holds; and each
    Secret holds only keys the configuration uses (no client certificate lying unused in SASL mode)."""
    mounts, volumes, used = _mounts(), _volumes(), set()
    for (table, key), path in _files_named(mode).items():
        volume = FILE_SETTINGS[(table, key)]
        directory, _, filename = path.rpartition("/")
        assert directory == mounts[volume]["mountPath"], f"{mode}: {table}.{key} = {path}"
        secret = _one("Secret", volumes[volume]["secret"]["secretName"], mode)
        assert filename in secret["stringData"], f"{mode}: {table}.{key}: no key {filename} in the Secret"
        used.add((secret["metadata"]["name"], filename))
    held = {(d["metadata"]["name"], key) for _, d in _documents(KUBERNETES / mode) if d["kind"] == "Secret"
            for key in d["stringData"]}
    assert held == used, f"{mode}: Secret keys no setting reads: {sorted(held - used)}"
    toml = tomllib.loads(_config_toml(mode))
    inline = [(t, k) for t, table in toml.items() if isinstance(table, dict) for k in table if k.endswith("password")]
    assert not inline, f"{mode}: a password in the ConfigMap: {inline}"


def test_each_mode_is_one_coherent_security_configuration(tmp_path: Path) -> None:
    """sasl-ssl: TLS with a CA only, and SCRAM for the proxy's own login; mtls: TLS with the proxy's certificate,
    no SASL. Both start with the one Deployment: the SASL Secret's volume is optional (absent in mtls). Apart
    from the brokers' addresses and the security tables the two configurations are the same."""
    sasl, mtls = _configmap_config(tmp_path / "sasl", "sasl-ssl"), _configmap_config(tmp_path / "mtls", "mtls")
    assert sasl.upstream_tls.enabled and sasl.upstream_tls.ca_file
    assert not sasl.upstream_tls.cert_file and not sasl.upstream_tls.key_file
    assert sasl.control_sasl.mechanism == "SCRAM-SHA-512" and sasl.control_sasl.password == "secret"
    assert mtls.upstream_tls.enabled and mtls.upstream_tls.ca_file and mtls.upstream_tls.cert_file
    assert mtls.upstream_tls.key_file and mtls.control_sasl.mechanism is None
    assert _volumes()["insync-proxy-sasl"]["secret"]["optional"] is True
    assert not [e for e in _proxy_container()["env"] if "SASL" in e["name"]], "the password comes from its file"
    same = {"bootstrap_servers": (), "upstream_tls": mtls.upstream_tls, "control_sasl": mtls.control_sasl}
    assert replace(sasl, **same) == replace(mtls, **same)


def _configmap_config(tmp_path: Path, mode: str) -> ProxyConfig:
    """A mode's config.toml loaded as the pod would: every Secret volume's mount stood in by a directory holding
    that Secret's keys (TLS files as placeholders, the password `secret`), nothing from the environment."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    raw = _config_toml(mode)
    volumes = _volumes()
    for name, mount in _mounts().items():
        secret = volumes[name].get("secret")
        if secret is None:
            continue
        directory = tmp_path / name
        directory.mkdir()
        found = [d for _, d in _documents(KUBERNETES / mode)
                 if d["kind"] == "Secret" and d["metadata"]["name"] == secret["secretName"]]
        for key in found[0]["stringData"] if found else ():
            (directory / key).write_text("secret\n" if key == "password" else "placeholder\n")
        raw = raw.replace(mount["mountPath"] + "/", f"{directory}/")
    path = tmp_path / "config.toml"
    path.write_text(raw)
    return load_config(str(path), env={})


@pytest.mark.parametrize("mode", MODES)
def test_the_sidecar_memory_limit_is_the_documented_formula_of_its_budget(tmp_path: Path, mode: str) -> None:
    """limits.memory = 64 MiB (the process) + max_buffered_bytes + 32 MiB (docs/operations.md)."""
    config = _configmap_config(tmp_path, mode)
    limit = _proxy_container()["resources"]["limits"]["memory"]
    assert re.fullmatch(r"\d+Mi", limit), limit
    assert int(limit[:-2]) * 1024 * 1024 == memory_limit_bytes(config.max_buffered_bytes)
    request = _proxy_container()["resources"]["requests"]["memory"]
    assert int(request[:-2]) <= int(limit[:-2])


@pytest.mark.parametrize("mode", MODES)
def test_configmap_config_loads_and_matches_the_mounts(tmp_path: Path, mode: str) -> None:
    """The ConfigMap's config.toml is a valid proxy configuration (Secret files stood in by temp files),
    binds all interfaces, advertises localhost, reloads on its own, and writes audit files into the mounted
    volume."""
    config = _configmap_config(tmp_path, mode)
    assert (config.bind_host, config.admin_host, config.advertised_host) == (
        "0.0.0.0",
        "0.0.0.0",
        "127.0.0.1",
    )
    assert config.upstream_tls.enabled and config.tls_reload_seconds > 0
    assert config.audit.directory == _mounts()["insync-proxy-audit"]["mountPath"]
    producer = _pod()["containers"][0]
    bootstrap = next(e["value"] for e in producer["env"] if e["name"] == "KAFKA_BOOTSTRAP_SERVERS")
    assert bootstrap == f"{config.advertised_host}:{config.listeners[0].bootstrap_port}"


@pytest.mark.parametrize("mode", MODES)
def test_producer_uses_an_acks_value_its_client_accepts_and_gets_acks_minus_two_from_the_proxy(
    tmp_path: Path, mode: str,
) -> None:
    """The Java client refuses acks=-2 at start (so do librdkafka and aiokafka): the example producer
    sends acks=all, and the ConfigMap's acks policy for its topics gives it acks=-2 semantics (the ISR
    precheck for acks=-1: fast_fail; acks=1 raised to -2: acks_floor)."""
    producer = _pod()["containers"][0]
    acks = {e["name"]: e.get("value") for e in producer["env"]}.get("KAFKA_ACKS")
    assert acks in ("all", "-1"), f"KAFKA_ACKS={acks!r}: the Java client accepts all, -1, 0 and 1 only"
    config = _configmap_config(tmp_path, mode)
    policy = policy_for(config.acks_policies, "orders")
    assert policy is not None and policy.fast_fail and policy.acks_floor == -2, policy
