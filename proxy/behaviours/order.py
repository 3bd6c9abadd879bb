"""The order in which the behaviours see an exchange, declared once.

The server builds its registry in this order (proxy/server.py); a test or benchmark that registers some of them
puts them in the same order with `in_order`. Why this order: the version negotiation first (it answers
ApiVersions), then Metadata's enrichment and the address rewrite of every other answer, the topic config watcher;
then Produce, one concern each (proxy/behaviours/produce_exchange.py): topic ids named, the acks decided, then at
completion the partitions counted and the leaders' errors learnt.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from insync_proxy.proxy.behaviours.accounting import ProduceAccounting
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.behaviours.addresses import AddressRewrite
from insync_proxy.proxy.behaviours.api_versions import ApiVersionsNegotiation
from insync_proxy.proxy.behaviours.config_changes import TopicConfigWatcher
from insync_proxy.proxy.behaviours.isr_learning import IsrLearning
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher
from insync_proxy.proxy.behaviours.topic_ids import TopicIdResolution
from insync_proxy.proxy.datapath.exchange import BehaviourBase

__all__ = ["ORDER", "in_order"]

#: Every behaviour class, in the order an exchange meets them.
ORDER: Final[tuple[type, ...]] = (
    ApiVersionsNegotiation,
    MetadataEnricher,
    AddressRewrite,
    TopicConfigWatcher,
    TopicIdResolution,
    AcksPolicy,
    ProduceAccounting,
    IsrLearning,
)


def in_order(behaviours: Iterable[BehaviourBase]) -> list[BehaviourBase]:
    """`behaviours` sorted into `ORDER`; at most one of each class, and only classes `ORDER` names."""
    ranked: dict[int, BehaviourBase] = {}
    for behaviour in behaviours:
        kind = type(behaviour)
        rank = next((i for i, cls in enumerate(ORDER) if kind is cls), None)
        if rank is None:
            raise ValueError(f"{kind.__name__} has no place in the behaviours' ORDER (proxy/behaviours/order.py)")
        if rank in ranked:
            raise ValueError(f"two {kind.__name__} behaviours: each has one place in ORDER")
        ranked[rank] = behaviour
    return [ranked[rank] for rank in sorted(ranked)]
