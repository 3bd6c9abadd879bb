"""Live reloads without Kafka: TLS material replaced only by material that loads (tls.py), the configuration's
reloadable settings handed to the parts that use them (reload.py), the rest named as needing a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.pki import Ca, Issued, replace_file
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import _die_with_parent
from insync_proxy.proxy.behaviours.accounting import ProduceAccounting
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.reference import reference_markdown
from insync_proxy.proxy.config.schema import schema
from insync_proxy.proxy.config.settings import (
    AcksPolicyConfig,
    AuditConfig,
    ConfigError,
    ListenerConfig,
    ProxyConfig,
    SaslConfig,
    TlsConfig,
    UpstreamTlsConfig,
)
from insync_proxy.proxy.config.tls import TlsMaterial, TlsReloadError
from insync_proxy.proxy.observability.logs import summary_interval
from insync_proxy.proxy.observability.logsetup import log_format_in_use, setup_logging
from insync_proxy.proxy.reload import merge
from insync_proxy.proxy.server import InsyncProxy

# ------------------------------------------------------------------------------------------- TLS material


@pytest.fixture
def ca() -> Ca:
    return Ca.new()


def _client_side(tmp_path: Path, ca: Ca, issued: Issued) -> tuple[TlsMaterial, TlsConfig]:
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    issued.write(tmp_path / "proxy.crt", tmp_path / "proxy.key")
    tls = UpstreamTlsConfig(enabled=True, ca_file=str(tmp_path / "ca.pem"), cert_file=str(tmp_path / "proxy.crt"),
                    key_file=str(tmp_path / "proxy.key"))
    return TlsMaterial("upstream_tls", tls), tls


def test_a_rotated_pair_replaces_the_material_and_unchanged_files_do_not(tmp_path: Path, ca: Ca) -> None:
    first = ca.issue("insync-proxy")
    material, _ = _client_side(tmp_path, ca, first)
    old_context = material.context
    assert material.check() == ("unchanged", "")
    second = ca.issue("insync-proxy")
    second.write(tmp_path / "proxy.crt", tmp_path / "proxy.key")
    outcome, text = material.check()
    assert outcome == "reloaded" and f"{second.serial:x}" in text
    assert material.context is not old_context
    assert material.current.certificate is not None and material.current.certificate.serial == second.serial
    assert material.presented[material.context] == material.current.certificate  # type: ignore[index]


@pytest.mark.parametrize("broken", ["key_of_another_certificate", "truncated_pem", "expired", "half_written_pair"])
def test_broken_material_never_replaces_the_working_one(tmp_path: Path, ca: Ca, broken: str) -> None:
    first = ca.issue("insync-proxy")
    material, _ = _client_side(tmp_path, ca, first)
    working = material.context
    cert, key = tmp_path / "proxy.crt", tmp_path / "proxy.key"
    good = ca.issue("insync-proxy")
    if broken == "key_of_another_certificate":
        replace_file(cert, good.cert_pem)
        replace_file(key, ca.issue("someone-else").key_pem())
        why = "the key does not belong to the certificate"
    elif broken == "truncated_pem":
        replace_file(cert, good.cert_pem[: len(good.cert_pem) // 2])
        why = "no complete PEM certificate"
    elif broken == "expired":
        import datetime

        ca.issue("insync-proxy", valid_seconds=60, not_before=datetime.datetime.now(datetime.UTC)
                 - datetime.timedelta(hours=1)).write(cert, key)
        why = "expired at"
    else:  # the certificate written, its key not yet
        replace_file(cert, good.cert_pem)
        why = "the key does not belong to the certificate"
    outcome, text = material.check()
    assert outcome == "failed" and why in text and "upstream_tls.cert_file" in text, text
    assert material.context is working
    # The same broken content is reported once, not at every check
    assert material.check() == ("unchanged", "")
    assert material.check(force=True)[0] == "failed"
    # And the good pair is picked up at the next check
    good.write(cert, key)
    assert material.check()[0] == "reloaded"
    assert material.current.certificate is not None and material.current.certificate.serial == good.serial


def test_content_not_mtime_says_a_file_changed_kubernetes_symlink_swap(tmp_path: Path, ca: Ca) -> None:
    # Given the layout of a Kubernetes Secret volume: the files are symlinks through ..data to a timestamped
    # directory, swapped in one rename
    def generation(name: str, issued: Issued) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "ca.crt").write_bytes(ca.pem)
        issued.write(folder / "tls.crt", folder / "tls.key")
        for f in folder.iterdir():
            os.utime(f, (1_000_000_000, 1_000_000_000))  # same old mtime in every generation
        return folder

    generation("..2026_01", ca.issue("insync-proxy"))
    (tmp_path / "..data").symlink_to("..2026_01")
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    tls = UpstreamTlsConfig(enabled=True, ca_file=str(tmp_path / "ca.crt"), cert_file=str(tmp_path / "tls.crt"),
                    key_file=str(tmp_path / "tls.key"))
    material = TlsMaterial("upstream_tls", tls)
    new = ca.issue("insync-proxy")
    generation("..2026_02", new)
    (tmp_path / "..data_tmp").symlink_to("..2026_02")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert material.check()[0] == "reloaded"
    assert material.current.certificate is not None and material.current.certificate.serial == new.serial


def test_an_encrypted_key_reloads_with_its_password_file(tmp_path: Path, ca: Ca) -> None:
    issued = ca.issue("insync-proxy")
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    issued.write(tmp_path / "p.crt", tmp_path / "p.key", password="one")
    (tmp_path / "password").write_text("one\n")
    tls = UpstreamTlsConfig(enabled=True, ca_file=str(tmp_path / "ca.pem"), cert_file=str(tmp_path / "p.crt"),
                    key_file=str(tmp_path / "p.key"), key_password="one", key_password_file=str(tmp_path / "password"))
    material = TlsMaterial("upstream_tls", tls)
    rotated = ca.issue("insync-proxy")
    rotated.write(tmp_path / "p.crt", tmp_path / "p.key", password="two")
    assert material.check()[0] == "failed"  # the key is new, its password not yet
    (tmp_path / "password").write_text("two\n")
    assert material.check()[0] == "reloaded"


def test_unusable_material_at_start_is_one_clear_error(tmp_path: Path, ca: Ca) -> None:
    issued = ca.issue("insync-proxy")
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    replace_file(tmp_path / "p.crt", issued.cert_pem)
    replace_file(tmp_path / "p.key", ca.issue("other").key_pem())
    with pytest.raises(TlsReloadError, match="upstream_tls.cert_file/key_file.*does not belong"):
        TlsMaterial("upstream_tls", UpstreamTlsConfig(enabled=True, ca_file=str(tmp_path / "ca.pem"),
                                              cert_file=str(tmp_path / "p.crt"), key_file=str(tmp_path / "p.key")))


async def test_a_listener_hands_new_connections_the_new_certificate_and_open_ones_keep_theirs(
        tmp_path: Path, ca: Ca) -> None:
    (tmp_path / "ca.pem").write_bytes(ca.pem)
    first = ca.issue("localhost", server=True)
    first.write(tmp_path / "s.crt", tmp_path / "s.key")
    material = TlsMaterial("downstream_tls", TlsConfig(enabled=True, cert_file=str(tmp_path / "s.crt"),
                                                       key_file=str(tmp_path / "s.key")))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=material.listener_context())
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))

    async def connect() -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
        from cryptography import x509

        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        der = writer.get_extra_info("ssl_object").getpeercert(True)
        return x509.load_der_x509_certificate(der).serial_number, reader, writer

    try:
        serial, old_reader, old_writer = await connect()
        assert serial == first.serial
        second = ca.issue("localhost", server=True)
        second.write(tmp_path / "s.crt", tmp_path / "s.key")
        assert material.check()[0] == "reloaded"
        serial, _, writer = await connect()
        assert serial == second.serial
        writer.close()
        old_writer.write(b"still here")
        assert await asyncio.wait_for(old_reader.readexactly(10), 5) == b"still here"
        old_writer.close()
    finally:
        server.close()


# ------------------------------------------------------------------------------------------- configuration


def test_merge_applies_what_reloads_and_names_what_needs_a_restart() -> None:
    old = ProxyConfig(bootstrap_servers=("127.0.0.1:9092",))
    new = replace(old, admin_port=9999, min_insync_ttl_seconds=7.0,
                  listeners=(ListenerConfig(bootstrap_port=9093),),
                  acks_policies=(AcksPolicyConfig(topics="a.*", acks_floor=-2),))
    merged = merge(old, new)
    assert merged.needs_restart == ["listener[1].bootstrap_port", "admin_port"]
    assert merged.applied == ["min_insync_ttl_seconds", "acks_policy (now 1, was 0)"]
    assert merged.config.admin_port == old.admin_port and merged.config.listeners == old.listeners
    assert merged.config.min_insync_ttl_seconds == 7.0 and merged.config.acks_policies == new.acks_policies


def test_the_reference_says_per_setting_whether_it_reloads() -> None:
    text = reference_markdown()
    assert "| Reloads |" in text
    assert "| `admin_port` | integer | `9190` |" in text
    for line in text.splitlines():
        if line.startswith("| `admin_port` ") or line.startswith("| `bootstrap_port` "):
            assert "| no |" in line
        if line.startswith("| `min_insync_ttl_seconds` ") or line.startswith("| `acks_floor` "):
            assert "| yes |" in line


class _Files:
    """Copies of TLS files under new names: a changed path with material that loads."""

    def __init__(self, directory: Path, ca: Ca) -> None:
        self.directory = directory
        self.ca = ca
        self.n = 0
        (directory / "ca.pem").write_bytes(ca.pem)
        ca.issue("insync-proxy").write(directory / "c.crt", directory / "c.key")
        ca.issue("localhost", server=True).write(directory / "s.crt", directory / "s.key")
        (directory / "pw").write_text("pw\n")

    def copy(self, name: str) -> str:
        self.n += 1
        target = self.directory / f"{self.n}-{name}"
        shutil.copy(self.directory / name, target)
        return str(target)


def _tls(files: _Files, side: str) -> TlsConfig:
    d = files.directory
    cert, key = ("c.crt", "c.key") if side == "upstream_tls" else ("s.crt", "s.key")
    kind = UpstreamTlsConfig if side == "upstream_tls" else TlsConfig
    return kind(enabled=True, ca_file=str(d / "ca.pem"), cert_file=str(d / cert), key_file=str(d / key),
                key_password="pw")


def _proxy_config(tmp_path: Path, files: _Files) -> ProxyConfig:
    return ProxyConfig(
        bootstrap_servers=("127.0.0.1:1",), admin_port=0, listeners=(ListenerConfig(bootstrap_port=0, broker_port_base=0),),
        upstream_tls=_tls(files, "upstream_tls"), downstream_tls=_tls(files, "downstream_tls"),
        control_sasl=SaslConfig(mechanism="PLAIN", username="proxy", password="pw"),
        acks_policies=(AcksPolicyConfig(topics="t.*", fast_fail=False, acks_floor=None),),
        audit=AuditConfig(directory=str(tmp_path / "audit")),
    )


def _behaviour(proxy: InsyncProxy, kind: type) -> Any:
    return next(b for b in proxy.registry.behaviours if isinstance(b, kind))


def _side(side: str) -> Callable[[InsyncProxy], TlsMaterial]:
    return lambda p: p.upstream_tls if side == "upstream_tls" else p.downstream_tls


#: Every reloadable setting: (a changed value, given the files; where the running proxy shows it took effect).
Change = tuple[Callable[[_Files], Any], Callable[[InsyncProxy], Any]]
CHANGES: dict[str, Change] = {
    **{f"{side}.{attr}": ((lambda f, a=attr, s=side: f.copy(Path(getattr(_tls(f, s), a)).name)),
                          (lambda p, a=attr, s=side: getattr(_side(s)(p).tls, a)))
       for side in ("upstream_tls", "downstream_tls") for attr in ("ca_file", "cert_file", "key_file")},
    "upstream_tls.key_password_file": (lambda f: f.copy("pw"), lambda p: p.upstream_tls.tls.key_password_file),
    "downstream_tls.key_password_file": (lambda f: f.copy("pw"), lambda p: p.downstream_tls.tls.key_password_file),
    # An unencrypted key loads with any password: the password alone changes
    "upstream_tls.key_password": (lambda f: "other", lambda p: p.upstream_tls.tls.key_password),
    "downstream_tls.key_password": (lambda f: "other", lambda p: p.downstream_tls.tls.key_password),
    "upstream_tls.check_hostname": (lambda f: False, lambda p: p.upstream_tls.context.check_hostname),
    "control_sasl.mechanism": (lambda f: "SCRAM-SHA-256", lambda p: p.control.sasl.mechanism),
    "control_sasl.username": (lambda f: "other", lambda p: p.control.sasl.username),
    "control_sasl.password": (lambda f: "other", lambda p: p.control.sasl.password),
    "control_sasl.password_file": (lambda f: f.copy("pw"), lambda p: p.control.sasl.password_file),
    # OAUTHBEARER's settings reach the control connection's next login (its token source is made from them)
    "control_sasl.oauthbearer_token_endpoint_url": (lambda f: "http://127.0.0.1:1/token",
                                                    lambda p: p.control.sasl.oauthbearer_token_endpoint_url),
    "control_sasl.oauthbearer_client_id": (lambda f: "proxy", lambda p: p.control.sasl.oauthbearer_client_id),
    "control_sasl.oauthbearer_client_secret": (lambda f: "other", lambda p: p.control.sasl.oauthbearer_client_secret),
    "control_sasl.oauthbearer_client_secret_file": (lambda f: f.copy("pw"),
                                                    lambda p: p.control.sasl.oauthbearer_client_secret_file),
    "control_sasl.oauthbearer_scope": (lambda f: "kafka", lambda p: p.control.sasl.oauthbearer_scope),
    "control_sasl.oauthbearer_audience": (lambda f: "kafka", lambda p: p.control.sasl.oauthbearer_audience),
    "control_sasl.oauthbearer_extensions": (lambda f: ("logicalCluster=lkc-1",),
                                            lambda p: p.control.sasl.oauthbearer_extensions),
    "control_sasl.kerberos_principal": (lambda f: "proxy@R", lambda p: p.control.sasl.kerberos_principal),
    "control_sasl.kerberos_keytab": (lambda f: f.copy("pw"), lambda p: p.control.sasl.kerberos_keytab),
    "control_sasl.kerberos_service_name": (lambda f: "kafka2", lambda p: p.control.sasl.kerberos_service_name),
    "control_sasl.kerberos_service_host": (lambda f: "kafka.example.com",
                                           lambda p: p.control.sasl.kerberos_service_host),
    "control_sasl.aws_region": (lambda f: "eu-west-1", lambda p: p.control.sasl.aws_region),
    "control_sasl.aws_profile": (lambda f: "kafka", lambda p: p.control.sasl.aws_profile),
    "control_sasl.oauthbearer_ca_file": (lambda f: f.copy("pw"), lambda p: p.control.sasl.oauthbearer_ca_file),
    "acks_policy.topics": (lambda f: "u.*", lambda p: _behaviour(p, AcksPolicy).policies[0].topics),
    "acks_policy.fast_fail": (lambda f: True, lambda p: _behaviour(p, AcksPolicy).has_fast_fail),
    "acks_policy.acks_floor": (lambda f: -2, lambda p: _behaviour(p, AcksPolicy).policies[0].acks_floor),
    "audit.max_file_bytes": (lambda f: 4096, lambda p: p.audit.config.max_file_bytes),
    "audit.max_total_bytes": (lambda f: 10**10, lambda p: p.audit.config.max_total_bytes),
    "audit.interval_seconds": (lambda f: 3.0, lambda p: p.summaries.interval_seconds),
    "audit.detail": (lambda f: "every_request",
                     lambda p: "every_request" if _behaviour(p, ProduceAccounting).every_request else "summary"),
    "drain_timeout_seconds": (lambda f: 3.0, lambda p: p.config.drain_timeout_seconds),
    "connect_timeout_seconds": (lambda f: 3.0, lambda p: (p.connection_settings.connect_timeout_seconds,
                                                           p.control.timeout)),
    "control_request_timeout_seconds": (lambda f: 3.0, lambda p: p.control.request_timeout),
    "tls_reload_seconds": (lambda f: 3.0, lambda p: p.config.tls_reload_seconds),
    "min_insync_ttl_seconds": (lambda f: 3.0, lambda p: p.min_insync.ttl),
    "min_insync_miss_wait_ms": (lambda f: 3.0, lambda p: p.min_insync.miss_wait * 1000),
    "min_insync_max_stale_seconds": (lambda f: 3.0, lambda p: p.min_insync.max_stale),
    "min_insync_max_entries": (lambda f: 3, lambda p: p.min_insync.max_entries),
    "metadata_refresh_seconds": (lambda f: 3.0, lambda p: p.metadata.interval_seconds),
    "topic_label_limit": (lambda f: 3, lambda p: p.metrics.topic.limit),
    "max_topics_in_use": (lambda f: 3, lambda p: p.min_insync.demand.max_topics),
    "log_level": (lambda f: "DEBUG", lambda p: logging.getLevelName(logging.getLogger("insync_proxy").level)),
    "log_format": (lambda f: "json", lambda p: log_format_in_use()),
    "log_summary_interval_seconds": (lambda f: 3.0, lambda p: summary_interval()),
}
#: What the probe shows for a changed value, when it is not the value itself.
SHOWN: dict[str, Callable[[Any], Any]] = {
    "acks_policy.fast_fail": lambda v: v,
    "connect_timeout_seconds": lambda v: (v, v),
}


def _changed(config: ProxyConfig, key: str, value: Any) -> ProxyConfig:
    """`config` with one setting (by TOML key; an array of tables: its first item) changed."""
    table, _, name = key.rpartition(".")
    if not table:
        return replace(config, **{name: value})
    if table == "acks_policy":
        return replace(config, acks_policies=(replace(config.acks_policies[0], **{name: value}),))
    return replace(config, **{table: replace(getattr(config, table), **{name: value})})


@pytest.fixture
def our_log_handler() -> Iterator[None]:
    """The handler `run` installs (a reload changes its format), the test's own handlers back afterwards."""
    root, ours = logging.getLogger(), logging.getLogger("insync_proxy")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    setup_logging("INFO", "text")
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    ours.setLevel(our_level)


async def test_every_reloadable_setting_takes_effect_on_a_reload(tmp_path: Path, ca: Ca,
                                                                 our_log_handler: None) -> None:
    # Every setting flagged `reloads` has a change and a probe here: a new reloadable setting fails this test
    # until it shows where it takes effect
    reloadable = {e.key for e in schema() if e.meta.reloads}
    assert reloadable == set(CHANGES), (reloadable - set(CHANGES), set(CHANGES) - reloadable)
    files = _Files(tmp_path, ca)
    base = _proxy_config(tmp_path, files)
    for key, (change, probe) in CHANGES.items():
        # Given a proxy, and a configuration that changes one setting
        proxy = InsyncProxy(base, load=lambda c=base: c)
        value = change(files)
        changed = _changed(base, key, value)
        before = probe(proxy)
        expected = SHOWN.get(key, lambda v: v)(value)
        assert before != expected, key
        proxy.reloads.load = lambda c=changed: c  # type: ignore[misc]
        # When the proxy reloads
        answer = proxy.reloads.reload("test")
        # Then the setting took effect where it is used, and the answer names it
        assert answer["result"] == "ok", (key, answer)
        assert key in [c.split("[")[0] + ("." + c.split("].")[1] if "]." in c else "") for c in answer["changed"]], \
            (key, answer)
        assert probe(proxy) == expected, key
        await proxy.control.close()


async def test_a_changed_port_is_named_as_needing_a_restart_and_the_rest_applies(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    base = ProxyConfig(bootstrap_servers=("127.0.0.1:1",), admin_port=0, audit=AuditConfig(enabled=False),
                       listeners=(ListenerConfig(bootstrap_port=0, broker_port_base=0),))
    new = replace(base, admin_port=9555, min_insync_ttl_seconds=9.0)
    proxy = InsyncProxy(base, load=lambda: new)
    with caplog.at_level(logging.INFO, "insync_proxy"):
        answer = proxy.reloads.reload("SIGHUP")
    assert answer == {"result": "ok", "changed": ["min_insync_ttl_seconds"], "needs_restart": ["admin_port"],
                      "tls": []}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["reload: admin_port changed but needs a restart; the running value stays until then"]
    assert proxy.config.admin_port == 0 and proxy.min_insync.ttl == 9.0
    await proxy.control.close()


async def test_a_configuration_that_does_not_validate_changes_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    base = ProxyConfig(bootstrap_servers=("127.0.0.1:1",), admin_port=0, audit=AuditConfig(enabled=False),
                       listeners=(ListenerConfig(bootstrap_port=0, broker_port_base=0),))

    def broken() -> ProxyConfig:
        raise ConfigError("config.toml: min_insync_ttl_seconds = -1: expected a number of at least 1")

    proxy = InsyncProxy(base, load=broken)
    with caplog.at_level(logging.INFO, "insync_proxy"):
        answer = proxy.reloads.reload("SIGHUP")
    assert answer["result"] == "failed" and "min_insync_ttl_seconds" in answer["error"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "reload of config failed" in errors[0]
    assert proxy.config is base
    assert proxy.metrics.reloads_total.labels("config", "failed")._value.get() == 1
    await proxy.control.close()


async def test_post_reload_answers_what_changed(tmp_path: Path) -> None:
    base = ProxyConfig(bootstrap_servers=("127.0.0.1:1",), admin_port=0, audit=AuditConfig(enabled=False),
                       listeners=(ListenerConfig(bootstrap_port=0, broker_port_base=0),))
    proxy = InsyncProxy(base, load=lambda: replace(base, topic_label_limit=5))
    await proxy.admin.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.admin.port)
        writer.write(b"POST /reload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        response = (await asyncio.wait_for(reader.read(), 10)).decode()
        head, _, body = response.partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 200")
        assert json.loads(body)["changed"] == ["topic_label_limit"]
        assert proxy.metrics.topic.limit == 5
    finally:
        await proxy.admin.stop()
        await proxy.control.close()


async def test_a_reload_whose_new_tls_files_do_not_load_keeps_the_working_material(tmp_path: Path, ca: Ca) -> None:
    files = _Files(tmp_path, ca)
    base = _proxy_config(tmp_path, files)
    # Given a new configuration naming a certificate whose key is another's, and another TTL
    replace_file(tmp_path / "other.crt", ca.issue("insync-proxy").cert_pem)
    new = replace(base, min_insync_ttl_seconds=8.0,
                  upstream_tls=replace(base.upstream_tls, cert_file=str(tmp_path / "other.crt")))
    proxy = InsyncProxy(base, load=lambda: new)
    working = proxy.upstream_tls.context
    # When the proxy reloads
    answer = proxy.reloads.reload("POST /reload")
    # Then the settings applied, the TLS material did not, and the answer says so
    assert answer["result"] == "partial"
    assert answer["changed"] == ["upstream_tls.cert_file", "min_insync_ttl_seconds"]
    assert len(answer["tls"]) == 1 and "upstream_tls: FAILED: " in answer["tls"][0]
    assert proxy.upstream_tls.context is working and proxy.min_insync.ttl == 8.0
    assert proxy.metrics.reload_failing.labels("upstream_tls")._value.get() == 1
    await proxy.control.close()


# ------------------------------------------------------------------------------------------- a ConfigMap edit

_CONFIGMAP_TOML = """\
bootstrap_servers = ["127.0.0.1:1"]
admin_port = 0
tls_reload_seconds = 0.1
min_insync_ttl_seconds = {ttl}

[[listener]]
bootstrap_port = 0
broker_port_base = 0

[audit]
enabled = false
"""


def _configmap_generation(volume: Path, name: str, toml: str) -> None:
    """One generation of a ConfigMap volume as the kubelet writes it: a timestamped directory, then `..data`
    pointed at it by renaming a new symlink over the old one (atomic: a reader sees one generation or the other)."""
    folder = volume / name
    folder.mkdir()
    (folder / "config.toml").write_text(toml)
    os.utime(folder / "config.toml", (1_000_000_000, 1_000_000_000))  # every generation: the same old mtime
    (volume / "..data_tmp").symlink_to(name)
    os.replace(volume / "..data_tmp", volume / "..data")


def _reloaded_event(proxy: InsyncProxy) -> asyncio.Event:
    """Set once the proxy has reloaded its configuration (whatever the trigger)."""
    reloaded, reload = asyncio.Event(), proxy.reloads.reload

    def reload_and_say(trigger: str) -> dict[str, Any]:
        answer = reload(trigger)
        reloaded.set()
        return answer

    proxy.reloads.reload = reload_and_say  # type: ignore[method-assign]
    return reloaded


async def test_a_configmap_edit_reloads_the_configuration_without_sighup(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given the layout of a Kubernetes ConfigMap volume mounted as a directory (no subPath), and a proxy that
    # read config.toml through it and checks its files every 0.1 s
    volume = tmp_path / "insync-proxy-config"
    volume.mkdir()
    _configmap_generation(volume, "..2026_01_01_00_00_00.1", _CONFIGMAP_TOML.format(ttl=30.0))
    (volume / "config.toml").symlink_to("..data/config.toml")
    path = str(volume / "config.toml")
    proxy = InsyncProxy(load_config(path, env={}), load=lambda: load_config(path, env={}), config_file=path)
    assert proxy.min_insync.ttl == 30.0
    reloaded = _reloaded_event(proxy)
    checks = asyncio.get_running_loop().create_task(proxy.reloads.run())
    try:
        # When the kubelet swaps ..data to a new generation with a changed setting that reloads (nobody sends
        # SIGHUP)
        with caplog.at_level(logging.INFO, "insync_proxy"):
            _configmap_generation(volume, "..2026_01_01_00_05_00.2", _CONFIGMAP_TOML.format(ttl=7.0))
            # Then the proxy reloads by itself (within a generous bound: it checks every 0.1 s) and applies it
            await asyncio.wait_for(reloaded.wait(), timeout=30)
        assert proxy.min_insync.ttl == 7.0
        assert proxy.config.min_insync_ttl_seconds == 7.0
        assert proxy.metrics.reloads_total.labels("config", "ok")._value.get() == 1
        done = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reload (")]
        assert done[-1] == f"reload ({path} changed) done: min_insync_ttl_seconds", done
        # and the unchanged file does not reload again
        assert proxy.reloads.check_config_file() is None
    finally:
        checks.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checks
        await proxy.control.close()


async def test_a_changed_configuration_file_that_does_not_validate_is_said_once_and_changes_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    volume = tmp_path / "insync-proxy-config"
    volume.mkdir()
    _configmap_generation(volume, "..1", _CONFIGMAP_TOML.format(ttl=30.0))
    (volume / "config.toml").symlink_to("..data/config.toml")
    path = str(volume / "config.toml")
    proxy = InsyncProxy(load_config(path, env={}), load=lambda: load_config(path, env={}), config_file=path)
    running = proxy.config
    # Given a new generation whose min_insync_ttl_seconds is out of bounds
    _configmap_generation(volume, "..2", _CONFIGMAP_TOML.format(ttl=-1))
    with caplog.at_level(logging.INFO, "insync_proxy"):
        # When the proxy checks its files twice
        answer = proxy.reloads.check_config_file()
        again = proxy.reloads.check_config_file()
    # Then one ERROR names the setting, the running configuration stays, and the same content is not retried
    assert answer is not None and answer["result"] == "failed" and "min_insync_ttl_seconds" in answer["error"]
    assert again is None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "reload of config failed" in errors[0], errors
    assert proxy.config is running and proxy.metrics.reload_failing.labels("config")._value.get() == 1
    # And a fixed generation applies and clears the failure
    _configmap_generation(volume, "..3", _CONFIGMAP_TOML.format(ttl=9.0))
    fixed = proxy.reloads.check_config_file()
    assert fixed is not None and fixed["result"] == "ok" and proxy.min_insync.ttl == 9.0
    assert proxy.metrics.reload_failing.labels("config")._value.get() == 0
    await proxy.control.close()


def test_run_reloads_a_configmap_edit_by_itself(tmp_path: Path) -> None:
    """`insync-proxy run --config <ConfigMap volume>/config.toml` watches that file: the command line hands its
    path to the reload checks (no Kafka needed: the proxy runs on without a reachable broker)."""
    volume = tmp_path / "insync-proxy-config"
    volume.mkdir()
    _configmap_generation(volume, "..2026_01_01_00_00_00.1", _CONFIGMAP_TOML.format(ttl=30.0))
    (volume / "config.toml").symlink_to("..data/config.toml")
    log_file = tmp_path / "proxy.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INSYNC_PROXY_")}
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "insync_proxy", "run", "--config", str(volume / "config.toml")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )
    try:
        def said(text: str) -> bool:
            assert process.poll() is None, f"the proxy exited with {process.returncode}:\n{log_file.read_text()}"
            return text in log_file.read_text()

        wait_until(lambda: said("listening"), timeout=60, what="the proxy to listen")
        _configmap_generation(volume, "..2026_01_01_00_05_00.2", _CONFIGMAP_TOML.format(ttl=7.0))
        wait_until(lambda: said("changed) done: min_insync_ttl_seconds"), timeout=60,
                   what="the proxy to reload the edited ConfigMap by itself")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


async def test_a_configuration_file_caught_half_written_reloads_once_it_is_whole(tmp_path: Path) -> None:
    # Given a proxy that checks its configuration file every 0.1 s, and a writer that truncates the file and
    # writes it again (what `cat > config.toml` or Python's write_text do: not atomic)
    path = tmp_path / "config.toml"
    path.write_text(_CONFIGMAP_TOML.format(ttl=30.0))
    proxy = InsyncProxy(load_config(str(path), env={}), load=lambda: load_config(str(path), env={}),
                        config_file=str(path))
    reloaded = _reloaded_event(proxy)
    seen_half, digest = asyncio.Event(), proxy.reloads._config_file_digest

    def digest_and_note() -> str | None:
        if path.read_text() == "":
            seen_half.set()
        return digest()

    proxy.reloads._config_file_digest = digest_and_note  # type: ignore[method-assign]
    checks = asyncio.get_running_loop().create_task(proxy.reloads.run())
    try:
        # When a check reads the file between the truncation and the write
        path.write_text("")
        await asyncio.wait_for(seen_half.wait(), timeout=30)
        path.write_text(_CONFIGMAP_TOML.format(ttl=7.0))
        await asyncio.wait_for(reloaded.wait(), timeout=30)
        # Then the reload reads the whole file: no failed reload, the new value applied
        assert proxy.metrics.reloads_total.labels("config", "failed")._value.get() == 0
        assert proxy.metrics.reloads_total.labels("config", "ok")._value.get() == 1
        assert proxy.min_insync.ttl == 7.0
    finally:
        checks.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checks
        await proxy.control.close()
