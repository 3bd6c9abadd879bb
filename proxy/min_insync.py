"""The min.insync.replicas cache (KIP-637), fed by DescribeConfigs over the control connection.

- One batched DescribeConfigs for every topic a response needs that is not cached; concurrent
  misses for the same topic share one request.
- TTL with refresh ahead of expiry; a miss waits at most a short bound, then the topic goes out
  unenriched this time and the answer lands in the cache in the background.
- No DESCRIBE_CONFIGS ACL for the proxy on a topic: no value (the field is omitted), counted, and
  warned once (the first such topic; the others are counted).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from insync_proxy.protocol import ErrorCode
from insync_proxy.proxy.background import report_failure

if TYPE_CHECKING:
    from insync_proxy.proxy.control import ControlConnection
    from insync_proxy.proxy.metrics import ProxyMetrics

log: Final = logging.getLogger("insync_proxy.min_insync")

CONFIG_KEY: Final = "min.insync.replicas"
MAX_TOPICS_PER_REQUEST: Final = 500


@dataclass(frozen=True, slots=True)
class CachedValue:
    value: int | None  # None: the proxy may not read it (no ACL) or the topic does not exist
    fetched_at: float


class MinInsyncCache:
    def __init__(
        self,
        control: ControlConnection,
        metrics: ProxyMetrics,
        ttl_seconds: float = 30.0,
        miss_wait_seconds: float = 0.05,
    ) -> None:
        self.control = control
        self.metrics = metrics
        self.ttl = ttl_seconds
        self.miss_wait = miss_wait_seconds
        self.entries: dict[str, CachedValue] = {}
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        #: One WARNING for the proxy's principal lacking DESCRIBE_CONFIGS, not one per topic or per refresh.
        self._warned_unauthorized = False
        self._refresh_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ reads
    def get(self, topic: str) -> int | None:
        """The cached value, if fresh; counts a hit or a miss."""
        entry = self.entries.get(topic)
        if entry is not None and time.monotonic() - entry.fetched_at < self.ttl:
            self.metrics.metadata_cache_hits_total.inc()
            return entry.value
        self.metrics.metadata_cache_misses_total.inc()
        return None

    def peek(self, topic: str) -> int | None:
        """The cached value without counting (for the acks precheck's own accounting)."""
        entry = self.entries.get(topic)
        if entry is not None and time.monotonic() - entry.fetched_at < self.ttl:
            return entry.value
        return None

    def has_fresh(self, topic: str) -> bool:
        entry = self.entries.get(topic)
        return entry is not None and time.monotonic() - entry.fetched_at < self.ttl

    async def wait_for(self, topics: Iterable[str], bound_seconds: float | None = None) -> None:
        """Fetch the topics not freshly cached; wait at most `timeout` (default: the miss bound).

        The fetch keeps going in the background after the wait gives up.
        """
        missing = [t for t in dict.fromkeys(topics) if not self.has_fresh(t)]
        if not missing:
            return
        future = self.fetch(missing)
        try:
            async with asyncio.timeout(self.miss_wait if bound_seconds is None else bound_seconds):
                await asyncio.shield(future)
        except TimeoutError:
            pass
        except Exception as exc:  # pragma: no cover - fetch futures never fail
            log.debug("min.insync.replicas fetch failed: %s", exc)

    # ------------------------------------------------------------------ writes
    def fetch(self, topics: list[str]) -> asyncio.Future[None]:
        """Start (or join) DescribeConfigs for the topics; the future completes when all are in.

        The future never fails (a failure is logged and counted once, where it happens): callers may
        drop it.
        """
        loop = asyncio.get_running_loop()
        waits = []
        new = []
        for topic in topics:
            in_flight = self._in_flight.get(topic)
            if in_flight is not None:
                waits.append(in_flight)
            else:
                new.append(topic)
        for start in range(0, len(new), MAX_TOPICS_PER_REQUEST):
            batch = new[start : start + MAX_TOPICS_PER_REQUEST]
            task = loop.create_task(self._describe(batch))
            for topic in batch:
                self._in_flight[topic] = task
            waits.append(task)
        return asyncio.ensure_future(_gather_quietly(waits))

    async def _describe(self, topics: list[str]) -> None:
        started = time.perf_counter()
        try:
            response = await self.control.describe_topic_configs(topics, [CONFIG_KEY])
        except Exception as exc:
            # Reported here, once: the fetch's future never fails, so no caller can drop a failure.
            self.metrics.describe_configs_errors_total.labels(type(exc).__name__).inc()
            self.metrics.metadata_cache_refreshes_total.labels("min_insync", "error").inc()
            report_failure(self.metrics, "min_insync_fetch", f"DescribeConfigs of min.insync.replicas for "
                           f"{_topics_text(topics)}", exc)
            return
        finally:
            for topic in topics:
                self._in_flight.pop(topic, None)
        self.metrics.describe_configs_latency_seconds.observe(time.perf_counter() - started)
        self.metrics.metadata_cache_refreshes_total.labels("min_insync", "ok").inc()
        now = time.monotonic()
        for result in response.results:
            topic = result.resource_name
            if result.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                self.metrics.min_insync_unauthorized_total.inc()
                if not self._warned_unauthorized:
                    self._warned_unauthorized = True
                    log.warning(
                        "no DESCRIBE_CONFIGS permission on topic %s for the proxy's principal: its Metadata "
                        "goes out without min_insync_replicas and acks=-2 is forwarded as -1 (grant "
                        "DESCRIBE_CONFIGS on topics to the proxy's control credentials); further topics without "
                        "it are counted in insync_proxy_min_insync_unauthorized_total, not logged again", topic,
                    )
                else:
                    log.debug("no DESCRIBE_CONFIGS permission on topic %s for the proxy's principal", topic)
                self.entries[topic] = CachedValue(None, now)
                continue
            if result.error_code != 0:
                self.metrics.describe_configs_errors_total.labels(_error_name(result.error_code)).inc()
                self.entries.pop(topic, None)
                continue
            value = next((c.value for c in result.configs if c.name == CONFIG_KEY), None)
            try:
                self.entries[topic] = CachedValue(int(value) if value is not None else None, now)
            except ValueError:
                self.entries[topic] = CachedValue(None, now)
        self._update_gauges()

    def invalidate(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self.entries.pop(topic, None)
        self._update_gauges()

    def invalidate_all(self) -> None:
        self.entries.clear()
        self._update_gauges()

    def _update_gauges(self) -> None:
        self.metrics.metadata_cache_entries.set(len(self.entries))
        if self.entries:
            oldest = min(e.fetched_at for e in self.entries.values())
            self.metrics.metadata_cache_age_seconds.set(time.monotonic() - oldest)
        else:
            self.metrics.metadata_cache_age_seconds.set(0)

    # ------------------------------------------------------------------ refresh ahead of expiry
    def start(self) -> None:
        self._refresh_task = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(max(self.ttl / 4, 0.5))
            try:
                now = time.monotonic()
                due = [t for t, e in self.entries.items() if now - e.fetched_at > self.ttl * 0.6]
                if due:
                    await self.fetch(due)
                self._update_gauges()
            except Exception as exc:  # the loop must outlive any one failure
                report_failure(self.metrics, "min_insync_refresh", "refresh ahead of expiry", exc)

    def stop(self) -> None:
        if self._refresh_task is not None:
            self._refresh_task.cancel()


async def _gather_quietly(futures: list[asyncio.Future[None]]) -> None:
    await asyncio.gather(*futures, return_exceptions=True)


def _topics_text(topics: list[str]) -> str:
    shown = ", ".join(topics[:3])
    return f"{len(topics)} topic(s): {shown}" + (", ..." if len(topics) > 3 else "")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)

