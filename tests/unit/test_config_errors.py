"""A wrong setting stops the real command line within 2 s: exit 2, one stderr line naming the setting as the
user spelled it (TOML key path, environment variable or flag) and what is allowed; never a traceback.

One table of refused cases, each run as `check-config` and as `run`: both exit 2 with the same line, so `run`
refuses exactly what `check-config` refuses (TLS files included: both load them with tls.py's functions,
files.check_files; the hosts to bind and the directories to write too, places.check_places)."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVERS = 'bootstrap_servers = ["kafka-1:9092"]\n'
#: Free ports, for a case that `run` would refuse only after binding its ports ({free_ports} in its TOML: the
#: listener, as the last table): were the check missing, `run` would start there, not on the default ports, and
#: be killed by run_cli's bound.
FREE_PORTS = "admin_port = 0\n[[listener]]\nbootstrap_port = 0\nbroker_port_base = {base}\n"


def run_cli(tmp_path: Path, toml: str | None, *flags: str, env: dict[str, str] | None = None,
            command: str = "run") -> tuple[int, str, str, float]:
    """`python -m insync_proxy <command> [--config FILE] flags...` with only `env` of INSYNC_PROXY_*;
    returns the exit code, stdout, stderr and the seconds from exec to exit."""
    args = [sys.executable, "-m", "insync_proxy", command]
    if toml is not None:
        path = tmp_path / "config.toml"
        path.write_text(toml)
        args += ["--config", str(path)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INSYNC_PROXY_")}
    clean["PYTHONPATH"] = str(ROOT)  # this source tree's insync_proxy, whatever `pip install -e` points at
    started = time.monotonic()
    done = subprocess.run([*args, *flags], env={**clean, **(env or {})}, cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


CASES = [
    # (id, TOML file or None, flags, environment, words the one line must hold)
    ("string_where_a_number_belongs", SERVERS + 'admin_port = "9190x"\n', [], {}, ["admin_port", "whole number"]),
    ("zero_metadata_refresh", SERVERS + "metadata_refresh_seconds = 0\n", [], {},
     ["metadata_refresh_seconds = 0", "at least 1"]),
    ("table_set_from_one_variable", None, ["--bootstrap-servers", "k:1"], {"INSYNC_PROXY_UPSTREAM_TLS": "true"},
     ["INSYNC_PROXY_UPSTREAM_TLS", "INSYNC_PROXY_UPSTREAM_TLS_ENABLED"]),
    ("misspelt_variable", None, [], {"INSYNC_PROXY_BOOTSTRAP_SERVER": "k:1"},
     ["INSYNC_PROXY_BOOTSTRAP_SERVER", "did you mean INSYNC_PROXY_BOOTSTRAP_SERVERS", "docs/configuration.md"]),
    ("scram_without_a_password", SERVERS + '[control_sasl]\nmechanism = "SCRAM-SHA-512"\nusername = "proxy"\n', [],
     {}, ["control_sasl.mechanism", "password", "INSYNC_PROXY_CONTROL_SASL_PASSWORD"]),
    ("sasl_without_a_user", SERVERS + '[control_sasl]\nmechanism = "PLAIN"\n', [],
     {"INSYNC_PROXY_CONTROL_SASL_PASSWORD": "pw"}, ["control_sasl.username"]),
    ("negative_port_flag", None, ["--bootstrap-servers", "k:1", "--admin-port", "-1"], {},
     ["--admin-port", "0 to 65535"]),
    ("negative_port_in_a_listener", SERVERS + "[[listener]]\nbootstrap_port = -5\n", [], {},
     ["listener[1].bootstrap_port", "0 to 65535"]),
    ("bool_given_as_maybe", None, ["--bootstrap-servers", "k:1"], {"INSYNC_PROXY_AUDIT_ENABLED": "maybe"},
     ["INSYNC_PROXY_AUDIT_ENABLED", "true or false"]),
    ("bool_given_as_a_string_in_toml", SERVERS + 'use_uvloop = "yes"\n', [], {}, ["use_uvloop", "true or false"]),
    ("listener_as_a_scalar", SERVERS + "listener = 5\n", [], {}, ["listener", "[[listener]]"]),
    ("audit_as_a_scalar", SERVERS + "audit = true\n", [], {}, ["audit", "[audit]"]),
    ("a_setting_written_as_a_table", SERVERS + "[admin_port]\nport = 1\n", [], {}, ["admin_port"]),
    ("one_acks_policy_table_instead_of_an_array", SERVERS + '[acks_policy]\ntopics = "x"\n', [], {},
     ["acks_policy", "[[acks_policy]]"]),
    ("acks_floor_5", SERVERS + "[[acks_policy]]\nacks_floor = 5\n", [], {},
     ["acks_policy[1].acks_floor = 5", "-1, -2"]),
    ("bad_regex", SERVERS + '[[acks_policy]]\ntopics = "orders-("\n', [], {},
     ["acks_policy[1].topics", "regular expression"]),
    ("unknown_key_points_to_the_reference", SERVERS + "admin_prot = 1\n", [], {},
     ["admin_prot", "did you mean 'admin_port'", "docs/configuration.md"]),
    ("unknown_key_in_a_table", SERVERS + "[upstream_tls]\nenable = true\n", [], {},
     ["upstream_tls.enable", "did you mean 'upstream_tls.enabled'"]),
    ("plural_of_an_array_key", SERVERS + "acks_policies = []\n", [], {}, ["acks_policies", "acks_policy"]),
    ("zero_audit_interval_from_the_environment", SERVERS, [], {"INSYNC_PROXY_AUDIT_INTERVAL_SECONDS": "0"},
     ["INSYNC_PROXY_AUDIT_INTERVAL_SECONDS", "at least 0.1"]),
    ("negative_drain_timeout", SERVERS + "drain_timeout_seconds = -1\n", [], {}, ["drain_timeout_seconds"]),
    ("not_a_number", SERVERS + "connect_timeout_seconds = nan\n", [], {}, ["connect_timeout_seconds", "finite"]),
    ("zero_connect_timeout", SERVERS + "connect_timeout_seconds = 0\n", [], {}, ["connect_timeout_seconds", "above 0"]),
    ("number_flag_given_words", None, ["--bootstrap-servers", "k:1", "--metadata-refresh-seconds", "soon"], {},
     ["--metadata-refresh-seconds", "number"]),
    ("choice_flag", None, ["--bootstrap-servers", "k:1", "--metadata-schema", "v10"], {},
     ["--metadata-schema", "tagged, kip637"]),
    ("listener_from_the_environment", None, ["--bootstrap-servers", "k:1"],
     {"INSYNC_PROXY_LISTENER_BOOTSTRAP_PORT": "9000"}, ["INSYNC_PROXY_LISTENER_BOOTSTRAP_PORT", "TOML file only"]),
    ("log_level_verbose", SERVERS + 'log_level = "verbose"\n', [], {}, ["log_level", "DEBUG, INFO"]),
    ("log_format_xml", None, ["--bootstrap-servers", "k:1", "--log-format", "xml"], {}, ["--log-format", "text, json"]),
    ("not_host_port", 'bootstrap_servers = ["kafka-1"]\n', [], {}, ["bootstrap_servers", "host:port"]),
    ("no_brokers_at_all", None, [], {}, ["bootstrap_servers", "INSYNC_PROXY_BOOTSTRAP_SERVERS", "--bootstrap-servers"]),
    ("empty_number_variable", None, ["--bootstrap-servers", "k:1"], {"INSYNC_PROXY_ADMIN_PORT": ""},
     ["INSYNC_PROXY_ADMIN_PORT"]),
    ("tiny_frames", SERVERS + "max_frame_bytes = 10\n", [], {}, ["max_frame_bytes", "1024"]),
    ("port_collision", SERVERS + "admin_port = 9092\n", [], {}, ["listener[1].bootstrap_port", "admin_port"]),
    ("duplicate_listener_names", SERVERS + '[[listener]]\nname = "a"\n[[listener]]\nname = "a"\nbootstrap_port = 1\n',
     [], {}, ["listener[2].name", "twice"]),
    ("mtls_certificate_without_its_key", SERVERS + '[upstream_tls]\ncert_file = "c.pem"\n', [], {},
     ["upstream_tls", "cert_file and key_file"]),
    ("downstream_tls_without_a_certificate", SERVERS + "[downstream_tls]\nenabled = true\n", [], {},
     ["downstream_tls", "cert_file"]),
    ("password_file_missing", SERVERS + '[control_sasl]\nmechanism = "PLAIN"\nusername = "u"\n'
     'password_file = "/nonexistent/pw"\n', [], {}, ["control_sasl.password_file", "/nonexistent/pw"]),
    ("password_twice", SERVERS + '[control_sasl]\nmechanism = "PLAIN"\nusername = "u"\npassword_file = "pw"\n', [],
     {"INSYNC_PROXY_CONTROL_SASL_PASSWORD": "x"}, ["control_sasl.password_file", "INSYNC_PROXY_CONTROL_SASL_PASSWORD"]),
    ("unknown_flag", None, ["--bootstrap-servers", "k:1", "--admin-prot", "1"], {}, ["--admin-prot"]),
    ("not_toml", "bootstrap_servers = [", [], {}, ["not valid TOML"]),
    ("audit_total_below_one_file", SERVERS + "[audit]\nmax_file_bytes = 100000\nmax_total_bytes = 5000\n", [], {},
     ["audit.max_total_bytes", "audit.max_file_bytes"]),
    # bootstrap_servers as Kafka's bootstrap.servers takes it: host:port, nothing else
    ("plaintext_prefix", 'bootstrap_servers = ["PLAINTEXT://kafka-1:9092"]\n', [], {},
     ["bootstrap_servers", "PLAINTEXT:// prefix: drop it"]),
    ("sasl_ssl_prefix_from_the_environment", None, [], {"INSYNC_PROXY_BOOTSTRAP_SERVERS": "SASL_SSL://kafka-1:9093"},
     ["INSYNC_PROXY_BOOTSTRAP_SERVERS", "SASL_SSL:// prefix: drop it"]),
    ("host_port_extra", 'bootstrap_servers = ["kafka-1:9092:1"]\n', [], {}, ["bootstrap_servers", "one colon only"]),
    ("broker_port_above_65535", None, ["--bootstrap-servers", "kafka-1:70000"], {},
     ["--bootstrap-servers", "outside 1-65535"]),
    ("broker_port_0", 'bootstrap_servers = "kafka-1:0"\n', [], {}, ["bootstrap_servers", "outside 1-65535"]),
    # SASL credentials without a mechanism would be silently unused
    ("username_without_a_mechanism", SERVERS + '[control_sasl]\nusername = "proxy"\n', [], {},
     ["control_sasl.username", "control_sasl.mechanism"]),
    ("password_without_a_mechanism", SERVERS, [], {"INSYNC_PROXY_CONTROL_SASL_PASSWORD": "pw-7"},
     ["control_sasl.password", "control_sasl.mechanism"]),
    # flags are never abbreviated, and a mistyped secret's flag never prints the secret
    ("abbreviated_secret_flag", SERVERS, ["--control-sasl-password", "hunter2"], {},
     ["--control-sasl-password", "secrets have no flag"]),
    ("abbreviated_flag", SERVERS, ["--admin", "1"], {}, ["--admin"]),
    ("downstream_check_hostname_is_no_setting", SERVERS + "[downstream_tls]\ncheck_hostname = false\n", [], {},
     ["downstream_tls.check_hostname", "unknown setting"]),
    # TLS files, loaded the way `run` loads them ({pki}: the certificates the pki fixture made)
    ("ca_file_not_pem", SERVERS + '[upstream_tls]\nenabled = true\nca_file = "{pki}/not-pem.txt"\n', [], {},
     ["upstream_tls.ca_file", "PEM"]),
    ("cert_file_holds_a_key", SERVERS + '[upstream_tls]\nenabled = true\ncert_file = "{pki}/valid.key"\n'
     'key_file = "{pki}/valid.key"\n', [], {}, ["upstream_tls.cert_file", "no PEM certificate"]),
    ("key_file_holds_a_certificate", SERVERS + '[upstream_tls]\nenabled = true\ncert_file = "{pki}/valid.crt"\n'
     'key_file = "{pki}/valid.crt"\n', [], {}, ["upstream_tls.key_file", "no PEM private key"]),
    ("key_of_another_certificate", SERVERS + '[downstream_tls]\nenabled = true\ncert_file = "{pki}/valid.crt"\n'
     'key_file = "{pki}/other.key"\n', [], {}, ["downstream_tls.key_file", "not the key of downstream_tls.cert_file"]),
    ("encrypted_key_without_a_password", SERVERS + '[upstream_tls]\nenabled = true\ncert_file = "{pki}/valid.crt"\n'
     'key_file = "{pki}/encrypted.key"\n', [], {}, ["upstream_tls.key_file", "encrypted", "key_password_file"]),
    ("wrong_key_password", SERVERS + '[upstream_tls]\nenabled = true\ncert_file = "{pki}/valid.crt"\n'
     'key_file = "{pki}/encrypted.key"\nkey_password_file = "{pki}/wrong.password"\n', [], {},
     ["upstream_tls.key_password", "does not decrypt"]),
    ("expired_certificate", SERVERS + '[downstream_tls]\nenabled = true\ncert_file = "{pki}/expired.crt"\n'
     'key_file = "{pki}/expired.key"\n', [], {}, ["downstream_tls.cert_file", "expired on 2020-02-01"]),
    ("certificate_not_yet_valid", SERVERS + '[upstream_tls]\nenabled = true\ncert_file = "{pki}/future.crt"\n'
     'key_file = "{pki}/future.key"\n', [], {}, ["upstream_tls.cert_file", "not valid before 2090-01-01"]),
    ("expired_ca", SERVERS + '[upstream_tls]\nenabled = true\nca_file = "{pki}/expired.crt"\n', [], {},
     ["upstream_tls.ca_file", "expired on 2020-02-01"]),
    # What `run` would otherwise meet only at start (places.py): hosts to bind, directories to write
    ("bind_host_not_of_this_machine", SERVERS + 'bind_host = "10.99.99.99"\n{free_ports}', [], {},
     ["bind_host = '10.99.99.99'", "not an address of this machine"]),
    ("admin_host_not_of_this_machine", SERVERS + 'admin_host = "192.0.2.1"\n{free_ports}', [], {},
     ["admin_host = '192.0.2.1'", "not an address of this machine"]),
    ("bind_host_does_not_resolve", SERVERS + '{free_ports}', ["--bind-host", "no-such-host.invalid"], {},
     ["bind_host = 'no-such-host.invalid'", "does not resolve"]),
    # (the configuration file itself is the regular file in the way: cwd is its directory)
    ("audit_directory_is_a_file", SERVERS + 'audit.directory = "config.toml"\n{free_ports}', [], {},
     ["audit.directory = 'config.toml'", "not a directory"]),
    ("audit_directory_below_a_file", SERVERS + '{free_ports}', [], {"INSYNC_PROXY_AUDIT_DIRECTORY": "config.toml/a"},
     ["audit.directory = 'config.toml/a'", "'config.toml' is a file"]),
    ("debug_capture_dir_is_a_file", SERVERS + 'debug_capture_dir = "config.toml"\naudit.enabled = false\n'
     '{free_ports}', [], {}, ["debug_capture_dir = 'config.toml'", "not a directory"]),
    # Mistakes whose first words used to mislead
    ("ca_file_is_a_directory", SERVERS + '[upstream_tls]\nenabled = true\nca_file = "."\n', [], {},
     ["upstream_tls.ca_file = '.' is a directory", "name the PEM file in it"]),
    ("cert_file_is_a_directory", SERVERS + '[downstream_tls]\nenabled = true\ncert_file = "{pki}"\n'
     'key_file = "{pki}/valid.key"\n', [], {}, ["downstream_tls.cert_file", "is a directory"]),
    ("top_level_key_below_a_table", SERVERS + "[audit]\nenabled = false\nadmin_port = 0\n", [], {},
     ["audit.admin_port", "admin_port is a top-level setting", "move it above the first [table]"]),
    ("top_level_key_below_an_array_of_tables", SERVERS + '[[listener]]\nbootstrap_port = 0\nlog_level = "DEBUG"\n', [],
     {}, ["listener[1].log_level", "[[listener]]", "move it above the first [table]"]),
    ("byte_order_mark", "\ufeff" + SERVERS, [], {}, ["remove the byte-order mark"]),
    ("yaml_instead_of_toml", "bootstrap_servers:\n  - kafka-1:9092\nadmin_port: 9190\n", [], {},
     ["this looks like YAML", "line 1", "the configuration is TOML (key = value"]),
    ("yaml_line_in_toml", SERVERS + "admin_port: 9190\n", [], {}, ["this looks like YAML", "line 2"]),
    ("empty_password_variable", SERVERS + '[control_sasl]\nmechanism = "PLAIN"\nusername = "u"\n', [],
     {"INSYNC_PROXY_CONTROL_SASL_PASSWORD": ""}, ["needs a password", "INSYNC_PROXY_CONTROL_SASL_PASSWORD is set, "
                                                "but empty"]),
    ("empty_key_password_variable", SERVERS + '[upstream_tls]\nenabled = true\ncert_file = "{pki}/valid.crt"\n'
     'key_file = "{pki}/encrypted.key"\n', [], {"INSYNC_PROXY_UPSTREAM_TLS_KEY_PASSWORD": ""},
     ["is encrypted", "INSYNC_PROXY_UPSTREAM_TLS_KEY_PASSWORD is set, but empty"]),
    # From tests/unit/test_config.py's in-process cases, through the command line
    ("port_above_65535", SERVERS + "admin_port = 70000\n", [], {}, ["admin_port = 70000", "0 to 65535"]),
    ("a_number_where_a_string_belongs", SERVERS + "proxy_id = 7\n", [], {}, ["proxy_id = 7", "a string"]),
    ("no_listener_at_all", SERVERS + "listener = []\n", [], {}, ["listener = []", "at least 1 [[listener]]"]),
    ("unknown_sasl_mechanism", SERVERS + '[control_sasl]\nmechanism = "SCRAM-SHA-1"\n', [], {},
     ["control_sasl.mechanism", "PLAIN, SCRAM-SHA-256"]),
    ("empty_list_of_brokers", "bootstrap_servers = []\n", [], {}, ["bootstrap_servers is not set"]),
]

#: Configurations that work but should not be so: exit 0 (check-config) or a start (run), with the warning.
WARNINGS = [
    ("password_written_in_the_file", SERVERS + '[control_sasl]\nmechanism = "PLAIN"\nusername = "u"\n'
     'password = "pw-in-the-file"\n', ["control_sasl.password", "INSYNC_PROXY_CONTROL_SASL_PASSWORD",
                                       "password_file"]),
    ("certificate_expiring_within_7_days", SERVERS + '[downstream_tls]\nenabled = true\n'
     'cert_file = "{pki}/soon.crt"\nkey_file = "{pki}/soon.key"\n', ["downstream_tls.cert_file", "expires on"]),
    ("tls_files_with_tls_off", SERVERS + '[upstream_tls]\nca_file = "{pki}/valid.crt"\n',
     ["upstream_tls.ca_file", "upstream_tls.enabled = false"]),
]


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


def _dated_certificate(directory: Path, name: str, start: str, end: str) -> None:
    """A self-signed certificate valid from `start` to `end` (openssl ca: `req -x509` only counts days from now)."""
    (directory / "index.txt").write_text("")
    (directory / "serial").write_text("01\n")
    (directory / "ca.cnf").write_text("[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\n"
                                      "serial = serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n"
                                      "[p]\ncommonName = supplied\n")
    _openssl(directory, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}")
    _openssl(directory, "ca", "-batch", "-config", "ca.cnf", "-selfsign", "-keyfile", f"{name}.key", "-in",
             f"{name}.csr", "-startdate", start, "-enddate", end, "-out", f"{name}.crt")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Certificates and keys, good and bad, for the TLS cases."""
    if subprocess.run(["openssl", "version"], capture_output=True).returncode != 0:
        pytest.skip("the openssl command is not installed")
    directory = tmp_path_factory.mktemp("pki")
    for name, days in (("valid", "30"), ("soon", "3")):
        _openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.crt", "-subj", f"/CN={name}", "-days", days)
    _openssl(directory, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "other.key")
    _openssl(directory, "pkey", "-in", "valid.key", "-aes256", "-passout", "pass:right-password", "-out",
             "encrypted.key")
    (directory / "wrong.password").write_text("wrong-password\n")
    (directory / "not-pem.txt").write_text("not a certificate\n")
    _dated_certificate(directory, "expired", "20200101000000Z", "20200201000000Z")
    _dated_certificate(directory, "future", "20900101000000Z", "20900201000000Z")
    return directory


#: Seconds beyond a bare interpreter's start a refusal may take on a busy machine (half the default connect
#: timeout: a refusal that waited on a broker would take the whole of it).
REFUSAL_WALL_BOUND = 5.0


def _refusal(tmp_path: Path, toml: str | None, flags: list[str], env: dict[str, str], command: str
             ) -> tuple[int, str]:
    """Run `command` on a wrong setting; its exit code and its one stderr line, after checking it stopped at
    once (under 2 s of CPU, and under 2 s from exec to exit, or, on a machine too busy for that, under
    REFUSAL_WALL_BOUND beyond a bare interpreter's start), printed nothing on stdout and no traceback."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, out, err, elapsed = run_cli(tmp_path, toml, *flags, env=env, command=command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
    if elapsed >= 2.0:
        # Two cores shared by many test runs: a slow exit may be the wait for a core. Re-run once; if it is
        # still slow, take off what a bare interpreter start costs at this moment.
        print(f"slow exit ({elapsed:.2f}s, {cpu_seconds:.2f}s of CPU): re-run once")
        code, out, err, elapsed = run_cli(tmp_path, toml, *flags, env=env, command=command)
        if elapsed >= 2.0:
            bare = time.monotonic()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            elapsed -= time.monotonic() - bare
            print(f"still slow: {elapsed:.2f}s beyond a bare interpreter start")
    lines = err.strip().splitlines()
    assert len(lines) == 1, (command, err)
    assert "Traceback" not in err and "hunter2" not in err
    assert out == "", command  # check-config prints the TOML only when it is valid
    # The CPU bound is the steady one; the wall bound only tells "stopped at once" from "waited for something"
    # (a connect would take connect_timeout_seconds, 10 s by default)
    assert elapsed < REFUSAL_WALL_BOUND, f"{command}: {elapsed:.2f}s"
    assert cpu_seconds < 2.0, f"{command}: {cpu_seconds:.2f}s of CPU"
    # a usage error names the command it was given to (`insync-proxy run: error: ...`): the rest is the same
    return code, lines[0].replace(f"insync-proxy {command}", "insync-proxy COMMAND")


@pytest.mark.parametrize(("toml", "flags", "env", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_config_and_run_refuse_a_wrong_setting_with_the_same_line(
        tmp_path: Path, request: pytest.FixtureRequest, toml: str | None, flags: list[str], env: dict[str, str],
        words: list[str]) -> None:
    if toml is not None and "{pki}" in toml:
        toml = toml.replace("{pki}", str(request.getfixturevalue("pki")))
    if toml is not None and "{free_ports}" in toml:
        toml = toml.replace("{free_ports}", FREE_PORTS.format(base=_free_port_base()))
    # Given a wrong setting; When the configuration is checked, and the proxy started, with it
    checked = _refusal(tmp_path, toml, flags, env, "check-config")
    started = _refusal(tmp_path, toml, flags, env, "run")
    # Then both stop at once with exit 2 and the same one line, naming the setting and what is allowed
    assert checked == started, (checked, started)
    code, line = checked
    assert code == 2, line
    for word in words:
        assert word in line, (word, line)


def test_check_config_rejects_the_same_way(tmp_path: Path) -> None:
    code, out, err, elapsed = run_cli(tmp_path, SERVERS + "metadata_refresh_seconds = 0\n", command="check-config")
    assert (code, len(err.strip().splitlines())) == (2, 1) and "metadata_refresh_seconds" in err
    assert out == "" and elapsed < 2.0


def test_secrets_never_appear_in_an_error(tmp_path: Path) -> None:
    code, out, err, _ = run_cli(tmp_path, SERVERS, env={"INSYNC_PROXY_UPSTREAM_TLS_KEY_PASSWORD": "",
                                                       "INSYNC_PROXY_CONTROL_SASL_PASSWORD": "hunter2-secret",
                                                       "INSYNC_PROXY_CONTROL_SASL_MECHANISM": "KERBEROS"})
    assert code == 2 and "INSYNC_PROXY_CONTROL_SASL_MECHANISM" in err
    assert "hunter2-secret" not in err + out


def test_a_comma_separated_string_is_the_list_of_brokers(tmp_path: Path) -> None:
    # Given bootstrap_servers written as one string, as users write it
    code, out, err, _ = run_cli(tmp_path, 'bootstrap_servers = "kafka-1:9092, kafka-2:9092"\n', command="check-config")
    # Then it is the list of both brokers
    assert code == 0, err
    assert 'bootstrap_servers = ["kafka-1:9092", "kafka-2:9092"]' in out.splitlines()


def test_the_variables_the_project_itself_uses_are_allowed(tmp_path: Path) -> None:
    env = {name: "x" for name in ("INSYNC_PROXY_KAFKA_VERSION", "INSYNC_PROXY_KAFKA_LIBS", "INSYNC_PROXY_KAFKA_BACKEND",
                                  "INSYNC_PROXY_TEST_LOGS", "INSYNC_PROXY_COMPILE", "INSYNC_PROXY_CACHE")}
    code, _, err, _ = run_cli(tmp_path, SERVERS, env=env, command="check-config")
    assert code == 0, err


def _start_run(tmp_path: Path, toml: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`python -m insync_proxy run` on free ports, towards a broker that is not there (the start needs none)."""
    path = tmp_path / "config.toml"
    path.write_text("admin_port = 0\naudit.enabled = false\n" + toml
                    + f"\n[[listener]]\nbootstrap_port = 0\nbroker_port_base = {_free_port_base()}\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INSYNC_PROXY_")}
    return subprocess.Popen([sys.executable, "-m", "insync_proxy", "run", "--config", str(path)], cwd=tmp_path,
                            env={**clean, "PYTHONPATH": str(ROOT), **(env or {})}, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)


def _free_port_base() -> int:
    from harness.proxy_process import free_port_base

    return free_port_base()


def _log_until(process: subprocess.Popen[str], word: str, timeout: float = 60.0) -> list[str]:
    """The stderr lines up to the first holding `word` (the process is stopped when it does not come)."""
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if word in line:
            return lines
    process.kill()
    raise AssertionError(f"no {word!r} in the log within {timeout:.0f}s: {lines}")


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.mark.parametrize(("toml", "words"), [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_check_config_and_run_warn_the_same_way(tmp_path: Path, request: pytest.FixtureRequest, toml: str,
                                                words: list[str], stop: list[subprocess.Popen[str]]) -> None:
    if "{pki}" in toml:
        toml = toml.replace("{pki}", str(request.getfixturevalue("pki")))
    # Given a configuration that works but should not be so
    # When it is checked: Then it is valid (exit 0), with one warning line naming the setting
    code, out, err, _ = run_cli(tmp_path, toml, command="check-config")
    warning = err.strip().splitlines()
    assert code == 0 and len(warning) == 1, err
    assert "configuration warning" in warning[0] and "Traceback" not in err
    for word in words:
        assert word in warning[0], (word, warning[0])
    assert "pw-in-the-file" not in out + err
    # When the proxy is started with it: Then it starts, and its log says the same before listening
    process = _start_run(tmp_path, toml)
    stop.append(process)
    lines = _log_until(process, "listening")
    said = [line for line in lines if "WARNING" in line and "configuration:" in line]
    assert len(said) == 1 and said[0].endswith(warning[0].split("configuration warning: ", 1)[1]), lines


def test_with_json_logs_every_line_is_json_the_error_included(tmp_path: Path) -> None:
    # Given log_format = "json" and a wrong setting; When the proxy is started
    code, _, err, _ = run_cli(tmp_path, SERVERS + 'log_format = "json"\nadmin_port = -4\n')
    # Then the one line saying so is a JSON object naming the setting
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    entry = json.loads(lines[0])
    assert entry["level"] == "ERROR" and "admin_port = -4" in entry["message"]


def test_with_json_logs_the_first_line_of_a_start_is_json(tmp_path: Path, stop: list[subprocess.Popen[str]]) -> None:
    process = _start_run(tmp_path, SERVERS + 'log_format = "json"\n[control_sasl]\nmechanism = "PLAIN"\n'
                                             'username = "u"\npassword = "inline-pw"\n')
    stop.append(process)
    lines = _log_until(process, "listening")
    assert [json.loads(line)["level"] for line in lines][0] in ("INFO", "WARNING")
    assert any("control_sasl.password" in json.loads(line)["message"] for line in lines)
    assert "inline-pw" not in "\n".join(lines)


def test_a_port_in_use_exits_1_naming_it_and_the_other_process(tmp_path: Path) -> None:
    # Given a port another process holds
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        # When the proxy is started with it as admin_port
        code, _, err, _ = run_cli(tmp_path, SERVERS, "--admin-port", str(port), "--bootstrap-port", "0",
                                  "--broker-port-base", str(_free_port_base()), "--no-audit")
    # Then it exits 1 naming the setting, and asks about the other process
    last = err.strip().splitlines()[-1]
    assert code == 1, err
    assert f"admin_port = {port}" in last and "is another process using the port?" in last


def test_a_bind_host_of_another_machine_is_the_configuration_at_fault(tmp_path: Path) -> None:
    # Given bind_host an address this machine does not have (TEST-NET-1, RFC 5737)
    code, _, err, _ = run_cli(tmp_path, SERVERS + 'bind_host = "192.0.2.1"\n', "--admin-port", "0",
                              "--no-audit")
    # Then run exits 2 naming bind_host, and does not blame another process
    last = err.strip().splitlines()[-1]
    assert code == 2, err
    assert "bind_host = '192.0.2.1'" in last and "another process" not in last


def _without_the_bind_permission() -> None:
    """In the child, before exec: drop CAP_NET_BIND_SERVICE from the bounding set (root keeps the rest)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_NET_BIND_SERVICE, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_NET_BIND_SERVICE)")


PR_CAPBSET_DROP, CAP_NET_BIND_SERVICE = 24, 10  # linux/prctl.h, linux/capability.h


def test_a_port_below_1024_without_the_permission_is_refused_by_both_commands_alike(tmp_path: Path) -> None:
    # Given a process that may not bind ports below 1024 (root's children lose CAP_NET_BIND_SERVICE)
    start = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")
    if not start.exists() or int(start.read_text()) <= 80:
        pytest.skip("not Linux, or this machine lets every process bind port 80")
    drop = _without_the_bind_permission if os.geteuid() == 0 else None
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("INSYNC_PROXY_")}, "PYTHONPATH": str(ROOT)}
    flags = ["--bootstrap-servers", "kafka-1:9092", "--admin-port", "0", "--bootstrap-port", "80",
             "--broker-port-base", str(_free_port_base()), "--no-audit"]
    answers = []
    for command in ("check-config", "run"):
        # When the configuration is checked, and the proxy started, with bootstrap_port = 80
        try:
            done = subprocess.run([sys.executable, "-m", "insync_proxy", command, *flags], preexec_fn=drop, env=env,
                                  cwd=tmp_path, capture_output=True, text=True, timeout=30)
        except subprocess.SubprocessError as exc:
            pytest.skip(f"cannot drop CAP_NET_BIND_SERVICE here: {exc}")
        answers.append((done.returncode, done.stderr.strip().splitlines()))
    # Then both exit 2 with the same one line naming the port and the permission
    assert answers[0] == answers[1], answers
    code, lines = answers[0]
    assert code == 2 and len(lines) == 1, answers
    assert "listener[1].bootstrap_port = 80: permission denied" in lines[0], lines
