"""Topic names in admin requests that change topics or their configs, read without a full decode.

The proxy invalidates its min.insync.replicas cache for exactly these topics when CreateTopics,
DeleteTopics, AlterConfigs or IncrementalAlterConfigs pass through it.
"""

from __future__ import annotations

import struct

from .api_keys import FIRST_FLEXIBLE_VERSION, ApiKey
from .errors import ProtocolError, TruncatedData
from .headers import peek_request_header
from .messages import CreateTopicsResponse, decode_response
from .primitives import Buffer, Reader

__all__ = [
    "BROKER_RESOURCE", "TOPIC_CHANGING_APIS", "changed_topic_configs", "changed_topic_names", "topic_change_error_codes",
]

MIN_INSYNC_REPLICAS = "min.insync.replicas"
_SET = 0  # IncrementalAlterConfigs operation

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

#: The requests that create, delete or reconfigure topics: API key -> first flexible version (from the specs).
TOPIC_CHANGING_APIS: dict[int, int] = {
    key: first for key in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.ALTER_CONFIGS,
                           ApiKey.INCREMENTAL_ALTER_CONFIGS)
    if (first := FIRST_FLEXIBLE_VERSION[key]) is not None
}


def _string(r: Reader, flexible: bool) -> str | None:
    return r.compact_nullable_string() if flexible else r.nullable_string()


def _skip_configs(r: Reader, flexible: bool, with_operation: bool) -> int | None:
    """Skip a config array; return the min.insync.replicas value it sets, if any."""
    min_insync: int | None = None
    for _ in range(max(r.array_length(flexible), 0)):
        name = _string(r, flexible)
        operation = r.int8() if with_operation else _SET
        value = _string(r, flexible)
        if flexible:
            r.tagged_fields()
        if name == MIN_INSYNC_REPLICAS and operation == _SET and value is not None and value.strip().isdigit():
            min_insync = int(value)
    return min_insync


def changed_topic_names(frame: Buffer) -> tuple[list[str], bool]:
    """(names, brokers_changed) of `changed_topic_configs`."""
    names, brokers_changed, _ = changed_topic_configs(frame)
    return names, brokers_changed


def changed_topic_configs(frame: Buffer) -> tuple[list[str], bool, dict[str, int]]:
    """Topics a CreateTopics/DeleteTopics/(Incremental)AlterConfigs request touches.

    Returns (names, brokers_changed, min_insync): ``brokers_changed`` when an AlterConfigs names a
    BROKER resource, whose defaults every topic without an override inherits; ``min_insync`` the
    min.insync.replicas values the request sets explicitly, per topic (CreateTopics configs,
    AlterConfigs entries, IncrementalAlterConfigs SET operations). ``frame`` is the request (header +
    body). DeleteTopics v6+ may name topics by id only: those are not returned. Raises ProtocolError
    on a malformed request.
    """
    peek = peek_request_header(frame)
    key, version = peek.api_key, peek.api_version
    flexible = version >= TOPIC_CHANGING_APIS.get(key, 1 << 15)
    r = Reader(frame, peek.header_size)
    names: list[str] = []
    brokers_changed = False
    min_insync: dict[str, int] = {}
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
                value = _skip_configs(r, flexible, with_operation=False)
                if flexible:
                    r.tagged_fields()
                if name:
                    names.append(name)
                    if value is not None:
                        min_insync[name] = value
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
                value = _skip_configs(r, flexible, with_operation=key == ApiKey.INCREMENTAL_ALTER_CONFIGS)
                if flexible:
                    r.tagged_fields()
                if resource_type == TOPIC_RESOURCE and name:
                    names.append(name)
                    if value is not None:
                        min_insync[name] = value
                elif resource_type == BROKER_RESOURCE:
                    brokers_changed = True
        else:
            return [], False, {}
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeError) as e:
        raise TruncatedData(f"cannot read topic names of API {key} v{version}: {e!r}") from None
    return names, brokers_changed, min_insync


def topic_change_error_codes(frame: Buffer, api_key: int, version: int) -> dict[str, int]:
    """Per topic, the error code of a CreateTopics or (Incremental)AlterConfigs response (header + body).

    Lets the proxy tell a change that happened from one the broker refused. Other APIs: empty.
    Raises ProtocolError on a malformed response.
    """
    flexible = version >= TOPIC_CHANGING_APIS.get(api_key, 1 << 15)
    codes: dict[str, int] = {}
    try:
        r = Reader(frame)
        r.int32()  # correlation id
        if flexible:
            r.tagged_fields()
        if api_key == ApiKey.CREATE_TOPICS:
            response = decode_response(api_key, version, r.take(len(frame) - r.pos))
            assert isinstance(response, CreateTopicsResponse)
            return {t.name: t.error_code for t in response.topics}
        if api_key not in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
            return codes
        r.int32()  # throttle_time_ms
        for _ in range(max(r.array_length(flexible), 0)):
            error_code = r.int16()
            _string(r, flexible)  # error_message
            resource_type = r.int8()
            name = _string(r, flexible)
            if flexible:
                r.tagged_fields()
            if resource_type == TOPIC_RESOURCE and name:
                codes[name] = error_code
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeError) as e:
        raise TruncatedData(f"cannot read the answer of API {api_key} v{version}: {e!r}") from None
    return codes
