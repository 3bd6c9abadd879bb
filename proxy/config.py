"""Configuration: a TOML file, INSYNC_PROXY_* environment variables and CLI flags, in rising priority.

Everything is validated at start; a ConfigError says what is wrong and how to fix it.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from insync_proxy.proxy.broker_ports import (
    DEFAULT_NODE_ID_RANGES,
    BrokerPortsError,
    ListenerPorts,
    check_listener_ports,
)

ENV_PREFIX = "INSYNC_PROXY_"
METADATA_SCHEMAS = ("tagged", "kip637")
VALID_FLOORS = (-1, -2)
AUDIT_DETAILS = ("summary", "every_request")


class ConfigError(ValueError):
    """Invalid configuration; the message names the setting and the fix."""


@dataclass(frozen=True)
class TlsConfig:
    """TLS for one side. Upstream: ca_file to trust, optional client cert (mTLS). Downstream: cert+key."""

    enabled: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True


@dataclass(frozen=True)
class SaslConfig:
    """SASL credentials of the proxy's own control connection (client connections pass theirs through)."""

    mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never logged

    def __repr__(self) -> str:
        return f"SaslConfig(mechanism={self.mechanism!r}, username={self.username!r}, password=***)"


@dataclass(frozen=True)
class ListenerConfig:
    """A group of ports clients use: one bootstrap port, and one port per broker from broker_port_base."""

    name: str = "default"
    bootstrap_port: int = 9092
    broker_port_base: int = 9100
    #: Node ids given broker ports: "first-last" ranges or single ids, at consecutive ports from broker_port_base.
    node_id_ranges: tuple[str, ...] = DEFAULT_NODE_ID_RANGES
    metadata_schema: str = "tagged"  # "kip637": KIP-637 literal Metadata v10 (never for real v10+ clients)
    hide_unready_partitions: bool = False


@dataclass(frozen=True)
class AcksPolicyConfig:
    """A per-topic-pattern policy: fast_fail precheck for acks=-1, and an acks floor for acks=1."""

    topics: str = ".*"
    fast_fail: bool = False
    acks_floor: int | None = None

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.topics, topic) is not None


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = True
    directory: str = "audit"
    max_file_bytes: int = 64 * 1024 * 1024
    max_total_bytes: int = 1024 * 1024 * 1024
    queue_size: int = 100_000
    kafka_topic: str | None = None
    #: produce_summary events cover this many seconds each (schema v2).
    interval_seconds: float = 10.0
    #: "summary" (default), or "every_request": also one produce_decision event per partition per request
    #: (debugging only: its volume grows with traffic).
    detail: str = "summary"


@dataclass(frozen=True)
class ProxyConfig:
    bootstrap_servers: tuple[str, ...] = ()
    bind_host: str = "127.0.0.1"
    advertised_host: str = "127.0.0.1"
    listeners: tuple[ListenerConfig, ...] = (ListenerConfig(),)
    admin_host: str = "127.0.0.1"
    admin_port: int = 9190
    proxy_id: str = field(default_factory=socket.gethostname)
    max_frame_bytes: int = 104_857_600
    drain_timeout_seconds: float = 30.0
    connect_timeout_seconds: float = 10.0
    #: Each read of the control connection (Metadata, DescribeConfigs) waits this long on one broker, then
    #: moves on to the next.
    control_request_timeout_seconds: float = 2.0
    upstream_tls: TlsConfig = TlsConfig()
    downstream_tls: TlsConfig = TlsConfig()
    control_sasl: SaslConfig = SaslConfig()
    min_insync_ttl_seconds: float = 30.0
    min_insync_miss_wait_ms: float = 50.0
    metadata_refresh_seconds: float = 10.0
    acks_policies: tuple[AcksPolicyConfig, ...] = ()
    audit: AuditConfig = AuditConfig()
    topic_label_limit: int = 200
    log_level: str = "INFO"
    use_uvloop: bool = True
    #: Tests: scan every response written to clients for a real broker host+port; count and log each.
    debug_address_leak_check: bool = False
    #: Protocol debugging: raw request and broker-response frames of the APIs the proxy decodes are written
    #: here (the first few per API and version). Never on in production: frames hold record data.
    debug_capture_dir: str | None = None

    def validate(self) -> ProxyConfig:
        """Return self, or raise ConfigError with what is wrong and how to fix it."""
        if not self.bootstrap_servers:
            raise ConfigError(
                "no upstream brokers: set --bootstrap-servers host:port[,host:port] "
                f"(or {ENV_PREFIX}BOOTSTRAP_SERVERS, or bootstrap_servers in the TOML file)"
            )
        for server in self.bootstrap_servers:
            parse_host_port(server, "bootstrap_servers")
        ports: dict[int, str] = {self.admin_port: "admin_port"}
        names = set()
        for listener in self.listeners:
            if listener.name in names:
                raise ConfigError(f"listener name {listener.name!r} is used twice: give each [[listener]] its own name")
            names.add(listener.name)
            if listener.metadata_schema not in METADATA_SCHEMAS:
                raise ConfigError(
                    f"listener {listener.name}: metadata_schema={listener.metadata_schema!r}; "
                    f"use one of {', '.join(METADATA_SCHEMAS)}"
                )
            for what, port in (("bootstrap_port", listener.bootstrap_port),):
                _check_port(port, f"listener {listener.name}: {what}")
                if port in ports:
                    raise ConfigError(f"listener {listener.name}: {what} {port} is already used by {ports[port]}")
                ports[port] = f"listener {listener.name} {what}"
            _check_port(listener.broker_port_base, f"listener {listener.name}: broker_port_base")
        _check_port(self.admin_port, "admin_port")
        _check_broker_ports(self)
        for policy in self.acks_policies:
            try:
                re.compile(policy.topics)
            except re.error as exc:
                raise ConfigError(f"acks_policy topics={policy.topics!r} is not a valid regex: {exc}") from None
            if policy.acks_floor is not None and policy.acks_floor not in VALID_FLOORS:
                raise ConfigError(
                    f"acks_policy {policy.topics!r}: acks_floor={policy.acks_floor} must be -1 (all) or -2 "
                    "(min.insync.replicas)"
                )
        if not self.audit.interval_seconds > 0:
            raise ConfigError(f"[audit] interval_seconds={self.audit.interval_seconds}: must be above 0 (default 10)")
        if self.audit.detail not in AUDIT_DETAILS:
            raise ConfigError(f"[audit] detail={self.audit.detail!r}: use one of {', '.join(AUDIT_DETAILS)}")
        if not self.control_request_timeout_seconds > 0:
            raise ConfigError(
                f"control_request_timeout_seconds={self.control_request_timeout_seconds}: must be above 0 (default 2)"
            )
        if self.max_frame_bytes < 1024:
            raise ConfigError(f"max_frame_bytes={self.max_frame_bytes} is too small (Kafka's default is 104857600)")
        if self.control_sasl.mechanism and self.control_sasl.mechanism not in (
            "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"
        ):
            raise ConfigError(f"control SASL mechanism {self.control_sasl.mechanism!r}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        for tls_name, tls in (("upstream_tls", self.upstream_tls), ("downstream_tls", self.downstream_tls)):
            for attr in ("ca_file", "cert_file", "key_file"):
                path = getattr(tls, attr)
                if tls.enabled and path and not Path(path).is_file():
                    raise ConfigError(f"{tls_name}.{attr}={path}: no such file")
        if self.downstream_tls.enabled and not (self.downstream_tls.cert_file and self.downstream_tls.key_file):
            raise ConfigError("downstream_tls needs cert_file and key_file")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"log_level={self.log_level!r}: use DEBUG, INFO, WARNING or ERROR")
        return self

    def upstream_addresses(self) -> list[tuple[str, int]]:
        return [parse_host_port(s, "bootstrap_servers") for s in self.bootstrap_servers]

    def policy_for(self, topic: str) -> AcksPolicyConfig | None:
        """The first acks policy whose pattern matches the topic."""
        for policy in self.acks_policies:
            if policy.matches(topic):
                return policy
        return None


def _check_broker_ports(config: ProxyConfig) -> None:
    """Each listener's node_id_ranges fit the port range and collide with no other port of the proxy."""
    try:
        check_listener_ports([ListenerPorts(lc.name, lc.bootstrap_port, lc.broker_port_base, lc.node_id_ranges)
                              for lc in config.listeners], config.admin_port)
    except BrokerPortsError as exc:
        raise ConfigError(str(exc)) from None


def _check_port(port: int, what: str) -> None:
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{what}={port!r} is not a TCP port (0-65535)")


def parse_host_port(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"{what}: {value!r} is not host:port (e.g. kafka-1:9092)")
    return host.strip("[]"), int(port)


def _coerce(value: Any, target: Any, name: str) -> Any:
    """Convert strings from env/CLI to the dataclass field's type."""
    if not isinstance(value, str):
        return value
    text = str(target)
    if "bool" in text:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}={value!r}: expected true or false")
    if "tuple[str" in text:
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if text.startswith("int") or text == "int":
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r}: expected a whole number") from None
    if text.startswith("float") or text == "float":
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r}: expected a number") from None
    return value


_FLAT_FIELDS = {f.name: f for f in fields(ProxyConfig)}


def load_config(path: str | None = None, env: dict[str, str] | None = None, overrides: dict[str, Any] | None = None) -> ProxyConfig:
    """Build the configuration: defaults < TOML file < INSYNC_PROXY_* env < CLI overrides."""
    env = dict(os.environ) if env is None else env
    raw: dict[str, Any] = {}
    if path:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "listener":
            values["listeners"] = tuple(_build(ListenerConfig, item, f"[[listener]] #{i + 1}") for i, item in enumerate(value))
        elif key == "acks_policy":
            values["acks_policies"] = tuple(
                _build(AcksPolicyConfig, item, f"[[acks_policy]] #{i + 1}") for i, item in enumerate(value)
            )
        elif key == "audit":
            values["audit"] = _build(AuditConfig, value, "[audit]")
        elif key in ("upstream_tls", "downstream_tls"):
            values[key] = _build(TlsConfig, value, f"[{key}]")
        elif key == "control_sasl":
            values[key] = _build(SaslConfig, value, "[control_sasl]")
        elif key in _FLAT_FIELDS:
            values[key] = tuple(value) if isinstance(value, list) else value
        else:
            raise ConfigError(f"config file {path}: unknown setting {key!r}; see `insync-proxy run --help`")
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX):].lower()
        if name in _FLAT_FIELDS and name not in ("listeners", "acks_policies", "audit"):
            values[name] = _coerce(value, _FLAT_FIELDS[name].type, key)
        elif name == "control_sasl_password":
            values["control_sasl"] = replace(values.get("control_sasl", SaslConfig()), password=value)
        elif name == "audit_directory":
            values["audit"] = replace(values.get("audit", AuditConfig()), directory=value)
        elif name == "audit_enabled":
            values["audit"] = replace(values.get("audit", AuditConfig()), enabled=_coerce(value, "bool", key))
        elif name == "audit_interval_seconds":
            values["audit"] = replace(values.get("audit", AuditConfig()),
                                      interval_seconds=_coerce(value, "float", key))
        elif name == "audit_detail":
            values["audit"] = replace(values.get("audit", AuditConfig()), detail=value)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key in _FLAT_FIELDS:
            values[key] = _coerce(value, _FLAT_FIELDS[key].type, "--" + key.replace("_", "-"))
        else:
            raise ConfigError(f"unknown override {key}")
    try:
        config = ProxyConfig(**values)
    except TypeError as exc:
        raise ConfigError(f"configuration: {exc}") from None
    return config.validate()


def _build(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table")
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    return cls(**{k: _coerce(v, known[k].type, f"{where}.{k}") for k, v in data.items()})
