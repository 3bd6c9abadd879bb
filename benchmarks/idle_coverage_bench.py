"""Tag 637 coverage of all-topics Metadata answers after idle periods, on a real cluster (not a test; issue 39).

    python benchmarks/idle_coverage_bench.py [--topics 10000] [--marks 0,30,3630,3700]

Starts its own 3-broker KRaft Kafka (devcluster/, broker heap sized for the topics), creates N topics
(`--partitions`, 1 by default, RF 3) and runs the real proxy as its own process with the defaults a platform team keeps
(min_insync_ttl_seconds 30, min_insync_max_stale_seconds 3600, min_insync_miss_wait_ms 1000; the audit off).
Once /readyz says ready, nothing talks to the proxy but this script: at each mark (seconds after ready) it sends
one all-topics Metadata v12 and counts the topics whose answer carries tag 637; the proxy's CPU seconds and RSS
are printed beside each. The default marks: the first answer, one a TTL later (whose stale values the proxy serves
while it reads them again), then one after an idle hour (3,600 s with no request at all), and one 70 s after that.

The question it answers: does a client that asks for all topics rarely (a pattern subscription, an admin tool,
a KIP-637 partitioner refreshing every few minutes) see the tag on every topic, up to an idle hour?
Prints a table; writes a JSON summary to bench-results/idle-coverage-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.control_plane_bench import all_topics_metadata, coverage, create_topics  # noqa: E402
from benchmarks.proxy_bench import _terminate, table  # noqa: E402
from benchmarks.shared import cpu_seconds, rss_mib, say  # noqa: E402
from harness.proxy_process import ProxyProcess  # noqa: E402
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster, broker_heap_for  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--topics", type=int, default=10_000, help="topics of the cluster (default 10,000)")
    parser.add_argument("--marks", default="0,30,3630,3700",
                        help="seconds after ready at which one all-topics Metadata is asked (default 0,30,3630,3700)")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions a topic (default 1; RF 3: each broker holds topics x partitions replicas, "
                             "and a broker's open files grow with them: 10,000 x 2 passes a limit of 20,000)")
    parser.add_argument("--output", type=Path, default=ROOT / "bench-results", help="directory of the JSON summary")
    args = parser.parse_args(argv)
    marks = sorted(float(m) for m in args.marks.split(","))
    signal.signal(signal.SIGTERM, _terminate)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    heap = broker_heap_for(args.topics * args.partitions)
    results: dict[str, Any] = {"started_utc": stamp, "topics": args.topics, "partitions": args.partitions,
                               "broker_heap": heap, "answers": []}
    cluster: LocalKafkaCluster | None = None
    proxy: ProxyProcess | None = None
    code = 0
    try:
        cluster = LocalKafkaCluster(ClusterSettings(broker_heap=heap))
        cluster.start()
        results["kafka_version"] = cluster.version
        names = [f"idle-{i:05d}" for i in range(args.topics)]
        t0 = time.monotonic()
        create_topics(cluster, names, partitions=args.partitions)
        say(f"{args.topics} topics created in {time.monotonic() - t0:.0f}s (broker heap {heap})")
        proxy = ProxyProcess(cluster, extra_toml="", groups=("default",), debug_checks=False,
                             metadata_refresh_seconds=10, audit_enabled=False)
        # ProxyProcess writes a test TTL of 5 s: the defaults are what is measured here
        proxy.config_file.write_text(proxy.config_file.read_text().replace("min_insync_ttl_seconds = 5\n", ""))
        proxy.start(timeout=600)
        ready = time.monotonic()
        say(f"proxy ready; asking for all topics at {', '.join(f'{m:.0f}' for m in marks)} s")
        rows = []
        for mark in marks:
            time.sleep(max(0.0, ready + mark - time.monotonic()))
            asked = time.monotonic()
            tagged, total = coverage(all_topics_metadata(proxy.bootstrap()))
            took = time.monotonic() - asked
            answer = {"seconds_after_ready": round(asked - ready, 1), "tagged": tagged, "topics": total,
                      "answer_seconds": round(took, 3), "proxy_cpu_seconds": round(cpu_seconds(proxy.pid), 2),
                      "proxy_rss_mib": round(rss_mib(proxy.pid), 1)}
            results["answers"].append(answer)
            say(f"after {answer['seconds_after_ready']:.0f} s: {tagged}/{total} tagged "
                f"(answer {took * 1000:.0f} ms, proxy CPU {answer['proxy_cpu_seconds']} s, "
                f"RSS {answer['proxy_rss_mib']} MiB)")
            rows.append([f"{answer['seconds_after_ready']:.0f}", f"{tagged:,}/{total:,}",
                         f"{100 * tagged / max(total, 1):.1f}%", f"{took * 1000:.0f}",
                         f"{answer['proxy_cpu_seconds']}", f"{answer['proxy_rss_mib']}"])
        print(table(f"Tag 637 on all-topics answers, {args.topics:,} topics, the proxy's defaults", ["s after ready", "tagged", "coverage", "answer ms", "proxy CPU s", "RSS MiB"], rows))
        if any(a["tagged"] < a["topics"] for a in results["answers"]):
            code = 1
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except Exception as exc:
        say(f"benchmark failed: {exc!r}")
        results["error"] = repr(exc)
        code = 1
    finally:
        if proxy is not None and proxy.process is not None:
            proxy.process.terminate()
            proxy.process.wait(30)
        if cluster is not None:
            cluster.stop()
            cluster.cleanup()
        args.output.mkdir(parents=True, exist_ok=True)
        out = args.output / f"idle-coverage-{stamp}.json"
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")
        say(f"wrote {out}")
    return code


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    sys.exit(main())
