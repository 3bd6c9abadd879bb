"""Benchmarks of the protocol hot paths (not a test): ``python benchmarks/protocol_bench.py``.

Prints one table row per measurement with its goal.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from insync_proxy.protocol.framing import FrameSplitter, encode_frame  # noqa: E402
from insync_proxy.protocol.headers import (  # noqa: E402
    RequestHeader,
    encode_request_header,
    encode_response_with_header,
    split_response,
)
from insync_proxy.protocol.messages import (  # noqa: E402
    Kip637MetadataResponseTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponseKip637,
    MetadataResponsePartition,
    MetadataResponseTopic,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
    decode_response,
    encode_metadata_response_kip637,
    encode_request,
    encode_response,
)
from insync_proxy.protocol.metadata_scan import scan_metadata_response  # noqa: E402
from insync_proxy.protocol.metadata_splice import (  # noqa: E402
    enrich_metadata_response,
    splice_metadata_response,
)
from insync_proxy.protocol.produce import (  # noqa: E402
    build_forward_request_chunks,
    index_produce_request,
    patch_produce_acks,
    produce_acks_offset,
    read_produce_acks,
)


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best wall time of ``repeat`` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def produce_frame(size: int = 16 * 1024, version: int = 11) -> bytearray:
    """A Produce request of about ``size`` bytes (one partition, opaque records)."""
    req = ProduceRequest(transactional_id="txn-1", acks=-2, timeout_ms=30000, topic_data=(
        TopicProduceData(name="orders", partition_data=(PartitionProduceData(index=0, records=b"\x00" * size),)),))
    header = RequestHeader(request_api_key=0, request_api_version=version, correlation_id=1, client_id="producer-1")
    return bytearray(encode_request_header(header) + encode_request(req, version))


def metadata_frame(topics: int = 100, partitions: int = 100, version: int = 12) -> bytes:
    """A MetadataResponse of topics x partitions, 3 replicas each, as a frame payload."""
    brokers = tuple(MetadataResponseBroker(node_id=i, host=f"broker-{i}.kafka.svc", port=9092, rack=f"r{i}")
                    for i in range(3))
    msg = MetadataResponse(brokers=brokers, cluster_id="cluster-1", controller_id=0, topics=tuple(
        MetadataResponseTopic(name=f"topic-{t:03d}", topic_id=uuid.UUID(int=t + 1), partitions=tuple(
            MetadataResponsePartition(partition_index=p, leader_id=p % 3, leader_epoch=7,
                                      replica_nodes=(p % 3, (p + 1) % 3, (p + 2) % 3),
                                      isr_nodes=(p % 3, (p + 1) % 3, (p + 2) % 3))
            for p in range(partitions))) for t in range(topics)))
    return encode_response_with_header(3, version, 1, encode_response(msg, version))


def main() -> None:
    rows: list[tuple[str, str, str]] = []

    # 1. acks read + patch on a 16 KiB Produce request.
    frame = produce_frame()
    n = 200_000

    def acks_loop() -> None:
        for _ in range(n):
            offset = produce_acks_offset(frame)
            if read_produce_acks(frame) == -2:
                pass
            patch_produce_acks(frame, offset, -2)

    def acks_fast_loop() -> None:
        for _ in range(n):
            patch_produce_acks(frame, produce_acks_offset(frame), -1)

    t = best_of(acks_loop, 3)
    rows.append(("Produce acks read + patch, 16 KiB v11 request (offset, read, patch)", f"{n / t:,.0f} frames/s",
                 ">= 200,000/s"))
    t = best_of(acks_fast_loop, 3)
    rows.append(("Produce acks offset + patch only", f"{n / t:,.0f} frames/s", ">= 200,000/s"))

    # 1b. index + forward split of the same request.
    m = 50_000

    def index_loop() -> None:
        for _ in range(m):
            idx = index_produce_request(frame)
            build_forward_request_chunks(idx, {("orders", 0)}, acks=-1)

    t = best_of(index_loop, 3)
    rows.append(("Produce index + forward chunks, 16 KiB v11 request", f"{m / t:,.0f} frames/s", "-"))

    # 2. Metadata v12, 100 topics x 100 partitions: splice tag 637 on every topic + broker rewrite.
    meta = metadata_frame()
    min_isr: dict[str | uuid.UUID, int] = {f"topic-{i:03d}": 2 for i in range(100)}
    addresses = {i: (f"proxy-{i}.local", 19092 + i) for i in range(3)}
    t = best_of(lambda: enrich_metadata_response(meta, 12, min_insync_replicas=min_isr,
                                                 broker_addresses=addresses), 10)
    rows.append((f"Metadata v12 100x100x3 ({len(meta) / 1024:.0f} KiB): splice tag 637 + broker rewrite",
                 f"{t * 1000:.2f} ms", "<= 20 ms"))
    leaderless = {(f"topic-{i:03d}", p) for i in range(0, 100, 10) for p in range(0, 100, 10)}
    t = best_of(lambda: enrich_metadata_response(meta, 12, min_insync_replicas=min_isr,
                                                 broker_addresses=addresses, leaderless=leaderless), 10)
    rows.append(("  same + 100 partitions presented leaderless", f"{t * 1000:.2f} ms", "<= 20 ms"))

    # 2b. One scan serving every room: brokers and topic heads, then the splice and/or the partitions.
    t_splice = best_of(lambda: enrich_metadata_response(meta, 12, min_insync_replicas=min_isr,
                                                       broker_addresses=addresses), 10)
    t = best_of(lambda: scan_metadata_response(meta, 12), 10)
    rows.append(("Metadata v12 100x100x3: scan (brokers, topic heads, offsets; 10,000 partitions skipped)",
                 f"{t * 1000:.2f} ms ({t / t_splice:.2f}x splice)", "<= splice"))
    scanned = scan_metadata_response(meta, 12)
    t_only = best_of(lambda: splice_metadata_response(scanned, min_insync_replicas=min_isr,
                                                      broker_addresses=addresses), 10)

    def scan_splice() -> None:
        scan = scan_metadata_response(meta, 12)
        splice_metadata_response(scan, min_insync_replicas=min_isr, broker_addresses=addresses)

    t = best_of(scan_splice, 10)
    rows.append(("  scan + splice from the scan (tag 637 + broker rewrite)",
                 f"{t * 1000:.2f} ms (splice part {t_only * 1000:.3f} ms)", "<= 20 ms"))

    def scan_isr() -> None:
        scan = scan_metadata_response(meta, 12)
        for topic in scan.topics:
            scan.partitions(topic)

    t_isr = best_of(scan_isr, 10)
    rows.append(("  scan + every partition's leader/replicas/ISR read",
                 f"{t_isr * 1000:.2f} ms ({t_isr / t_splice:.1f}x splice)", "<< full decode"))

    def scan_isr_splice() -> None:
        scan = scan_metadata_response(meta, 12)
        for topic in scan.topics:
            scan.partitions(topic)
        splice_metadata_response(scan, min_insync_replicas=min_isr, broker_addresses=addresses,
                                 leaderless=leaderless)

    t = best_of(scan_isr_splice, 10)
    rows.append(("  scan + every ISR read + splice with 100 leaderless", f"{t * 1000:.2f} ms", "<= 20 ms"))
    wide = metadata_frame(topics=1000, partitions=1)

    def scan_wide() -> None:
        scan = scan_metadata_response(wide, 12)
        for topic in scan.topics:
            scan.partitions(topic)

    t = best_of(scan_wide, 10)
    t_dec = best_of(lambda: decode_response(3, 12, split_response(wide, 3, 12)[1]), 3)
    rows.append(("Metadata v12 1,000 topics x 1 partition: scan + every partition read",
                 f"{t * 1000:.2f} ms (full decode {t_dec * 1000:.1f} ms)", "<< full decode"))
    meta9 = metadata_frame(version=9)

    def scan_kip637() -> None:
        splice_metadata_response(scan_metadata_response(meta9, 9), min_insync_replicas=min_isr,
                                 broker_addresses=addresses, layout="kip637")

    t = best_of(scan_kip637, 10)

    def decode_kip637() -> None:
        spliced = enrich_metadata_response(meta9, 9, min_insync_replicas=min_isr, broker_addresses=addresses)
        correlation_id, body = split_response(spliced, 3, 9)
        msg = decode_response(3, 9, body)
        assert isinstance(msg, MetadataResponse)
        kip637 = MetadataResponseKip637(
            throttle_time_ms=msg.throttle_time_ms, brokers=msg.brokers, cluster_id=msg.cluster_id,
            controller_id=msg.controller_id, cluster_authorized_operations=msg.cluster_authorized_operations,
            topics=tuple(Kip637MetadataResponseTopic(
                error_code=t.error_code, name=t.name or "", is_internal=t.is_internal, partitions=t.partitions,
                topic_authorized_operations=t.topic_authorized_operations, min_insync_replicas=t.min_insync_replicas)
                for t in msg.topics))
        encode_response_with_header(3, 10, correlation_id, encode_metadata_response_kip637(kip637))

    t_old = best_of(decode_kip637, 3)
    rows.append(("Metadata v9 100x100x3: scan + splice as KIP-637's layout",
                 f"{t * 1000:.2f} ms (was {t_old * 1000:.0f} ms)", "<= 20 ms"))

    def generic() -> None:
        _, body = split_response(meta, 3, 12)
        msg = decode_response(3, 12, body)
        encode_response(msg, 12)

    t_dec = best_of(lambda: decode_response(3, 12, split_response(meta, 3, 12)[1]), 3)
    t = best_of(generic, 3)
    rows.append(("Metadata v12 100x100x3: full generic decode + encode (comparison)",
                 f"{t * 1000:.1f} ms (decode {t_dec * 1000:.1f} ms)", "-"))

    # 3. Frame splitter: 16 KiB frames fed in 64 KiB chunks.
    payload = bytes(16 * 1024)  # 16 KiB + 4-byte prefix: frames straddle chunk boundaries
    stream = encode_frame(payload) * 4096  # ~64 MiB
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def split() -> None:
        splitter = FrameSplitter()
        count = 0
        for c in chunks:
            count += len(splitter.feed(c))
        assert count == 4096

    t = best_of(split, 5)
    rows.append(("FrameSplitter, 16 KiB frames in 64 KiB chunks", f"{len(stream) / t / 1e6:,.0f} MB/s",
                 ">> 1,000 MB/s"))

    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{width}}  {'result':>28}  goal")
    print("-" * (width + 45))
    for name, result, goal in rows:
        print(f"{name:<{width}}  {result:>28}  {goal}")
    print(f"\nPython {sys.version.split()[0]} on {sys.platform}")


if __name__ == "__main__":
    main()
