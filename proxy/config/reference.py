"""Configuration, the reference: docs/configuration.md and `check-config`'s TOML, made from the schema.

`python -m insync_proxy.proxy.config.reference` prints the reference; `--write` writes docs/configuration.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from insync_proxy.proxy.config.schema import (
    Entry,
    allowed,
    array_item,
    dataclass_type,
    default_text,
    entry,
    entry_key,
    hints,
    optional,
    schema,
    setting_meta,
    toml_name,
    toml_value,
    type_name,
)
from insync_proxy.proxy.config.settings import DOCS, OTHER_ENV_VARS, Meta, ProxyConfig


def effective_toml(config: ProxyConfig) -> str:
    """The configuration as TOML, one `key = value` line per setting, unset ones and secrets (masked) as
    comments: loaded again with the same environment it gives the same configuration."""
    lines: list[str] = []

    def emit(instance: Any, cls: type, prefix: str) -> None:
        type_hints = hints(cls)
        later: list[tuple[str, Any, type, bool]] = []
        for f in fields(cls):
            value = getattr(instance, f.name)
            inner, _ = optional(type_hints[f.name])
            key = f"{prefix}{toml_name(f)}"
            if dataclass_type(inner) is not None:
                later.append((key, value, inner, False))
            elif dataclass_type(array_item(inner)) is not None:
                later.extend((key, v, array_item(inner), True) for v in value)
            else:
                e = entry(entry_key(key))
                name = key.rsplit(".", 1)[-1]
                if value is None:
                    lines.append(f"# {name} is not set")
                elif e.meta.secret:
                    # A comment: the TOML loads back as the same configuration (with the same environment and
                    # secret files), never with "***" as the password.
                    lines.append(f'# {name} = "***" (secret: set, not shown)')
                else:
                    lines.append(f"{name} = {toml_value(value)}")
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
        "<!-- Generated from proxy/config/settings.py (the settings) by `python -m insync_proxy.proxy.config.reference --write`; do not edit. -->",
        "",
        "Settings come from, in rising priority: defaults, the TOML file (`insync-proxy run --config FILE`),",
        "`INSYNC_PROXY_*` environment variables, then flags. Every value is checked at start: a wrong type, a",
        "value out of range, an unknown key or an unknown `INSYNC_PROXY_*` variable stops the proxy with exit",
        "code 2 and one line naming the setting; so does a TLS file `run` cannot load (not PEM, a key that does",
        "not match its certificate or that its password does not decrypt, a certificate that expired or is not",
        "yet valid), a `bind_host` or `admin_host` that does not resolve or is not an address of this machine (a",
        "test bind on port 0 shows it), a port below 1024 without the permission to bind it, and an",
        "`audit.directory` or `debug_capture_dir` that is a file or that cannot be created or written by this",
        "user (looked at, never created by the check). A certificate expiring within 7 days, a password written",
        "in the TOML file and TLS files named on a side whose `enabled` is false are warnings.",
        "`insync-proxy check-config` (same flags as `run`) refuses exactly what `run` refuses, with the same line,",
        "without starting, and prints the configuration as TOML that loads back unchanged (secrets as comments);",
        "`--connect` also tries the brokers. Exit codes: 0 valid, 2 invalid, 1 when a `--connect` step fails. A",
        "port another process holds is not checked (it may be freed or taken before the start): `run` exits 1",
        "naming it.",
        "",
        "- **Environment variables**: `INSYNC_PROXY_` + the key path in capitals with `_` for `.`: `admin_port`",
        "  is `INSYNC_PROXY_ADMIN_PORT`, `[audit] directory` is `INSYNC_PROXY_AUDIT_DIRECTORY`. Booleans: `true`",
        "  or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`); lists: one comma-separated string.",
        "- **The TOML file**: UTF-8 without a byte-order mark, `key = value` (not YAML's `key: value`). A key",
        "  belongs to the `[table]` header above it, up to the next header: top-level settings go above the",
        "  first `[table]`.",
        "- **Arrays of tables** (`[[listener]]`, `[[acks_policy]]`) are set in the TOML file only; the flags",
        "  `--bootstrap-port`, `--broker-port-base` etc. set the first listener.",
        "- **Flags**: a boolean has `--x` and `--no-x`. Secrets have no flag (a flag shows in `ps`).",
        "- **Secrets** (marked *secret*) never appear in logs or in `check-config`'s output. A password can",
        "  come from its value, its environment variable, or a file (`password_file`, `key_password_file`;",
        "  one trailing newline is dropped), never two of them at once. A variable set but empty gives no value",
        "  (an error naming a missing password says so).",
        "- **Reloads**: SIGHUP or `POST /reload` on the admin port re-reads the TOML file, the environment and the",
        "  secret files through the same checks. Settings marked *yes* apply to the next exchange without dropping",
        "  a connection; a changed *no* setting gets one WARNING (\"needs a restart\") and keeps its running",
        "  value. A configuration that does not validate changes nothing (one ERROR; the process runs on). TLS",
        "  files and the TOML file are also re-read by content every `tls_reload_seconds`: changed TLS files",
        "  replace the material once it loads, a changed TOML file reloads as SIGHUP does (docs/operations.md,",
        "  \"Rotating certificates and reloading\").",
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
        out += ["| Key | Type | Default | Allowed | Environment | Flag | Reloads | Meaning |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for e in entries:
            name = e.key[len(table) + 1:] if table else e.key
            kind = type_name(e.type) + (", secret" if e.meta.secret else "")
            flag = f"`{e.flag}`" if e.flag else "-"
            if e.flag and optional(e.type)[0] is bool:
                flag = f"`{e.flag}`, `--no-{e.flag[2:]}`"
            default = "(required)" if e.meta.required else default_text(e) \
                if e.meta.default_text or e.default in (None, ()) else f"`{default_text(e)}`"
            out.append(f"| `{name}` | {kind} | {_md(default)} | {_md(allowed(e))} | "
                       f"{'`' + e.env + '`' if e.env else '-'} | {flag} | {'yes' if e.meta.reloads else 'no'} | "
                       f"{_md(e.meta.meaning)} |")
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
        by_name = {toml_name(f): f for f in fields(cls)}
        f = by_name[part]
        meta = setting_meta(f)
        inner, _ = optional(hints(cls)[f.name])
        cls = dataclass_type(inner) or array_item(inner)
    return meta


def reference_path() -> Path:
    """docs/configuration.md of the source tree this module is in."""
    return Path(__file__).resolve().parents[2] / DOCS


def page_command(argv: list[str] | None, *, module: str, description: str, text: Callable[[], str],
                 path: Path, page: Callable[[str, str], str]) -> int:
    """The command line of a reference made from the code (`python -m <module> [--write]`): print `text()`, or
    write it into `path` (`page(old page, text)`: the page as it is to be)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", allow_abbrev=False, description=description)
    parser.add_argument("--write", action="store_true", help=f"write it into {path.name}")
    args = parser.parse_args(argv)
    made = text()
    if not args.write:
        sys.stdout.write(made if made.endswith("\n") else made + "\n")
        return 0
    path.write_text(page(path.read_text() if path.exists() else "", made))
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m insync_proxy.proxy.config.reference [--write]`: print docs/configuration.md, or write it."""
    return page_command(argv, module="insync_proxy.proxy.config.reference", text=reference_markdown,
                        description=f"Print the configuration reference made from the settings; --write writes "
                                    f"it to {DOCS}.", path=reference_path(), page=lambda _, made: made)


if __name__ == "__main__":
    sys.exit(main())
