"""Configuration: one typed schema, read from a TOML file, INSYNC_PROXY_* environment variables and flags.

Each setting is a dataclass field declared with `setting(...)`: its type comes from the annotation, its
default, bounds, choices, secrecy and one-line meaning from the field's metadata. From that one definition
come the TOML keys, the environment variable names (INSYNC_PROXY_ + [table_] + field), the flags of
`insync-proxy run`, the validation of every source, and docs/configuration.md
(`python -m insync_proxy.proxy.config --write`). A new field declared with `setting(...)` is all a new
setting needs. Priority, lowest first: defaults, the TOML file, the environment, the flags.

Everything is validated at start; a ConfigError is one line naming the setting as the user spelled it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import socket
import sys
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

from insync_proxy.proxy.broker_ports import (
    DEFAULT_NODE_ID_RANGES,
    BrokerPortsError,
    ListenerPorts,
    check_listener_ports,
)

ENV_PREFIX = "INSYNC_PROXY_"
#: Where every setting is described (generated from this module).
DOCS = "docs/configuration.md"

#: INSYNC_PROXY_* variables that are not settings of the proxy: the dev cluster, the tests and the build read
#: them. Any other INSYNC_PROXY_* variable that names no setting is an error (a misspelt setting).
OTHER_ENV_VARS: dict[str, str] = {
    "INSYNC_PROXY_KAFKA_VERSION": "Kafka version of `demo`, `dev-cluster` and the tests",
    "INSYNC_PROXY_KAFKA_LIBS": "an unpacked Kafka's libs/ directory, used instead of jars from Maven",
    "INSYNC_PROXY_KAFKA_BACKEND": "`local` (Kafka's jars as JVMs) or `testcontainers`, for the tests",
    "INSYNC_PROXY_CACHE": "where Kafka jars and the dev cluster's state live (default ~/.cache/insync-proxy)",
    "INSYNC_PROXY_TEST_LOGS": "where the tests keep logs of failed runs",
    "INSYNC_PROXY_COMPILE": "`1` builds the compiled (mypyc) data path at install time",
}

METADATA_SCHEMAS = ("tagged", "kip637")
VALID_FLOORS = (-1, -2)
AUDIT_DETAILS = ("summary", "every_request")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    """Invalid configuration; the message names the setting and what is allowed."""


@dataclass(frozen=True)
class Meta:
    """What the schema knows of one setting besides its type."""

    meaning: str = ""
    #: Bounds of a number, or of the number of items of a list / array of tables.
    min: float | None = None
    max: float | None = None
    #: The minimum itself is not allowed (durations that must be above 0).
    min_exclusive: bool = False
    choices: tuple[Any, ...] = ()
    #: Choices compared without case; the value becomes the choice's spelling.
    ignore_case: bool = False
    #: Never printed or logged; no flag (a flag's value shows in `ps`).
    secret: bool = False
    #: "host:port" or "regex": what each string must be besides a string.
    format: str | None = None
    #: Must be set (no usable default).
    required: bool = False
    #: This setting names a file holding the secret setting of this name (read at start, newline stripped).
    file_for: str | None = None
    #: TOML key when it is not the field name (e.g. `listener` for `listeners`).
    toml: str | None = None
    #: Flag spelling instead of the generated one; "" for none. Booleans get --x and --no-x.
    flag: str | None = None
    #: False: no environment variable.
    env: bool = True
    #: Arrays of tables: the first item's scalar settings get flags (the first listener's ports).
    first_item_flags: bool = False
    #: The default as the docs show it, when the value itself says nothing (a computed default).
    default_text: str | None = None


def setting(default: Any = MISSING, *, meaning: str, default_factory: Any = MISSING, **meta: Any) -> Any:
    """A dataclass field that is a setting: `meaning` is its one-line description; see `Meta` for the rest."""
    info = Meta(meaning=meaning, **meta)
    metadata = {"setting": info}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata, repr=not info.secret)
    return field(default=default, metadata=metadata, repr=not info.secret)


# ---------------------------------------------------------------------------------------------- the settings


@dataclass(frozen=True)
class TlsConfig:
    """TLS for one side. Upstream: ca_file to trust, optional client cert (mTLS). Downstream: cert+key."""

    enabled: bool = setting(False, meaning="use TLS on this side")
    ca_file: str | None = setting(
        None, meaning="PEM file of the CA certificates to trust (upstream: default the system store; "
                      "downstream: when set, clients must present a certificate it signed)")
    cert_file: str | None = setting(
        None, meaning="PEM certificate the proxy presents (upstream: the mTLS client certificate)")
    key_file: str | None = setting(None, meaning="PEM private key of cert_file")
    key_password: str | None = setting(None, secret=True, meaning="password of an encrypted key_file")
    key_password_file: str | None = setting(None, file_for="key_password",
                                            meaning="file holding key_password (instead of the value)")
    check_hostname: bool = setting(True, meaning="upstream: verify the broker's certificate names the host "
                                                 "connected to")


@dataclass(frozen=True)
class SaslConfig:
    """SASL credentials of the proxy's own control connection (client connections pass theirs through)."""

    mechanism: str | None = setting(None, choices=SASL_MECHANISMS, ignore_case=True,
                                    meaning="SASL mechanism of the proxy's own connections; unset: no SASL")
    username: str | None = setting(None, meaning="SASL user of the proxy's own connections")
    password: str | None = setting(None, secret=True, meaning="password of username")
    password_file: str | None = setting(None, file_for="password",
                                        meaning="file holding the password (instead of the value)")


@dataclass(frozen=True)
class ListenerConfig:
    """A group of ports clients use: one bootstrap port, and one port per broker from broker_port_base."""

    name: str = setting("default", flag="--listener-name", meaning="names the listener in logs and metrics")
    bootstrap_port: int = setting(9092, min=0, max=65535,
                                  meaning="port clients bootstrap from (0: any free port)")
    broker_port_base: int = setting(9100, min=0, max=65535,
                                    meaning="first broker port: the node ids of node_id_ranges take consecutive ports from here")
    node_id_ranges: tuple[str, ...] = setting(
        DEFAULT_NODE_ID_RANGES, flag="--node-id-ranges",
        meaning="node ids given broker ports, as \"first-last\" ranges or single ids, in order from broker_port_base "
                "(default 0-89: node id + 9100, clear of the admin port)")
    metadata_schema: str = setting(
        "tagged", choices=METADATA_SCHEMAS,
        meaning="tagged: min.insync.replicas as tagged field 637 (every client); kip637: KIP-637's literal "
                "Metadata v10 (never for real Metadata v10+ clients)")
    hide_unready_partitions: bool = setting(
        False, meaning="present partitions below min ISR as leaderless (producer-only listeners)")


@dataclass(frozen=True)
class AcksPolicyConfig:
    """A per-topic-pattern policy: fast_fail precheck for acks=-1, and an acks floor for acks=1."""

    topics: str = setting(".*", format="regex", meaning="regular expression over the whole topic name")
    fast_fail: bool = setting(False, meaning="the acks=-2 precheck (ISR below min: NOT_ENOUGH_REPLICAS) for acks=-1 too")
    acks_floor: int | None = setting(None, choices=VALID_FLOORS,
                                     meaning="raise acks=1 to this: -1 (all) or -2 (min.insync.replicas)")

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.topics, topic) is not None


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = setting(True, flag="--audit", meaning="write audit events")
    directory: str = setting("audit", meaning="where audit JSON Lines files go")
    max_file_bytes: int = setting(64 * 1024 * 1024, min=1024, meaning="an audit file is rotated at this size")
    max_total_bytes: int = setting(1024 * 1024 * 1024, min=1024,
                                   meaning="the oldest audit files are deleted above this total")
    queue_size: int = setting(100_000, min=1, meaning="events waiting for the writer; a full queue drops and counts")
    kafka_topic: str | None = setting(None, meaning="also write the events to this (existing) topic")
    interval_seconds: float = setting(10.0, min=0.1, meaning="seconds each produce_summary event covers")
    detail: str = setting(
        "summary", choices=AUDIT_DETAILS,
        meaning="every_request: also one produce_decision event per partition per request (debugging)")


@dataclass(frozen=True)
class ProxyConfig:
    bootstrap_servers: tuple[str, ...] = setting(
        (), required=True, format="host:port",
        meaning="the real brokers to bootstrap from: host:port, a list or one comma-separated string")
    bind_host: str = setting("127.0.0.1", meaning="address the client listeners bind")
    advertised_host: str = setting("127.0.0.1", meaning="host clients are told to connect to")
    listeners: tuple[ListenerConfig, ...] = setting(
        (ListenerConfig(),), toml="listener", min=1, first_item_flags=True,
        meaning="groups of client ports: a bootstrap port, and one port per broker (node_id_ranges)")
    admin_host: str = setting("127.0.0.1", meaning="address of the admin HTTP port")
    admin_port: int = setting(9190, min=0, max=65535, meaning="admin HTTP port: /metrics /healthz /readyz")
    proxy_id: str = setting(default_factory=socket.gethostname, default_text="the host name",
                            meaning="name of this proxy in audit events")
    max_frame_bytes: int = setting(104_857_600, min=1024, max=2**31 - 1,
                                   meaning="largest Kafka frame accepted, like the broker's socket.request.max.bytes")
    drain_timeout_seconds: float = setting(30.0, min=0, meaning="on SIGTERM, wait this long for in-flight requests")
    connect_timeout_seconds: float = setting(10.0, min=0, min_exclusive=True,
                                             meaning="connecting to a broker gives up after this long")
    control_request_timeout_seconds: float = setting(
        2.0, min=0, min_exclusive=True,
        meaning="each read of the control connection waits this long on one broker, then tries the next")
    upstream_tls: TlsConfig = setting(TlsConfig(), meaning="TLS towards the brokers")
    downstream_tls: TlsConfig = setting(TlsConfig(), meaning="TLS towards the clients")
    control_sasl: SaslConfig = setting(SaslConfig(), meaning="SASL of the proxy's own connections")
    min_insync_ttl_seconds: float = setting(30.0, min=1, meaning="min.insync.replicas cache TTL (refreshed ahead)")
    min_insync_miss_wait_ms: float = setting(
        50.0, min=0, meaning="a Produce to a topic whose min.insync.replicas is unknown waits this long for it")
    metadata_refresh_seconds: float = setting(10.0, min=1,
                                              meaning="the proxy's own Metadata refresh (brokers, ISR)")
    acks_policies: tuple[AcksPolicyConfig, ...] = setting(
        (), toml="acks_policy", meaning="per-topic acks policies; the first whose topics match wins")
    audit: AuditConfig = setting(AuditConfig(), meaning="the audit stream of acks decisions")
    topic_label_limit: int = setting(200, min=0, meaning="topics with their own metric labels; the rest are `other`")
    log_level: str = setting("INFO", choices=LOG_LEVELS, ignore_case=True, meaning="log level")
    log_format: str = setting("text", choices=LOG_FORMATS,
                              meaning="text, or json: one object a line (time, level, logger, message)")
    use_uvloop: bool = setting(True, flag="--uvloop", meaning="use uvloop's event loop (about twice the throughput)")
    debug_address_leak_check: bool = setting(
        False, meaning="tests: scan every response to clients for a real broker address; count and log each")
    debug_capture_dir: str | None = setting(
        None, meaning="protocol debugging: write raw frames of the decoded APIs here (never in production: "
                      "frames hold record data)")

    def validate(self) -> ProxyConfig:
        """Return self, or raise ConfigError: every value against the schema, then the rules across settings."""
        for f in fields(self):
            if _dataclass(_array_item(_hints(ProxyConfig)[f.name])) is not None:
                _check_count(_setting_meta(f), len(getattr(self, f.name)), _toml_name(f), _toml_name(f))
        for entry, value in iter_values(self):
            if entry.meta.required and value in (None, (), ""):
                raise ConfigError(_missing(entry))
            _check(value, entry, entry.key)
        _cross_checks(self)
        return self

    def upstream_addresses(self) -> list[tuple[str, int]]:
        return [parse_host_port(s, "bootstrap_servers") for s in self.bootstrap_servers]

    def policy_for(self, topic: str) -> AcksPolicyConfig | None:
        """The first acks policy whose pattern matches the topic."""
        for policy in self.acks_policies:
            if policy.matches(topic):
                return policy
        return None


def _cross_checks(config: ProxyConfig) -> None:
    """Rules across settings; each value alone is already valid."""
    ports: dict[int, str] = {config.admin_port: "admin_port"} if config.admin_port else {}
    names: set[str] = set()
    for i, listener in enumerate(config.listeners):
        where = f"listener[{i + 1}]"
        if listener.name in names:
            raise ConfigError(f"{where}.name = {listener.name!r} is used twice: give each [[listener]] its own name")
        names.add(listener.name)
        port = listener.bootstrap_port
        if port and port in ports:
            raise ConfigError(f"{where}.bootstrap_port = {port} is already used by {ports[port]}")
        if port:
            ports[port] = f"{where}.bootstrap_port"
    _check_broker_ports(config)
    for side in ("upstream_tls", "downstream_tls"):
        tls: TlsConfig = getattr(config, side)
        if tls.enabled:
            for attr in ("ca_file", "cert_file", "key_file"):
                path = getattr(tls, attr)
                if path and not Path(path).is_file():
                    raise ConfigError(f"{side}.{attr} = {path!r}: no such file")
        if bool(tls.cert_file) != bool(tls.key_file):
            raise ConfigError(f"{side}: a certificate needs both cert_file and key_file (mTLS: the proxy's "
                              "certificate and its key)")
        if tls.key_password and not tls.key_file:
            raise ConfigError(f"{side}.key_password is set but no key_file")
    if config.downstream_tls.enabled and not config.downstream_tls.cert_file:
        raise ConfigError("downstream_tls.enabled = true needs cert_file and key_file (the proxy's certificate)")
    sasl = config.control_sasl
    if sasl.mechanism and not sasl.username:
        raise ConfigError(f"control_sasl.mechanism = {sasl.mechanism!r} needs a user: set control_sasl.username "
                          f"(or {ENV_PREFIX}CONTROL_SASL_USERNAME)")
    if sasl.mechanism and not sasl.password:
        raise ConfigError(
            f"control_sasl.mechanism = {sasl.mechanism!r} needs a password: set control_sasl.password_file, "
            f"{ENV_PREFIX}CONTROL_SASL_PASSWORD or control_sasl.password")
    if config.audit.max_total_bytes < config.audit.max_file_bytes:
        raise ConfigError(f"audit.max_total_bytes = {config.audit.max_total_bytes} is below audit.max_file_bytes = "
                          f"{config.audit.max_file_bytes}: the total must hold at least one file")


def _check_broker_ports(config: ProxyConfig) -> None:
    """Each listener's node_id_ranges fit the port range and collide with no other port of the proxy."""
    try:
        check_listener_ports([ListenerPorts(lc.name, lc.bootstrap_port, lc.broker_port_base, lc.node_id_ranges)
                              for lc in config.listeners], config.admin_port)
    except BrokerPortsError as exc:
        raise ConfigError(str(exc)) from None


def parse_host_port(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(f"{what}: {value!r} is not host:port (e.g. kafka-1:9092)")
    return host.strip("[]"), int(port)


# ------------------------------------------------------------------------------------------------ the schema


@dataclass(frozen=True)
class Entry:
    """One setting as users spell it."""

    #: Field names from ProxyConfig down, e.g. ("audit", "directory"); arrays of tables give their field.
    path: tuple[str, ...]
    #: TOML key path, e.g. `audit.directory`, `listener.bootstrap_port` (each [[listener]]).
    key: str
    #: The table it lives in, as TOML spells it: "" (top level), "audit", "listener", ...
    table: str
    #: True inside an array of tables ([[listener]], [[acks_policy]]).
    in_array: bool
    type: Any
    meta: Meta
    default: Any
    env: str | None
    flag: str | None

    @property
    def is_bool(self) -> bool:
        return _optional(self.type)[0] is bool


def _setting_meta(f: Field[Any]) -> Meta:
    meta = f.metadata.get("setting")
    return meta if isinstance(meta, Meta) else Meta()


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(tp: Any) -> tuple[Any, bool]:
    """(T, True) for `T | None`, (tp, False) otherwise."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _dataclass(tp: Any) -> type | None:
    return tp if isinstance(tp, type) and is_dataclass(tp) else None


def _array_item(tp: Any) -> Any:
    """T for `tuple[T, ...]`, else None."""
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _toml_name(f: Field[Any]) -> str:
    return _setting_meta(f).toml or f.name


@cache
def schema() -> tuple[Entry, ...]:
    """Every scalar setting (numbers, strings, booleans, lists of strings), tables and arrays walked."""
    return tuple(_walk(ProxyConfig, (), "", "", in_array=False, flags=True, env=True))


def _walk(cls: type, path: tuple[str, ...], table: str, flag_prefix: str, *, in_array: bool, flags: bool,
          env: bool) -> Iterator[Entry]:
    hints = _hints(cls)
    for f in fields(cls):
        meta = _setting_meta(f)
        tp = hints[f.name]
        name = _toml_name(f)
        key = f"{table}.{name}" if table else name
        inner, _ = _optional(tp)
        nested = _dataclass(inner)
        item = _array_item(inner)
        if nested is not None:
            yield from _walk(nested, (*path, f.name), key, f"{flag_prefix}{name}-", in_array=in_array,
                             flags=flags, env=env)
            continue
        if item is not None and _dataclass(item) is not None:
            yield from _walk(item, (*path, f.name), key, "", in_array=True,
                             flags=flags and meta.first_item_flags and not in_array, env=False)
            continue
        _check_supported(inner, f"{cls.__name__}.{f.name}")
        env_name = (ENV_PREFIX + key.replace(".", "_").upper()) if env and meta.env and not in_array else None
        flag = None
        if flags and not meta.secret and meta.flag != "":
            flag = meta.flag or "--" + (flag_prefix + f.name).replace("_", "-")
        yield Entry(path=(*path, f.name), key=key, table=table, in_array=in_array, type=tp, meta=meta,
                    default=_default(f), env=env_name, flag=flag)


def _check_supported(tp: Any, where: str) -> None:
    if tp in _SCALARS or _array_item(tp) in _SCALARS:
        return
    raise TypeError(f"{where}: the configuration schema reads bool, int, float, str, tuples of those, "
                    f"dataclasses and tuples of dataclasses, not {tp}")


@cache
def _entries_by(attr: str) -> dict[str, Entry]:
    return {getattr(e, attr): e for e in schema() if getattr(e, attr)}


def entry(key: str) -> Entry:
    """The setting of this TOML key path (e.g. `audit.directory`, `listener.bootstrap_port`)."""
    return _entries_by("key")[key]


def iter_values(config: Any, cls: type = ProxyConfig, prefix: str = "") -> Iterator[tuple[Entry, Any]]:
    """(entry, value) of every scalar setting of a built configuration; each array item in turn."""
    hints = _hints(cls)
    for f in fields(cls):
        value = getattr(config, f.name)
        inner, _ = _optional(hints[f.name])
        key = f"{prefix}{_toml_name(f)}"
        if _dataclass(inner) is not None:
            if value is not None:
                yield from iter_values(value, inner, key + ".")
        elif _dataclass(_array_item(inner)) is not None:
            for item in value:
                yield from iter_values(item, _array_item(inner), key + ".")
        else:
            yield entry(key), value


# --------------------------------------------------------------------------------------- values and checks


@dataclass(frozen=True)
class Given:
    """A value from one source, with how the user spelled it (`config.toml: audit.directory`,
    `INSYNC_PROXY_AUDIT_DIRECTORY`, `--audit-directory`); text: it came as a string (environment, flag)."""

    value: Any
    spelled: str
    text: bool


_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _type_name(tp: Any) -> str:
    inner, _ = _optional(tp)
    item = _array_item(inner)
    if inner in _SCALARS:
        return _SCALARS[inner]
    if item in _SCALARS:
        return f"list of {_SCALARS[item]}s"
    return "array of tables" if item is not None else "table"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _allowed_item(tp: Any, meta: Meta) -> str:
    if meta.choices:
        return "one of " + ", ".join(str(c) for c in meta.choices)
    if tp is bool:
        return "true or false"
    if tp in (int, float):
        text = "a whole number" if tp is int else "a number"
        low, high = meta.min, meta.max
        if low is not None and high is not None:
            text += f" from {_number(low)} to {_number(high)}"
        elif low is not None:
            text += f" above {_number(low)}" if meta.min_exclusive else f" of at least {_number(low)}"
        elif high is not None:
            text += f" of at most {_number(high)}"
        return text
    if meta.format == "host:port":
        return "host:port"
    if meta.format == "regex":
        return "a regular expression"
    return "a string"


def allowed(e: Entry) -> str:
    """What the setting accepts, in words."""
    inner, _ = _optional(e.type)
    item = _array_item(inner)
    if item is None:
        return _allowed_item(inner, e.meta)
    text = f"a list, each {_allowed_item(item, e.meta)} (a TOML array, or one comma-separated string)"
    return ("at least one: " + text) if e.meta.required else text


def _show(value: Any, given: Given | None, secret: bool) -> str:
    if secret:
        return "'***'"
    if given is not None and given.text:
        return repr(given.value)
    return _toml_value(value)


def _fail(e: Entry, spelled: str, shown: str, why: str = "") -> ConfigError:
    default = "" if e.meta.required or (e.default in (None, ()) and not e.meta.default_text) \
        else f"; default {default_text(e)}"
    return ConfigError(f"{spelled} = {shown}: {why or 'expected ' + allowed(e)}{default}")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _from_text(text: str, tp: Any) -> Any:
    """A value typed in an environment variable or a flag; ValueError when it is not one of `tp`."""
    text = text.strip()
    if tp is bool:
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ValueError(text)
    if tp is int:
        return int(text)
    if tp is float:
        return float(text)
    return text


def _typed(value: Any, tp: Any, meta: Meta) -> Any:
    """TOML's integer is a fine float; a choice given in another case takes the choice's spelling."""
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, str) and meta.ignore_case:
        for choice in meta.choices:
            if str(choice).lower() == value.lower():
                return choice
    return value


def _parse(given: Given, e: Entry) -> Any:
    """The typed value of one source's value, checked; ConfigError naming the setting as spelled."""
    value = given.value
    inner, optional = _optional(e.type)
    item = _array_item(inner)
    shown = _show(value, given, e.meta.secret)
    if given.text and isinstance(value, str) and optional and not value.strip():
        return None
    try:
        if item is not None:
            if isinstance(value, str):  # what users write in a variable, a flag, and often in TOML too
                value = tuple(_from_text(part, item) for part in value.split(",") if part.strip())
            elif isinstance(value, list | tuple):
                value = tuple(_typed(v.strip() if isinstance(v, str) else v, item, e.meta) for v in value)
        else:
            if given.text and isinstance(value, str):
                value = _from_text(value, inner)
            value = _typed(value, inner, e.meta)
    except ValueError:
        raise _fail(e, given.spelled, shown) from None
    _check(value, e, given.spelled, given)
    return value


def _check(value: Any, e: Entry, spelled: str, given: Given | None = None) -> None:
    """Type, choices, bounds and format of a typed value (of each item of a list)."""
    inner, optional = _optional(e.type)
    shown = _show(value, given, e.meta.secret)
    if value is None:
        if optional:
            return
        raise _fail(e, spelled, shown)
    item = _array_item(inner)
    if item is not None and not isinstance(value, tuple):
        raise _fail(e, spelled, shown)
    for one in value if item is not None else (value,):
        _check_item(one, item or inner, e, spelled, shown)


def _check_item(value: Any, tp: Any, e: Entry, spelled: str, shown: str) -> None:
    meta = e.meta
    if not _has_type(value, tp):
        raise _fail(e, spelled, shown)
    if tp is float and not math.isfinite(value):
        raise _fail(e, spelled, shown, f"expected a finite number ({allowed(e)})")
    if meta.choices and value not in meta.choices:
        raise _fail(e, spelled, shown)
    if tp in (int, float):
        low, high = meta.min, meta.max
        if (low is not None and (value <= low if meta.min_exclusive else value < low)) or (
                high is not None and value > high):
            raise _fail(e, spelled, shown)
    if meta.format == "host:port":
        try:
            parse_host_port(value, spelled)
        except ConfigError:
            raise _fail(e, spelled, shown, f"{value!r} is not host:port (e.g. kafka-1:9092)") from None
    elif meta.format == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            raise _fail(e, spelled, shown, f"not a valid regular expression ({exc})") from None


def _has_type(value: Any, tp: Any) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)


def _missing(e: Entry) -> str:
    ways = [f"{e.key} in the TOML file"] + [w for w in (e.env, e.flag) if w]
    return f"{e.key} is not set ({e.meta.meaning}): set {', '.join(ways)}"


# ------------------------------------------------------------------------------------------------- sources


def _unknown(name: str, known: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"{where}: unknown setting {name!r}{hint}; every setting is in {DOCS}")


def _toml_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"the value {_toml_value(value)}"


def _from_toml(data: Mapping[str, Any], cls: type, prefix: str, source: str) -> dict[str, Any]:
    """A tree of Given values from one TOML table, checking keys and table-ness against the dataclass."""
    by_name = {_toml_name(f): f for f in fields(cls)}
    hints = _hints(cls)
    tree: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        f = by_name.get(name)
        if f is None:
            raise _unknown(key, [f"{prefix}{n}" for n in by_name], source)
        inner, _ = _optional(hints[f.name])
        nested, item = _dataclass(inner), _array_item(inner)
        if nested is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: {key} = {_toml_value(value)}: {key} is a table: write [{key}] and "
                                  f"its settings under it (see {DOCS})")
            tree[f.name] = _from_toml(value, nested, key + ".", source)
        elif item is not None and _dataclass(item) is not None:
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ConfigError(f"{source}: {key} is {_toml_kind(value)}, but it is an array of tables: "
                                  f"write [[{key}]] before each one's settings (see {DOCS})")
            _check_count(_setting_meta(f), len(value), f"{source}: {key} = {_toml_value(value)}", key)
            tree[f.name] = [_from_toml(v, item, f"{key}[{i + 1}].", source) for i, v in enumerate(value)]
        else:
            if isinstance(value, dict):
                raise ConfigError(f"{source}: [{key}] is a table, but {key} is a setting: "
                                  f"write {key} = ... (expected {allowed(entry(_entry_key(key)))})")
            tree[f.name] = Given(value, f"{source}: {key}", text=False)
    return tree


def _check_count(meta: Meta, count: int, spelled: str, key: str) -> None:
    """Bounds of the number of tables in an array of tables."""
    if meta.min is not None and count < meta.min:
        raise ConfigError(f"{spelled}: expected at least {_number(meta.min)} [[{key}]]")
    if meta.max is not None and count > meta.max:
        raise ConfigError(f"{spelled}: expected at most {_number(meta.max)} [[{key}]]")


def _entry_key(spelled_key: str) -> str:
    """`listener[2].bootstrap_port` -> `listener.bootstrap_port`."""
    return re.sub(r"\[\d+\]", "", spelled_key)


def _set(tree: dict[str, Any], e: Entry, given: Given) -> None:
    """Put a value from the environment or a flag into the tree (into the first item of an array)."""
    node = tree
    cls: type = ProxyConfig
    for name in e.path[:-1]:
        inner, _ = _optional(_hints(cls)[name])
        item = _array_item(inner)
        if item is not None:
            items = node.setdefault(name, [])
            if not items:
                items.append({})
            node, cls = items[0], item
        else:
            node, cls = node.setdefault(name, {}), inner
    node[e.path[-1]] = given


def _from_env(tree: dict[str, Any], env: Mapping[str, str]) -> None:
    by_env = _entries_by("env")
    for name, value in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or name in OTHER_ENV_VARS:
            continue
        e = by_env.get(name)
        if e is not None:
            _set(tree, e, Given(value, name, text=True))
            continue
        key = name[len(ENV_PREFIX):].lower()
        tables = {x.table for x in schema() if x.table and not x.in_array}
        arrays = {x.table for x in schema() if x.in_array}
        if key in tables:
            example = next(x.env for x in schema() if x.table == key and x.env)
            raise ConfigError(f"{name}: [{key}] is a table: set its settings one by one, e.g. {example}=... "
                              f"(every variable: {DOCS})")
        array = next((a for a in arrays if key == a or key.startswith(a + "_")), None)
        if array is not None or key in ("listeners", "acks_policies"):
            array = array or ("listener" if key == "listeners" else "acks_policy")
            raise ConfigError(f"{name}: [[{array}]] is set in the TOML file only (arrays of tables have no "
                              f"environment variables; see {DOCS})")
        known = list(by_env) + list(OTHER_ENV_VARS)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"{name}: unknown environment variable{hint}; every INSYNC_PROXY_ variable is in {DOCS}")


def _from_overrides(tree: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    by_key = _entries_by("key")
    for key, value in overrides.items():
        if value is None:
            continue
        e = by_key.get(key)
        if e is None:
            raise ConfigError(f"unknown setting {key!r}; every setting is in {DOCS}")
        spelled = e.flag or key
        if isinstance(value, bool) and e.flag and _optional(e.type)[0] is bool and not value:
            spelled = "--no-" + e.flag[2:]
        _set(tree, e, Given(value, spelled, text=isinstance(value, str)))


def _read_secret_files(tree: dict[str, Any], cls: type = ProxyConfig) -> None:
    """Settings naming a file of a secret (`password_file`): the file's text becomes the secret's value."""
    hints = _hints(cls)
    for f in fields(cls):
        inner, _ = _optional(hints[f.name])
        node = tree.get(f.name)
        if node is None:
            continue
        if _dataclass(inner) is not None:
            _read_secret_files(node, inner)
        elif _dataclass(_array_item(inner)) is not None:
            for item in node:
                _read_secret_files(item, _array_item(inner))
        target = _setting_meta(f).file_for
        if target is None or not isinstance(node, Given):
            continue
        if not isinstance(node.value, str) or not node.value:
            continue  # the type check names it
        if target in tree:
            raise ConfigError(f"{node.spelled} and {tree[target].spelled} are both set: give the secret one way")
        try:
            secret = Path(node.value).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"{node.spelled} = {node.value!r}: cannot read it ({exc.strerror})") from None
        if not secret:
            raise ConfigError(f"{node.spelled} = {node.value!r}: the file is empty")
        tree[target] = Given(secret, node.spelled, text=False)


def _build(cls: type, tree: Mapping[str, Any], prefix: str = "") -> Any:
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in tree:
            continue
        node = tree[f.name]
        inner, _ = _optional(hints[f.name])
        key = f"{prefix}{_toml_name(f)}"
        if _dataclass(inner) is not None:
            values[f.name] = _build(inner, node, key + ".")
        elif _dataclass(_array_item(inner)) is not None:
            item = _array_item(inner)
            built = [_build(item, sub, f"{key}[{i + 1}].") for i, sub in enumerate(node)]
            values[f.name] = tuple(built)
        else:
            values[f.name] = _parse(node, entry(_entry_key(key)))
    return cls(**values)


def load_config(path: str | None = None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> ProxyConfig:
    """Build the configuration: defaults < TOML file < INSYNC_PROXY_* env < flags (`overrides`, keyed by TOML
    key path: `admin_port`, `audit.directory`, `listener.bootstrap_port` for the first listener)."""
    env = os.environ if env is None else env
    tree: dict[str, Any] = {}
    if path:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path}: cannot read it ({exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
        tree = _from_toml(raw, ProxyConfig, "", path)
    _from_env(tree, env)
    _from_overrides(tree, overrides or {})
    _read_secret_files(tree)
    config: ProxyConfig = _build(ProxyConfig, tree)
    return config.validate()


# ------------------------------------------------------------------------------------- printing and docs


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def default_text(e: Entry) -> str:
    if e.meta.default_text:
        return e.meta.default_text
    if e.default is None:
        return "not set"
    if e.default == ():
        return "none"
    return _toml_value(e.default)


def effective_toml(config: ProxyConfig) -> str:
    """The configuration as TOML, one `key = value` line per setting, secrets masked, unset ones commented."""
    lines: list[str] = []

    def emit(instance: Any, cls: type, prefix: str) -> None:
        hints = _hints(cls)
        later: list[tuple[str, Any, type, bool]] = []
        for f in fields(cls):
            value = getattr(instance, f.name)
            inner, _ = _optional(hints[f.name])
            key = f"{prefix}{_toml_name(f)}"
            if _dataclass(inner) is not None:
                later.append((key, value, inner, False))
            elif _dataclass(_array_item(inner)) is not None:
                later.extend((key, v, _array_item(inner), True) for v in value)
            else:
                e = entry(_entry_key(key))
                name = key.rsplit(".", 1)[-1]
                if value is None:
                    lines.append(f"# {name} is not set")
                elif e.meta.secret:
                    lines.append(f'{name} = "***"')
                else:
                    lines.append(f"{name} = {_toml_value(value)}")
        for key, value, sub, array in later:
            lines.append("")
            lines.append(f"[[{key}]]" if array else f"[{key}]")
            emit(value, sub, key + ".")

    emit(config, ProxyConfig, "")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def reference_markdown() -> str:
    """docs/configuration.md: every setting, from the schema."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from proxy/config.py by `python -m insync_proxy.proxy.config --write`; do not edit. -->",
        "",
        "Settings come from, in rising priority: defaults, the TOML file (`insync-proxy run --config FILE`),",
        "`INSYNC_PROXY_*` environment variables, then flags. Every value is checked at start: a wrong type, a",
        "value out of range, an unknown key or an unknown `INSYNC_PROXY_*` variable stops the proxy with exit",
        "code 2 and one line naming the setting. `insync-proxy check-config` (same flags as `run`) checks a",
        "configuration and prints it, secrets masked, without starting; `--connect` also tries the brokers.",
        "",
        "- **Environment variables**: `INSYNC_PROXY_` + the key path in capitals with `_` for `.`: `admin_port`",
        "  is `INSYNC_PROXY_ADMIN_PORT`, `[audit] directory` is `INSYNC_PROXY_AUDIT_DIRECTORY`. Booleans: `true`",
        "  or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`); lists: one comma-separated string.",
        "- **Arrays of tables** (`[[listener]]`, `[[acks_policy]]`) are set in the TOML file only; the flags",
        "  `--bootstrap-port`, `--broker-port-base` etc. set the first listener.",
        "- **Flags**: a boolean has `--x` and `--no-x`. Secrets have no flag (a flag shows in `ps`).",
        "- **Secrets** (marked *secret*) never appear in logs or in `check-config`'s output. A password can",
        "  come from its value, its environment variable, or a file (`password_file`, `key_password_file`;",
        "  one trailing newline is dropped), never two of them at once.",
        "",
    ]
    sections: dict[str, list[Entry]] = {}
    for e in schema():
        sections.setdefault(e.table, []).append(e)
    for table, entries in sections.items():
        array = entries[0].in_array
        title = "Top level" if not table else f"`[[{table}]]`" if array else f"`[{table}]`"
        out += [f"## {title}", ""]
        holder = _holder_meta(table)
        if holder is not None:
            out += [holder.meaning[0].upper() + holder.meaning[1:] + "."
                    + (" TOML only (an array of tables); the flags set the first one." if array and
                       holder.first_item_flags else " TOML only (an array of tables)." if array else ""), ""]
        out += ["| Key | Type | Default | Allowed | Environment | Flag | Meaning |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for e in entries:
            name = e.key[len(table) + 1:] if table else e.key
            kind = _type_name(e.type) + (", secret" if e.meta.secret else "")
            flag = f"`{e.flag}`" if e.flag else "-"
            if e.flag and _optional(e.type)[0] is bool:
                flag = f"`{e.flag}`, `--no-{e.flag[2:]}`"
            default = "(required)" if e.meta.required else default_text(e) \
                if e.meta.default_text or e.default in (None, ()) else f"`{default_text(e)}`"
            out.append(f"| `{name}` | {kind} | {_md(default)} | {_md(allowed(e))} | "
                       f"{'`' + e.env + '`' if e.env else '-'} | {flag} | {_md(e.meta.meaning)} |")
        out.append("")
    out += ["## Other `INSYNC_PROXY_*` variables", "",
            "Not settings of the proxy: the dev cluster, the tests and the build read them, and the proxy",
            "accepts them in its environment.", "", "| Variable | Meaning |", "| --- | --- |"]
    out += [f"| `{name}` | {_md(text)} |" for name, text in OTHER_ENV_VARS.items()]
    return "\n".join(out) + "\n"


def _holder_meta(table: str) -> Meta | None:
    """The metadata of the field that holds a table (`audit`) or an array of tables (`listener`)."""
    cls: type = ProxyConfig
    meta = None
    for part in table.split(".") if table else ():
        by_name = {_toml_name(f): f for f in fields(cls)}
        f = by_name[part]
        meta = _setting_meta(f)
        inner, _ = _optional(_hints(cls)[f.name])
        cls = _dataclass(inner) or _array_item(inner)
    return meta


def reference_path() -> Path:
    """docs/configuration.md of the source tree this module is in."""
    return Path(__file__).resolve().parents[1] / DOCS


def main(argv: list[str] | None = None) -> int:
    """`python -m insync_proxy.proxy.config [--write]`: print docs/configuration.md, or write it."""
    argv = sys.argv[1:] if argv is None else argv
    text = reference_markdown()
    if argv == ["--write"]:
        reference_path().write_text(text)
        print(f"wrote {reference_path()}")
        return 0
    if argv:
        print("usage: python -m insync_proxy.proxy.config [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "AcksPolicyConfig", "AuditConfig", "ConfigError", "ListenerConfig", "ProxyConfig", "SaslConfig", "TlsConfig",
    "load_config", "parse_host_port", "effective_toml", "reference_markdown", "schema", "setting",
]
