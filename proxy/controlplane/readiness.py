"""Partition readiness: which partitions the proxy sees below min.insync.replicas, and when that turns.

Audit events: `isr_change` whenever the view of a partition's ISR or leader changes, `partition_readiness`
when a partition turns unready (ISR below min) or ready again. The `partitions_below_min_isr` gauge is
counted at each sweep (after the proxy's own periodic Metadata). All three cover the topics in use (those
the proxy's clients name, proxy/controlplane/min_insync.py `TopicDemand`, at most `max_topics_in_use`), not every
partition of the cluster: the proxy follows only those. A partition of another topic that reaches the view
(a hide_unready_partitions listener learns every topic of an answer; a leader's error re-reads its topic)
is no event and is not kept here.
"""

from __future__ import annotations

from collections.abc import Iterable

from insync_proxy.audit.events import isr_change_event, partition_readiness_event
from insync_proxy.proxy.controlplane.context import AuditSink
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
from insync_proxy.proxy.datapath.cluster_view import ClusterView, PartitionState, Readiness, effective_min_isr
from insync_proxy.proxy.observability.metrics import ProxyMetrics


class PartitionReadiness:
    """Follows the cluster view; with an audit sink, says each partition's turns as audit events."""

    def __init__(self, cluster_view: ClusterView, min_insync: MinInsyncCache, metrics: ProxyMetrics,
                 audit: AuditSink | None) -> None:
        self.view = cluster_view
        self.min_insync = min_insync
        self.metrics = metrics
        self.audit = audit
        #: Each partition's readiness when last looked at (only kept when audited).
        self._ready: dict[tuple[str, int], bool] = {}
        if audit is not None:
            cluster_view.on_partition_changed.append(self._isr_changed)

    def _isr_changed(self, topic: str, partition: int, old: PartitionState | None, new: PartitionState) -> None:
        """An `isr_change` audit event whenever the proxy's view of a partition's ISR or leader changes."""
        assert self.audit is not None
        if topic not in self.min_insync.demand:
            return  # not followed: not in use, or named beyond max_topics_in_use
        self.audit.emit(isr_change_event(topic, partition, len(new.isr),
                                         effective_min_isr(self.min_insync.peek(topic), len(new.replicas)),
                                         new.leader_id))
        self._note(topic, partition, new)

    def _note(self, topic: str, partition: int, state: PartitionState, readiness: Readiness | None = None) -> None:
        """A partition_readiness event when the view turns a partition unready (ISR below min) or ready again."""
        assert self.audit is not None
        if readiness is None:
            readiness = self.view.readiness(topic, partition, self.min_insync.peek(topic))
        if readiness.min_isr is None or readiness.isr_size is None:
            return  # unknown: neither
        ready = not readiness.below_min_isr
        key = (topic, partition)
        was = self._ready.get(key)
        self._ready[key] = ready
        if was is None and ready:
            return  # first sight of a healthy partition: nothing turned
        if was != ready:
            self.audit.emit(partition_readiness_event(topic, partition, ready, readiness.isr_size, readiness.min_isr,
                                                      state.leader_id))

    def sweep(self, topics: Iterable[str] | None = None) -> None:
        """One pass over the partitions of `topics` (default: every topic in the view): the below-min gauge, and
        readiness events (min.insync.replicas may have become known or changed since the ISR last did)."""
        below = 0
        view, peek = self.view, self.min_insync.peek
        counts = view.topic_partition_counts
        for topic in list(counts) if topics is None else topics:
            min_insync = peek(topic)
            for partition in range(counts.get(topic, 0)):
                state = view.partitions.get((topic, partition))
                if state is None:
                    continue
                readiness = view.readiness(topic, partition, min_insync)
                below += readiness.below_min_isr
                if self.audit is not None:
                    self._note(topic, partition, state, readiness)
        if self.audit is not None and topics is not None:
            # Partitions of topics no longer followed: their next turn is news again.
            followed = set(topics)
            for key in [k for k in self._ready if k[0] not in followed]:
                del self._ready[key]
        self.metrics.partitions_below_min_isr.set(below)
