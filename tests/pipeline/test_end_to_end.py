"""End to end: real traffic through the proxy, a paused broker, then the Spark report on its audit files.

Also renders the HTML report in headless Chromium and checks that the screenshot shows the plots.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.proxy_process import ProxyProcess
from harness.raw_client import RawKafkaClient, batch
from harness.waiting import WaitTimeout, wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster

from .events import audited_requests

SCREENSHOT_DIR = Path("test-logs")


def test_report_shows_the_below_min_isr_interval_and_the_decisions_clients_saw(
    spark: Any, proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, tmp_path: Path
) -> None:
    from insync_proxy.pipeline.report import run_report

    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    # Given partition 0 on brokers 1,2 and partition 1 on 1,3 (both led by 1), min.insync.replicas=2
    kafka_cluster.create_topic(topic, configs={"min.insync.replicas": "2"}, assignments={0: [1, 2], 1: [1, 3]})
    leader_address = f"127.0.0.1:{proxy.broker_port(kafka_cluster.wait_for_leader(topic, 1))}"
    observed: Counter[tuple[int, int]] = Counter()
    stop = threading.Event()

    failures: list[BaseException] = []

    def traffic() -> None:
        try:
            # The broker answers within 5 s (REQUEST_TIMED_OUT while a paused follower is still in the ISR);
            # the client waits longer than that, so the traffic never stops on a slow answer.
            with RawKafkaClient(leader_address, timeout=120) as client:
                while not stop.is_set():
                    result = client.produce({(topic, 0): batch(b"a"), (topic, 1): batch(b"b")}, acks=-2,
                                            timeout_ms=5000)
                    for (_, partition), r in result.items():
                        observed[(partition, r.error_code)] += 1
                    time.sleep(0.05)
        except BaseException as exc:  # surfaced by the test below, not lost with the thread
            failures.append(exc)
            raise

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        wait_until(lambda: observed[(0, 0)] > 10, 60, what="traffic to flow")
        # When broker 2 is paused until partition 0's ISR is below its min ISR, for a measured span
        kafka_cluster.pause_broker(2)
        try:
            kafka_cluster.wait_for_isr(topic, 0, 1)
            below_at = time.monotonic()
            wait_until(lambda: observed[(0, 19)] >= 20, 60, what="the proxy to answer NOT_ENOUGH_REPLICAS")
        finally:
            kafka_cluster.resume_broker(2)
        kafka_cluster.wait_for_isr(topic, 0, 2)
        measured = time.monotonic() - below_at
        recovered = observed[(0, 0)]
        try:
            wait_until(lambda: failures or observed[(0, 0)] > recovered + 10, 60, what="partition 0 to be used again")
        except WaitTimeout:
            raise AssertionError(f"partition 0 not used again; answers so far: {dict(observed)}; "
                                 f"proxy below-min gauge {proxy.metric('insync_proxy_partitions_below_min_isr')}, "
                                 "metadata refreshes " + str([line for line in proxy.metrics_text().splitlines()
                                                               if "refreshes_total" in line or "precheck" in line
                                                               or "background" in line])) from None
        assert not failures, failures
    finally:
        stop.set()
        worker.join(30)
    sent = sum(observed.values())
    # v1: one event per decision; v2: summaries every audit interval (10 s by default)
    wait_until(lambda: audited_requests(proxy.audit_events(), topic) >= sent, 60, what="every request in the audit")

    # Then the report over the audit files shows that interval and the decisions the client saw
    result = run_report(spark, [str(proxy.audit_dir)], str(tmp_path / "report"))
    intervals = [i for i in result.tables["isr_below_min_intervals"] if i["topic"] == topic]
    assert [i["partition"] for i in intervals] == [0], "\n".join(map(str, intervals))
    assert abs(intervals[0]["duration_s"] - measured) < 6, (intervals[0], measured)
    assert intervals[0]["min_isr"] == 2 and intervals[0]["lowest_isr"] == 1
    counts = {(d["partition"], d["decision"]): d["requests"]
              for d in result.tables["decisions_by_kind"] if d["topic"] == topic}
    # Most NOT_ENOUGH_REPLICAS come from the proxy's precheck; the broker itself may answer a few (a request
    # forwarded just before the proxy's view of the ISR caught up): those are "forwarded" with error 19.
    answered = counts.get((0, "answered_not_enough_replicas"), 0)
    assert 0 < answered <= observed[(0, 19)]
    assert answered + counts.get((0, "forwarded"), 0) == sum(n for (p, _), n in observed.items() if p == 0)
    assert counts.get((1, "forwarded"), 0) == sum(n for (p, _), n in observed.items() if p == 1)
    traffic = {r["partition"]: r for r in result.tables["partition_traffic"] if r["topic"] == topic}
    assert traffic[0]["answered_by_proxy_requests"] == answered
    assert traffic[0]["written_requests"] == observed[(0, 0)]
    assert traffic[0]["answered_by_proxy_requests"] + traffic[0]["failed_requests"] == \
        sum(n for (p, code), n in observed.items() if p == 0 and code != 0)

    # And the HTML report opens in headless Chromium with its plots drawn
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (apt-get install chromium): screenshot not taken")
    SCREENSHOT_DIR.mkdir(exist_ok=True)
    shot = SCREENSHOT_DIR / "durability-report.png"
    blank_html = tmp_path / "blank.html"
    blank_html.write_text("<html><body></body></html>")
    blank = tmp_path / "blank.png"
    for page, png in ((result.html_path, shot), (blank_html, blank)):
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium'}", "--hide-scrollbars", "--window-size=1280,2400",
             f"--screenshot={png.resolve()}", page.resolve().as_uri()],
            check=True, capture_output=True, timeout=120,
        )
    assert shot.stat().st_size > 5 * blank.stat().st_size, (shot.stat().st_size, blank.stat().st_size)
    print(f"report screenshot: {shot.resolve()}")
