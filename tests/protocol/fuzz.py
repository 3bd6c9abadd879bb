"""Fuzzer: random and mutated frames into every decoder; only ProtocolError may escape.

    python -m tests.protocol.fuzz --iterations 10000000 [--seed N]

The test suite runs it with 100,000 iterations (tests/protocol/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from insync_proxy.protocol.api_keys import ApiKey
from insync_proxy.protocol.errors import ProtocolError
from insync_proxy.protocol.fetch import find_fetch_node_endpoints, rewrite_fetch_node_endpoints
from insync_proxy.protocol.framing import FrameSplitter
from insync_proxy.protocol.headers import decode_request_header, peek_request_header, split_response
from insync_proxy.protocol.messages import (
    MetadataResponseKip637,
    NodeEndpoint,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
    decode_metadata_response_kip637,
    decode_request,
    decode_response,
    encode_metadata_response_kip637,
)
from insync_proxy.protocol.metadata_scan import scan_metadata_response
from insync_proxy.protocol.metadata_splice import enrich_metadata_response, splice_metadata_response
from insync_proxy.protocol.produce import (
    build_forward_request,
    build_produce_error_response,
    index_produce_request,
    read_produce_acks,
    rewrite_produce_node_endpoints,
)
from insync_proxy.protocol.schema import is_flexible_version

from .frames import fetch_response_frame, request_frame, response_frame
from .schema_gen import all_message_versions, random_instance

Target = Callable[[bytes], Any]
_ADDRESSES = {0: ("proxy-0", 19092), 1: ("proxy-1", 19093), 2: ("proxy-2", 19094)}


def _request_targets(api_key: int, version: int) -> list[Target]:
    def decode_body(frame: bytes) -> Any:
        peek = peek_request_header(frame)
        return decode_request(api_key, version, memoryview(frame)[peek.header_size:])

    targets: list[Target] = [peek_request_header, decode_request_header, decode_body]
    if api_key == ApiKey.PRODUCE:
        def produce_paths(frame: bytes) -> Any:
            idx = index_produce_request(frame)
            keep = {p.key for i, p in enumerate(idx.partitions()) if i % 2 == 0}
            build_forward_request(idx, keep, acks=-1)
            return build_produce_error_response(idx, {p.key: 19 for p in idx.partitions()})
        targets += [read_produce_acks, produce_paths]
    return targets


def _response_targets(api_key: int, version: int) -> list[Target]:
    def decode_body(frame: bytes) -> Any:
        _, body = split_response(frame, api_key, version)
        return decode_response(api_key, version, body)

    targets: list[Target] = [decode_body]
    if api_key == ApiKey.METADATA:
        targets.append(lambda f: enrich_metadata_response(
            f, version, min_insync_replicas={"abc": 2}, broker_addresses=_ADDRESSES, leaderless={("abc", 0)}))

        def scan_read_splice(frame: bytes) -> Any:
            scan = scan_metadata_response(frame, version)
            for topic in scan.topics:
                scan.partitions(topic)
            return splice_metadata_response(scan, min_insync_replicas={"abc": 2}, broker_addresses=_ADDRESSES,
                                            leaderless={("abc", 0)}, layout="kip637" if version == 9 else "kafka")
        targets.append(scan_read_splice)
    if api_key == ApiKey.PRODUCE:
        targets.append(lambda f: rewrite_produce_node_endpoints(f, version, _ADDRESSES))
    return targets


def build_corpus(seed: int) -> list[tuple[bytes, list[Target]]]:
    """Valid frames of every message/version, each with the decoders that should accept it."""
    rng = random.Random(seed)
    corpus: list[tuple[bytes, list[Target]]] = []
    for kind, cls, version in all_message_versions():
        flexible = is_flexible_version(cls, version)
        for _ in range(2):
            msg = random_instance(cls, version, flexible, rng)
            if kind == "request":
                corpus.append((request_frame(msg, version), _request_targets(cls.API_KEY, version)))
            else:
                corpus.append((response_frame(msg, version), _response_targets(cls.API_KEY, version)))
    for version in range(0, 14):
        msg = ProduceRequest(transactional_id="tx" if version >= 3 else None, acks=-2, timeout_ms=1000,
                             topic_data=(TopicProduceData(name="abc", topic_id=uuid.UUID(int=7), partition_data=(
                                 PartitionProduceData(index=0, records=b"r" * 64),
                                 PartitionProduceData(index=1, records=None))),))
        corpus.append((request_frame(msg, version), _request_targets(ApiKey.PRODUCE, version)))
    for version in range(12, 19):
        topic: Any = uuid.UUID(int=9) if version >= 13 else "abc"
        frame = fetch_response_frame(version, [(topic, [(0, b"x" * 40), (1, None)])],
                                     [NodeEndpoint(node_id=1, host="b1", port=9092)])
        corpus.append((frame, [lambda f, v=version: rewrite_fetch_node_endpoints(f, v, _ADDRESSES),
                               lambda f, v=version: find_fetch_node_endpoints(f, v)]))
    kip637 = random_instance(MetadataResponseKip637, 9, True, rng)
    corpus.append((encode_metadata_response_kip637(kip637), [decode_metadata_response_kip637]))
    return corpus


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """One random corruption of ``frame``."""
    data = bytearray(frame)
    choice = rng.randrange(7)
    if choice == 0 and data:  # bit flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif choice == 1:  # truncation
        del data[rng.randint(0, len(data)) :]
    elif choice == 2 and len(data) >= 2:  # length-field corruption: int16/int32/varint-sized garbage
        i = rng.randrange(len(data) - 1)
        value = rng.choice([0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, rng.getrandbits(32)])
        width = rng.choice([1, 2, 4])
        data[i : i + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "big")
    elif choice == 3:  # random bytes spliced in
        i = rng.randint(0, len(data))
        data[i:i] = rng.randbytes(rng.randint(1, 8))
    elif choice == 4 and data:  # bytes removed from the middle
        i = rng.randrange(len(data))
        del data[i : i + rng.randint(1, 8)]
    elif choice == 5:  # trailing garbage
        data += rng.randbytes(rng.randint(1, 8))
    else:  # entirely random bytes, sometimes keeping the header
        keep = rng.choice([0, 4, 10, 14])
        data = data[:keep] + bytearray(rng.randbytes(rng.randint(0, 64)))
    return bytes(data)


def _splitter_round(frame: bytes, rng: random.Random) -> None:
    stream = bytearray(struct.pack(">i", len(frame)) + frame) * 2
    if rng.random() < 0.5:
        stream = bytearray(mutate(bytes(stream), rng))
    splitter = FrameSplitter(max_frame_size=4096)
    pos = 0
    while pos < len(stream):
        step = rng.randint(1, 300)
        for f in splitter.feed(bytes(stream[pos : pos + step])):
            try:
                peek_request_header(f)
            except ProtocolError:
                pass
        pos += step


def run(iterations: int, seed: int = 0, report: bool = False) -> int:
    """Fuzz ``iterations`` frames; raise AssertionError on any non-ProtocolError. Returns calls made."""
    rng = random.Random(seed)
    corpus = build_corpus(seed)
    every_target = [t for _, targets in corpus for t in targets]
    calls = 0
    started = time.monotonic()
    for i in range(iterations):
        frame, targets = corpus[rng.randrange(len(corpus))]
        r = rng.random()
        if r < 0.02:
            data = rng.randbytes(rng.randint(0, 48))
            targets = [rng.choice(every_target) for _ in range(3)]
        elif r < 0.04:
            try:
                _splitter_round(frame, rng)
            except ProtocolError:
                pass
            calls += 1
            continue
        else:
            data = mutate(frame, rng)
            if rng.random() < 0.2:
                data = mutate(data, rng)
        for target in targets:
            calls += 1
            try:
                target(data)
            except ProtocolError:
                pass
            except Exception as e:  # noqa: BLE001 - the point is to catch anything else
                raise AssertionError(f"{type(e).__name__} escaped {target!r} at iteration {i} "
                                     f"(seed {seed}) for input {data.hex()}") from e
        if report and i and i % 100_000 == 0:
            print(f"{i} frames, {calls} decoder calls, {time.monotonic() - started:.1f}s", file=sys.stderr)
    return calls


def main() -> None:
    """CLI: ``python -m tests.protocol.fuzz --iterations N --seed S``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    started = time.monotonic()
    calls = run(args.iterations, args.seed, report=True)
    print(f"ok: {args.iterations} frames, {calls} decoder calls, seed {args.seed}, "
          f"{time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
