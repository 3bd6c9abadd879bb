"""The same acceptance on the testcontainers backend (apache/kafka image), where a Docker engine exists."""

from __future__ import annotations

import uuid

import pytest

from insync_proxy.devcluster.cluster import ClusterSettings
from insync_proxy.devcluster.containers import ContainerKafkaCluster, docker_unavailable_reason
from tests.integration.shrinking_isr import exercise_acks_all_with_shrinking_isr

pytestmark = pytest.mark.needs_kafka

_REASON = docker_unavailable_reason()


@pytest.mark.skipif(_REASON is not None, reason=f"testcontainers backend: {_REASON}")
def test_acks_all_with_shrinking_isr_on_the_apache_kafka_image() -> None:
    cluster = ContainerKafkaCluster(ClusterSettings())
    cluster.start()
    try:
        exercise_acks_all_with_shrinking_isr(cluster, f"tc-{uuid.uuid4().hex[:8]}")
    finally:
        cluster.stop()
