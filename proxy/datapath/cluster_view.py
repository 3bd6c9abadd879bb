"""The proxy's view of the cluster: brokers' real addresses, and each partition's leader, replicas and ISR.

Fed by every Metadata response that passes through the proxy and by the control connection's own
periodic refresh. Only the proxy reads the real addresses; clients only ever see listener addresses.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from insync_proxy.protocol import MetadataResponse, MetadataScan, ScannedTopic
from insync_proxy.protocol.primitives import SlottedRecord

NULL_TOPIC_ID: Final = uuid.UUID(int=0)
#: How long a leader's NOT_ENOUGH_REPLICAS answer outweighs Metadata that still shows a full ISR: long
#: enough for the re-read it triggers to see the shrink.
BROKER_SAID_SECONDS: Final = 3.0
#: Partitions whose leader's word is remembered; past it, words older than BROKER_SAID_SECONDS go.
BROKER_SAID_KEPT: Final = 1024
#: partition index, leader id, leader epoch, replicas, ISR
_PartitionFields = tuple[int, int, int, tuple[int, ...], tuple[int, ...]]


def effective_min_isr(min_insync_replicas: int | None, replica_count: int) -> int | None:
    """As the broker computes it: min(min.insync.replicas, replica count); None when unknown."""
    if min_insync_replicas is None or replica_count <= 0:
        return None
    return min(min_insync_replicas, replica_count)


class Readiness(SlottedRecord):
    """A partition's ISR size against its effective min ISR, as the proxy sees it (None: unknown). Asked per
    partition of every checked Produce request: a `SlottedRecord`."""

    __slots__ = ("isr_size", "min_isr")
    _fields: ClassVar[tuple[str, ...]] = ("isr_size", "min_isr")

    def __init__(self, isr_size: int | None, min_isr: int | None) -> None:
        self.isr_size = isr_size
        self.min_isr = min_isr

    @property
    def below_min_isr(self) -> bool:
        """True only when both are known and the ISR is too small; unknown is never "below"."""
        return self.isr_size is not None and self.min_isr is not None and self.isr_size < self.min_isr


UNKNOWN_READINESS: Final = Readiness(None, None)


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    seen_at: float


class ClusterView:
    """Brokers and partition states, last writer wins (Metadata answers are point-in-time snapshots)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: Monotonic seconds (a parameter, so a test can step it: a compiled module's globals cannot be patched).
        self.clock = clock
        self.brokers: dict[int, tuple[str, int]] = {}
        self.known_brokers: dict[int, tuple[str, int]] = {}  # every broker ever seen, for late connections
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.topic_ids: dict[uuid.UUID, str] = {}
        self.topic_partition_counts: dict[str, int] = {}
        self.updated_at = 0.0
        self._broker_said_below: dict[tuple[str, int], float] = {}
        self._broker_said_prune_at = BROKER_SAID_KEPT
        self.on_partition_changed: list[Callable[[str, int, PartitionState | None, PartitionState], None]] = []

    def update(self, response: MetadataResponse, all_topics: bool = False) -> None:
        """Take in a decoded MetadataResponse; `all_topics` when it answered a request for every topic."""
        self._apply(
            {b.node_id: (b.host, b.port) for b in response.brokers},
            ((t.name, t.topic_id, t.error_code,
              [(p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes))
               for p in t.partitions] if t.error_code == 0 else [])
             for t in response.topics),
            all_topics,
        )

    def update_from_scan(self, scan: MetadataScan, all_topics: bool = False,
                         only: Container[str] | None = None, topics: Sequence[ScannedTopic] | None = None) -> None:
        """Take in a scanned MetadataResponse (partitions are read from the scan's offsets only here); with
        `only`, just those topics (the topics in use: a 3,000-topic answer then costs what its few topics do);
        with `topics`, just these of the scan's topics (a slice of a big answer)."""
        if topics is None:
            topics = scan.topics
        if only is not None:
            topics = [t for t in topics if t.name is not None and t.name in only]
        self._apply(
            {b.node_id: (b.host, b.port) for b in scan.brokers},
            ((t.name, t.topic_id, t.error_code,
              [(p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
               for p in scan.partitions(t)] if t.error_code == 0 else [])
             for t in topics),
            all_topics and only is None,
        )

    def _apply(
        self,
        brokers: dict[int, tuple[str, int]],
        topics: Iterable[tuple[str | None, uuid.UUID | None, int, list[_PartitionFields]]],
        all_topics: bool,
    ) -> None:
        now = self.clock()
        if brokers and brokers != self.brokers:
            self.brokers = brokers
            self.known_brokers.update(brokers)
        seen_topics: set[str] = set()
        for name, topic_id, error_code, partitions in topics:
            if name is None:
                name = self.topic_ids.get(topic_id) if topic_id is not None else None
                if name is None:
                    continue
            if error_code != 0:
                if error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION: it is gone
                    self.forget_topic(name)
                continue
            seen_topics.add(name)
            if topic_id is not None and topic_id != NULL_TOPIC_ID:
                self.topic_ids[topic_id] = name
            self.topic_partition_counts[name] = len(partitions)
            for index, leader_id, leader_epoch, replicas, isr in partitions:
                key = (name, index)
                old = self.partitions.get(key)
                # Java ignores partition metadata whose leader epoch went backwards: so do we.
                if old is not None and leader_epoch >= 0 and leader_epoch < old.leader_epoch:
                    continue
                state = PartitionState(leader_id, leader_epoch, replicas, isr, now)
                self.partitions[key] = state
                if old is None or old.isr != state.isr or old.leader_id != state.leader_id:
                    for on_change in self.on_partition_changed:
                        on_change(name, index, old, state)
        if all_topics:
            for name in set(self.topic_partition_counts) - seen_topics:
                self.forget_topic(name)
        self.updated_at = now

    def forget_topics_but(self, keep: Container[str], older_than: float) -> None:
        """Forget the topics not in `keep` whose partitions nobody told the view about for `older_than` seconds."""
        now = self.clock()
        for name, count in list(self.topic_partition_counts.items()):
            if name in keep or not count:
                continue
            state = self.partitions.get((name, 0))
            if state is None or now - state.seen_at > older_than:
                self.forget_topic(name)

    def forget_topic(self, name: str) -> None:
        count = self.topic_partition_counts.pop(name, 0)
        for i in range(count):
            self.partitions.pop((name, i), None)
        said = self._broker_said_below
        if said:
            for key in [k for k in said if k[0] == name]:
                del said[key]
        for topic_id, known in list(self.topic_ids.items()):
            if known == name:
                del self.topic_ids[topic_id]

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get((topic, partition))

    def readiness(self, topic: str, partition: int, min_insync_replicas: int | None) -> Readiness:
        """The one answer to "is this partition below its min ISR?" (acks precheck, hiding, gauges).

        A partition whose leader answered NOT_ENOUGH_REPLICAS within BROKER_SAID_SECONDS counts as below,
        whatever the last Metadata said (brokers' metadata may lag the leader's own ISR by a moment)."""
        state = self.partitions.get((topic, partition))
        if state is None:
            return UNKNOWN_READINESS
        min_isr = effective_min_isr(min_insync_replicas, len(state.replicas))
        isr_size = len(state.isr)
        if self._broker_said_below and min_isr is not None and isr_size >= min_isr:
            said_at = self._broker_said_below.get((topic, partition))
            if said_at is not None:
                if self.clock() - said_at < BROKER_SAID_SECONDS:
                    return Readiness(min_isr - 1, min_isr)
                del self._broker_said_below[(topic, partition)]
        return Readiness(isr_size, min_isr)

    def broker_said_below_min_isr(self, topic: str, partition: int) -> None:
        """The partition's leader answered NOT_ENOUGH_REPLICAS(_AFTER_APPEND) to a forwarded Produce."""
        now = self.clock()
        said = self._broker_said_below
        if len(said) >= self._broker_said_prune_at and (topic, partition) not in said:
            # A word older than BROKER_SAID_SECONDS no longer counts: forgotten (readiness() drops only those it meets);
            # the next pass waits for twice what stays.
            self._broker_said_below = said = {k: at for k, at in said.items() if now - at < BROKER_SAID_SECONDS}
            self._broker_said_prune_at = max(BROKER_SAID_KEPT, 2 * len(said))
        said[(topic, partition)] = now

    def topic_name(self, topic: str | uuid.UUID) -> str | None:
        if isinstance(topic, uuid.UUID):
            return self.topic_ids.get(topic)
        return topic
