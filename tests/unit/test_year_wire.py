"""The scenario runner's own pieces that need no cluster (harness/kafka_wire.py, harness/min_insync_history.py):
its hand-written Metadata v12 reader agrees with `protocol/` (two implementations of one spec), and the values a
tag 637 may carry after a change."""

from __future__ import annotations

import struct

from harness.kafka_wire import metadata_request, read_metadata_v12
from harness.min_insync_history import allowed_values
from insync_proxy.protocol import encode_response
from insync_proxy.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)


def test_the_hand_written_reader_reads_what_protocol_writes_tag_637_included() -> None:
    # Given a MetadataResponse v12 written by the project's encoder: one topic with tag 637, one without
    response = MetadataResponse(
        brokers=(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9101),
                 MetadataResponseBroker(node_id=2, host="127.0.0.1", port=9102, rack="r2")),
        cluster_id="c", controller_id=1,
        topics=(MetadataResponseTopic(name="orders", min_insync_replicas=2, partitions=(
                    MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=(1, 2), isr_nodes=(1,)),)),
                MetadataResponseTopic(name="plain", error_code=0)),
    )
    payload = b"\x00" + bytes(encode_response(response, 12))  # response header v1: an empty tag buffer first
    # When the runner's reader reads it
    answer = read_metadata_v12(payload)
    # Then it sees the brokers, the ISR and tag 637 exactly where protocol/ put them
    assert answer.brokers == {1: ("127.0.0.1", 9101), 2: ("127.0.0.1", 9102)}
    assert answer.topics["orders"].min_insync == 2 and answer.topics["orders"].partitions == {0: (1, [1])}
    assert answer.topics["plain"].min_insync is None


def test_the_metadata_request_is_a_v12_frame_naming_its_topics() -> None:
    frame = metadata_request(7, ["a", "bc"])
    size, api_key, version, correlation_id = struct.unpack(">ihhi", frame[:12])
    assert (size, api_key, version, correlation_id) == (len(frame) - 4, 3, 12, 7)
    assert b"\x02a\x00" in frame and b"\x03bc\x00" in frame


def test_a_replaced_value_is_right_until_the_lag_after_its_replacement() -> None:
    # Given min.insync.replicas 2 from 60 s, 3 from 75 s (when the brokers showed it)
    history = [(60.0, 2), (75.0, 3)]
    # Then 2 is still right 14 s after the change, no longer 16 s after it; 3 is right from before it was seen
    assert allowed_values(history, 89.0, 15) == {2, 3}
    assert allowed_values(history, 91.0, 15) == {3}
    assert 3 in allowed_values(history, 70.0, 15)
