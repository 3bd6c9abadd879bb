"""The admin port's URL as the proxy says it (logs, the ready message)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("host", "url"), [("127.0.0.1", "http://127.0.0.1:9190"), ("::1", "http://[::1]:9190"),
                                           ("fd00::5", "http://[fd00::5]:9190")])
def test_the_admin_url_puts_an_ipv6_address_in_brackets(host: str, url: str) -> None:
    from insync_proxy.proxy.observability.admin import AdminServer
    from insync_proxy.proxy.observability.metrics import ProxyMetrics

    assert AdminServer(ProxyMetrics(), lambda: (True, "ok"), host, 9190).url == url
