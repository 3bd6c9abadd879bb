"""Configuration, the schema's second room: the settings as entries (TOML key, variable, flag), what each
accepts in words, and the checks of values and of the rules across settings. Every source (loader.py)
and the reference (reference.py) read the settings through here."""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

from insync_proxy.proxy.config.broker_ports import (
    NODE_ID_PLACEHOLDER,
    BrokerPortsError,
    ListenerPorts,
    advertised_name,
    check_listener_ports,
)
from insync_proxy.proxy.config.settings import (
    ENV_PREFIX,
    PASSWORD_MECHANISMS,
    SASL_MECHANISMS,
    ConfigError,
    Meta,
    ProxyConfig,
    SaslConfig,
    TlsConfig,
    host_port_problem,
)


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
        return optional(self.type)[0] is bool


def setting_meta(f: Field[Any]) -> Meta:
    meta = f.metadata.get("setting")
    return meta if isinstance(meta, Meta) else Meta()


@cache
def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def optional(tp: Any) -> tuple[Any, bool]:
    """(T, True) for `T | None`, (tp, False) otherwise."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def dataclass_type(tp: Any) -> type | None:
    return tp if isinstance(tp, type) and is_dataclass(tp) else None


def array_item(tp: Any) -> Any:
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


def toml_name(f: Field[Any]) -> str:
    return setting_meta(f).toml or f.name


@cache
def schema() -> tuple[Entry, ...]:
    """Every scalar setting (numbers, strings, booleans, lists of strings), tables and arrays walked."""
    return tuple(_walk(ProxyConfig, (), "", "", in_array=False, flags=True, env=True))


def _walk(cls: type, path: tuple[str, ...], table: str, flag_prefix: str, *, in_array: bool, flags: bool,
          env: bool) -> Iterator[Entry]:
    type_hints = hints(cls)
    for f in fields(cls):
        meta = setting_meta(f)
        tp = type_hints[f.name]
        name = toml_name(f)
        key = f"{table}.{name}" if table else name
        inner, _ = optional(tp)
        nested = dataclass_type(inner)
        item = array_item(inner)
        if nested is not None:
            yield from _walk(nested, (*path, f.name), key, f"{flag_prefix}{name}-", in_array=in_array,
                             flags=flags, env=env)
            continue
        if item is not None and dataclass_type(item) is not None:
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
    if tp in _SCALARS or array_item(tp) in _SCALARS:
        return
    raise TypeError(f"{where}: the configuration schema reads bool, int, float, str, tuples of those, "
                    f"dataclasses and tuples of dataclasses, not {tp}")


@cache
def entries_by(attr: str) -> dict[str, Entry]:
    return {getattr(e, attr): e for e in schema() if getattr(e, attr)}


def entry(key: str) -> Entry:
    """The setting of this TOML key path (e.g. `audit.directory`, `listener.bootstrap_port`)."""
    return entries_by("key")[key]


def iter_values(config: Any, cls: type = ProxyConfig, prefix: str = "") -> Iterator[tuple[Entry, Any]]:
    """(entry, value) of every scalar setting of a built configuration; each array item in turn."""
    type_hints = hints(cls)
    for f in fields(cls):
        value = getattr(config, f.name)
        inner, _ = optional(type_hints[f.name])
        key = f"{prefix}{toml_name(f)}"
        if dataclass_type(inner) is not None:
            if value is not None:
                yield from iter_values(value, inner, key + ".")
        elif dataclass_type(array_item(inner)) is not None:
            for item in value:
                yield from iter_values(item, array_item(inner), key + ".")
        else:
            yield entry(key), value


# --------------------------------------------------------------------------------------- values and checks


_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def type_name(tp: Any) -> str:
    inner, _ = optional(tp)
    item = array_item(inner)
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
    inner, _ = optional(e.type)
    item = array_item(inner)
    if item is None:
        return _allowed_item(inner, e.meta)
    text = f"a list, each {_allowed_item(item, e.meta)} (a TOML array, or one comma-separated string)"
    return ("at least one: " + text) if e.meta.required else text


def shown(value: Any, secret: bool, typed: str | None = None) -> str:
    """A value as error messages show it: masked when secret, as typed when it came as text."""
    if secret:
        return "'***'"
    return repr(typed) if typed is not None else toml_value(value)


def fail(e: Entry, spelled: str, shown: str, why: str = "") -> ConfigError:
    default = "" if e.meta.required or (e.default in (None, ()) and not e.meta.default_text) \
        else f"; default {default_text(e)}"
    return ConfigError(f"{spelled} = {shown}: {why or 'expected ' + allowed(e)}{default}")


def check_value(value: Any, e: Entry, spelled: str, typed: str | None = None) -> None:
    """Type, choices, bounds and format of a typed value (of each item of a list); `typed`: the text it came as."""
    inner, is_optional = optional(e.type)
    text = shown(value, e.meta.secret, typed)
    if value is None:
        if is_optional:
            return
        raise fail(e, spelled, text)
    item = array_item(inner)
    if item is not None and not isinstance(value, tuple):
        raise fail(e, spelled, text)
    for one in value if item is not None else (value,):
        _check_item(one, item or inner, e, spelled, text)


def _check_item(value: Any, tp: Any, e: Entry, spelled: str, shown: str) -> None:
    meta = e.meta
    if not _has_type(value, tp):
        raise fail(e, spelled, shown)
    if tp is float and not math.isfinite(value):
        raise fail(e, spelled, shown, f"expected a finite number ({allowed(e)})")
    if meta.choices and value not in meta.choices:
        raise fail(e, spelled, shown)
    if tp in (int, float):
        low, high = meta.min, meta.max
        if (low is not None and (value <= low if meta.min_exclusive else value < low)) or (
                high is not None and value > high):
            raise fail(e, spelled, shown)
    if meta.format == "host:port":
        problem = host_port_problem(value)
        if problem is not None:
            raise fail(e, spelled, shown, problem)
    elif meta.format == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            raise fail(e, spelled, shown, f"not a valid regular expression ({exc})") from None


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


def check_count(meta: Meta, count: int, spelled: str, key: str) -> None:
    """Bounds of the number of tables in an array of tables."""
    if meta.min is not None and count < meta.min:
        raise ConfigError(f"{spelled}: expected at least {_number(meta.min)} [[{key}]]")
    if meta.max is not None and count > meta.max:
        raise ConfigError(f"{spelled}: expected at most {_number(meta.max)} [[{key}]]")


def entry_key(spelled_key: str) -> str:
    """`listener[2].bootstrap_port` -> `listener.bootstrap_port`."""
    return re.sub(r"\[\d+\]", "", spelled_key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def default_text(e: Entry) -> str:
    if e.meta.default_text:
        return e.meta.default_text
    if e.default is None:
        return "not set"
    if e.default == ():
        return "none"
    return toml_value(e.default)


def validate(config: ProxyConfig) -> ProxyConfig:
    """Return the configuration, or raise ConfigError: every value against the schema, then the rules across
    settings."""
    for f in fields(config):
        if dataclass_type(array_item(hints(ProxyConfig)[f.name])) is not None:
            check_count(setting_meta(f), len(getattr(config, f.name)), toml_name(f), toml_name(f))
    for e, value in iter_values(config):
        if e.meta.required and value in (None, (), ""):
            raise ConfigError(_missing(e))
        check_value(value, e, e.key)
    _cross_checks(config)
    return config


def _cross_checks(config: ProxyConfig) -> None:
    """Rules across settings; each value alone is already valid."""
    _check_advertised_host(config.advertised_host)
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
                if path and Path(path).is_dir():
                    raise ConfigError(f"{side}.{attr} = {path!r} is a directory: name the PEM file in it")
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
    if not sasl.mechanism and (sasl.username or sasl.password):
        given = "control_sasl.username" if sasl.username else "control_sasl.password"
        raise ConfigError(f"{given} is set but control_sasl.mechanism is not: set control_sasl.mechanism (one of "
                          f"{', '.join(SASL_MECHANISMS)}) or remove it (without a mechanism the proxy does not "
                          "log in)")
    _check_sasl(sasl)
    if config.audit.max_total_bytes < config.audit.max_file_bytes:
        raise ConfigError(f"audit.max_total_bytes = {config.audit.max_total_bytes} is below audit.max_file_bytes = "
                          f"{config.audit.max_file_bytes}: the total must hold at least one file")


_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                        r"[A-Za-z0-9])?)*\.?$")


def _check_advertised_host(host: str) -> None:
    """advertised_host: a host name or address, where {node_id} may stand for each broker's id."""
    if "{" in host or "}" in host:
        rest = host.replace(NODE_ID_PLACEHOLDER, "")
        if "{" in rest or "}" in rest:
            raise ConfigError(f"advertised_host = {host!r}: the only placeholder is {NODE_ID_PLACEHOLDER} (e.g. "
                              "kafka-{node_id}.example.com)")
        sample = advertised_name(host, 1)
        if not _HOST_NAME.match(sample):
            raise ConfigError(f"advertised_host = {host!r}: {sample!r} (broker 1's) is not a host name")


def _check_broker_ports(config: ProxyConfig) -> None:
    """Each listener's node_id_ranges fit the port range and collide with no other port of the proxy."""
    try:
        check_listener_ports([ListenerPorts(lc.name, lc.bootstrap_port, lc.broker_port_base, lc.node_id_ranges)
                              for lc in config.listeners], config.admin_port)
    except BrokerPortsError as exc:
        raise ConfigError(str(exc)) from None


def _check_sasl(sasl: SaslConfig) -> None:
    """[control_sasl]: what each mechanism needs, and nothing of another mechanism's set by mistake."""
    oauth = {f.name: getattr(sasl, f.name) for f in fields(sasl) if f.name.startswith("oauthbearer_")}
    oauth_given = sorted(name for name, value in oauth.items() if value and not name.endswith("_file"))
    kerberos_given = sorted(f.name for f in fields(sasl) if f.name.startswith("kerberos_")
                            and getattr(sasl, f.name) not in (None, f.default))
    if kerberos_given and sasl.mechanism != "GSSAPI":
        raise ConfigError(f"control_sasl.{kerberos_given[0]} is set but control_sasl.mechanism is "
                          f"{sasl.mechanism!r}: Kerberos settings take effect with mechanism = \"GSSAPI\" only")
    if sasl.mechanism == "GSSAPI":
        _check_gssapi(sasl, oauth_given)
    aws_given = sorted(name for name in ("aws_region", "aws_profile") if getattr(sasl, name))
    if aws_given and sasl.mechanism != "AWS_MSK_IAM":
        raise ConfigError(f"control_sasl.{aws_given[0]} is set but control_sasl.mechanism is {sasl.mechanism!r}: AWS "
                          "settings take effect with mechanism = \"AWS_MSK_IAM\" only")
    if sasl.mechanism == "AWS_MSK_IAM":
        _check_aws(sasl, oauth_given)
    if sasl.mechanism in PASSWORD_MECHANISMS:
        if not sasl.username:
            raise ConfigError(f"control_sasl.mechanism = {sasl.mechanism!r} needs a user: set control_sasl.username "
                              f"(or {ENV_PREFIX}CONTROL_SASL_USERNAME)")
        if not sasl.password:
            raise ConfigError(
                f"control_sasl.mechanism = {sasl.mechanism!r} needs a password: set control_sasl.password_file, "
                f"{ENV_PREFIX}CONTROL_SASL_PASSWORD or control_sasl.password")
        if oauth_given:
            raise ConfigError(f"control_sasl.{oauth_given[0]} is set but control_sasl.mechanism is "
                              f"{sasl.mechanism!r}: OAuth settings take effect with mechanism = \"OAUTHBEARER\" only")
    if sasl.mechanism == "OAUTHBEARER":
        if sasl.username:
            raise ConfigError("control_sasl.username is set but control_sasl.mechanism is \"OAUTHBEARER\": the brokers "
                              "take the proxy's principal from the token (its `sub`); remove username and set "
                              "oauthbearer_client_id")
        if sasl.password:
            raise ConfigError("control_sasl.password is set but control_sasl.mechanism is \"OAUTHBEARER\": the proxy "
                              "logs in with a token from oauthbearer_token_endpoint_url; set "
                              "oauthbearer_client_secret(_file) instead")
        url = sasl.oauthbearer_token_endpoint_url
        if not url:
            raise ConfigError("control_sasl.mechanism = \"OAUTHBEARER\" needs control_sasl.oauthbearer_token_endpoint_url "
                              "(the OAuth 2.0 token endpoint, e.g. https://idp.example.com/oauth2/token)")
        if not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"control_sasl.oauthbearer_token_endpoint_url = {url!r} is not an http(s):// URL")
        if not sasl.oauthbearer_client_id:
            raise ConfigError("control_sasl.mechanism = \"OAUTHBEARER\" needs control_sasl.oauthbearer_client_id (the "
                              "proxy's client at the token endpoint)")
        if not sasl.oauthbearer_client_secret:
            raise ConfigError("control_sasl.mechanism = \"OAUTHBEARER\" needs the client's secret: set "
                              f"control_sasl.oauthbearer_client_secret_file or {ENV_PREFIX}CONTROL_SASL_OAUTHBEARER_"
                              "CLIENT_SECRET")
        for extension in sasl.oauthbearer_extensions:
            key, sep, value = extension.partition("=")
            if not sep or not re.fullmatch(r"[A-Za-z]+", key) or key == "auth" or not value or "\x01" in value:
                raise ConfigError(f"control_sasl.oauthbearer_extensions: {extension!r} is not key=value with a key "
                                  "of letters other than `auth` (RFC 7628) and a value")
        if sasl.oauthbearer_ca_file and not Path(sasl.oauthbearer_ca_file).is_file():
            raise ConfigError(f"control_sasl.oauthbearer_ca_file = {sasl.oauthbearer_ca_file!r}: no such file")
    elif not sasl.mechanism and oauth_given:
        raise ConfigError(f"control_sasl.{oauth_given[0]} is set but control_sasl.mechanism is not: set "
                          "control_sasl.mechanism = \"OAUTHBEARER\" or remove it")


#: kerberos_service_host's placeholder: the first label of the host the connection goes to.
LABEL_PLACEHOLDER = "{label}"


def _check_gssapi(sasl: SaslConfig, oauth_given: list[str]) -> None:
    """GSSAPI: a principal, readable files, the gssapi package; no password or OAuth setting beside it."""
    if sasl.username or sasl.password or oauth_given:
        given = "username" if sasl.username else "password" if sasl.password else oauth_given[0]
        raise ConfigError(f"control_sasl.{given} is set but control_sasl.mechanism is \"GSSAPI\": the proxy logs in "
                          "as control_sasl.kerberos_principal with its keytab; remove it")
    if not sasl.kerberos_principal:
        raise ConfigError("control_sasl.mechanism = \"GSSAPI\" needs control_sasl.kerberos_principal (e.g. "
                          "insync-proxy@EXAMPLE.COM) and usually kerberos_keytab")
    for name in ("kerberos_keytab", "kerberos_krb5_conf"):
        path = getattr(sasl, name)
        if path and not Path(path).is_file():
            raise ConfigError(f"control_sasl.{name} = {path!r}: no such file")
    service_host = sasl.kerberos_service_host
    if service_host is not None and not _HOST_NAME.match(service_host.replace(LABEL_PLACEHOLDER, "kafka-1")):
        raise ConfigError(f"control_sasl.kerberos_service_host = {service_host!r}: a host name, where "
                          f"{LABEL_PLACEHOLDER} may stand for the first label of the host connected to (e.g. "
                          "{label}.example.com)")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", sasl.kerberos_service_name):
        raise ConfigError(f"control_sasl.kerberos_service_name = {sasl.kerberos_service_name!r}: a principal's "
                          "primary (letters, digits, . _ -), e.g. kafka")
    try:
        import gssapi  # noqa: F401
    except ImportError:
        raise ConfigError("control_sasl.mechanism = \"GSSAPI\" needs the gssapi package: pip install "
                          "'insync-proxy[kerberos]' (it builds against MIT Kerberos: apt-get install libkrb5-dev, "
                          "or dnf install krb5-devel)") from None


def _check_aws(sasl: SaslConfig, oauth_given: list[str]) -> None:
    """AWS_MSK_IAM: botocore, a region that looks like one; no password or OAuth setting beside it."""
    if sasl.username or sasl.password or oauth_given:
        given = "username" if sasl.username else "password" if sasl.password else oauth_given[0]
        raise ConfigError(f"control_sasl.{given} is set but control_sasl.mechanism is \"AWS_MSK_IAM\": the proxy signs "
                          "its login with AWS credentials (botocore's chain, control_sasl.aws_profile); remove it")
    if sasl.aws_region and not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", sasl.aws_region):
        raise ConfigError(f"control_sasl.aws_region = {sasl.aws_region!r} is not an AWS region (e.g. eu-west-1)")
    try:
        import botocore  # noqa: F401
    except ImportError:
        raise ConfigError("control_sasl.mechanism = \"AWS_MSK_IAM\" needs botocore: pip install "
                          "'insync-proxy[aws]'") from None
