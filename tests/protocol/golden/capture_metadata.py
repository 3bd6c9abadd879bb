"""Capture real brokers' Metadata answers into this folder (not a test; needs Java and Kafka's jars).

    python -m tests.protocol.golden.capture_metadata [--version 3.9.2] [--version 4.3.1]

For each Kafka version: a 3-broker dev cluster, a few topics (replication factor 3 and 1, one
auto-created internal topic), then every Metadata version the broker supports is asked for all
topics, for a missing topic, and again after one broker died (shrunk ISRs, offline replicas,
leaderless partitions). Each answer is stored as ``Metadata-v<version>-<n>.response.bin`` (frame
payload: response header + body), next to its request (``.request.bin``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from insync_proxy.client.blocking_client import BlockingKafkaClient, request_frame
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster
from insync_proxy.protocol import (
    ApiKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    encode_request,
)
from insync_proxy.protocol.messages import MetadataRequestTopic

HERE = Path(__file__).parent


def _exchange(address: tuple[str, int], api_key: int, version: int, body: bytes, correlation_id: int) -> tuple[bytes, bytes]:
    """One request on a fresh connection: (request frame, response frame), size prefixes stripped."""
    frame = request_frame(api_key, version, body, client_id="golden-capture", correlation_id=correlation_id)
    with BlockingKafkaClient(*address, timeout=30) as client:
        client.send_bytes(frame)
        return bytes(frame[4:]), client.receive_frame()


def _metadata_request(version: int, topics: list[str] | None) -> bytes:
    if topics is None and version == 0:
        topics = []  # v0: an empty list means every topic
    request = MetadataRequest(
        topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=8 <= version <= 10,
        include_topic_authorized_operations=version >= 8,
    )
    return encode_request(request, version)


def capture(kafka_version: str, versions: range, counter: list[int]) -> None:
    settings = ClusterSettings(version=kafka_version, brokers=3, extra_broker_config={"broker.rack": "rack-a"})
    with LocalKafkaCluster(settings) as cluster:
        cluster.start()
        cluster.create_topic("golden-rf3", 3, 3)
        cluster.create_topic("golden-rf1", 3, 1)
        address = cluster.broker_addresses[0]
        # FindCoordinator creates __consumer_offsets (is_internal); retried until it exists.
        for _ in range(60):
            with BlockingKafkaClient(*address, timeout=30) as client:
                found = client.request(FindCoordinatorRequest(key="golden"), 1, FindCoordinatorResponse)
            if found.error_code == 0:
                break
            time.sleep(1)

        def ask(label: str, topics: list[str] | None, only: list[int] | None = None) -> None:
            for version in versions:
                if only is not None and version not in only:
                    continue
                counter[0] += 1
                request, response = _exchange(address, ApiKey.METADATA, version,
                                              _metadata_request(version, topics), counter[0])
                stem = HERE / f"Metadata-v{version}-{counter[0]}"
                stem.with_suffix(".request.bin").write_bytes(request)
                stem.with_suffix(".response.bin").write_bytes(response)
                print(f"{kafka_version} {label}: v{version} -> {len(response)} bytes")

        ask("all topics", None)
        ask("missing topic", ["golden-missing", "golden-rf3"], only=[1, 9, versions[-1]])
        cluster.kill_broker(3)
        cluster.wait_for_isr("golden-rf3", 0, 2)
        ask("broker 3 dead", None, only=[1, 5, 7, 9, 10, 12, versions[-1]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--version", action="append", help="Kafka version (repeatable)")
    args = parser.parse_args()
    counter = [0]
    for kafka_version in args.version or ["3.9.2", "4.3.1"]:
        versions = range(0, 13) if kafka_version.startswith("3.") else range(4, 14)
        capture(kafka_version, versions, counter)


if __name__ == "__main__":
    main()
