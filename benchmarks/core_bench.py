"""In-process CPU per Produce exchange through the sans-IO ConnectionCore and the proxy's behaviours (not a test).

No sockets, no Kafka, no event loop: one 16 KiB Produce request (16 records of 1 KiB, one partition) and its
answer go through `ConnectionCore` with the behaviours the proxy registers, the exchange observer and real
metrics, many times over; the figure is this thread's CPU time per exchange (the minimum of five runs, warm
caches). It isolates the Python work per request from the kernel and the event loop, which the end-to-end
benchmarks (`proxy_bench.py`, `peers_bench.py`) include; in the running proxy the same code costs about twice
as much (cold caches after each trip through the kernel).

    python benchmarks/core_bench.py                    # Produce v9, v11, v12 and v13
    python benchmarks/core_bench.py --versions 12 --exchanges 50000
"""

from __future__ import annotations

import argparse
import gc
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.connection_core import LISTENER  # noqa: E402
from harness.produce_frames import SentProduce, broker_response  # noqa: E402
from harness.sidecar import BELOW_MIN, HEALTHY, ORDERS, TOPIC_IDS, Sidecar  # noqa: E402
from insync_proxy.protocol import ApiKey, ProduceRequest, RequestHeader, encode_request, encode_request_header  # noqa: E402
from insync_proxy.protocol.messages import PartitionProduceData, TopicProduceData  # noqa: E402
from insync_proxy.protocol.records import encode_record_batch  # noqa: E402
from insync_proxy.proxy.behaviours.addresses import AddressRewrite  # noqa: E402
from insync_proxy.proxy.behaviours.api_versions import ApiVersionsNegotiation  # noqa: E402
from insync_proxy.proxy.behaviours.config_changes import TopicConfigWatcher  # noqa: E402
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher  # noqa: E402
from insync_proxy.proxy.behaviours.order import in_order  # noqa: E402
from insync_proxy.proxy.datapath.core import CloseReason, ConnectionCore  # noqa: E402
from insync_proxy.proxy.datapath.exchange import BehaviourBase, BehaviourRegistry, Exchange, Frame  # noqa: E402
from insync_proxy.proxy.datapath.observer import ExchangeObserver  # noqa: E402

RECORDS, RECORD_SIZE = 16, 1000


class _NullIO:
    """Writes go nowhere; anything else would be a bug in the benchmark."""

    def write_client(self, data: list[Frame]) -> None:
        return None

    def write_upstream(self, data: list[Frame]) -> None:
        return None

    def run_async(self, exchange: Exchange, result: object) -> None:
        raise AssertionError("nothing here should wait")

    def close(self, reason: CloseReason) -> None:
        raise AssertionError(f"the core closed the connection: {reason}")


def _request(version: int, correlation_id: int, acks: int = -1) -> bytes:
    batch = encode_record_batch([bytes(RECORD_SIZE)] * RECORDS)
    data = (PartitionProduceData(index=0, records=batch),)
    topic = (TopicProduceData(topic_id=TOPIC_IDS[ORDERS], partition_data=data) if version >= 13
             else TopicProduceData(name=ORDERS, partition_data=data))
    body = encode_request(ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1500, topic_data=(topic,)), version)
    header = encode_request_header(RequestHeader(
        request_api_key=ApiKey.PRODUCE, request_api_version=version, correlation_id=correlation_id,
        client_id="producer-1"))
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def measure(version: int, variant: str, exchanges: int) -> float:
    """Microseconds of this thread's CPU per exchange (the minimum of five runs)."""
    answered = variant == ANSWERED
    side = Sidecar(audit_on=variant in ("every behaviour, audit on", ANSWERED))
    side.isr(orders=[BELOW_MIN if answered else HEALTHY])
    side.min_insync_replicas(2)
    context = side.context
    behaviours: list[BehaviourBase]
    if variant == "core only":
        behaviours = []
    elif variant == "+ address rewrite":
        behaviours = [AddressRewrite()]
    elif variant == PRODUCE_ONLY:
        behaviours = side.behaviours
    else:  # as the proxy registers them, in its one order (proxy/behaviours/order.py)
        behaviours = in_order([ApiVersionsNegotiation(), MetadataEnricher(context), AddressRewrite(),
                               TopicConfigWatcher(context), *side.behaviours])
    core = ConnectionCore(BehaviourRegistry(behaviours), LISTENER, _NullIO(), max_frame_bytes=1 << 24,
                          observer=ExchangeObserver(side.metrics))
    requests = [_request(version, i, -2 if answered else -1) for i in range(64)]
    responses = [broker_response(SentProduce(version, i, -1, [(ORDERS, 0)]), TOPIC_IDS) for i in range(64)]

    def run(n: int) -> float:
        started = time.thread_time_ns()
        if answered:  # nothing goes upstream: the proxy answers NOT_ENOUGH_REPLICAS itself
            for i in range(n):
                core.receive_client_data(requests[i & 63])
        else:
            for i in range(n):
                core.receive_client_data(requests[i & 63])
                core.receive_upstream_data(responses[i & 63])
        return (time.thread_time_ns() - started) / n / 1000

    # No garbage collection while measuring: an exchange leaves no garbage for it (every object it builds is freed by
    # its reference count), and when a collection falls into a run depends on the setup's objects, not on the
    # exchange (it moved the instruction count by several thousand per exchange either way).
    gc.collect()
    gc.disable()
    try:
        run(min(exchanges, 2000))
        return min(run(exchanges) for _ in range(5))
    finally:
        gc.enable()


ANSWERED = "acks=-2 answered NOT_ENOUGH_REPLICAS, audit on"
#: The four Produce behaviours (topic ids, acks decision, accounting, ISR learning), without the address rewrite.
PRODUCE_ONLY = "+ the Produce behaviours (audit off)"
VARIANTS = ("core only", "+ address rewrite", PRODUCE_ONLY, "every behaviour, audit off",
            "every behaviour, audit on", ANSWERED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--versions", default="9,11,12,13", help="Produce versions (default 9,11,12,13)")
    parser.add_argument("--exchanges", type=int, default=20000, help="exchanges per run (default 20000)")
    args = parser.parse_args(argv)
    versions = [int(v) for v in args.versions.split(",") if v.strip()]
    rows = [[name, *(f"{measure(v, name, args.exchanges):.1f}" for v in versions)] for name in VARIANTS]
    header = ["us of CPU per 16 KiB Produce exchange", *(f"v{v}" for v in versions)]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
