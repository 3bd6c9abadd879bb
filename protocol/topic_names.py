"""Topic names in admin requests that change topics or their configs, read without a full decode.

The proxy invalidates its min.insync.replicas cache for exactly these topics when CreateTopics,
DeleteTopics, AlterConfigs or IncrementalAlterConfigs pass through it.
"""

from __future__ import annotations

import struct

from .api_keys import ApiKey
from .errors import ProtocolError, TruncatedData
from .headers import peek_request_header
from .primitives import Buffer, Reader

__all__ = ["BROKER_RESOURCE", "TOPIC_CHANGING_APIS", "changed_topic_names"]

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

#: API key -> first flexible version.
TOPIC_CHANGING_APIS: dict[int, int] = {
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
}


def _string(r: Reader, flexible: bool) -> str | None:
    return r.compact_nullable_string() if flexible else r.nullable_string()


def _skip_configs(r: Reader, flexible: bool, with_operation: bool) -> None:
    for _ in range(max(r.array_length(flexible), 0)):
        _string(r, flexible)  # name
        if with_operation:
            r.int8()
        _string(r, flexible)  # value
        if flexible:
            r.tagged_fields()


def changed_topic_names(frame: Buffer) -> tuple[list[str], bool]:
    """Topics a CreateTopics/DeleteTopics/(Incremental)AlterConfigs request touches.

    Returns (names, brokers_changed): ``brokers_changed`` when an AlterConfigs names a BROKER
    resource, whose defaults every topic without an override inherits. ``frame`` is the request
    (header + body). DeleteTopics v6+ may name topics by id only: those are not returned.
    Raises ProtocolError on a malformed request.
    """
    peek = peek_request_header(frame)
    key, version = peek.api_key, peek.api_version
    flexible = version >= TOPIC_CHANGING_APIS.get(key, 1 << 15)
    r = Reader(frame, peek.header_size)
    names: list[str] = []
    brokers_changed = False
    try:
        if key == ApiKey.CREATE_TOPICS:
            for _ in range(max(r.array_length(flexible), 0)):
                name = _string(r, flexible)
                r.int32()
                r.int16()
                for _ in range(max(r.array_length(flexible), 0)):
                    r.int32()
                    for _ in range(max(r.array_length(flexible), 0)):
                        r.int32()
                    if flexible:
                        r.tagged_fields()
                _skip_configs(r, flexible, with_operation=False)
                if flexible:
                    r.tagged_fields()
                if name:
                    names.append(name)
        elif key == ApiKey.DELETE_TOPICS:
            if version >= 6:
                for _ in range(max(r.array_length(flexible), 0)):
                    name = _string(r, flexible)
                    r.uuid()
                    r.tagged_fields()
                    if name:
                        names.append(name)
            else:
                for _ in range(max(r.array_length(flexible), 0)):
                    name = _string(r, flexible)
                    if name:
                        names.append(name)
        elif key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
            for _ in range(max(r.array_length(flexible), 0)):
                resource_type = r.int8()
                name = _string(r, flexible)
                _skip_configs(r, flexible, with_operation=key == ApiKey.INCREMENTAL_ALTER_CONFIGS)
                if flexible:
                    r.tagged_fields()
                if resource_type == TOPIC_RESOURCE and name:
                    names.append(name)
                elif resource_type == BROKER_RESOURCE:
                    brokers_changed = True
        else:
            return [], False
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeError) as e:
        raise TruncatedData(f"cannot read topic names of API {key} v{version}: {e!r}") from None
    return names, brokers_changed
