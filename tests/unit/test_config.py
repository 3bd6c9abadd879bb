"""Configuration: one typed schema; file < environment < flags; errors that name the setting as spelled."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import shutil
import ssl
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.pki import Ca
from insync_proxy.cli import JsonLogFormatter, build_parser, config_from_args, main
from insync_proxy.proxy.behaviours.acks import policy_for
from insync_proxy.proxy.config import schema as config_schema
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.reference import effective_toml, reference_markdown, reference_path
from insync_proxy.proxy.config.schema import schema, validate
from insync_proxy.proxy.config.settings import (
    OTHER_ENV_VARS,
    ConfigError,
    ListenerConfig,
    ProxyConfig,
    SaslConfig,
    setting,
)
from insync_proxy.proxy.config.tls import client_ssl_context

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "config.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_missing_bootstrap_servers_says_how_to_set_them() -> None:
    with pytest.raises(ConfigError, match="--bootstrap-servers"):
        load_config(None, env={})


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, 'bootstrap_servers = ["a:9092"]\nadmin_port = 1000\nproxy_id = "from-file"\n')
    env = {"INSYNC_PROXY_ADMIN_PORT": "2000", "INSYNC_PROXY_PROXY_ID": "from-env"}
    config = load_config(path, env=env, overrides={"proxy_id": "from-flag"})
    assert config.bootstrap_servers == ("a:9092",)
    assert config.admin_port == 2000
    assert config.proxy_id == "from-flag"


def test_loopback_is_the_default_bind_address() -> None:
    config = load_config(None, env={"INSYNC_PROXY_BOOTSTRAP_SERVERS": "k:9092"})
    assert config.bind_host == "127.0.0.1" and config.admin_host == "127.0.0.1"


def test_nested_settings_come_from_table_plus_field_variables(tmp_path: Path) -> None:
    ca = write(tmp_path, "pem", "ca.pem")
    env = {
        "INSYNC_PROXY_BOOTSTRAP_SERVERS": "k:9093",
        "INSYNC_PROXY_UPSTREAM_TLS_ENABLED": "true",
        "INSYNC_PROXY_UPSTREAM_TLS_CA_FILE": ca,
        "INSYNC_PROXY_AUDIT_INTERVAL_SECONDS": "2.5",
        "INSYNC_PROXY_AUDIT_DIRECTORY": "/var/audit",
        "INSYNC_PROXY_AUDIT_ENABLED": "off",
        "INSYNC_PROXY_CONTROL_SASL_MECHANISM": "scram-sha-256",
        "INSYNC_PROXY_CONTROL_SASL_USERNAME": "proxy",
        "INSYNC_PROXY_CONTROL_SASL_PASSWORD": "pw",
    }
    config = load_config(None, env=env)
    assert (config.upstream_tls.enabled, config.upstream_tls.ca_file) == (True, ca)
    assert (config.audit.interval_seconds, config.audit.directory, config.audit.enabled) == (2.5, "/var/audit", False)
    assert config.control_sasl == SaslConfig(mechanism="SCRAM-SHA-256", username="proxy", password="pw")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('bootstrap_servers = ["k"]', r"bootstrap_servers = \[\"k\"\]: 'k' is not host:port"),
        ('bootstrap_servers = ["k:1"]\nbogus = 1', "unknown setting 'bogus'; every setting is in docs/configuration.md"),
        ('bootstrap_servers = ["k:1"]\n[[acks_policy]]\ntopics = "("', r"acks_policy\[1\].topics.*regular expression"),
        ('bootstrap_servers = ["k:1"]\n[[acks_policy]]\nacks_floor = 2', r"acks_floor = 2: expected one of -1, -2"),
        ('bootstrap_servers = ["k:1"]\n[[listener]]\nname = "a"\n[[listener]]\nname = "a"\nbootstrap_port = 1',
         "used twice"),
        ('bootstrap_servers = ["k:1"]\n[[listener]]\nmetadata_schema = "v10"', "one of tagged, kip637"),
        ('bootstrap_servers = ["k:1"]\nadmin_port = 70000', "admin_port = 70000: expected a whole number from 0 to 65535"),
        ('bootstrap_servers = ["k:1"]\nmax_topics_in_use = 0', "max_topics_in_use = 0: expected a whole number from 1"),
        ('bootstrap_servers = ["k:1"]\nlog_summary_interval_seconds = 0', r"log_summary_interval_seconds = 0(\.0)?: expected a number above 0"),
        ('bootstrap_servers = ["k:1"]\nlog_summary_interval_seconds = -5', r"log_summary_interval_seconds = -5(\.0)?: expected a number above 0"),
        ('bootstrap_servers = ["k:1"]\n[control_sasl]\nmechanism = "SCRAM-SHA-1"', "PLAIN, SCRAM-SHA-256"),
        ('bootstrap_servers = ["k:1"]\nadmin_port = 9190.0', "admin_port = 9190.0: expected a whole number"),
        ('bootstrap_servers = ["k:1"]\nadmin_port = true', "admin_port = true: expected a whole number"),
        ('bootstrap_servers = ["k:1"]\nproxy_id = 7', "proxy_id = 7: expected a string"),
        ('bootstrap_servers = ["k:1", 2]', "bootstrap_servers"),
        ('bootstrap_servers = []', "bootstrap_servers is not set"),
        ('bootstrap_servers = ["k:1"]\nlistener = []', r"listener = \[\]: expected at least 1 \[\[listener\]\]"),
        ("bootstrap_servers = [", "not valid TOML"),
    ],
)
def test_bad_config_is_rejected_with_a_clear_message(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), env={})


def test_an_error_names_the_flag_as_typed() -> None:
    with pytest.raises(ConfigError, match=r"^--no-audit|--audit-interval-seconds = '0'"):
        load_config(None, env={}, overrides={"bootstrap_servers": "k:1", "audit.interval_seconds": "0"})


def test_a_config_built_in_code_is_checked_by_validate() -> None:
    with pytest.raises(ConfigError, match="metadata_refresh_seconds = 0"):
        validate(ProxyConfig(bootstrap_servers=("k:1",), metadata_refresh_seconds=0))
    with pytest.raises(ConfigError, match="bootstrap_port"):
        validate(ProxyConfig(bootstrap_servers=("k:1",), listeners=(ListenerConfig(bootstrap_port=-1),)))


def test_password_never_appears_in_the_repr(tmp_path: Path) -> None:
    path = write(tmp_path, 'bootstrap_servers = ["k:1"]\n[control_sasl]\nmechanism = "PLAIN"\nusername = "u"\n')
    config = load_config(path, env={"INSYNC_PROXY_CONTROL_SASL_PASSWORD": "s3cret"})
    assert config.control_sasl.password == "s3cret"
    assert "s3cret" not in repr(config)
    assert "s3cret" not in effective_toml(config)


def test_password_from_a_file_is_read_and_masked(tmp_path: Path) -> None:
    secret = write(tmp_path, "from-the-file\n", "password")
    path = write(tmp_path, 'bootstrap_servers = ["k:1"]\n[control_sasl]\nmechanism = "SCRAM-SHA-512"\n'
                           f'username = "u"\npassword_file = "{secret}"\n')
    config = load_config(path, env={})
    assert config.control_sasl.password == "from-the-file"
    printed = effective_toml(config)
    assert '# password = "***" (secret: set, not shown)' in printed.splitlines()
    assert "from-the-file" not in printed + repr(config)


def test_an_empty_password_file_is_an_error(tmp_path: Path) -> None:
    secret = write(tmp_path, "\n", "password")
    with pytest.raises(ConfigError, match="INSYNC_PROXY_CONTROL_SASL_PASSWORD_FILE = .*: the file is empty"):
        load_config(None, env={"INSYNC_PROXY_BOOTSTRAP_SERVERS": "k:1", "INSYNC_PROXY_CONTROL_SASL_MECHANISM": "PLAIN",
                               "INSYNC_PROXY_CONTROL_SASL_USERNAME": "u",
                               "INSYNC_PROXY_CONTROL_SASL_PASSWORD_FILE": secret})


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make an encrypted key")
def test_an_encrypted_client_key_is_loaded_with_its_password_from_a_file(tmp_path: Path) -> None:
    # Given an mTLS client certificate whose key is encrypted, and the key's password in a file
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1", "-subj", "/CN=insync-proxy",
                    "-keyout", str(key), "-out", str(cert), "-passout", "pass:key-secret"],
                   check=True, capture_output=True)
    password = write(tmp_path, "key-secret\n", "key-password")
    env = {"INSYNC_PROXY_BOOTSTRAP_SERVERS": "k:9093", "INSYNC_PROXY_UPSTREAM_TLS_ENABLED": "1",
           "INSYNC_PROXY_UPSTREAM_TLS_CERT_FILE": str(cert), "INSYNC_PROXY_UPSTREAM_TLS_KEY_FILE": str(key)}
    # When the configuration names the password file, Then the client context loads the key
    config = load_config(None, env={**env, "INSYNC_PROXY_UPSTREAM_TLS_KEY_PASSWORD_FILE": password})
    assert isinstance(client_ssl_context(config.upstream_tls), ssl.SSLContext)
    assert "key-secret" not in effective_toml(config) + repr(config)
    # and without it the key cannot be loaded
    with pytest.raises(ssl.SSLError):
        client_ssl_context(load_config(None, env={**env, "INSYNC_PROXY_UPSTREAM_TLS_KEY_PASSWORD": "wrong"}).upstream_tls)


def test_cli_flags_override_the_first_listener(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["run", "--bootstrap-servers", "k:9092", "--bootstrap-port", "19092", "--metadata-schema", "kip637",
         "--hide-unready-partitions", "--no-audit"]
    )
    config = config_from_args(args, env={})
    listener = config.listeners[0]
    assert (listener.bootstrap_port, listener.metadata_schema, listener.hide_unready_partitions) == (
        19092, "kip637", True)
    assert config.audit.enabled is False


def test_first_listener_flags_change_the_first_toml_listener_only(tmp_path: Path) -> None:
    path = write(tmp_path, 'bootstrap_servers = ["k:1"]\n[[listener]]\nname = "a"\nbroker_port_base = 30000\n'
                           '[[listener]]\nname = "b"\nbootstrap_port = 9093\n')
    args = build_parser().parse_args(["run", "--config", path, "--bootstrap-port", "7000"])
    first, second = config_from_args(args, env={}).listeners
    assert (first.name, first.bootstrap_port, first.broker_port_base) == ("a", 7000, 30000)
    assert (second.name, second.bootstrap_port) == ("b", 9093)


LEGACY_FLAGS = [
    ["--bootstrap-servers", "k:1"], ["--bootstrap-port", "1"], ["--broker-port-base", "2"],
    ["--metadata-schema", "kip637"], ["--hide-unready-partitions"], ["--admin-port", "300"], ["--no-audit"],
    ["--audit-directory", "d"], ["--audit-interval-seconds", "4"], ["--audit-detail", "every_request"],
    ["--no-uvloop"], ["--log-level", "DEBUG"], ["--proxy-id", "p"], ["--drain-timeout-seconds", "5"],
    ["--bind-host", "0.0.0.0"], ["--advertised-host", "h"], ["--admin-host", "a"],
]


def test_every_flag_spelling_of_before_still_works(tmp_path: Path) -> None:
    argv = ["run", "--config", write(tmp_path, "")] + [word for flag in LEGACY_FLAGS for word in flag]
    config = config_from_args(build_parser().parse_args(argv), env={})
    assert (config.bootstrap_servers, config.listeners[0].bootstrap_port, config.listeners[0].broker_port_base) == (
        ("k:1",), 1, 2)
    assert (config.admin_port, config.audit.enabled, config.audit.directory, config.audit.interval_seconds) == (
        300, False, "d", 4.0)
    assert (config.audit.detail, config.use_uvloop, config.log_level, config.proxy_id) == (
        "every_request", False, "DEBUG", "p")
    assert (config.drain_timeout_seconds, config.bind_host, config.advertised_host, config.admin_host) == (
        5.0, "0.0.0.0", "h", "a")


def test_first_matching_acks_policy_wins(tmp_path: Path) -> None:
    path = write(tmp_path, 'bootstrap_servers = ["k:1"]\n[[acks_policy]]\ntopics = "pay-.*"\nacks_floor = -2\n'
                           '[[acks_policy]]\ntopics = ".*"\nfast_fail = true\n')
    config = load_config(path, env={})
    assert policy_for(config.acks_policies, "pay-1").acks_floor == -2  # type: ignore[union-attr]
    assert policy_for(config.acks_policies, "other").fast_fail is True  # type: ignore[union-attr]


# ------------------------------------------------------------------------------ the schema and its products


def test_every_setting_has_a_meaning_and_unique_names() -> None:
    entries = schema()
    assert len(entries) > 40
    assert all(e.meta.meaning for e in entries), [e.key for e in entries if not e.meta.meaning]
    envs = [e.env for e in entries if e.env]
    flags = [e.flag for e in entries if e.flag]
    assert len(envs) == len(set(envs)) and len(flags) == len(set(flags))
    assert not set(envs) & set(OTHER_ENV_VARS)


def test_every_dataclass_field_is_a_setting_with_a_flag_and_a_variable_by_the_generic_rule() -> None:
    # Given the schema walked from ProxyConfig
    by_key = {e.key: e for e in schema()}
    # Then a table's field is INSYNC_PROXY_<TABLE>_<FIELD> and --<table>-<field>; arrays have no variables
    audit = by_key["audit.max_file_bytes"]
    assert (audit.env, audit.flag) == ("INSYNC_PROXY_AUDIT_MAX_FILE_BYTES", "--audit-max-file-bytes")
    assert by_key["upstream_tls.enabled"].env == "INSYNC_PROXY_UPSTREAM_TLS_ENABLED"
    for field in dataclasses.fields(ListenerConfig):
        e = by_key[f"listener.{field.name}"]
        assert e.env is None and e.flag, e  # the first listener's flags
    assert all(e.env is None and e.flag is None for e in schema() if e.table == "acks_policy")
    assert all(e.flag is None for e in schema() if e.meta.secret)


def test_the_configuration_reference_is_up_to_date() -> None:
    # docs/configuration.md is generated: python -m insync_proxy.proxy.config.reference --write
    assert reference_path() == ROOT / "docs" / "configuration.md"
    assert reference_path().read_text() == reference_markdown(), \
        "docs/configuration.md is stale: run `python -m insync_proxy.proxy.config.reference --write`"


def test_the_reference_lists_every_setting_variable_and_flag() -> None:
    text = reference_markdown()
    for e in schema():
        assert f"`{e.key.rsplit('.', 1)[-1]}`" in text
        for name in (e.env, e.flag):
            assert name is None or f"`{name}`" in text


def test_readme_links_the_reference_and_its_example_is_a_valid_configuration(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/configuration.md)" in readme
    example = readme.split("### Your own cluster", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    secret = write(tmp_path, "pw\n", "secret")
    ca_file = tmp_path / "ca.pem"  # the example's CA bundle, a real one: the proxy loads it at start
    ca_file.write_bytes(Ca.new().pem)
    example = example.replace("/run/secrets/insync-proxy", secret).replace("/etc/kafka/ca.pem", str(ca_file))
    config = load_config(write(tmp_path, example), env={})
    assert config.control_sasl.password == "pw" and config.acks_policies[0].acks_floor == -1
    assert config.upstream_tls.enabled and config.upstream_tls.ca_file == str(ca_file)


def test_every_insync_proxy_variable_in_the_project_is_a_setting_or_known() -> None:
    # Given every INSYNC_PROXY_* name the project's code, scripts and docs mention
    settings = {e.env for e in schema() if e.env}
    found: set[str] = set()
    for folder in ("proxy", "protocol", "pipeline", "devcluster", "audit", "insync_proxy", "scripts", "harness", "tests", "benchmarks",
                   "deploy", "docs"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in ("", ".py", ".md", ".yaml", ".yml", ".toml", ".sh") and \
                    not path.name.startswith("test_config"):
                found |= set(re.findall(r"INSYNC_PROXY_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    for path in (ROOT / "Dockerfile", ROOT / "setup.py", ROOT / "README.md"):
        found |= set(re.findall(r"INSYNC_PROXY_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text()))
    # Then each is a setting's variable or one of the known others (which the proxy accepts)
    assert found - settings - set(OTHER_ENV_VARS) == set()


def test_a_new_setting_needs_only_its_field() -> None:
    # Given a dataclass with a new field declared by setting(...)
    @dataclasses.dataclass(frozen=True)
    class Example:
        answer_timeout_seconds: float = setting(5.0, min=0, min_exclusive=True, meaning="a new one")

    (entry,) = config_schema._walk(Example, (), "", "", in_array=False, flags=True, env=True)
    # Then it has its variable, flag, type, default and bounds without anything else
    assert (entry.env, entry.flag, entry.default) == ("INSYNC_PROXY_ANSWER_TIMEOUT_SECONDS", "--answer-timeout-seconds", 5.0)
    assert config_schema.allowed(entry) == "a number above 0"


# --------------------------------------------------------------------------------------- check-config, logs


def test_check_config_connect_calls_the_preflight_and_exits_by_its_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[ProxyConfig] = []

    def check_connection(config: ProxyConfig, say: object) -> bool:
        seen.append(config)
        say("bootstrap k:1: ok")  # type: ignore[operator]
        return config.proxy_id == "good"

    module = types.ModuleType("insync_proxy.cli.preflight")
    module.check_connection = check_connection  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "insync_proxy.cli.preflight", module)
    for key in [k for k in __import__("os").environ if k.startswith("INSYNC_PROXY_")]:
        monkeypatch.delenv(key)
    argv = ["check-config", "--connect", "--bootstrap-servers", "k:1"]
    assert main([*argv, "--proxy-id", "good"]) == 0
    assert main([*argv, "--proxy-id", "bad"]) == 1
    assert [c.proxy_id for c in seen] == ["good", "bad"]
    assert "bootstrap k:1: ok" in capsys.readouterr().out.splitlines()


def test_check_config_prints_every_setting_with_secrets_masked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("INSYNC_PROXY_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("INSYNC_PROXY_CONTROL_SASL_PASSWORD", "do-not-print")
    path = write(tmp_path, 'bootstrap_servers = "k:1"\n[control_sasl]\nmechanism = "PLAIN"\nusername = "u"\n')
    assert main(["check-config", "--config", path, "--admin-port", "9999"]) == 0
    out = capsys.readouterr().out
    assert "do-not-print" not in out
    lines = out.splitlines()
    assert {"admin_port = 9999", '# password = "***" (secret: set, not shown)', "[[listener]]", "[audit]"} <= set(lines)
    import tomllib

    printed = tomllib.loads(out)  # the output is TOML a user can start from
    assert printed["bootstrap_servers"] == ["k:1"] and printed["listener"][0]["bootstrap_port"] == 9092


def test_json_log_lines_are_one_object_each() -> None:
    record = logging.LogRecord("insync_proxy.admin", logging.WARNING, __file__, 1, "two\nlines %s", ("x",), None)
    line = JsonLogFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == ("WARNING", "insync_proxy.admin", "two\nlines x")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])


def test_check_config_toml_loads_back_unchanged(tmp_path: Path) -> None:
    # Given a configuration with lists, arrays of tables, quotes, IPv6, a secret from a file and one from the env
    secret = write(tmp_path, "pw-from-a-file\n", "password")
    path = write(tmp_path, f'''bootstrap_servers = ["a:9092", "[::1]:9093"]
admin_port = 0
proxy_id = "p \\"q\\" \\\\ r"
metadata_refresh_seconds = 2.5
[control_sasl]
mechanism = "scram-sha-256"
username = "u"
password_file = "{secret}"
[upstream_tls]
check_hostname = false
[[listener]]
name = "a"
bootstrap_port = 0
node_id_ranges = ["1-3", "7"]
[[listener]]
name = "b"
bootstrap_port = 9300
broker_port_base = 9400
node_id_ranges = "1-3"
[[acks_policy]]
topics = "orders-.*"
acks_floor = -2
''')
    env = {"INSYNC_PROXY_AUDIT_DIRECTORY": str(tmp_path / "a b")}
    config = load_config(path, env=env)
    # When check-config's TOML is loaded again (same environment): Then it is the same configuration
    printed = effective_toml(config)
    again = load_config(write(tmp_path, printed, "printed.toml"), env=env)
    assert again == config
    assert "pw-from-a-file" not in printed


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = actions[0].choices[name]
    return found


def test_the_help_says_what_the_code_does(capsys: pytest.CaptureFixture[str]) -> None:
    from insync_proxy.proxy.observability.metrics import OVERFLOW_TOPIC

    # topic_label_limit names the label the code uses
    assert f'topic="{OVERFLOW_TOPIC}"' in config_schema.entry("topic_label_limit").meta.meaning
    # the downstream side has no host name check (it had one that did nothing)
    assert "downstream_tls.check_hostname" not in {e.key for e in schema()}
    assert "upstream_tls.check_hostname" in {e.key for e in schema()}
    run = _subcommand("run")
    # --node-id-ranges shows its default once
    node_ids = next(a for a in run._actions if "--node-id-ranges" in a.option_strings)
    assert node_ids.help is not None and node_ids.help.count("0-89") == 1, node_ids.help
    # the run epilog's port arithmetic: consecutive ports in the order of node_id_ranges
    assert run.epilog is not None and "in the\norder written" in run.epilog
    # check-config's exit codes, also in the top-level help
    assert "1 when --connect fails" in build_parser().format_help()
    # demo sets the upstream itself: it offers none of those flags
    demo_flags = {flag for a in _subcommand("demo")._actions for flag in a.option_strings}
    assert "--security" in demo_flags
    assert not {f for f in demo_flags if f.startswith(("--bootstrap-servers", "--upstream-tls", "--control-sasl"))}


def test_report_help_names_the_command_users_typed(capsys: pytest.CaptureFixture[str]) -> None:
    # the report's command line is cli.py's own: its help needs no PySpark
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert capsys.readouterr().out.startswith("usage: insync-proxy report ")


def test_flags_are_never_abbreviated() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--control-sasl-password", "hunter2"])


def test_a_start_failure_names_the_setting_and_blames_another_process_only_for_a_port_in_use() -> None:
    import errno
    import socket

    from insync_proxy.cli import start_failure

    config = load_config(None, env={"INSYNC_PROXY_BOOTSTRAP_SERVERS": "k:9092"},
                         overrides={"bind_host": "no-such-host.invalid"})

    def bind_error(code: int, port: int) -> OSError:
        return OSError(code, f"error while attempting to bind on address ('127.0.0.1', {port}): {os.strerror(code)}")

    cases = {
        "in use": (bind_error(errno.EADDRINUSE, 9190), 1, "admin_port = 9190: the port is in use (is another process"),
        "broker port": (bind_error(errno.EADDRINUSE, 9105), 1, "listener[1].broker_port_base (port 9105)"),
        "privileged": (bind_error(errno.EACCES, 9092), 2, "listener[1].bootstrap_port = 9092: permission denied"),
        "not here": (bind_error(errno.EADDRNOTAVAIL, 9092), 2, "bind_host = '127.0.0.1': not an address"),
        "no name": (socket.gaierror(-2, "Name or service not known"), 2, "bind_host = 'no-such-host.invalid'"),
    }
    for name, (exc, code, words) in cases.items():
        got_code, line = start_failure(config, exc)
        assert (got_code, words in line) == (code, True), (name, line)
        assert ("another process" in line) == (code == 1), (name, line)
    # With admin_port and bootstrap_port both 0 (any free port), the address says which host setting it is
    config = load_config(None, env={"INSYNC_PROXY_BOOTSTRAP_SERVERS": "k:9092"},
                         overrides={"bind_host": "10.99.99.99", "admin_port": 0, "listener.bootstrap_port": 0})
    exc = OSError(errno.EADDRNOTAVAIL, "error while attempting to bind on address ('10.99.99.99', 0): cannot assign")
    assert start_failure(config, exc) == (2, "bind_host = '10.99.99.99': not an address of this machine (error "
                                             "while attempting to bind on address ('10.99.99.99', 0): cannot assign)")
