"""The real cluster behaves like Kafka: acks=all against a shrinking ISR, directly (no proxy yet)."""

from __future__ import annotations

import pytest

from insync_proxy.devcluster.cluster import LocalKafkaCluster
from tests.integration.shrinking_isr import (
    exercise_acks_all_with_shrinking_isr,
)


def test_acks_all_fails_with_not_enough_replicas_only_below_min_isr(
    kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    exercise_acks_all_with_shrinking_isr(kafka_cluster, topic_name)


@pytest.mark.kafka39
def test_acks_all_fails_with_not_enough_replicas_only_below_min_isr_on_kafka_39(
    kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    assert kafka_cluster.version.startswith("3.9.")
    exercise_acks_all_with_shrinking_isr(kafka_cluster, topic_name)


def test_killed_broker_restarts_and_rejoins_the_isr(kafka_cluster: LocalKafkaCluster, topic_name: str) -> None:
    # Given a healthy RF-3 topic
    kafka_cluster.create_topic(topic_name, 1, 3)
    leader = kafka_cluster.wait_for_leader(topic_name, 0)
    victim = next(b for b in kafka_cluster.brokers if b != leader)
    # When a follower is killed, the ISR drops to 2; when it starts again, the ISR is 3 again
    kafka_cluster.kill_broker(victim)
    kafka_cluster.wait_for_isr(topic_name, 0, 2)
    kafka_cluster.start_broker(victim)
    kafka_cluster.wait_for_isr(topic_name, 0, 3)
