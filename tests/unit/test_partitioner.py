"""KIP-637's ready-partition rule and the Java-compatible hash for keyed records."""

from __future__ import annotations

import os

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from insync_proxy.client.partitioner import (
    MinInsyncMetadata,
    PartitionInfo,
    ReadyPartitioner,
    TopicInfo,
    murmur2,
    require_min_insync_acks,
)


def test_murmur2_matches_the_java_clients_hash_as_kafka_python_implements_it() -> None:
    for n in range(200):
        key = os.urandom(n % 37)
        assert murmur2(key) & 0x7FFFFFFF == kafka_python_murmur2(key) & 0x7FFFFFFF


def test_only_acks_all_and_minus_two_require_min_insync() -> None:
    assert [require_min_insync_acks(a) for a in ("all", -1, -2, 0, 1, "1")] == [True, True, True, False, False, False]


def _view() -> MinInsyncMetadata:
    view = MinInsyncMetadata("127.0.0.1:1", max_age_seconds=1e9)
    info = TopicInfo("t", 2, {
        0: PartitionInfo(0, 1, (1, 2, 3), (1,)),        # below min ISR 2
        1: PartitionInfo(1, 2, (1, 2, 3), (2, 3)),
        2: PartitionInfo(2, -1, (1, 2, 3), (1, 2, 3)),   # no leader
        3: PartitionInfo(3, 3, (3,), (3,)),             # one replica: effective min ISR is 1
    })
    view.topics["t"] = info
    view._fetched_at["t"] = 1e18
    return view


def test_ready_partitions_follow_kip637() -> None:
    view = _view()
    assert view.ready_partitions("t", "all") == [1, 3]
    assert view.ready_partitions("t", 1) == [0, 1, 3]


def test_keyless_records_go_to_ready_partitions_and_keyed_records_keep_their_hash() -> None:
    partitioner = ReadyPartitioner(_view(), "t", "all")
    assert {partitioner(None, [0, 1, 2, 3], [0, 1, 3]) for _ in range(100)} == {1, 3}
    key = b"order-42"
    assert partitioner(key, [0, 1, 2, 3], [0, 1, 3]) == (murmur2(key) & 0x7FFFFFFF) % 4


def test_kafka_python_3_asks_the_partitioner_through_its_partition_method() -> None:
    # Given kafka-python 3's view of the topic (it calls partition(topic, serialized_key, cluster) on a partitioner
    # that is no kafka.partitioner.Partitioner)
    class Cluster:
        def partitions_for_topic(self, topic: str) -> set[int]:
            return {0, 1, 2, 3}

        def available_partitions_for_topic(self, topic: str) -> set[int]:
            return {0, 1, 3}

    partitioner = ReadyPartitioner(_view(), "t", "all")
    # Then keyless records go to the ready partitions and keyed ones keep their hash
    assert {partitioner.partition("t", None, Cluster()) for _ in range(100)} == {1, 3}
    assert partitioner.partition("t", b"order-42", Cluster()) == (murmur2(b"order-42") & 0x7FFFFFFF) % 4


def test_refresh_reads_the_proxys_enriched_metadata() -> None:
    from harness.scripted_broker import Received, ScriptedBroker
    from insync_proxy.protocol import MetadataRequest, MetadataResponse
    from insync_proxy.protocol.messages import MetadataResponsePartition, MetadataResponseTopic

    def proxy(request: Received) -> MetadataResponse:
        decoded = request.decoded()
        assert isinstance(decoded, MetadataRequest) and not decoded.allow_auto_topic_creation
        return MetadataResponse(topics=(MetadataResponseTopic(name="t", min_insync_replicas=2, partitions=(
            MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=(1, 2, 3), isr_nodes=(1,)),
            MetadataResponsePartition(partition_index=1, leader_id=2, replica_nodes=(1, 2, 3), isr_nodes=(2, 3)),
        )),))

    # Given a proxy that answers Metadata v12 with min.insync.replicas in tag 637
    with ScriptedBroker(proxy) as broker:
        view = MinInsyncMetadata(broker.address)
        # Then only partition 1 is ready for acks=all, both for acks=1
        assert view.ready_partitions("t", "all") == [1]
        assert view.ready_partitions("t", 1) == [0, 1]
    assert broker.received[0].header.request_api_version == 13  # the highest both speak


def test_an_unreachable_proxy_keeps_the_last_view() -> None:
    view = _view()
    view._fetched_at["t"] = 0.0  # stale: the next read refreshes, and 127.0.0.1:1 refuses
    assert view.ready_partitions("t", "all") == [1, 3]
