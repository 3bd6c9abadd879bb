"""Configuration, the loader: where values come from. Defaults < the TOML file < INSYNC_PROXY_* variables <
flags, and files holding secrets; every value checked against the schema (schema.py) on the way in.

A ConfigError is one line naming the setting as the user spelled it.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from insync_proxy.proxy.config.schema import (
    Entry,
    allowed,
    array_item,
    check_count,
    check_value,
    dataclass_type,
    entries_by,
    entry,
    entry_key,
    fail,
    hints,
    optional,
    schema,
    setting_meta,
    shown,
    toml_name,
    toml_value,
    validate,
)
from insync_proxy.proxy.config.settings import (
    DOCS,
    ENV_PREFIX,
    OTHER_ENV_VARS,
    ConfigError,
    Meta,
    ProxyConfig,
)


@dataclass(frozen=True)
class Given:
    """A value from one source, with how the user spelled it (`config.toml: audit.directory`,
    `INSYNC_PROXY_AUDIT_DIRECTORY`, `--audit-directory`); text: it came as a string (environment, flag)."""

    value: Any
    spelled: str
    text: bool


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
    inner, is_optional = optional(e.type)
    item = array_item(inner)
    typed = given.value if given.text and isinstance(given.value, str) else None
    text = shown(value, e.meta.secret, typed)
    if given.text and isinstance(value, str) and is_optional and not value.strip():
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
        raise fail(e, given.spelled, text) from None
    check_value(value, e, given.spelled, typed)
    return value


def _unknown(name: str, known: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"{where}: unknown setting {name!r}{hint}; every setting is in {DOCS}")


#: The settings of the top level, as TOML names them.
_TOP_LEVEL = frozenset(toml_name(f) for f in fields(ProxyConfig))


def _toml_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"the value {toml_value(value)}"


def _from_toml(data: Mapping[str, Any], cls: type, prefix: str, source: str) -> dict[str, Any]:
    """A tree of Given values from one TOML table, checking keys and table-ness against the dataclass."""
    by_name = {toml_name(f): f for f in fields(cls)}
    type_hints = hints(cls)
    tree: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        f = by_name.get(name)
        if f is None:
            if prefix and name in _TOP_LEVEL:
                # TOML puts every key below a [table] header into that table, up to the next header.
                table = f"[[{prefix.split('[')[0]}]]" if prefix.endswith("].") else f"[{prefix[:-1]}]"
                raise ConfigError(f"{source}: {key}: unknown setting in {table}, but {name} is a top-level setting: "
                                  f"a key written below {table} belongs to it; move it above the first [table]")
            raise _unknown(key, [f"{prefix}{n}" for n in by_name], source)
        inner, _ = optional(type_hints[f.name])
        nested, item = dataclass_type(inner), array_item(inner)
        if nested is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: {key} = {toml_value(value)}: {key} is a table: write [{key}] and "
                                  f"its settings under it (see {DOCS})")
            tree[f.name] = _from_toml(value, nested, key + ".", source)
        elif item is not None and dataclass_type(item) is not None:
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ConfigError(f"{source}: {key} is {_toml_kind(value)}, but it is an array of tables: "
                                  f"write [[{key}]] before each one's settings (see {DOCS})")
            check_count(setting_meta(f), len(value), f"{source}: {key} = {toml_value(value)}", key)
            tree[f.name] = [_from_toml(v, item, f"{key}[{i + 1}].", source) for i, v in enumerate(value)]
        else:
            if isinstance(value, dict):
                raise ConfigError(f"{source}: [{key}] is a table, but {key} is a setting: "
                                  f"write {key} = ... (expected {allowed(entry(entry_key(key)))})")
            tree[f.name] = Given(value, f"{source}: {key}", text=False)
    return tree


def _set(tree: dict[str, Any], e: Entry, given: Given) -> None:
    """Put a value from the environment or a flag into the tree (into the first item of an array)."""
    node = tree
    cls: type = ProxyConfig
    for name in e.path[:-1]:
        inner, _ = optional(hints(cls)[name])
        item = array_item(inner)
        if item is not None:
            items = node.setdefault(name, [])
            if not items:
                items.append({})
            node, cls = items[0], item
        else:
            node, cls = node.setdefault(name, {}), inner
    node[e.path[-1]] = given


def _from_env(tree: dict[str, Any], env: Mapping[str, str]) -> None:
    by_env = entries_by("env")
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
    by_key = entries_by("key")
    for key, value in overrides.items():
        if value is None:
            continue
        e = by_key.get(key)
        if e is None:
            raise ConfigError(f"unknown setting {key!r}; every setting is in {DOCS}")
        spelled = e.flag or key
        if isinstance(value, bool) and e.flag and optional(e.type)[0] is bool and not value:
            spelled = "--no-" + e.flag[2:]
        _set(tree, e, Given(value, spelled, text=isinstance(value, str)))


def _read_secret_files(tree: dict[str, Any], cls: type = ProxyConfig) -> None:
    """Settings naming a file of a secret (`password_file`): the file's text becomes the secret's value."""
    type_hints = hints(cls)
    for f in fields(cls):
        inner, _ = optional(type_hints[f.name])
        node = tree.get(f.name)
        if node is None:
            continue
        if dataclass_type(inner) is not None:
            _read_secret_files(node, inner)
        elif dataclass_type(array_item(inner)) is not None:
            for item in node:
                _read_secret_files(item, array_item(inner))
        target = setting_meta(f).file_for
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
    type_hints = hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in tree:
            continue
        node = tree[f.name]
        inner, _ = optional(type_hints[f.name])
        key = f"{prefix}{toml_name(f)}"
        if dataclass_type(inner) is not None:
            values[f.name] = _build(inner, node, key + ".")
        elif dataclass_type(array_item(inner)) is not None:
            item = array_item(inner)
            built = [_build(item, sub, f"{key}[{i + 1}].") for i, sub in enumerate(node)]
            values[f.name] = tuple(built)
        else:
            values[f.name] = _parse(node, entry(entry_key(key)))
    return cls(**values)


def _inline_secrets(raw: Mapping[str, Any], path: str) -> list[str]:
    """A warning for each secret written in the TOML file itself (the file is a ConfigMap, in git, in backups)."""
    found = []
    for e in schema():
        if not e.meta.secret or e.in_array:
            continue
        node: Any = raw
        for part in e.key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            table, _, name = e.key.rpartition(".")
            where = f"[{table}] {name}_file" if table else f"{name}_file"
            ways = " or ".join(w for w in (e.env, where) if w)
            found.append(f"{path}: {e.key} is written in the configuration file: give it in {ways} instead "
                         "(never in the file)")
    return found


#: A YAML mapping line (`key: value`, `key:`, `- key: value`), as a TOML file written as YAML starts.
_YAML_LINE = re.compile(r"\s*(?:-\s+)?[A-Za-z_][\w.-]*:(?:\s|$)")


def _toml_mistake(text: str, exc: tomllib.TOMLDecodeError) -> str:
    """tomllib's complaint, or what is wrong in the user's words when it is a known mistake: a byte-order
    mark (some Windows editors write one), or YAML where TOML belongs. Never the line's text (a secret?)."""
    if text.startswith("\ufeff"):
        return "the file starts with a UTF-8 byte-order mark: remove the byte-order mark (save it as UTF-8 without BOM)"
    where = re.search(r"at line (\d+)", str(exc))
    lines = text.splitlines()
    number = int(where.group(1)) if where else 0
    line = lines[number - 1] if 0 < number <= len(lines) else ""
    shape = "`key: value`" if _YAML_LINE.match(line) else "`---`" if line.strip() == "---" else None
    if shape is not None:
        return (f"this looks like YAML (line {number} is {shape}); the configuration is TOML (key = value, "
                f"[table] headers: see {DOCS})")
    return str(exc)


def load_config(path: str | None = None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None, warnings: list[str] | None = None) -> ProxyConfig:
    """Build the configuration: defaults < TOML file < INSYNC_PROXY_* env < flags (`overrides`, keyed by TOML
    key path: `admin_port`, `audit.directory`, `listener.bootstrap_port` for the first listener).
    `warnings` receives one line for each thing that works but should not be so (a password in the file)."""
    env = os.environ if env is None else env
    tree: dict[str, Any] = {}
    if path:
        try:
            text = Path(path).read_text()
            raw = tomllib.loads(text)
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: no such file") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {path} is a directory: name the TOML file in it") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path}: cannot read it ({exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: not valid TOML: {_toml_mistake(text, exc)}") from None
        tree = _from_toml(raw, ProxyConfig, "", path)
        if warnings is not None:
            warnings.extend(_inline_secrets(raw, path))
    _from_env(tree, env)
    _from_overrides(tree, overrides or {})
    _read_secret_files(tree)
    config: ProxyConfig = _build(ProxyConfig, tree)
    try:
        return validate(config)
    except ConfigError as exc:
        raise explain_empty_secrets(exc, env) from None


def explain_empty_secrets(error: ConfigError, env: Mapping[str, str] | None = None) -> ConfigError:
    """`error`, saying so when a secret's variable it names is set but empty: an empty variable gives no value,
    so the error reads "needs a password" while the user sees the variable in the pod's spec."""
    env = os.environ if env is None else env
    text = str(error)
    empty = [e.env for e in schema() if e.meta.secret and e.env and e.env in text and e.env in env
             and not env[e.env].strip()]
    if not empty:
        return error
    return ConfigError(text + "".join(f"; {name} is set, but empty (an empty variable gives no value)"
                                      for name in empty))
