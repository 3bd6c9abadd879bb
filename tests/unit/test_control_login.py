"""A refused login of the proxy's own connection, and a missing DESCRIBE_CONFIGS: each counted, said once."""

from __future__ import annotations

import logging

import pytest

from insync_proxy.protocol import (
    DescribeConfigsResponse,
)
from insync_proxy.protocol.messages import DescribeConfigsResult
from insync_proxy.proxy.controlplane.background import report_failure
from insync_proxy.proxy.controlplane.control import AuthenticationFailed, ControlConnection
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from tests.unit.control_brokers import PASSWORD, Login, PlainBroker


async def test_a_refused_login_is_counted_every_time_and_said_once_until_a_login_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a broker and a control connection whose password is wrong
    caplog.set_level(logging.DEBUG)
    broker = PlainBroker()
    address = await broker.start()
    metrics = ProxyMetrics()
    login = Login(username="refused-once")
    control = ControlConnection([address], sasl=login, request_timeout=2, metrics=metrics)
    try:
        # When it tries three times (three refreshes), and each failure is reported as a background failure
        for _ in range(3):
            with pytest.raises(AuthenticationFailed) as refused:
                await control.metadata(None)
            report_failure(metrics, "metadata_refresh", "the proxy's periodic full Metadata", refused.value)
        # Then every refusal is counted, and one WARNING says what failed, for whom, and what to check
        assert metrics.control_authentication_failures_total.labels("PLAIN")._value.get() == 3
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "SASL PLAIN login as 'refused-once'" in warnings[0]
        assert "wrong password or unknown user" in warnings[0]
        assert "INSYNC_PROXY_CONTROL_SASL_PASSWORD" in warnings[0]
        assert all(login.password not in r.getMessage() for r in caplog.records)
        # When the password is fixed, a login succeeds (said at INFO); a later refusal is said again
        login.password = PASSWORD
        await control.close()
        await control.metadata(None)
        assert any("succeeds again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
        login.password = "wrong-again"
        await control.close()
        with pytest.raises(AuthenticationFailed):
            await control.metadata(None)
        assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 2
    finally:
        await control.close()
        broker.close()


async def test_a_refusal_names_the_password_file_the_password_came_from(caplog: pytest.LogCaptureFixture) -> None:
    broker = PlainBroker()
    address = await broker.start()
    control = ControlConnection([address], sasl=Login(username="from-a-file", password_file="/run/secrets/proxy"),
                                request_timeout=2)
    try:
        with pytest.raises(AuthenticationFailed):
            await control.metadata(None)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "control_sasl.password_file '/run/secrets/proxy'" in warnings[0], warnings
        assert "INSYNC_PROXY_CONTROL_SASL_PASSWORD" not in warnings[0]
    finally:
        await control.close()
        broker.close()


async def test_a_listener_without_sasl_is_said_as_such_not_as_an_empty_list(caplog: pytest.LogCaptureFixture) -> None:
    # Given [control_sasl] towards a listener that enables no SASL mechanism (a PLAINTEXT port answers so)
    broker = PlainBroker(mechanisms=())
    address = await broker.start()
    control = ControlConnection([address], sasl=Login(username="no-sasl-here"), request_timeout=2)
    try:
        with pytest.raises(AuthenticationFailed):
            await control.metadata(None)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "the listener offers no SASL at all (a PLAINTEXT or SSL listener)" in warnings[0], warnings
    finally:
        await control.close()
        broker.close()


class _Unauthorized:
    """A control connection whose principal may not DESCRIBE_CONFIGS any topic."""

    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        return DescribeConfigsResponse(results=tuple(
            DescribeConfigsResult(error_code=29, resource_type=2, resource_name=t) for t in topics))


async def test_a_principal_without_describe_configs_is_one_warning_for_many_topics_and_refreshes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    metrics = ProxyMetrics()
    cache = MinInsyncCache(_Unauthorized(), metrics, ttl_seconds=0)  # type: ignore[arg-type]  # never fresh
    # When topics are fetched three times (TTL 0: every fetch asks the broker again)
    for _ in range(3):
        await cache.fetch(["a", "b", "c"])
    # Then nothing is cached as a value, each unauthorized answer is counted, and one WARNING names the permission
    assert cache.peek("a") is None
    assert metrics.min_insync_unauthorized_total._value.get() == 9
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "DESCRIBE_CONFIGS" in warnings[0], warnings


async def test_a_request_a_stalled_broker_reads_after_the_session_ended_goes_to_a_new_login_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a broker granting 2-second SASL sessions, and a control connection logged in with it
    caplog.set_level(logging.DEBUG, logger="insync_proxy.control")  # the logger's own level too: an earlier test
    # in this worker may have set it (the proxy's logging setup)
    broker = PlainBroker(session_lifetime_ms=2_000)
    address = await broker.start()
    login = Login(password=PASSWORD)
    control = ControlConnection([address], sasl=login, request_timeout=5)
    try:
        await control.metadata(None)
        assert broker.logins == 1
        # When the broker stands still (paused) across the session's end with the next request sent in time, and
        # reads it only then (Kafka closes the connection)
        broker.stall_seconds = 2.5
        response = await control.metadata(None)
        # Then the request was answered over a new login, and nothing was said above DEBUG: no failover, no WARNING
        assert [b.node_id for b in response.brokers] == [1]
        assert broker.closed_for_session_end == 1 and broker.logins == 2
        assert control.failovers == 0
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert any("its SASL session had ended: a new connection logs in" in r.getMessage() for r in caplog.records)
    finally:
        await control.close()
        broker.close()
