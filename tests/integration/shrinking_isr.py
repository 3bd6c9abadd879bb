"""acks=all against a shrinking ISR on a real cluster, directly: the exercise the dev cluster's test and the
testcontainers backend's both run (tests/integration/test_dev_cluster.py, test_testcontainers_backend.py)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Producer

from insync_proxy.devcluster.cluster import LocalKafkaCluster
from tests.helpers import consume_values

#: Delivery errors after which a record may or may not be in the log: the broker's REQUEST_TIMED_OUT, and
#: the client's own message and request timeouts.
OUTCOME_UNKNOWN = frozenset({KafkaError.REQUEST_TIMED_OUT, KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT})


def produce_batch(producer: Producer, topic: str, values: list[bytes], timeout: float = 60.0) -> dict[bytes, Any]:
    """Produce values; return value -> delivery error (None when acknowledged)."""
    results: dict[bytes, Any] = {}

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        results[msg.value()] = err

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    producer.flush(timeout)
    assert len(results) == len(values), f"only {len(results)} of {len(values)} delivery reports"
    return results


def exercise_acks_all_with_shrinking_isr(cluster: LocalKafkaCluster, topic: str) -> None:
    # Given a replication-factor-3 topic with min.insync.replicas=2
    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = cluster.wait_for_leader(topic, 0)
    followers = [b for b in cluster.brokers if b != leader]
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5})
    acknowledged: list[bytes] = []

    first = produce_batch(producer, topic, [f"full-{i}".encode() for i in range(50)])
    assert all(err is None for err in first.values()), first
    acknowledged += first

    paused: list[int] = []
    try:
        # When one follower is paused, the ISR shrinks to 2 and acks=all still succeeds
        cluster.pause_broker(followers[0])
        paused.append(followers[0])
        cluster.wait_for_isr(topic, 0, 2)
        second = produce_batch(producer, topic, [f"isr2-{i}".encode() for i in range(50)])
        assert all(err is None for err in second.values()), second
        acknowledged += second

        # When a second follower is paused, the ISR is 1 < 2: the broker answers NOT_ENOUGH_REPLICAS
        cluster.pause_broker(followers[1])
        paused.append(followers[1])
        cluster.wait_for_isr(topic, 0, 1)
        strict = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "retries": 0,
                "enable.idempotence": False,
                "message.timeout.ms": 30000,
            }
        )
        # The leader's Metadata may show the shrink a moment before the leader acts on it (its AlterPartition
        # answer still pending, seen under load): a write then is appended and times out waiting for the
        # paused follower (outcome unknown, as Kafka says) instead of being refused. Such records may or may
        # not be in the log; the next attempt is refused.
        maybe: set[bytes] = set()
        refused: dict[bytes, Any] = {}
        for attempt in range(5):
            third = produce_batch(strict, topic, [f"isr1-{attempt}-{i}".encode() for i in range(5)])
            unknown = {v for v, err in third.items() if err is not None and err.code() in OUTCOME_UNKNOWN}
            maybe |= unknown
            refused = {v: err for v, err in third.items() if v not in unknown}
            if refused:
                break
        codes = {err.code() if err else None for err in refused.values()}
        assert codes == {KafkaError.NOT_ENOUGH_REPLICAS}, (codes, f"{len(maybe)} timed out")
    finally:
        for node_id in paused:
            cluster.resume_broker(node_id)

    # Then resuming both brings the ISR back to 3, and a consumer reads exactly the acknowledged records
    # (and, once at most, any whose write timed out)
    cluster.wait_for_isr(topic, 0, 3)
    # (drained a little longer: nothing beyond the acknowledged records may be there)
    consumed = consume_values({"bootstrap.servers": cluster.bootstrap_servers}, topic, len(acknowledged), drain_polls=4)
    assert sorted(v for v in consumed if v not in maybe) == sorted(acknowledged)
    assert len(consumed) == len(set(consumed))
