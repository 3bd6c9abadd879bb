"""benchmarks/proxy_bench.py's own clients, exercised against a scripted broker (a full run needs a cluster)."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import proxy_bench as bench
from harness.scripted_broker import Received, ScriptedBroker
from insync_proxy.devcluster.probe import ClusterInfo, PartitionInfo, TopicInfo
from insync_proxy.protocol import CreateTopicsRequest, CreateTopicsResponse, ProduceRequest, ProduceResponse
from insync_proxy.protocol.messages import (
    CreatableTopicResult,
    PartitionProduceResponse,
    TopicProduceResponse,
)
from insync_proxy.protocol.schema import Message


def broker_answering(error_code: int) -> Callable[[Received], Message]:
    def answer(request: Received) -> Message:
        decoded = request.decoded()
        if isinstance(decoded, CreateTopicsRequest):
            return CreateTopicsResponse(topics=tuple(CreatableTopicResult(name=t.name) for t in decoded.topics))
        assert isinstance(decoded, ProduceRequest)
        return ProduceResponse(responses=tuple(
            TopicProduceResponse(name=t.name, partition_responses=tuple(
                PartitionProduceResponse(index=p.index, error_code=error_code) for p in t.partition_data))
            for t in decoded.topic_data))
    return answer


def test_round_trips_patch_correlation_ids_and_check_answers() -> None:
    frame = bench.produce_frame("t", 0, bench.batch(b"x" * 100), 3)
    seen: list[list[int]] = []
    with ScriptedBroker(broker_answering(21)) as broker:
        timings = bench.round_trips(broker.port, frame, 5, lambda r: seen.append(bench.produce_errors(r)))
    assert len(timings) == 5 and seen == [[21]] * 4
    assert [r.header.correlation_id for r in broker.received] == [1, 2, 3, 4, 5]
    assert all(r.decoded().acks == 3 for r in broker.received)  # type: ignore[attr-defined]


def test_produce_load_pipelines_a_window_per_partition() -> None:
    with ScriptedBroker(broker_answering(0)) as broker:
        result = bench.produce_load(broker.port, "t", [0, 1], -2, 0.3, 3, 2)
    assert result["requests"] >= 6 and result["error_responses"] == 0
    assert {r.decoded().topic_data[0].partition_data[0].index for r in broker.received} == {0, 1}  # type: ignore[attr-defined]


def test_create_topics_batches_names_into_create_topics_requests() -> None:
    names = [f"s-{i}" for i in range(5)]

    class FakeCluster:
        def __init__(self, port: int) -> None:
            self.broker_addresses = [("127.0.0.1", port)]

        def metadata(self, topics: list[str]) -> ClusterInfo:
            return ClusterInfo({}, 1, {t: TopicInfo(t, 0, {0: PartitionInfo(0, 0, 1, [1], [1])}) for t in topics})

        def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
            assert condition(), what

    with ScriptedBroker(broker_answering(0)) as broker:
        bench.create_topics(FakeCluster(broker.port), names, chunk=2)
    requests = [r.decoded() for r in broker.received]
    assert [[t.name for t in r.topics] for r in requests] == [names[0:2], names[2:4], names[4:]]  # type: ignore[attr-defined]
    assert {r.header.request_api_version for r in broker.received} == {7}
