"""produce_partition_records: the audit's lean walk agrees with the full index and the batches' headers."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insync_proxy.protocol import (
    ProtocolError,
    count_records,
    index_produce_request,
    produce_partition_records,
)

from .frames import TOPIC_ID, produce_frame_with_batches

layouts = st.lists(
    st.tuples(st.sampled_from(["orders", "t", "payments-eu"]),
              st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.lists(st.integers(1, 20), max_size=3))),
                       min_size=1, max_size=4)),
    min_size=1, max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from([3, 7, 9, 12, 13]), acks=st.sampled_from([-2, -1, 0, 1, 5]), layout=layouts)
def test_lean_walk_matches_the_index_and_the_batch_counts(
    version: int, acks: int, layout: list[tuple[str, list[tuple[int, list[int] | None]]]]
) -> None:
    frame = produce_frame_with_batches(version, acks, layout)
    got_acks, partitions = produce_partition_records(frame)
    index = index_produce_request(frame)
    assert got_acks == acks == index.acks
    assert [(p[0], p[1], p[2]) for p in partitions] == [
        (s.topic, s.partition, max(s.records_size, 0)) for s in index.partitions()
    ]
    expected_counts = [sum(batches) if batches else 0 for _, parts in layout for _, batches in parts]
    assert [p[3] for p in partitions] == expected_counts
    # the index counts a one-batch set in the walk and any other on demand, to the same numbers
    assert [index.record_count(s) for s in index.partitions()] == expected_counts
    assert all(s.records in (-1, c) for s, c in zip(index.partitions(), expected_counts, strict=True))


def test_topic_ids_are_returned_for_v13() -> None:
    _, partitions = produce_partition_records(produce_frame_with_batches(13, -1, [("ignored", [(0, [2])])]))
    assert partitions == [(TOPIC_ID, 0, partitions[0][2], 2)]


def test_old_message_sets_count_one_per_entry() -> None:
    # Given a magic-1 message set of two entries (offset, size, message)
    message = struct.pack(">iBBq", 0, 1, 0, 0) + struct.pack(">i", -1) + struct.pack(">i", 1) + b"x"
    entry = struct.pack(">qi", 0, len(message)) + message
    data = entry + entry
    assert count_records(data, 0, len(data)) == 2


def test_a_truncated_request_raises_protocol_error() -> None:
    frame = produce_frame_with_batches(9, -1, [("t", [(0, [3])])])
    for cut in (len(frame) - 1, len(frame) // 2, 20):
        with pytest.raises(ProtocolError):
            produce_partition_records(frame[:cut])
