"""The min.insync.replicas cache (KIP-637), fed by DescribeConfigs over the control connection, and the
topics in use (`TopicDemand`) that the proxy's control plane follows.

- Demand-driven: only the topics the proxy's clients name in a request or produce to are refreshed
  ahead of expiry; each leaves that set after `topic_idle_seconds` untouched. A topic seen only in an
  all-topics answer is described when such an answer needs it and its entry is stale, never ahead.
- Bounded: at most `max_topics_in_use` topics are followed. A client naming more (made-up names, or a
  cluster's every topic one by one) gets its answers as before, enriched through the cache's miss path,
  but the topics beyond the bound are not followed (not refreshed ahead, not in the proxy's own Metadata,
  no readiness events): counted in insync_proxy_topics_not_followed_total, said once per log interval.
- One batched DescribeConfigs for every topic a response needs that is not cached; concurrent
  misses for the same topic share one request. Batches hold at most `describe_configs_batch_topics`
  topics, and each waits `control_request_timeout_seconds` plus 2 ms per topic (control.py).
- TTL with refresh ahead of expiry at a per-topic point between 50% and 80% of the TTL (from the
  process's randomised string hash): topics fetched together spread out, and a fleet of sidecars does
  not refresh in step.
- Stale while revalidate (Metadata answers only): a value older than the TTL but younger than the TTL plus
  `max_stale` goes into the answer as it is, and its topic is read again in the background (batched, as a
  refresh): a client asking for all topics less often than the TTL still gets every tag. The acks precheck
  and the readiness sweep use fresh values only (`peek`). The age of the oldest value an answer carried is
  observed (insync_proxy_min_insync_served_age_seconds).
- A miss (never read, or older than the TTL plus `max_stale`) waits at most `miss_wait` (that answer only),
  then the topic goes out unenriched this time and the answer lands in the cache in the background; an answer
  that waited the whole bound is counted and said once per log interval.
- Bounded in count: at most `max_entries` entries; beyond it those read longest ago go first (the topics in
  use are re-read ahead of expiry, so they are the newest).
- A topic whose DescribeConfigs failed is not asked again for a back-off (1 s, doubling up to the TTL).
- No DESCRIBE_CONFIGS ACL for the proxy on a topic: no value (the field is omitted), counted, and
  warned once (the first such topic; the others are counted).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from insync_proxy.protocol import ErrorCode
from insync_proxy.proxy.controlplane.background import report_failure
from insync_proxy.proxy.observability.logs import RateLimitedLog

if TYPE_CHECKING:
    from insync_proxy.proxy.controlplane.control import ControlConnection
    from insync_proxy.proxy.observability.metrics import ProxyMetrics

log: Final = logging.getLogger("insync_proxy.min_insync")
_repeated: Final = RateLimitedLog(log)

CONFIG_KEY: Final = "min.insync.replicas"
MAX_TOPICS_PER_REQUEST: Final = 500
#: The first back-off after a failed DescribeConfigs of a topic (doubled per failure, up to the TTL).
FIRST_BACKOFF_SECONDS: Final = 1.0
#: The default of `max_topics_in_use` (proxy/config/settings.py says why this number).
DEFAULT_MAX_TOPICS_IN_USE: Final = 1000
#: The rate-limit cause of the "not followed" line, named after the setting that lifts it.
NOT_FOLLOWED_CAUSE: Final = "max_topics_in_use"
#: The default of `min_insync_max_stale_seconds` (proxy/config/settings.py says why this number).
DEFAULT_MAX_STALE_SECONDS: Final = 3600.0
#: The default of `min_insync_max_entries` (proxy/config/settings.py says why this number).
DEFAULT_MAX_ENTRIES: Final = 50_000
#: The default of `min_insync_miss_wait_ms`, in seconds (proxy/config/settings.py says why this number).
DEFAULT_MISS_WAIT_SECONDS: Final = 1.0
#: The rate-limit cause of the "answered without waiting longer" line, named after the setting it hit.
MISS_WAIT_CAUSE: Final = "min_insync_miss_wait_ms"


class TopicDemand:
    """The topics in use: named by a client's request (Metadata of some topics, Produce), each until it has
    gone `idle_seconds` untouched, at most `max_topics` at once. What the proxy's own Metadata, the
    min.insync.replicas refresh and the readiness sweep follow.

    `touch` is on the Produce path: a dict store, with the clock read only by `tick` (the refresh loop's)
    and for a topic seen for the first time, which calls `on_new` (start tracking it now). With `max_topics`
    followed already, a new topic is not taken in: `on_not_followed` hears of it (each time it is named),
    and it is served without being followed until idleness frees room.
    """

    def __init__(self, idle_seconds: float = 600.0, clock: Callable[[], float] = time.monotonic,
                 max_topics: int = DEFAULT_MAX_TOPICS_IN_USE) -> None:
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.now = clock()
        #: At most this many topics are followed at once (`max_topics_in_use`).
        self.max_topics = max_topics
        #: topic -> when a client last named it (to `tick`'s resolution).
        self.last_used: dict[str, float] = {}
        #: Called with each topic the moment it comes into use (start following it).
        self.on_new: list[Callable[[str], None]] = []
        #: Called with a topic a client named while `max_topics` were followed already (count it, say so).
        self.on_not_followed: list[Callable[[str], None]] = []

    def touch(self, topic: str) -> None:
        """A client named this topic (a Metadata request for it, a Produce to it)."""
        last_used = self.last_used
        if topic in last_used:
            last_used[topic] = self.now
            return
        if len(last_used) >= self.max_topics:
            for not_followed in self.on_not_followed:
                not_followed(topic)
            return
        self.now = self.clock()
        last_used[topic] = self.now
        for on_new in self.on_new:
            on_new(topic)

    def set_max_topics(self, max_topics: int) -> list[str]:
        """A new bound (a reload). Lowered below the topics followed now: the least recently named leave at
        once (returned), so that the set never holds more than its bound."""
        self.max_topics = max_topics
        excess = len(self.last_used) - max_topics
        if excess <= 0:
            return []
        oldest = sorted(self.last_used, key=self.last_used.__getitem__)[:excess]
        for topic in oldest:
            del self.last_used[topic]
        return oldest

    def tick(self) -> list[str]:
        """Advance the clock; the topics that went idle leave the set (returned)."""
        now = self.now = self.clock()
        idle = [t for t, at in self.last_used.items() if now - at > self.idle_seconds]
        for topic in idle:
            del self.last_used[topic]
        return idle

    def in_use(self) -> list[str]:
        """The topics in use now."""
        return list(self.last_used)

    def __contains__(self, topic: object) -> bool:
        return topic in self.last_used

    def __len__(self) -> int:
        return len(self.last_used)


@dataclass(frozen=True, slots=True)
class CachedValue:
    value: int | None  # None: the proxy may not read it (no ACL) or the topic does not exist
    fetched_at: float


class CacheLookup:
    """The cache's answer for one Metadata answer's topics: the values to serve (fresh and stale ones), the
    topics with nothing to serve (`missing`), those served stale (`stale`: to be read again), and when the
    oldest value served was read (None: no value served)."""

    __slots__ = ("values", "missing", "stale", "oldest")

    def __init__(self, values: dict[str, int], missing: list[str], stale: list[str], oldest: float | None) -> None:
        self.values = values
        self.missing = missing
        self.stale = stale
        self.oldest = oldest


class MinInsyncCache:
    def __init__(
        self,
        control: ControlConnection,
        metrics: ProxyMetrics,
        ttl_seconds: float = 30.0,
        miss_wait_seconds: float = DEFAULT_MISS_WAIT_SECONDS,
        demand: TopicDemand | None = None,
        batch_topics: int = MAX_TOPICS_PER_REQUEST,
        max_stale_seconds: float = DEFAULT_MAX_STALE_SECONDS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.control = control
        self.metrics = metrics
        self.ttl = ttl_seconds
        self.miss_wait = miss_wait_seconds
        #: A value up to this much older than the TTL is still served in Metadata answers, while it is re-read.
        self.max_stale = max_stale_seconds
        #: At most this many entries; beyond it those read longest ago go.
        self.max_entries = max(1, max_entries)
        #: Monotonic seconds (tests pass their own).
        self.clock = clock
        #: The topics in use: the only ones refreshed ahead of expiry.
        self.demand = demand if demand is not None else TopicDemand()
        self.batch_topics = max(1, batch_topics)
        #: topic -> its value; in the order they were read (oldest first: what `_bound` drops first).
        self.entries: dict[str, CachedValue] = {}
        self._in_flight: dict[str, asyncio.Future[None]] = {}
        #: topic -> (monotonic time before which it is not asked again, the back-off that led there)
        self._backoff: dict[str, tuple[float, float]] = {}
        #: Topics that came into use in this loop turn, read in one DescribeConfigs.
        self._new_topics: list[str] = []
        self.demand.on_new.append(self._topic_in_use)
        self.demand.on_not_followed.append(self._topic_not_followed)
        #: One WARNING for the proxy's principal lacking DESCRIBE_CONFIGS, not one per topic or per refresh.
        self._warned_unauthorized = False
        self._refresh_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ reads
    def get(self, topic: str) -> int | None:
        """The cached value, if fresh; counts a hit or a miss."""
        entry = self.entries.get(topic)
        if entry is not None and self.clock() - entry.fetched_at < self.ttl:
            self.metrics.metadata_cache_hits_total.inc()
            return entry.value
        self.metrics.metadata_cache_misses_total.inc()
        return None

    def peek(self, topic: str) -> int | None:
        """The cached value without counting (for the acks precheck's own accounting)."""
        entry = self.entries.get(topic)
        if entry is not None and self.clock() - entry.fetched_at < self.ttl:
            return entry.value
        return None

    def has_fresh(self, topic: str) -> bool:
        entry = self.entries.get(topic)
        return entry is not None and self.clock() - entry.fetched_at < self.ttl

    async def wait_for(self, topics: Iterable[str], bound_seconds: float | None = None) -> bool:
        """Fetch the topics not freshly cached; wait at most `bound_seconds` (default: the miss bound, `miss_wait`).
        True when every read they needed ended in time.

        The fetch keeps going in the background after the wait gives up. With the miss bound, a wait that hits
        it is counted (insync_proxy_min_insync_miss_wait_exceeded_total) and said once per log interval.
        """
        missing = [t for t in dict.fromkeys(topics) if not self.has_fresh(t)]
        if not missing:
            return True
        future = self.fetch(missing)
        bound = self.miss_wait if bound_seconds is None else bound_seconds
        try:
            async with asyncio.timeout(bound):
                await asyncio.shield(future)
        except TimeoutError:
            if bound_seconds is None:
                self._miss_wait_exceeded(missing)
            return False
        except Exception as exc:  # pragma: no cover - fetch futures never fail
            log.debug("min.insync.replicas fetch failed: %s", exc)
        return True

    def _miss_wait_exceeded(self, missing: list[str]) -> None:
        """A Metadata answer waited the whole miss bound: counted, said once per interval (a slow broker)."""
        self.metrics.min_insync_miss_wait_exceeded_total.inc()
        _repeated.warning(
            MISS_WAIT_CAUSE,
            "a Metadata answer waited min_insync_miss_wait_ms (%.0f ms) for DescribeConfigs of %s and went out "
            "without their min.insync.replicas (tag 637); the read goes on and the next answer carries them "
            "(insync_proxy_min_insync_miss_wait_exceeded_total counts such answers; "
            "insync_proxy_describe_configs_latency_seconds says how long the brokers take)",
            self.miss_wait * 1000, _topics_text(missing))

    # ------------------------------------------------------------------ writes
    def _topic_in_use(self, topic: str) -> None:
        """A topic came into use: read its min.insync.replicas soon unless it is cached (the Produce cold path), in
        one DescribeConfigs with the others of this loop turn (the control connection sends one request at a time:
        a Metadata naming 5 new topics must not queue 5 reads behind each other)."""
        if not self.has_fresh(topic):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (a synchronous test): the refresh loop picks it up
            if not self._new_topics:
                loop.call_soon(self._read_new_topics)
            self._new_topics.append(topic)

    def _read_new_topics(self) -> None:
        topics, self._new_topics = self._new_topics, []
        self.fetch(topics)  # those a Metadata answer is waiting for are under way already: joined, not asked again

    def _topic_not_followed(self, topic: str) -> None:
        """A client named a topic while `max_topics_in_use` were followed: counted, said once per interval."""
        self.metrics.topics_not_followed_total.inc()
        _repeated.warning(
            NOT_FOLLOWED_CAUSE,
            "%d topics are in use, the bound of max_topics_in_use: topic %.120r is served but not followed (its "
            "ISR and min.insync.replicas are read on demand, not refreshed ahead; no readiness events) until "
            "topics idle for topic_idle_seconds make room; raise max_topics_in_use if this client really uses "
            "that many topics (insync_proxy_topics_not_followed_total counts every such naming)",
            len(self.demand), topic)

    def fetch(self, topics: list[str]) -> asyncio.Future[None]:
        """Start (or join) DescribeConfigs for the topics; the future completes when all are in.

        The future never fails (a failure is logged and counted once, where it happens): callers may
        drop it. Topics in back-off after a failure are not asked again until it ends.
        """
        loop = asyncio.get_running_loop()
        waits = []
        new = []
        backoff = self._backoff
        now = self.clock() if backoff else 0.0
        for topic in topics:
            in_flight = self._in_flight.get(topic)
            if in_flight is not None:
                waits.append(in_flight)
            elif backoff and topic in backoff and backoff[topic][0] > now:
                continue
            else:
                new.append(topic)
        size = self.batch_topics
        for start in range(0, len(new), size):
            batch = new[start : start + size]
            task = loop.create_task(self._describe(batch))
            for topic in batch:
                self._in_flight[topic] = task
            waits.append(task)
        return asyncio.ensure_future(_gather_quietly(waits))

    def _back_off(self, topics: list[str]) -> None:
        """Not asked again for a while: 1 s, doubling per failure up to the TTL."""
        now = self.clock()
        for topic in topics:
            previous = self._backoff.get(topic)
            delay = FIRST_BACKOFF_SECONDS if previous is None else min(previous[1] * 2, max(self.ttl, 1.0))
            self._backoff[topic] = (now + delay, delay)

    async def _describe(self, topics: list[str]) -> None:
        started = time.perf_counter()
        self.metrics.topic_configs_read_total.inc(len(topics))
        try:
            response = await self.control.describe_topic_configs(topics, [CONFIG_KEY])
        except Exception as exc:
            # Reported here, once: the fetch's future never fails, so no caller can drop a failure.
            self._back_off(topics)
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
        now = self.clock()
        failed: list[str] = []
        entries = self.entries
        for result in response.results:
            topic = result.resource_name
            entries.pop(topic, None)  # written again below at the end: the entries stay in the order they were read
            if self._backoff and result.error_code == 0:
                self._backoff.pop(topic, None)
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
                failed.append(topic)  # e.g. a deleted topic still in use: not asked again at every tick
                continue
            value = next((c.value for c in result.configs if c.name == CONFIG_KEY), None)
            try:
                self.entries[topic] = CachedValue(int(value) if value is not None else None, now)
            except ValueError:
                self.entries[topic] = CachedValue(None, now)
        if failed:
            self._back_off(failed)
        self._bound()
        self._update_gauges()

    def set_max_entries(self, max_entries: int) -> None:
        """A new bound (a reload); lowered below the entries held, those read longest ago go at once."""
        self.max_entries = max(1, max_entries)
        self._bound()
        self._update_gauges()

    def _bound(self) -> None:
        """At most `max_entries`: those read longest ago go (counted)."""
        entries = self.entries
        excess = len(entries) - self.max_entries
        if excess > 0:
            for topic in list(itertools.islice(entries, excess)):
                del entries[topic]
            self.metrics.metadata_cache_evicted_total.inc(excess)

    def invalidate(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self.entries.pop(topic, None)
        self._update_gauges()

    def invalidate_all(self) -> None:
        self.entries.clear()
        self._update_gauges()

    def values_for(self, topics: Iterable[str], count: bool = True) -> CacheLookup:
        """The values of these topics to serve in a Metadata answer, in one pass: fresh ones, and stale ones (older
        than the TTL, younger than the TTL plus `max_stale`: served while `served` has them read again); the
        topics with nothing to serve are `missing`. Hits (values served) and misses are counted once, not per
        topic; not at all with ``count=False``, for a second look at the same answer."""
        now = self.clock()
        ttl = self.ttl
        servable = ttl + self.max_stale
        entries = self.entries
        values: dict[str, int] = {}
        missing: list[str] = []
        stale: list[str] = []
        oldest = now
        for topic in topics:
            entry = entries.get(topic)
            if entry is None:
                missing.append(topic)
                continue
            fetched_at = entry.fetched_at
            age = now - fetched_at
            if age >= ttl:
                if age >= servable:
                    missing.append(topic)
                    continue
                stale.append(topic)
            value = entry.value
            if value is not None:
                values[topic] = value
                if fetched_at < oldest:
                    oldest = fetched_at
        if count:
            self.count_lookups(len(values), len(missing))
        return CacheLookup(values, missing, stale, oldest if values else None)

    def served(self, lookup: CacheLookup) -> None:
        """A Metadata answer went out with `lookup`'s values: the age of the oldest is observed, the stale ones
        counted, and what was missing or stale is read in the background (batched; reads under way are joined,
        topics in back-off skipped): never a wait for the client."""
        if lookup.oldest is not None:
            self.metrics.min_insync_served_age_seconds.observe(max(0.0, self.clock() - lookup.oldest))
        if lookup.stale:
            self.metrics.min_insync_stale_served_total.inc(len(lookup.stale))
        if lookup.missing or lookup.stale:
            self.fetch(lookup.missing + lookup.stale if lookup.stale else lookup.missing)

    def count_lookups(self, hits: int, misses: int) -> None:
        """Count cache hits and misses (once per answer)."""
        if hits:
            self.metrics.metadata_cache_hits_total.inc(hits)
        if misses:
            self.metrics.metadata_cache_misses_total.inc(misses)

    def _update_gauges(self) -> None:
        self.metrics.metadata_cache_entries.set(len(self.entries))
        self.metrics.topics_in_use.set(len(self.demand))
        # The topics in use only: they are re-read ahead of expiry, so an age above the TTL means reads fail (the
        # entries of other topics are kept, unrefreshed, up to the max stale age).
        entries = self.entries
        now = self.clock()
        oldest = now
        for topic in self.demand.last_used:
            entry = entries.get(topic)
            if entry is not None and entry.fetched_at < oldest:
                oldest = entry.fetched_at
        self.metrics.metadata_cache_age_seconds.set(now - oldest)

    # ------------------------------------------------------------------ refresh ahead of expiry
    def start(self) -> None:
        self._refresh_task = asyncio.get_running_loop().create_task(self._refresh_loop())

    def due(self) -> list[str]:
        """Topics in use whose entry is missing or past its refresh point (50-80% of the TTL, per topic); and
        the entries of topics not in use that can no longer be served (older than the TTL plus the max stale
        age) are forgotten."""
        now = self.clock()
        ttl = self.ttl
        entries = self.entries
        due = []
        for topic in self.demand.in_use():
            entry = entries.get(topic)
            # A point between 50% and 80% of the TTL, fixed per topic in this process (str hashes are salted
            # per process): a batch spreads out, and sidecars started together do not refresh in step.
            if entry is None or now - entry.fetched_at > ttl * (0.5 + 0.3 * ((hash(topic) & 0xFFFF) / 0xFFFF)):
                due.append(topic)
        servable = ttl + self.max_stale
        expired = [t for t, e in entries.items() if now - e.fetched_at > servable and t not in self.demand]
        for topic in expired:
            del entries[topic]
        if self._backoff:
            for topic in [t for t, (until, _) in self._backoff.items() if until < now - 2 * ttl]:
                del self._backoff[topic]
        return due

    async def _refresh_loop(self) -> None:
        while True:
            # A tick of an eighth of the TTL (jittered): refresh points spread over the TTL are met in time.
            await asyncio.sleep(max(self.ttl / 8, 0.5) * random.uniform(0.8, 1.2))
            try:
                self.demand.tick()
                due = self.due()
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

