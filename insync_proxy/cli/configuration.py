"""The settings' command line, shared by `run`, `check-config` and `demo`: one flag per setting of the schema,
and the configuration from file, environment and flags (with its one-line error)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tomllib
import typing
from pathlib import Path
from typing import Any

from insync_proxy.proxy.config.files import check_files
from insync_proxy.proxy.config.loader import explain_empty_secrets, load_config
from insync_proxy.proxy.config.places import check_places
from insync_proxy.proxy.config.schema import Entry, default_text, schema
from insync_proxy.proxy.config.settings import ENV_PREFIX, ConfigError, ProxyConfig
from insync_proxy.proxy.observability.logsetup import JsonLogFormatter, setup_logging

log = logging.getLogger("insync_proxy")

class Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit 2), like configuration errors. Flags are never abbreviated: an
    abbreviation would let `--control-sasl-password x` (no such flag: a secret) pass as
    `--control-sasl-password-file x`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {_without_values(message)} (`{self.prog} --help` lists the flags)\n")

def _without_values(message: str) -> str:
    """argparse's "unrecognized arguments: --x value" without the values: a mistyped secret's flag must not
    print the secret."""
    prefix = "unrecognized arguments: "
    if not message.startswith(prefix):
        return message
    flags = [word.split("=", 1)[0] for word in message[len(prefix):].split() if word.startswith("-")]
    text = prefix + (" ".join(flags) if flags else "(values without a flag)")
    if any("password" in flag for flag in flags):
        text += f"; secrets have no flag (a flag shows in `ps`): use {ENV_PREFIX}..._PASSWORD or a *_password_file"
    return text


def install_loop(use_uvloop: bool) -> str:
    import asyncio  # here, not at the top: a configuration error or --help exits without loading it

    if use_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            return "uvloop"
        except ImportError:
            log.warning("uvloop is not installed: using the default asyncio loop (about half the throughput)")
    return "asyncio"

def _dest(entry: Entry) -> str:
    return "setting:" + entry.key

def _metavar(entry: Entry) -> str | None:
    name = entry.path[-1]
    if entry.meta.choices:
        return "{" + ",".join(str(c) for c in entry.meta.choices) + "}"
    if entry.meta.format == "host:port":
        return "HOST:PORT[,...]"
    if name.endswith("_seconds"):
        return "SECONDS"
    if name.endswith("_ms"):
        return "MS"
    if name.endswith(("_file", "_dir", "directory")):
        return "PATH"
    if name.endswith(("_port", "_bytes", "_size", "_limit", "_base")):
        return "N"
    return name.rsplit("_", 1)[-1].upper()

def add_run_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """--config, and one flag per setting of the schema that has one (values are checked by the schema),
    except the settings whose key starts with one of `skip`."""
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    groups: dict[str, Any] = {}
    for entry in schema():
        if not entry.flag or entry.key.startswith(skip):
            continue
        title = entry.table or ""
        if title not in groups:
            groups[title] = p if not title else p.add_argument_group(
                f"[[{title}]] (the first listener)" if entry.in_array else f"[{title}]")
        default = "" if entry.default in (None, ()) and not entry.meta.default_text else default_text(entry)
        help_text = entry.meta.meaning.replace("%", "%%") + (f" (default {default})" if default else "")
        if entry.is_bool:
            groups[title].add_argument(entry.flag, dest=_dest(entry), action=argparse.BooleanOptionalAction,
                                       default=None, help=help_text)
        else:
            groups[title].add_argument(entry.flag, dest=_dest(entry), metavar=_metavar(entry), help=help_text)

def config_from_args(args: argparse.Namespace, env: dict[str, str] | None = None,
                     extra: dict[str, Any] | None = None, warnings: list[str] | None = None) -> ProxyConfig:
    """Merge file, environment and flags (and `extra` settings, by TOML key) into a validated configuration;
    `warnings` receives what works but should not be so."""
    given = vars(args)
    overrides: dict[str, Any] = {e.key: given.get(_dest(e)) for e in schema() if e.flag}
    overrides.update(extra or {})
    return load_config(getattr(args, "config", None), env=env, overrides=overrides, warnings=warnings)

def checked_configuration(args: argparse.Namespace, extra: dict[str, Any] | None = None
                          ) -> tuple[ProxyConfig, list[str]]:
    """What `run` and `check-config` both refuse (ConfigError) or warn about: the values (config_from_args),
    the files they name, loaded as `run` loads them (files.check_files), then the hosts and directories
    they name on this machine (places.check_places: what `run` would otherwise meet only at start)."""
    warnings: list[str] = []
    config = config_from_args(args, extra=extra, warnings=warnings)
    try:
        warnings += check_files(config)
    except ConfigError as exc:  # an encrypted key, its password's variable set but empty
        raise explain_empty_secrets(exc) from None
    check_places(config)
    return config, warnings

def configuration(args: argparse.Namespace, extra: dict[str, Any] | None = None, logs: bool = False
                   ) -> tuple[ProxyConfig, list[str]] | None:
    """The configuration and its warnings, or None after printing the one-line error (`logs`: as the log
    would, one JSON object when log_format = "json")."""
    try:
        return checked_configuration(args, extra=extra)
    except ConfigError as exc:
        message = f"configuration error: {exc}"
        if logs and _intended_log_format(args) == "json":
            print(JsonLogFormatter().format(logging.LogRecord(
                log.name, logging.ERROR, __file__, 0, message, None, None)), file=sys.stderr)
        else:
            print(f"insync-proxy: {message}", file=sys.stderr)
        return None

def _intended_log_format(args: argparse.Namespace) -> str:
    """log_format as the sources give it when the configuration as a whole is invalid: the flag, the
    variable, then the TOML file (so that with log_format = "json" even a configuration error is JSON)."""
    flag = vars(args).get("setting:log_format")
    if flag:
        return str(flag).strip().lower()
    variable = os.environ.get(f"{ENV_PREFIX}LOG_FORMAT")
    if variable:
        return variable.strip().lower()
    path = getattr(args, "config", None)
    if path:
        try:
            value = tomllib.loads(Path(path).read_text()).get("log_format")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return "text"
        return str(value).lower() if isinstance(value, str) else "text"
    return "text"


__all__ = ["JsonLogFormatter", "Parser", "add_run_flags", "checked_configuration", "config_from_args", "configuration",
           "install_loop", "setup_logging"]
