"""Hostile-input benchmark: malformed frames through the real proxy beside a healthy producer (issue #29).

    python benchmarks/hostile_bench.py [--frames 1000000] [--connections 48]

Starts its own 1-broker KRaft Kafka (devcluster/) and the real proxy as a separate process
(harness/proxy_process.py, no debug checks), then sends `--frames` malformed frames, one per connection,
from `--connections` clients at once (harness/hostile_clients.py: bad frames, oversized frames, requests
the broker refuses by closing the connection), while a librdkafka producer (acks=all) produces beside
them. Prints one table: what was sent and counted per cause, the healthy producer's deliveries and
errors, how many lines and bytes the proxy's log grew by, and CPU seconds (the proxy's per frame, Kafka's,
the clients'). The acceptance (issue #29 item 5): 0 crashes, 0 healthy-client errors, log <= 2,000 lines,
counters equal to what was sent per cause. Exits 1 when one of them fails. Writes a JSON summary to
bench-results/. `--frames 30000` is a run of a minute or so; the default 1M takes about half an hour on
two shared cores (each frame is a connection to the proxy and one from the proxy to the broker).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.shared import cpu_seconds, rss_mib, say, stop_run, write_summary  # noqa: E402
from harness.hostile_clients import CAUSES, HealthyProducer, send_malformed  # noqa: E402
from harness.proxy_process import ProxyProcess  # noqa: E402
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster  # noqa: E402

TOPIC = "healthy"
MAX_LOG_LINES = 2000


def counted(proxy: ProxyProcess) -> dict[str, float]:
    return {cause: proxy.metric("insync_proxy_bad_input_total", cause=cause) for cause in CAUSES}


def log_size(proxy: ProxyProcess) -> tuple[int, int]:
    data = proxy.log_file.read_bytes() if proxy.log_file.exists() else b""
    return data.count(b"\n"), len(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--frames", type=int, default=1_000_000, help="malformed frames to send (default 1,000,000)")
    parser.add_argument("--connections", type=int, default=48, help="hostile clients at once (default 48)")
    parser.add_argument("--rate", type=float, default=200.0, help="healthy producer's records/s (default 200)")
    parser.add_argument("--output", type=Path, default=ROOT / "bench-results")
    args = parser.parse_args(argv)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results: dict[str, Any] = {"started_utc": stamp, "args": {k: str(v) for k, v in vars(args).items()},
                               "loadavg_at_start": os.getloadavg()}
    cluster = LocalKafkaCluster(ClusterSettings(brokers=1))
    proxy: ProxyProcess | None = None
    ok = False
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1, 1)
        proxy = ProxyProcess(cluster, extra_toml="", groups=("default",), debug_checks=False,
                             metadata_refresh_seconds=10, audit_interval_seconds=10).start()
        assert proxy.process is not None
        pid = proxy.process.pid
        healthy = HealthyProducer(proxy.bootstrap(), TOPIC, args.rate).start()
        time.sleep(3)  # the producer connected and delivering before the flood
        nodes = [n for n in cluster.state()["nodes"] if n["pid"]]
        kafka_cpu0 = sum(cpu_seconds(n["pid"]) for n in nodes)
        kafka_log0 = sum(Path(n["log"]).stat().st_size for n in nodes)
        driver_cpu0 = time.process_time()
        before, (lines0, bytes0), cpu0 = counted(proxy), log_size(proxy), cpu_seconds(pid)
        host, port = proxy.bootstrap().rsplit(":", 1)
        say(f"sending {args.frames:,} malformed frames from {args.connections} connections ...")
        hostile = asyncio.run(send_malformed(
            host, int(port), args.frames, args.connections,
            progress=lambda n, s: say(f"  {n:,} sent in {s:.0f}s ({n / s:,.0f}/s; load {os.getloadavg()[0]:.1f})")))
        cpu = cpu_seconds(pid) - cpu0
        rss = rss_mib(pid)
        kafka_cpu = sum(cpu_seconds(n["pid"]) for n in nodes) - kafka_cpu0
        kafka_log = sum(Path(n["log"]).stat().st_size for n in nodes) - kafka_log0
        driver_cpu = time.process_time() - driver_cpu0
        time.sleep(2)  # the producer goes on after the flood
        undelivered = healthy.stop()
        after = counted(proxy)
        alive_during = proxy.alive()
        lines_during, bytes_during = log_size(proxy)
        code = proxy.stop()
        lines1, bytes1 = log_size(proxy)  # with the summaries written at exit
        crashed = not alive_during or code != 0
        delta = {cause: int(after[cause] - before[cause]) for cause in CAUSES}
        healthy_errors = len(healthy.errors) + undelivered
        rows = [(cause, hostile.sent[cause], delta[cause]) for cause in CAUSES]
        total = sum(hostile.sent.values())
        results.update({
            "sent": dict(hostile.sent), "counted": delta, "closed_by_proxy": hostile.closed_by_proxy,
            "not_closed": hostile.not_closed, "connect_failures": hostile.connect_failures,
            "seconds": hostile.seconds, "frames_per_s": total / hostile.seconds if hostile.seconds else 0,
            "proxy_cpu_s": cpu, "proxy_cpu_us_per_frame": cpu * 1e6 / total if total else 0,
            "proxy_rss_mib": rss, "kafka_cpu_s": kafka_cpu, "kafka_log_bytes": kafka_log,
            "clients_cpu_s": driver_cpu, "healthy_delivered": healthy.delivered, "healthy_errors": healthy_errors,
            "healthy_error_samples": healthy.errors[:5], "crashed": crashed, "exit_code": code,
            "log_lines_during": lines_during - lines0, "log_lines_with_exit_summaries": lines1 - lines0,
            "log_bytes_with_exit_summaries": bytes1 - bytes0,
        })
        checks = {
            "0 crashes": not crashed,
            "0 healthy-client errors": healthy_errors == 0 and healthy.delivered > 0,
            f"log <= {MAX_LOG_LINES:,} lines": lines1 - lines0 <= MAX_LOG_LINES,
            "counters = sent, per cause": all(hostile.sent[c] == delta[c] for c in CAUSES),
            "every hostile connection closed by the proxy": hostile.closed_by_proxy == total,
        }
        results["checks"] = checks
        ok = all(checks.values())
        print()
        print(f"{'cause':<18}{'sent':>12}{'counted':>12}")
        for cause, sent, count in rows:
            print(f"{cause:<18}{sent:>12,}{count:>12,}")
        print(f"{'total':<18}{total:>12,}{sum(delta.values()):>12,}")
        print()
        print(f"{'hostile frames/s':<40}{results['frames_per_s']:>14,.0f}  ({hostile.seconds:,.0f} s)")
        print(f"{'proxy CPU':<40}{cpu:>14,.1f} s  ({results['proxy_cpu_us_per_frame']:.0f} µs per frame)")
        print(f"{'proxy RSS at the end':<40}{rss:>14,.0f} MiB")
        print(f"{'Kafka CPU / its log grew by':<40}{kafka_cpu:>14,.1f} s  / {kafka_log / 1024:,.0f} KiB")
        print(f"{'hostile and healthy clients CPU':<40}{driver_cpu:>14,.1f} s")
        print(f"{'load average at the end':<40}{os.getloadavg()[0]:>14.1f}")
        print(f"{'closed by the proxy / not / no connect':<40}{hostile.closed_by_proxy:>14,} / "
              f"{hostile.not_closed:,} / {hostile.connect_failures:,}")
        print(f"{'healthy records delivered / errors':<40}{healthy.delivered:>14,} / {healthy_errors}")
        print(f"{'log lines during / with exit summaries':<40}{lines_during - lines0:>14,} / {lines1 - lines0:,} "
              f"({(bytes1 - bytes0) / 1024:,.1f} KiB)")
        print(f"{'proxy exit code':<40}{code!s:>14}")
        print()
        for name, passed in checks.items():
            print(f"{'PASS' if passed else 'FAIL'}  {name}")
        if healthy.errors:
            print("healthy-client errors, first ones:", *healthy.errors[:5], sep="\n  ")
    finally:
        stop_run(proxy, cluster)
        say(f"wrote {write_summary(results, args.output, 'hostile-bench', stamp)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
