"""In-process CPU per all-topics Metadata exchange through the connection core and MetadataEnricher (not a test).

No sockets, no Kafka: a Metadata v12 answer of N topics x 2 partitions (every topic's min.insync.replicas
cached) goes through `ConnectionCore` with the proxy's `MetadataEnricher` on an asyncio loop, the behaviour's
`pause` being the proxy's own (the loop's next turn). Two cases: the broker sends the same answer again (the
kept splice: compare, check the values fresh, renumber) or a changed one (an ISR differs every other answer:
scan, lookup and splice in slices). Printed: this thread's CPU per answer (best of 3 runs) and the longest
the event loop was held by one piece of an answer (median and worst over the answers of a run; a
full garbage collection inside a piece is the worst). The start's objects are frozen out of the collector, as
the proxy does once started. Build with
`./scripts/compile` first to measure the compiled data path, as the proxy runs it.

    python benchmarks/metadata_bench.py                 # 3,000 and 10,000 topics
    python benchmarks/metadata_bench.py --topics 3000 --answers 100
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.proxy_bench import table  # noqa: E402
from harness.metadata_slices import Pauses, all_topics_request, answer, core_for  # noqa: E402
from insync_proxy.proxy.datapath.exchange import Exchange, Frame  # noqa: E402
from insync_proxy.proxy.observability.compiled import compiled_modules  # noqa: E402


class _HoldsTimed(Pauses):
    """The proxy's own pause, timing the CPU spent between two pauses (how long the loop was held)."""

    def __init__(self) -> None:
        super().__init__(loop=True)
        self.since = time.process_time()
        self.longest = 0.0

    def mark(self) -> None:
        now = time.process_time()
        self.longest = max(self.longest, now - self.since)
        self.since = now

    async def __call__(self) -> None:
        self.mark()
        await super().__call__()
        self.since = time.process_time()


class _IO:
    def __init__(self) -> None:
        self.pending: list[tuple[Exchange, object]] = []

    def write_client(self, data: list[Frame]) -> None:
        pass

    def write_upstream(self, data: list[Frame]) -> None:
        pass

    def run_async(self, exchange: Exchange, result: object) -> None:
        self.pending.append((exchange, result))

    def close(self, reason: object) -> None:
        raise RuntimeError(f"the core closed the connection: {reason}")


def run(topics: int, answers: int, changed: bool) -> tuple[float, list[float]]:
    """(CPU seconds per answer, the longest hold of the loop of each answer)."""
    pauses = _HoldsTimed()
    io = _IO()
    core, _, _, _ = core_for(topics, pauses, io=io)
    frames = [answer(topics), answer(topics, isr=(1, 2))]
    holds: list[float] = []

    async def main() -> float:
        for i in range(-1 if changed else -2, answers):  # "the same again": the first answer is kept, not timed
            if i == 0:
                started = time.process_time()
                holds.clear()
            frame = frames[i % 2] if changed else frames[0]
            pauses.longest, pauses.since = 0.0, time.process_time()
            core.receive_client_data(all_topics_request(7))  # the answers carry correlation id 7
            core.receive_upstream_data(frame)
            while io.pending:
                exchange, awaitable = io.pending.pop()
                core.async_done(exchange, await awaitable)  # type: ignore[misc]
            pauses.mark()
            holds.append(pauses.longest)
        return (time.process_time() - started) / answers

    return asyncio.run(main()), holds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--topics", default="3000,10000", help="topics per answer (default 3000,10000)")
    parser.add_argument("--answers", type=int, default=40, help="answers per run (default 40)")
    args = parser.parse_args(argv)
    gc.collect()
    gc.freeze()  # as the proxy does once started (insync_proxy/cli.py `serve`)
    print(f"data path: {'compiled, ' + str(len(compiled_modules())) + ' modules' if compiled_modules() else 'interpreted'}")
    rows: list[list[object]] = []
    for topics in (int(t) for t in args.topics.split(",") if t.strip()):
        for changed in (False, True):
            results = [run(topics, args.answers, changed) for _ in range(3)]
            cpu = min(r[0] for r in results)
            holds = [h for r in results for h in r[1]]
            rows.append([f"{topics:,}", "changed" if changed else "the same again", round(cpu * 1e3, 2),
                         round(cpu * 1e6 / topics, 2), round(statistics.median(holds) * 1e3, 2),
                         round(max(holds) * 1e3, 2)])
    table("All-topics Metadata v12 through the connection core and MetadataEnricher, in process",
          ["topics", "answer", "CPU ms per answer", "us per topic", "loop held ms, median", "worst"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
