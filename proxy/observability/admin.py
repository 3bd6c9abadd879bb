"""The admin HTTP port: /metrics (Prometheus), /healthz (alive), /readyz (upstream known), and POST /reload
(re-read the configuration and the TLS files; the answer says what changed, as JSON).

A minimal HTTP/1.1 server on asyncio, so the image needs no web framework.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from insync_proxy.proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy.admin")


@dataclass(eq=False)
class AdminServer:
    """`reload` answers POST /reload (None: 404); the port is loopback by default (admin_host)."""

    metrics: ProxyMetrics
    ready: Callable[[], tuple[bool, str]]
    host: str
    port: int
    reload: Callable[[], dict[str, Any]] | None = None
    server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address goes in brackets (RFC 3986)
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 10)
            while True:  # headers are not needed
                line = await asyncio.wait_for(reader.readline(), 10)
                if line in (b"\r\n", b"\n", b""):
                    break
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else "/"
            method = parts[0] if parts else ""
            status, content_type, body = self._route(method, path)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + (body if method != "HEAD" else b""))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()

    def _metrics(self) -> bytes:
        # About a hundred fixed series through prometheus-client (~0.3 ms), then the per-topic series rendered
        # by hand (~1 ms at 1,000 topics): cheaper on the loop than a hop to a thread and back (measured).
        metrics = self.metrics
        topics = "".join(counter.render() for counter in metrics.topic_counters)
        return generate_latest(metrics.scrape_registry) + topics.encode()

    def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method == "POST" and path == "/reload" and self.reload is not None:
            answer = self.reload()
            status = "200 OK" if answer.get("result") == "ok" else "422 Unprocessable Entity"
            return status, "application/json", (json.dumps(answer, indent=1) + "\n").encode()
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only (and POST /reload)\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, self._metrics()
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if path == "/readyz":
            ready, reason = self.ready()
            if not ready:
                return "503 Service Unavailable", "text/plain", f"not ready: {reason}\n".encode()
            return "200 OK", "text/plain", (reason + "\n").encode()
        return "404 Not Found", "text/plain", b"try /metrics, /healthz, /readyz or POST /reload\n"
