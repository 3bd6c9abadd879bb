"""deploy/compose.yaml (no Docker engine here): the expected services, consistent ports and ids,
and every file it mounts or builds from exists."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.tools import DASHBOARD, DEPLOY

COMPOSE = DEPLOY / "compose.yaml"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def _services() -> dict[str, Any]:
    services: dict[str, Any] = _compose()["services"]
    return services


def test_compose_has_controller_three_brokers_proxy_prometheus_grafana() -> None:
    assert {"controller", *BROKERS, "insync-proxy", "prometheus", "grafana"} <= set(_services())


def test_kraft_cluster_is_consistent() -> None:
    services = _services()
    controller = services["controller"]["environment"]
    assert controller["KAFKA_PROCESS_ROLES"] == "controller"
    voters = controller["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert voters == f"{controller['KAFKA_NODE_ID']}@controller:9093"
    cluster_id = controller["CLUSTER_ID"]
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, "CLUSTER_ID must be a base64 UUID"
    node_ids = set()
    for name in BROKERS:
        env = services[name]["environment"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker" and env["CLUSTER_ID"] == cluster_id
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == voters
        assert f"CLIENT://{name}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert services[name]["image"].startswith("apache/kafka:")
        node_ids.add(int(env["KAFKA_NODE_ID"]))
    assert len(node_ids) == len(BROKERS) and int(controller["KAFKA_NODE_ID"]) not in node_ids


def test_proxy_is_built_from_the_dockerfile_and_publishes_a_port_per_broker() -> None:
    services = _services()
    proxy = services["insync-proxy"]
    context = (COMPOSE.parent / proxy["build"]["context"]).resolve()
    assert (context / proxy["build"]["dockerfile"]).is_file()
    assert proxy["environment"]["INSYNC_PROXY_BOOTSTRAP_SERVERS"].split(",") == [f"{b}:9092" for b in BROKERS]
    published: set[int] = set()
    for mapping in proxy["ports"]:
        container = mapping.split(":")[-1]
        low, _, high = container.partition("-")
        published |= set(range(int(low), int(high or low) + 1))
    node_ids = {int(services[b]["environment"]["KAFKA_NODE_ID"]) for b in BROKERS}
    assert {9092, 9190} | {9100 + n for n in node_ids} <= published
    assert int(proxy["stop_grace_period"].rstrip("s")) > 30, "must exceed drain_timeout_seconds"


def _bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    mounts = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts.append(((COMPOSE.parent / source).resolve(), target))
    return mounts


def test_every_mounted_file_exists() -> None:
    for name, service in _services().items():
        for source, _target in _bind_mounts(service):
            assert source.exists(), f"{name}: mounts {source}, which does not exist"


def test_prometheus_loads_the_rules_and_scrapes_the_proxy_service() -> None:
    prometheus = _services()["prometheus"]
    targets = {target: source for source, target in _bind_mounts(prometheus)}
    config = yaml.safe_load(targets["/etc/prometheus/prometheus.yml"].read_text())
    for rule_file in config["rule_files"]:
        assert f"/etc/prometheus/{rule_file}" in targets, f"rule file {rule_file} is not mounted"
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "insync-proxy")
    assert job["static_configs"][0]["targets"] == ["insync-proxy:9190"]


def test_grafana_provisions_the_prometheus_datasource_and_the_dashboard() -> None:
    grafana = _services()["grafana"]
    targets = {target: source for source, target in _bind_mounts(grafana)}
    datasources = yaml.safe_load(
        (targets["/etc/grafana/provisioning/datasources"] / "prometheus.yaml").read_text()
    )["datasources"]
    assert datasources[0]["url"] == "http://prometheus:9090" and datasources[0]["isDefault"]
    providers = yaml.safe_load(
        (targets["/etc/grafana/provisioning/dashboards"] / "insync-proxy.yaml").read_text()
    )["providers"]
    dashboard_dir = providers[0]["options"]["path"]
    mounted = [t for t, s in targets.items() if s == DASHBOARD.resolve()]
    assert mounted and mounted[0].startswith(dashboard_dir + "/")
    assert json.loads(DASHBOARD.read_text())["uid"] == "insync-proxy"
