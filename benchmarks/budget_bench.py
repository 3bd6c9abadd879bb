"""Slow consumers against the memory budget (issue #29 item 3; not a test).

    python benchmarks/budget_bench.py [--connections 200] [--fetches 8] [--max-mib 8] [--hold 30]
                                      [--budget-mib 64] [--no-read]

Starts a 1-broker Kafka (devcluster/) and the real proxy (harness/proxy_process.ProxyProcess, no debug checks),
fills a one-partition topic with a little more than `--max-mib` MiB, then opens `--connections` raw
connections to the proxy that each pipeline `--fetches` Fetches of `--max-mib` MiB from offset 0 and read
nothing for `--hold` seconds, while a producer beside them makes acks=1 round trips on a connection of its
own. Reported: the proxy's RSS growth (its peak, VmHWM, less its RSS before), the budget's gauges, the
producer's round trips before and during, the proxy's CPU while the consumers are held; then every answer is
read whole (each compared with one read at once) and the proxy's CPU per MiB of that read. `--budget-mib`
sets max_buffered_bytes (default: the proxy's default, 64 MiB; 0: 2 GiB, i.e. no budget, as before it).
A JSON summary goes to bench-results/budget-bench-<UTC timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.shared import cpu_seconds, say  # noqa: E402
from harness.proxy_process import ProxyProcess  # noqa: E402
from harness.slow_consumers import (  # noqa: E402
    MIB,
    SlowConsumers,
    fill,
    memory_kib,
    p50,
    produce_round_trips,
    reference_answer,
)
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster  # noqa: E402
from insync_proxy.proxy.datapath.budget import DEFAULT_MAX_BUFFERED_BYTES  # noqa: E402

TOPIC = "budget-bench"
PRODUCED = "budget-bench-beside"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--fetches", type=int, default=8, help="pipelined Fetches per connection")
    parser.add_argument("--max-mib", type=int, default=8, help="max bytes of each Fetch, MiB")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds the consumers read nothing")
    parser.add_argument("--budget-mib", type=int, help="max_buffered_bytes in MiB (0: 2 GiB, no budget)")
    parser.add_argument("--no-read", action="store_true", help="close the consumers instead of reading all")
    parser.add_argument("--output", type=Path, default=ROOT / "bench-results")
    args = parser.parse_args(argv)
    budget = DEFAULT_MAX_BUFFERED_BYTES if args.budget_mib is None else (args.budget_mib or 2048) * MIB
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result: dict[str, Any] = {"started_utc": stamp, "args": {k: str(v) for k, v in vars(args).items()},
                              "budget_bytes": budget, "loadavg_at_start": os.getloadavg()}
    cluster = LocalKafkaCluster(ClusterSettings(brokers=1))
    proxy: ProxyProcess | None = None
    consumers: SlowConsumers | None = None
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1, 1)
        cluster.create_topic(PRODUCED, 1, 1)
        broker = cluster.bootstrap_servers.split(",")[0]
        say(f"filling {TOPIC} with {args.max_mib + 0.5} MiB ...")
        fill(broker, TOPIC, args.max_mib + 0.5)
        toml = "" if args.budget_mib is None else f"max_buffered_bytes = {budget}\n"
        proxy = ProxyProcess(cluster, extra_toml=toml, groups=("default",), debug_checks=False,
                             metadata_refresh_seconds=10, audit_interval_seconds=10).start()
        port = proxy.broker_port(1)
        producer = f"127.0.0.1:{port}"
        expected = reference_answer("127.0.0.1", port, TOPIC, args.max_mib * MIB)
        result["answer_bytes"] = len(expected)
        normal = produce_round_trips(producer, PRODUCED, 100)
        rss_before = memory_kib(proxy.pid)["VmRSS"]
        say(f"{args.connections} slow consumers x {args.fetches} Fetches of {len(expected) / MIB:.1f} MiB, "
            f"held {args.hold:.0f}s; budget {budget / MIB:.0f} MiB")
        consumers = SlowConsumers("127.0.0.1", port, TOPIC, args.connections, args.fetches,
                                  args.max_mib * MIB).open()
        held_from = time.monotonic()
        cpu0 = cpu_seconds(proxy.pid)
        during: list[float] = []
        while time.monotonic() - held_from < args.hold:
            during += produce_round_trips(producer, PRODUCED, 20)
            time.sleep(0.5)  # a producer at a steady pace beside the consumers, not a wait for a condition
        held_seconds = time.monotonic() - held_from
        result.update(
            held_seconds=held_seconds,
            proxy_cpu_ms_per_s_while_held=(cpu_seconds(proxy.pid) - cpu0) * 1e3 / held_seconds,
            rss_before_mib=rss_before / 1024,
            rss_peak_mib=memory_kib(proxy.pid)["VmHWM"] / 1024,
            buffered_mib=proxy.metric("insync_proxy_buffered_bytes") / MIB,
            paused=proxy.metric("insync_proxy_budget_paused_connections"),
            produce_p50_ms_before=p50(normal) * 1e3, produce_max_ms_before=max(normal) * 1e3,
            produce_p50_ms_during=p50(during) * 1e3, produce_max_ms_during=max(during) * 1e3,
            produce_round_trips_during=len(during),
        )
        result["rss_growth_mib"] = result["rss_peak_mib"] - result["rss_before_mib"]
        if not args.no_read:
            say("reading every answer ...")
            cpu0, t0 = cpu_seconds(proxy.pid), time.monotonic()
            read = consumers.read_all(expected)
            result.update(read_mib=read / MIB, read_seconds=time.monotonic() - t0,
                          proxy_cpu_ms_per_mib_read=(cpu_seconds(proxy.pid) - cpu0) * 1e3 / (read / MIB),
                          every_answer_whole=True)
        consumers.close()
        consumers = None
    finally:
        if consumers is not None:
            consumers.close()
        if proxy is not None:
            proxy.stop()
        cluster.stop()
    args.output.mkdir(parents=True, exist_ok=True)
    out = args.output / f"budget-bench-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    say(f"wrote {out}")
    return 0


def print_table(r: dict[str, Any]) -> None:
    rows = [
        ("budget (max_buffered_bytes)", f"{r['budget_bytes'] / MIB:.0f} MiB"),
        ("held", f"{r['held_seconds']:.0f} s"),
        ("proxy RSS before / peak / growth", f"{r['rss_before_mib']:.0f} / {r['rss_peak_mib']:.0f} / "
                                             f"{r['rss_growth_mib']:.0f} MiB"),
        ("growth bound (budget + 32 MiB)", f"{r['budget_bytes'] / MIB + 32:.0f} MiB"),
        ("buffered_bytes gauge (end of hold)", f"{r['buffered_mib']:.1f} MiB"),
        ("budget_paused_connections gauge", f"{r['paused']:.0f}"),
        ("producer p50 / max before", f"{r['produce_p50_ms_before']:.1f} / {r['produce_max_ms_before']:.1f} ms"),
        ("producer p50 / max during", f"{r['produce_p50_ms_during']:.1f} / {r['produce_max_ms_during']:.1f} ms "
                                      f"({r['produce_round_trips_during']} round trips)"),
        ("proxy CPU while held", f"{r['proxy_cpu_ms_per_s_while_held']:.1f} ms/s"),
    ]
    if "read_mib" in r:
        rows += [("read afterwards, every answer whole", f"{r['read_mib']:.0f} MiB in {r['read_seconds']:.0f} s"),
                 ("proxy CPU per MiB read", f"{r['proxy_cpu_ms_per_mib_read']:.2f} ms")]
    print("| measure | value |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    sys.exit(main())
