"""Kafka API keys and the first flexible version of each (which picks the header versions).

``ApiKey`` and the table (``FIRST_FLEXIBLE_VERSION``), both generated from Kafka's specs
(protocol/kafka_versions.py), cover every key Apache Kafka defines up to 4.x (0..92), including the ones Kafka
4.0 removed (LeaderAndIsr, ...): a proxy may still see them and must be able to peek their header.
"""

from __future__ import annotations

from typing import Final

from .kafka_versions import FIRST_FLEXIBLE_VERSION, ApiKey

__all__ = ["FIRST_FLEXIBLE_VERSION", "ApiKey", "api_name", "is_flexible"]


#: Keys added after this one are assumed flexible from v0 (every API added since KIP-482 is).
_LAST_KNOWN_API_KEY: Final = max(FIRST_FLEXIBLE_VERSION)


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (api_key, api_version) uses the flexible (compact, tagged) encoding."""
    first = FIRST_FLEXIBLE_VERSION.get(api_key, 0 if api_key > _LAST_KNOWN_API_KEY else None)
    return first is not None and api_version >= first


#: Every API key this codec names.
_API_KEYS: Final = frozenset(int(k) for k in ApiKey)


def api_name(api_key: int) -> str:
    """Kafka's name of an API key for messages, ``API <n>`` for one this codec does not know."""
    return ApiKey(api_key).name if api_key in _API_KEYS else f"API {api_key}"
