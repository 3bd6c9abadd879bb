"""Topic names in admin requests that change topics or their configs, and the broker's answer per topic.

The proxy invalidates its min.insync.replicas cache for exactly these topics when CreateTopics,
DeleteTopics, AlterConfigs or IncrementalAlterConfigs pass through it. These requests are rare and small:
they are decoded whole by the message classes generated from Kafka's specs (protocol/kafka_messages.py).
"""

from __future__ import annotations

import struct
from typing import Final

from .api_keys import ApiKey
from .errors import ProtocolError, TruncatedData
from .headers import peek_request_header, response_header_version
from .kafka_messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from .messages import decode_request, decode_response
from .primitives import Buffer, bytes_view, skip_tagged_fields_at

__all__ = [
    "BROKER_RESOURCE", "TOPIC_CHANGING_APIS", "changed_topic_configs", "changed_topic_names", "topic_change_error_codes",
]

MIN_INSYNC_REPLICAS = "min.insync.replicas"
_SET = 0  # IncrementalAlterConfigs operation

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

#: The requests that create, delete or reconfigure topics.
TOPIC_CHANGING_APIS: Final = frozenset({ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.ALTER_CONFIGS,
                                        ApiKey.INCREMENTAL_ALTER_CONFIGS})


def _min_insync(configs: tuple[tuple[str, int, str | None], ...]) -> int | None:
    """The min.insync.replicas value a config array sets (name, operation, value), if any: the last one."""
    min_insync: int | None = None
    for name, operation, value in configs:
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
    on a malformed request (or a version the codec does not know).
    """
    peek = peek_request_header(frame)
    key, version = peek.api_key, peek.api_version
    if key not in TOPIC_CHANGING_APIS:
        return [], False, {}
    try:
        request = decode_request(key, version, bytes_view(frame)[peek.header_size:])
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeError) as e:
        raise TruncatedData(f"cannot read topic names of API {key} v{version}: {e!r}") from None
    names: list[str] = []
    brokers_changed = False
    min_insync: dict[str, int] = {}
    if isinstance(request, CreateTopicsRequest):
        for topic in request.topics:
            value = _min_insync(tuple((c.name, _SET, c.value) for c in topic.configs))
            if topic.name:
                names.append(topic.name)
                if value is not None:
                    min_insync[topic.name] = value
    elif isinstance(request, DeleteTopicsRequest):
        names = [t.name for t in request.topics if t.name] + [n for n in request.topic_names if n]
    else:
        resources: list[tuple[int, str, tuple[tuple[str, int, str | None], ...]]] = []
        if isinstance(request, AlterConfigsRequest):
            resources = [(r.resource_type, r.resource_name, tuple((c.name, _SET, c.value) for c in r.configs))
                         for r in request.resources]
        elif isinstance(request, IncrementalAlterConfigsRequest):
            resources = [(r.resource_type, r.resource_name,
                          tuple((c.name, c.config_operation, c.value) for c in r.configs)) for r in request.resources]
        for resource_type, resource_name, configs in resources:
            if resource_type == TOPIC_RESOURCE and resource_name:
                names.append(resource_name)
                value = _min_insync(configs)
                if value is not None:
                    min_insync[resource_name] = value
            elif resource_type == BROKER_RESOURCE:
                brokers_changed = True
    return names, brokers_changed, min_insync


def topic_change_error_codes(frame: Buffer, api_key: int, version: int) -> dict[str, int]:
    """Per topic, the error code of a CreateTopics or (Incremental)AlterConfigs response (header + body).

    Lets the proxy tell a change that happened from one the broker refused. Other APIs: empty.
    Raises ProtocolError on a malformed response.
    """
    if api_key not in (ApiKey.CREATE_TOPICS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return {}
    mv = bytes_view(frame)
    try:
        start = skip_tagged_fields_at(mv, 4) if response_header_version(api_key, version) == 1 else 4
        response = decode_response(api_key, version, mv[start:])
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeError) as e:
        raise TruncatedData(f"cannot read the answer of API {api_key} v{version}: {e!r}") from None
    if isinstance(response, CreateTopicsResponse):
        return {t.name: t.error_code for t in response.topics}
    assert isinstance(response, (AlterConfigsResponse, IncrementalAlterConfigsResponse))
    return {r.resource_name: r.error_code for r in response.responses
            if r.resource_type == TOPIC_RESOURCE and r.resource_name}
