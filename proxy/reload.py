"""Live reloads: a sidecar lives as long as its pod, its certificates and policies do not.

- TLS material (both sides' CA bundle, certificate, key, key password file) and the control login's password
  file are re-read every `tls_reload_seconds`, by content. New material replaces the working one only once it
  loads (tls.py says when it must not); new connections use it, established ones keep theirs.
- The configuration (TOML file, environment, secret files) is re-read on SIGHUP and POST /reload through the
  same schema, and when the TOML file's content changed (looked at every `tls_reload_seconds`: in Kubernetes
  nobody sends SIGHUP when a ConfigMap is edited, the kubelet swaps the volume's `..data` symlink). Each
  setting's `reloads` flag says whether it applies live; a changed one that cannot gets a WARNING ("needs a
  restart") and the rest still applies. A configuration that does not validate changes nothing.

Every attempt is counted in insync_proxy_reloads_total{what,result}; every failure is one ERROR line.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from insync_proxy.proxy.behaviours.accounting import ProduceAccounting
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.config.schema import (
    array_item,
    dataclass_type,
    hints,
    optional,
    setting_meta,
    toml_name,
)
from insync_proxy.proxy.config.settings import ConfigError, ProxyConfig, SaslConfig
from insync_proxy.proxy.config.tls import TlsMaterial
from insync_proxy.proxy.controlplane.control import ControlConnection
from insync_proxy.proxy.observability.logsetup import apply_logging

if TYPE_CHECKING:
    from insync_proxy.proxy.audit.kafka_sink import KafkaAuditSink
    from insync_proxy.proxy.audit.summary import ProduceSummaries
    from insync_proxy.proxy.audit.writer import AuditLog
    from insync_proxy.proxy.controlplane.metadata_refresh import MetadataRefresh
    from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
    from insync_proxy.proxy.datapath.connection import ConnectionSettings
    from insync_proxy.proxy.datapath.exchange import BehaviourRegistry
    from insync_proxy.proxy.observability.metrics import ProxyMetrics


class InsyncProxy(Protocol):
    """What a reload changes of the proxy process (proxy/server.py; nothing here imports it)."""

    config: ProxyConfig
    metrics: ProxyMetrics
    upstream_tls: TlsMaterial
    downstream_tls: TlsMaterial
    connection_settings: ConnectionSettings
    control: ControlConnection
    audit: AuditLog | None
    audit_to_kafka: KafkaAuditSink | None
    summaries: ProduceSummaries | None
    registry: BehaviourRegistry
    min_insync: MinInsyncCache
    metadata: MetadataRefresh

log = logging.getLogger("insync_proxy")

#: How often a turned-off interval (tls_reload_seconds = 0) looks whether a reload turned it on again.
_IDLE_SECONDS = 5.0
#: A changed configuration file is read again this long after the change was seen, until two reads agree (at
#: most `_SETTLE_TRIES` times): a writer that truncates and then writes (`cat >`, an editor saving in place)
#: is caught half-way only once, and the reload reads the whole file.
_SETTLE_SECONDS = 0.25
_SETTLE_TRIES = 8


@dataclass
class Merged:
    """A reloaded configuration: what applies and the keys it changes, and the changed keys that cannot."""

    config: ProxyConfig
    applied: list[str] = field(default_factory=list)
    needs_restart: list[str] = field(default_factory=list)


def merge(old: ProxyConfig, new: ProxyConfig) -> Merged:
    """The configuration to run with: `new`'s value for each setting that reloads, `old`'s for the others."""
    merged = Merged(old)
    merged.config = _merge(old, new, ProxyConfig, "", merged)
    # Client certificates required or not is fixed when the listener opens (its verify mode).
    if bool(old.downstream_tls.ca_file) != bool(new.downstream_tls.ca_file) and old.downstream_tls.enabled:
        merged.applied.remove("downstream_tls.ca_file")
        merged.needs_restart.append("downstream_tls.ca_file")
        tls = replace(merged.config.downstream_tls, ca_file=old.downstream_tls.ca_file)
        merged.config = replace(merged.config, downstream_tls=tls)
    return merged


def _reloads_whole(cls: type) -> bool:
    return all(setting_meta(f).reloads for f in fields(cls))


def _merge(old: Any, new: Any, cls: type, prefix: str, out: Merged) -> Any:
    values: dict[str, Any] = {}
    for f in fields(cls):
        before, after = getattr(old, f.name), getattr(new, f.name)
        inner, _ = optional(hints(cls)[f.name])
        key = f"{prefix}{toml_name(f)}"
        nested, item = dataclass_type(inner), dataclass_type(array_item(inner))
        if nested is not None:
            values[f.name] = _merge(before, after, nested, key + ".", out)
        elif before == after:
            values[f.name] = before
        elif item is not None:  # an array of tables: all of it, or none of it when any of its settings cannot
            changed = list(_changed_items(before, after, item, key))
            (out.applied if _reloads_whole(item) else out.needs_restart).extend(changed)
            values[f.name] = after if _reloads_whole(item) else before
        elif setting_meta(f).reloads:
            out.applied.append(key)
            values[f.name] = after
        else:
            out.needs_restart.append(key)
            values[f.name] = before
    return cls(**values)


def _changed_items(before: tuple[Any, ...], after: tuple[Any, ...], item: type, key: str) -> Iterator[str]:
    if len(before) != len(after):
        yield f"{key} (now {len(after)}, was {len(before)})"
        return
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        for f in fields(item):
            if getattr(a, f.name) != getattr(b, f.name):
                yield f"{key}[{i + 1}].{toml_name(f)}"


def own_connections(proxy: InsyncProxy) -> list[ControlConnection]:
    """The proxy's own connections: the control connection, and the audit sink's to topic leaders."""
    return [proxy.control, *(proxy.audit_to_kafka.leaders() if proxy.audit_to_kafka is not None else ())]


def _content_digest(path: str) -> str:
    """sha256 of a file's bytes. Opened by name each time, so a swapped symlink (a Kubernetes volume's `..data`)
    is followed to the new file; mtimes say nothing there (every generation may carry the same one)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class _SecretFile:
    """control_sasl.password_file, re-read by content like the TLS files."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.digest = self._digest()

    def _digest(self) -> str | None:
        if not self.path:
            return None
        return _content_digest(self.path)

    def changed(self) -> str | None:
        """The new secret when the file's content changed; ValueError when it cannot be read or is empty."""
        try:
            digest = self._digest()
        except OSError as exc:
            raise ValueError(f"control_sasl.password_file = {self.path!r}: cannot read it ({exc.strerror})") from None
        if digest == self.digest or self.path is None:
            return None
        secret = Path(self.path).read_text().rstrip("\r\n")
        if not secret:
            raise ValueError(f"control_sasl.password_file = {self.path!r}: the file is empty")
        self.digest = digest
        return secret


class Reloads:
    """The live reloads of one proxy process; `run()` is the TLS check loop, `reload()` the configuration's."""

    def __init__(self, proxy: InsyncProxy, load: Callable[[], ProxyConfig] | None = None,
                 config_file: str | None = None) -> None:
        self.proxy = proxy
        #: Reads the configuration again from its sources (None: nothing to re-read but the files).
        self.load = load
        #: The TOML file `load` reads: a change of its content reloads at the next check (None: no file).
        self.config_file = config_file
        self._config_digest = self._config_file_digest()
        self.metrics = proxy.metrics
        self.password_file = _SecretFile(proxy.config.control_sasl.password_file)
        self._failing: dict[str, str] = {}
        for material in (proxy.upstream_tls, proxy.downstream_tls):
            self._note_expiry(material)

    # --------------------------------------------------------------------------------- TLS material
    async def run(self) -> None:
        """Check the files (TLS, password, the configuration file) every tls_reload_seconds until cancelled."""
        while True:
            interval = self.proxy.config.tls_reload_seconds
            await asyncio.sleep(interval or _IDLE_SECONDS)
            if interval:
                try:
                    await self._config_file_settled()
                    # A changed configuration file reloads everything, the TLS files with it (forced)
                    if self.check_config_file() is None:
                        self.check_files()
                except Exception:  # a bug here must not end the checks: said, counted, tried again
                    log.exception("file check (TLS, configuration) failed; tried again in %.0fs", interval)
                    self.metrics.background_task_failures_total.labels("tls_reload").inc()

    async def _config_file_settled(self) -> None:
        """When the configuration file's content changed, wait until two reads `_SETTLE_SECONDS` apart agree."""
        seen = self._config_file_digest()
        tries = 0
        while seen != self._config_digest and tries < _SETTLE_TRIES:
            await asyncio.sleep(_SETTLE_SECONDS)
            now, tries = self._config_file_digest(), tries + 1
            if now == seen:
                return
            seen = now

    def _config_file_digest(self) -> str | None:
        if self.config_file is None or self.load is None:
            return None
        try:
            return _content_digest(self.config_file)
        except OSError as exc:
            # Unreadable is a content of its own: a reload then says why once, not at every check
            return f"unreadable: {exc}"

    def check_config_file(self) -> dict[str, Any] | None:
        """Reload when the configuration file's content is not what was last read; the reload's answer, or None."""
        if self.config_file is None or self.load is None or self._config_file_digest() == self._config_digest:
            return None
        return self.reload(f"{self.config_file} changed")

    def check_files(self, force: bool = False, config: ProxyConfig | None = None) -> list[str]:
        """Re-read every TLS file and the password file; swap what changed and loads. What changed, in words."""
        config = config or self.proxy.config
        said: list[str] = []
        for material, tls in ((self.proxy.upstream_tls, config.upstream_tls),
                              (self.proxy.downstream_tls, config.downstream_tls)):
            outcome, text = material.check(tls, force)
            if outcome == "reloaded":
                self._count(material.side, ok=True)
                log.info("TLS material reloaded: %s", text)
                if material.side == "upstream_tls":
                    self._upstream_context_changed()
                self._note_expiry(material)
                said.append(text)
            elif outcome == "failed":
                self._failed(material.side, text, "the working TLS material stays")
                said.append(f"{material.side}: FAILED: {text}")
            elif material.failure is None:
                self._recovered(material.side)
        said += self._check_password(config.control_sasl, force)
        return said

    def _check_password(self, sasl: SaslConfig, force: bool) -> list[str]:
        if sasl.password_file != self.password_file.path or force:
            self.password_file = _SecretFile(None)
            self.password_file.path = sasl.password_file
        try:
            secret = self.password_file.changed()
        except ValueError as exc:
            if self._failing.get("control_sasl") == str(exc) and not force:
                return []  # said once already: the same broken file is not reported at every check
            self._failed("control_sasl", str(exc), "the control connection keeps its password")
            return [f"control_sasl: FAILED: {exc}"]
        if secret is None or secret == self.proxy.config.control_sasl.password:
            return []
        self._set_sasl(replace(self.proxy.config.control_sasl, password=secret))
        self._count("control_sasl", ok=True)
        log.info("control_sasl.password_file changed: the next login of the proxy's own connections uses it")
        return ["control_sasl.password_file: new password for the next login"]

    def _set_sasl(self, sasl: SaslConfig) -> None:
        proxy = self.proxy
        proxy.config = replace(proxy.config, control_sasl=sasl)
        for connection in own_connections(proxy):
            connection.sasl = sasl if sasl.mechanism else None

    def _upstream_context_changed(self) -> None:
        """Every holder of the upstream context takes the new one for its next connection."""
        context = self.proxy.upstream_tls.context
        self.proxy.connection_settings.upstream_ssl = context
        for connection in own_connections(self.proxy):
            connection.ssl_context = context

    def _note_expiry(self, material: TlsMaterial) -> None:
        for name, certificate in (("cert_file", material.current.certificate), ("ca_file", material.current.ca)):
            if certificate is not None:
                self.metrics.tls_certificate_expiry.labels(material.side, name).set(certificate.not_after)

    def _count(self, what: str, ok: bool) -> None:
        self.metrics.reloads_total.labels(what, "ok" if ok else "failed").inc()
        if ok:
            self._recovered(what)

    def _failed(self, what: str, why: str, consequence: str) -> None:
        self.metrics.reloads_total.labels(what, "failed").inc()
        self.metrics.reload_failing.labels(what).set(1)
        self._failing[what] = why
        log.error("reload of %s failed: %s; %s (tried again at the next check)", what, why, consequence)

    def _recovered(self, what: str) -> None:
        if self._failing.pop(what, None) is not None:
            self.metrics.reload_failing.labels(what).set(0)

    # --------------------------------------------------------------------------------- the configuration
    def reload(self, trigger: str) -> dict[str, Any]:
        """Re-read the configuration and apply what reloads; the answer of POST /reload (JSON-able)."""
        log.info("reload (%s): reading the configuration again", trigger)
        # Taken before reading: a write after it is seen at the next check, never missed
        self._config_digest = self._config_file_digest()
        old = self.proxy.config
        try:
            new = self.load() if self.load is not None else old
        except ConfigError as exc:
            self._failed("config", str(exc), "nothing changed")
            return {"result": "failed", "error": str(exc), "changed": [], "needs_restart": [], "tls": []}
        merged = merge(old, new)
        for key in merged.needs_restart:
            log.warning("reload: %s changed but needs a restart; the running value stays until then", key)
        self.apply(merged.config)
        tls = self.check_files(force=True)
        failed = [t for t in tls if ": FAILED: " in t]
        self._count("config", ok=True)
        log.info("reload (%s) done: %s%s", trigger, ", ".join(merged.applied) or "no setting changed",
                 f"; needs a restart: {', '.join(merged.needs_restart)}" if merged.needs_restart else "")
        # partial: the settings applied, but TLS material that does not load kept the working one
        return {"result": "partial" if failed else "ok", "changed": merged.applied,
                "needs_restart": merged.needs_restart, "tls": tls}

    def apply(self, config: ProxyConfig) -> None:
        """Hand every reloadable setting of `config` to the part that uses it (for its next exchange)."""
        proxy = self.proxy
        proxy.config = config
        for behaviour in proxy.registry.behaviours:
            if isinstance(behaviour, AcksPolicy):
                behaviour.set_policies(config.acks_policies)
            elif isinstance(behaviour, ProduceAccounting):
                behaviour.every_request = config.audit.detail == "every_request" and proxy.audit is not None
        proxy.min_insync.ttl = config.min_insync_ttl_seconds
        proxy.min_insync.miss_wait = config.min_insync_miss_wait_ms / 1000
        proxy.min_insync.max_stale = config.min_insync_max_stale_seconds
        proxy.min_insync.set_max_entries(config.min_insync_max_entries)
        proxy.min_insync.demand.set_max_topics(config.max_topics_in_use)
        proxy.metadata.interval_seconds = config.metadata_refresh_seconds
        if proxy.summaries is not None:
            proxy.summaries.interval_seconds = config.audit.interval_seconds
        if proxy.audit is not None:
            proxy.audit.config = replace(proxy.audit.config, max_file_bytes=config.audit.max_file_bytes,
                                         max_total_bytes=config.audit.max_total_bytes)
        proxy.metrics.topic.limit = config.topic_label_limit
        proxy.connection_settings.connect_timeout_seconds = config.connect_timeout_seconds
        for connection in own_connections(proxy):
            connection.timeout = config.connect_timeout_seconds
            connection.request_timeout = config.control_request_timeout_seconds
        self._set_sasl(config.control_sasl)
        apply_logging(config.log_level, config.log_format, config.log_summary_interval_seconds)

