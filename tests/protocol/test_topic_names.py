"""The topic-change scanners against requests and responses that kio (the oracle) writes."""

from __future__ import annotations

import datetime
import importlib
import io
import struct
from typing import Any

import pytest

from insync_proxy.protocol import ApiKey, ProtocolError, RequestHeader, encode_request_header
from insync_proxy.protocol.topic_names import changed_topic_configs, topic_change_error_codes

kio_serial = pytest.importorskip("kio.serial")
ErrorCode = importlib.import_module("kio.schema.errors").ErrorCode


def _kio(api: str, version: int, kind: str) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def _write(entity: Any) -> bytes:
    out = io.BytesIO()
    kio_serial.entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _request(api_key: int, version: int, body: bytes) -> bytes:
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=9, client_id="t")
    return encode_request_header(header) + body


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_names_topics_and_the_min_insync_it_sets(version: int) -> None:
    m = _kio("incremental_alter_configs", version, "request")
    request = m.IncrementalAlterConfigsRequest(validate_only=False, resources=(
        m.AlterConfigsResource(resource_type=2, resource_name="orders", configs=(
            m.AlterableConfig(name="retention.ms", config_operation=0, value="1000"),
            m.AlterableConfig(name="min.insync.replicas", config_operation=0, value="2"),
        )),
        m.AlterConfigsResource(resource_type=2, resource_name="payments", configs=(
            m.AlterableConfig(name="min.insync.replicas", config_operation=1, value=None),  # DELETE
        )),
        m.AlterConfigsResource(resource_type=4, resource_name="1", configs=()),
    ))
    frame = _request(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, _write(request))
    assert changed_topic_configs(frame) == (["orders", "payments"], True, {"orders": 2})


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_names_topics_and_the_min_insync_it_sets(version: int) -> None:
    m = _kio("alter_configs", version, "request")
    request = m.AlterConfigsRequest(validate_only=False, resources=(
        m.AlterConfigsResource(resource_type=2, resource_name="orders", configs=(
            m.AlterableConfig(name="min.insync.replicas", value="3"),)),
    ))
    frame = _request(ApiKey.ALTER_CONFIGS, version, _write(request))
    assert changed_topic_configs(frame) == (["orders"], False, {"orders": 3})


@pytest.mark.parametrize("version", [0, 1])
def test_the_answers_error_codes_per_topic(version: int) -> None:
    m = _kio("incremental_alter_configs", version, "response")
    response = m.IncrementalAlterConfigsResponse(throttle_time=datetime.timedelta(0), responses=(
        m.AlterConfigsResourceResponse(error_code=ErrorCode(0), error_message=None, resource_type=2,
                                       resource_name="orders"),
        m.AlterConfigsResourceResponse(error_code=ErrorCode(44), error_message="policy", resource_type=2,
                                       resource_name="payments"),
    ))
    header = struct.pack(">i", 9) + (b"\x00" if version >= 1 else b"")
    frame = header + _write(response)
    assert topic_change_error_codes(frame, ApiKey.INCREMENTAL_ALTER_CONFIGS, version) == {"orders": 0, "payments": 44}
    with pytest.raises(ProtocolError):
        topic_change_error_codes(frame[:-3], ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
