"""A real Prometheus scrapes the real proxy in front of the real cluster after known traffic."""

from __future__ import annotations

from typing import Any

from harness.proxy_process import ProxyProcess
from harness.raw_client import RawKafkaClient, batch
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from tests.deploy.conftest import PrometheusFactory
from tests.deploy.tools import (
    STARTING_ERRORS,
    dashboard_targets,
    prometheus_query,
    render_grafana_variables,
)

PRODUCE_REQUESTS = 25


def _value(answer: dict[str, Any]) -> float:
    result = answer.get("data", {}).get("result", [])
    return sum(float(r["value"][1]) for r in result)


def test_prometheus_scrapes_the_running_proxy_and_finds_the_traffic(
    prometheus_server: PrometheusFactory, proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    # Given known traffic through the proxy: 25 acks=-2 requests to one partition
    kafka_cluster.create_topic(topic_name, 1, 3)
    leader = kafka_cluster.wait_for_leader(topic_name, 0)
    with RawKafkaClient(f"127.0.0.1:{proxy.broker_port(leader)}") as client:
        codes = [client.produce({(topic_name, 0): batch(b"x" * 100)}, acks=-2)[(topic_name, 0)].error_code
                 for _ in range(PRODUCE_REQUESTS)]
    assert codes.count(0) >= PRODUCE_REQUESTS - 2  # a brand-new leader may answer NOT_LEADER once or twice
    # When a real Prometheus scrapes the proxy's admin port
    url = prometheus_server([f"127.0.0.1:{proxy.admin_port}"])
    decisions = f'insync_proxy_produce_partitions_total{{topic="{topic_name}",acks_requested="-2",acks_sent="-1"}}'
    # Then it finds the series, with the values the traffic implies
    got = wait_until(lambda: _value(prometheus_query(url, decisions)) or None, timeout=30, what="the decisions series",
                     retry_on=STARTING_ERRORS)
    assert got == PRODUCE_REQUESTS
    assert _value(prometheus_query(url, 'up{job="insync-proxy"}')) == 1
    assert _value(prometheus_query(url, 'insync_proxy_requests_total{api="Produce"}')) >= PRODUCE_REQUESTS
    assert _value(prometheus_query(url, 'insync_proxy_upstream_up')) == 1
    assert _value(prometheus_query(url, 'insync_proxy_client_connections_total')) >= 1
    p99 = _value(prometheus_query(url, 'histogram_quantile(0.99, sum by (le) '
                                       '(insync_proxy_request_latency_seconds_bucket{api="Produce"}))'))
    assert 0 < p99 < 30
    # And every dashboard expression evaluates without error against the real proxy's series
    failures = []
    for target in dashboard_targets():
        answer = prometheus_query(url, render_grafana_variables(target.expr))
        if answer.get("status") != "success":
            failures.append(f"{target}: {answer.get('error')}")
    assert not failures, "\n".join(failures)
