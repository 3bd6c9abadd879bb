"""Repeatable log lines are bounded per cause, and bad input is counted every time (proxy/observability/logs.py).

The connection tests drive the real adapter's core with plain bytes: no sockets, no event loop, no Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from harness.connection_core import LISTENER
from insync_proxy.protocol import ApiKey, RequestHeader, encode_request_header
from insync_proxy.proxy.config.defaults import SUMMARY_INTERVAL_SECONDS
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.datapath.connection import ClientConnection, ConnectionSettings
from insync_proxy.proxy.datapath.core import NoObserver
from insync_proxy.proxy.datapath.exchange import BehaviourRegistry
from insync_proxy.proxy.observability.logs import (
    BAD_FRAME,
    BAD_INPUT_CAUSES,
    BROKER_CLOSED,
    OVERSIZED_FRAME,
    REFUSED_CONNECTION,
    RateLimitedLog,
    _bad_input_log,
    flush_all,
    report_bad_input,
    set_summary_interval,
    summary_interval,
)
from insync_proxy.proxy.observability.logsetup import setup_logging
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from tests.helpers import Clock

logger = logging.getLogger("tests.rate_limited")


def messages(caplog: pytest.LogCaptureFixture, name: str = "tests.rate_limited") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_the_first_line_of_a_cause_is_written_at_once_and_its_repeats_are_one_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    repeated = RateLimitedLog(logger, interval=60, clock=clock)
    # Given 1,000 lines of one cause within a minute
    for i in range(1000):
        repeated.warning("bad", "client %d sent garbage", i)
        clock.now += 0.05
    # Then only the first is written, with what it names
    assert messages(caplog) == ["client 0 sent garbage"]
    # When the minute is over and the cause comes again, one summary counts the 999 held back
    clock.now = 1000.0 + 61
    repeated.warning("bad", "client %d sent garbage", 1000)
    assert messages(caplog)[1:] == ["999 more like this (bad) in the last 61s; the latest: client 999 sent garbage"]
    # And the line that came after the minute waits for the next summary
    repeated.flush()
    assert messages(caplog)[2:] == ["1 more like this (bad) in the last 0s; the latest: client 1000 sent garbage"]
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_causes_are_limited_separately_and_a_quiet_cause_is_written_at_once_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    repeated = RateLimitedLog(logger, interval=60, clock=clock)
    repeated.warning("a", "first a")
    repeated.log("b", logging.INFO, "first b")
    repeated.warning("a", "second a")
    assert messages(caplog) == ["first a", "first b"]
    # When "a" is summarised and then stays quiet for a whole interval
    clock.now += 60
    repeated.flush()
    clock.now += 60
    repeated.warning("a", "a again %s", "later")
    # Then its next line is a first line, written at once; "b" held nothing back, so it has no summary
    assert messages(caplog)[2:] == ["1 more like this (a) in the last 60s; the latest: second a", "a again later"]


def test_a_traceback_goes_with_the_first_line_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    repeated = RateLimitedLog(logger, interval=60, clock=clock)
    for _ in range(3):
        repeated.error("bug", "internal error: %s", "boom", exc_info=RuntimeError("boom"))
    clock.now += 60
    repeated.flush()
    records = [r for r in caplog.records if r.name == logger.name]
    assert [r.exc_info is not None for r in records] == [True, False]
    assert records[1].getMessage().startswith("2 more like this (bug)")


def test_a_line_below_the_loggers_level_costs_no_window(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    repeated = RateLimitedLog(logger, interval=60, clock=Clock())
    repeated.log("chatty", logging.INFO, "not written")
    repeated.flush()
    assert messages(caplog) == []


def test_the_interval_is_log_summary_interval_seconds_for_every_limiter_made_without_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    # Given a limiter made before the setting is applied, one made after, and one with an interval of its own
    before = RateLimitedLog(logger, clock=clock)
    assert before.interval == SUMMARY_INTERVAL_SECONDS == summary_interval()
    config = load_config(None, env={"INSYNC_PROXY_BOOTSTRAP_SERVERS": "k:1",
                                    "INSYNC_PROXY_LOG_SUMMARY_INTERVAL_SECONDS": "5"})
    # When the logging is set up with the configuration (as `run` does; the test's own handlers back afterwards)
    root, ours = logging.getLogger(), logging.getLogger("insync_proxy")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    try:
        setup_logging(config.log_level, config.log_format, config.log_summary_interval_seconds)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        ours.setLevel(our_level)
    after = RateLimitedLog(logger, clock=clock)
    own = RateLimitedLog(logger, interval=60, clock=clock)
    # Then the process's limiters take 5 s (those of the proxy's modules too), the one with its own keeps it
    assert (before.interval, after.interval, own.interval, summary_interval()) == (5.0, 5.0, 60.0, 5.0)
    assert _bad_input_log.interval == 5.0
    # And the limiter uses it: the repeats of 5 s are summarised at the first line after them
    for i in range(3):
        before.warning("cause", "line %d", i)
        clock.now += 1
    assert messages(caplog) == ["line 0"]
    clock.now = 1000.0 + 5
    before.warning("cause", "line %d", 3)
    assert messages(caplog)[1].startswith("2 more like this (cause) in the last 5s; the latest: line 2")
    # And a value that is not above 0 is refused
    with pytest.raises(ValueError, match="above 0"):
        set_summary_interval(0)


async def test_on_an_event_loop_the_summary_comes_when_the_interval_ends_without_another_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    repeated = RateLimitedLog(logger, interval=0.2)
    # Given a flood that stops within the interval
    for i in range(50):
        repeated.warning("flood", "line %d", i)
    await asyncio.sleep(0)
    assert messages(caplog) == ["line 0"]
    # Then the loop's timer writes its summary once the interval is over (waited for up to 10 s)
    for _ in range(1000):
        if len(messages(caplog)) >= 2:
            break
        await asyncio.sleep(0.01)
    summaries = messages(caplog)[1:]
    assert len(summaries) == 1 and summaries[0].startswith("49 more like this (flood) in the last "), summaries
    assert summaries[0].endswith("s; the latest: line 49")


def test_bad_input_is_counted_every_time_and_logged_once_a_window_per_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    metrics = ProxyMetrics()
    # Given 10,000 of each cause of bad input on one listener
    for cause in BAD_INPUT_CAUSES:
        for i in range(10_000):
            report_bad_input(metrics, cause, "default", "client %d: %s", i, cause)
    flush_all()
    # Then every one is counted under its cause
    for cause in BAD_INPUT_CAUSES:
        assert metrics.registry.get_sample_value(
            "insync_proxy_bad_input_total", {"listener": "default", "cause": cause}) == 10_000
    # And the log holds two lines per cause: the first, and the summary of the other 9,999
    lines = messages(caplog, "insync_proxy.bad_input")
    assert len(lines) == 2 * len(BAD_INPUT_CAUSES), lines
    for cause in BAD_INPUT_CAUSES:
        assert f"client 0: {cause}" in lines
        assert any(line.startswith(f"9999 more like this ({cause}) in the last ")
                   and line.endswith(f"s; the latest: client 9999: {cause}") for line in lines), lines
    # broker_closed is said at INFO (a broker restart looks the same), the others at WARNING
    levels = {r.getMessage(): r.levelno for r in caplog.records}
    assert levels["client 0: broker_closed"] == logging.INFO
    assert levels["client 0: refused_connection"] == logging.WARNING


# ---------------------------------------------------------------------------------------------- connections


def _settings(metrics: ProxyMetrics) -> ConnectionSettings:
    return ConnectionSettings(
        registry=BehaviourRegistry([]), observer=NoObserver(), metrics=metrics, max_frame_bytes=1000,
        connect_timeout_seconds=1, upstream_ssl=None, bootstrap_candidates=lambda: [],
    )


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _request(api_key: int, correlation_id: int, body: bytes = b"") -> bytes:
    header = RequestHeader(request_api_key=api_key, request_api_version=1, correlation_id=correlation_id,
                           client_id="hostile")
    return _frame(encode_request_header(header) + body)


#: Malformed input as a hostile client sends it, and the cause it is counted under.
MALFORMED = {
    "an unknown API key": (_request(9999, 1), BAD_FRAME),
    "a header cut short": (_frame(b"\x00\x03\x00"), BAD_FRAME),
    "a size above max_frame_bytes": (struct.pack(">i", 1001) + b"\x00" * 8, OVERSIZED_FRAME),
    "a negative size": (b"\xff\xff\xff\xfe", OVERSIZED_FRAME),
    "HTTP on the Kafka port": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", OVERSIZED_FRAME),
}


@pytest.mark.parametrize("what", MALFORMED)
def test_each_malformed_frame_closes_its_connection_and_is_counted_under_its_cause(what: str) -> None:
    data, cause = MALFORMED[what]
    metrics = ProxyMetrics()
    connection = ClientConnection(_settings(metrics), LISTENER, None)
    connection.core.receive_client_data(data)
    assert connection.closed
    assert metrics.registry.get_sample_value(
        "insync_proxy_bad_input_total", {"listener": "default", "cause": cause}) == 1
    assert metrics.registry.get_sample_value(
        "insync_proxy_client_connection_errors_total", {"listener": "default", "kind": "bad_frame"}) is None


def test_a_thousand_hostile_connections_are_exact_counters_and_a_bounded_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    sent = {BAD_FRAME: 0, OVERSIZED_FRAME: 0, BROKER_CLOSED: 0}
    kinds = list(MALFORMED.values())
    # Given 1,000 connections, each with one malformed frame or a request the broker then refuses by closing
    for i in range(1000):
        connection = ClientConnection(settings, LISTENER, None)
        if i % 3 == 2:
            connection.core.receive_client_data(_request(ApiKey.LIST_OFFSETS, i, b"\xde\xad"))
            assert connection.pending == 1
            connection.upstream_lost(ConnectionResetError())
            sent[BROKER_CLOSED] += 1
        else:
            data, cause = kinds[i % len(kinds)]
            connection.core.receive_client_data(data)
            sent[cause] += 1
        assert connection.closed
    flush_all()
    # Then the counters say exactly what was sent, per cause
    for cause, count in sent.items():
        assert metrics.registry.get_sample_value(
            "insync_proxy_bad_input_total", {"listener": "default", "cause": cause}) == count, cause
    assert metrics.registry.get_sample_value(
        "insync_proxy_bad_input_total", {"listener": "default", "cause": REFUSED_CONNECTION}) is None
    # And the log is a first line and a summary per cause, whose counts add up to what was sent
    lines = messages(caplog, "insync_proxy.bad_input")
    assert len(lines) == 2 * len(sent), lines
    assert any(line.startswith("closing client ? on listener bootstrap: bad request frame (") for line in lines)
    assert any(line.startswith("broker ? closed the connection of client ? on listener bootstrap with 1 request(s)")
               for line in lines)
    for cause, count in sent.items():
        assert any(line.startswith(f"{count - 1} more like this ({cause})") for line in lines), (cause, lines)
