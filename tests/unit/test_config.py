"""Configuration: file < environment < flags, and errors that say what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from insync_proxy.cli import build_parser, config_from_args
from insync_proxy.proxy.config import ConfigError, load_config


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('bootstrap_servers = ["k"]', "not host:port"),
        ('bootstrap_servers = ["k:1"]\nbogus = 1', "unknown setting 'bogus'"),
        ('bootstrap_servers = ["k:1"]\n[[acks_policy]]\ntopics = "("', "not a valid regex"),
        ('bootstrap_servers = ["k:1"]\n[[acks_policy]]\nacks_floor = 2', "must be -1"),
        ('bootstrap_servers = ["k:1"]\n[[listener]]\nname = "a"\n[[listener]]\nname = "a"\nbootstrap_port = 1',
         "used twice"),
        ('bootstrap_servers = ["k:1"]\n[[listener]]\nmetadata_schema = "v10"', "use one of tagged, kip637"),
        ('bootstrap_servers = ["k:1"]\nadmin_port = 70000', "not a TCP port"),
        ('bootstrap_servers = ["k:1"]\n[control_sasl]\nmechanism = "GSSAPI"', "PLAIN, SCRAM-SHA-256"),
        ("bootstrap_servers = [", "not valid TOML"),
    ],
)
def test_bad_config_is_rejected_with_a_clear_message(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), env={})


def test_password_never_appears_in_the_repr(tmp_path: Path) -> None:
    path = write(tmp_path, 'bootstrap_servers = ["k:1"]\n[control_sasl]\nmechanism = "PLAIN"\nusername = "u"\n')
    config = load_config(path, env={"INSYNC_PROXY_CONTROL_SASL_PASSWORD": "s3cret"})
    assert config.control_sasl.password == "s3cret"
    assert "s3cret" not in repr(config)


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


def test_first_matching_acks_policy_wins(tmp_path: Path) -> None:
    path = write(tmp_path, 'bootstrap_servers = ["k:1"]\n[[acks_policy]]\ntopics = "pay-.*"\nacks_floor = -2\n'
                           '[[acks_policy]]\ntopics = ".*"\nfast_fail = true\n')
    config = load_config(path, env={})
    assert config.policy_for("pay-1").acks_floor == -2  # type: ignore[union-attr]
    assert config.policy_for("other").fast_fail is True  # type: ignore[union-attr]
