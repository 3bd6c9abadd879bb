"""Which Kafka connector version the pipeline resolves: PySpark's own if served, else the newest of its major."""

from __future__ import annotations

from pathlib import Path

import pytest

from insync_proxy.pipeline import jars

#: What Maven Central listed for the connector on 2026-11-26 (abridged), and for the token provider.
CONNECTOR_SERVED = ["3.5.9", "4.0.0", "4.0.0-preview1", "4.1.3", "4.2.0", "4.2.0-preview5"]
TOKEN_PROVIDER_SERVED = ["3.5.4", "4.0.0", "4.1.1", "4.2.0"]


def test_the_installed_version_when_served_else_the_newest_release_of_its_major() -> None:
    assert jars.pick_served("4.2.0", CONNECTOR_SERVED) == "4.2.0"
    assert jars.pick_served("4.3.0", CONNECTOR_SERVED) == "4.2.0"  # not the preview, not 3.x
    assert jars.pick_served("4.1.2", CONNECTOR_SERVED) == "4.0.0"  # never newer than Spark itself
    assert jars.pick_served("4.1.3", TOKEN_PROVIDER_SERVED) == "4.1.1"
    assert jars.pick_served("5.0.0", CONNECTOR_SERVED) is None
    assert jars.pick_served("4.3.0-preview1", CONNECTOR_SERVED) is None


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in ("INSYNC_SPARK_KAFKA_VERSION", "INSYNC_SPARK_TOKEN_PROVIDER_VERSION", "INSYNC_SPARK_JARS_DIR"):
        monkeypatch.delenv(name, raising=False)
    return jars.cache_root()


def test_a_pyspark_ahead_of_the_repository_gets_the_newest_served_connector_with_one_line(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given PySpark 4.3.0, whose connector the repository does not serve
    asked: list[str] = []

    def served(artifact: str, timeout: float = 30.0) -> list[str]:
        asked.append(artifact)
        return CONNECTOR_SERVED if artifact == jars.CONNECTOR else TOKEN_PROVIDER_SERVED

    monkeypatch.setattr(jars, "served_versions", served)
    resolved: list[tuple[str, str | None]] = []

    def fake_maven(version: str, target: Path, token_version: str | None = None) -> None:
        resolved.append((version, token_version))
        target.mkdir(parents=True)
        (target / f"{jars.CONNECTOR}_2.13-{version}.jar").touch()

    monkeypatch.setattr(jars, "resolve_with_maven", fake_maven)
    monkeypatch.setattr(jars, "spark_version", lambda: "4.3.0")
    lines: list[str] = []
    # When the jars are asked for on a fresh install
    got = jars.kafka_jars(note=lines.append)
    # Then Maven resolves 4.2.0 (token provider the same), and one line says why
    assert resolved == [("4.2.0", None)]
    assert [p.name for p in got] == [f"{jars.CONNECTOR}_2.13-4.2.0.jar"]
    assert len(lines) == 1 and "4.2.0" in lines[0] and "4.3.0" in lines[0], lines
    # And the next time the cache answers, without asking the repository again
    asked.clear()
    lines.clear()
    assert [p.name for p in jars.kafka_jars(note=lines.append)] == [f"{jars.CONNECTOR}_2.13-4.2.0.jar"]
    assert asked == [] and resolved == [("4.2.0", None)] and len(lines) == 1


def test_a_served_version_is_used_silently_and_an_unreachable_repository_falls_back_to_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []
    monkeypatch.setattr(jars, "served_versions", lambda artifact, timeout=30.0: CONNECTOR_SERVED)
    assert jars.connector_version("4.2.0", note=lines.append) == ("4.2.0", None)

    def offline(artifact: str, timeout: float = 30.0) -> list[str]:
        raise OSError("no route to host")

    monkeypatch.setattr(jars, "served_versions", offline)
    assert jars.connector_version("4.3.0", note=lines.append) == ("4.3.0", None)  # Maven's error will say it
    assert lines == []


def test_the_repository_is_the_maven_settings_mirror() -> None:
    assert jars.repository_url() == "https://repo.maven.apache.org/maven2"
