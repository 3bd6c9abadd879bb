"""The generated protocol modules are what the generator makes from the committed Kafka specs.

protocol/kafka_messages.py (message classes and their registry by API key), protocol/kafka_versions.py
(the walkers' version facts), protocol/kafka_walkers.py (skip functions, the Produce walks and the Metadata scan's) and
protocol/_wire_walkers.h (the same Produce walks in C, for the compiled core) are written by protocolgen (scripts/generate-protocol) from
protocolgen/specs/ (Kafka's JSON message specs) and protocolgen/config.py (the caps and the few facts the
specs do not say). Nobody edits them by hand: regenerating changes nothing.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from protocolgen import config
from protocolgen.generate import (
    C_WALKERS_OUT,
    KAFKA_VERSION_FILE,
    MESSAGES_OUT,
    SPECS,
    VERSIONS_OUT,
    WALKERS_OUT,
    committed_specs,
    generate,
    main,
)
from protocolgen.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]


def test_regenerating_from_the_committed_specs_changes_nothing() -> None:
    # Given the committed specs; When the modules are generated again; Then they are the committed ones
    generated = generate(committed_specs())
    assert set(generated) == {MESSAGES_OUT, VERSIONS_OUT, WALKERS_OUT, C_WALKERS_OUT}
    for path, text in generated.items():
        assert (ROOT / path).read_text() == text, f"{path} is not what scripts/generate-protocol writes"


def test_the_check_script_passes_on_the_repository() -> None:
    result = subprocess.run([str(ROOT / "scripts" / "generate-protocol"), "--check"], cwd=ROOT,
                            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert result.returncode == 0, result.stdout + result.stderr


def _copy_outputs(tmp_path: Path) -> None:
    for path in (MESSAGES_OUT, VERSIONS_OUT, WALKERS_OUT, C_WALKERS_OUT):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    shutil.copytree(SPECS, tmp_path / "protocolgen" / "specs")


def test_check_fails_and_shows_the_difference_when_a_generated_module_was_edited(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a copy of the repository's outputs
    _copy_outputs(tmp_path)
    assert main(["--check", "--out", str(tmp_path)]) == 0
    # When someone edits a generated module by hand
    versions = tmp_path / VERSIONS_OUT
    versions.write_text(versions.read_text().replace("PRODUCE_MAX_VERSION: Final = 13", "PRODUCE_MAX_VERSION: Final = 14"))
    # Then --check fails and shows the line
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert "-PRODUCE_MAX_VERSION: Final = 14" in capsys.readouterr().out


def test_a_spec_change_reaches_the_classes_and_the_walkers_tables() -> None:
    # Given Kafka's specs with a change in one field's versions (as a new Kafka release brings)
    specs = committed_specs()
    produce = specs["ProduceRequest.json"]
    assert '"name": "TransactionalId", "type": "string", "versions": "3+"' in produce
    specs["ProduceRequest.json"] = produce.replace('"name": "TransactionalId", "type": "string", "versions": "3+"',
                                                   '"name": "TransactionalId", "type": "string", "versions": "4+"')
    # When the modules are generated
    generated = generate(specs)
    # Then the message class and the walkers' fact both follow
    assert 'transactional_id: str | None = kfield(STRING, "4+", nullable="3+", default=None)' in generated[MESSAGES_OUT]
    assert "PRODUCE_REQUEST_TRANSACTIONAL_ID_SINCE: Final = 4" in generated[VERSIONS_OUT]


def test_a_spec_change_reaches_the_generated_skip_functions() -> None:
    # Given Kafka's specs where a Produce answer's partition gains an int32 in v13 (as a new Kafka release may)
    specs = committed_specs()
    produce = specs["ProduceResponse.json"]
    anchor = '{ "name": "LogStartOffset", "type": "int64", "versions": "5+", "default": "-1", "ignorable": true,'
    assert anchor in produce
    specs["ProduceResponse.json"] = produce.replace(
        anchor, '{ "name": "NewField", "type": "int32", "versions": "13+", "about": "new" },\n' + anchor)
    # When the modules are generated
    walkers = generate(specs)[WALKERS_OUT]
    # Then v13 has a partition layout of its own, with a head 4 bytes longer, and the table says so
    assert "def skip_produce_response_partition_produce_response_v13(" in walkers
    assert "pos += 34  # index, error_code, base_offset, log_append_time_ms, new_field, log_start_offset" in walkers
    assert "PRODUCE_RESPONSE_PARTITION_PRODUCE_RESPONSE_FIXED_PREFIX: Final[tuple[int, ...]] = " \
           "(14, 14, 22, 22, 22, 30, 30, 30, 30, 30, 30, 30, 30, 34,)" in walkers


def test_a_spec_change_reaches_the_produce_walks_in_python_and_in_c() -> None:
    # Given Kafka's specs where a Produce answer's partition gains an int32 in v13 (as a new Kafka release may)
    specs = committed_specs()
    produce = specs["ProduceResponse.json"]
    anchor = '{ "name": "LogStartOffset", "type": "int64", "versions": "5+", "default": "-1", "ignorable": true,'
    specs["ProduceResponse.json"] = produce.replace(
        anchor, '{ "name": "NewField", "type": "int32", "versions": "13+", "about": "new" },\n' + anchor)
    # When the modules are generated
    generated = generate(specs)
    walkers, header = generated[WALKERS_OUT], generated[C_WALKERS_OUT]
    # Then both walks of v13 skip the new field with the partition's fixed head, and v9-v12 stay as they were
    v13 = walkers[walkers.index("def walk_produce_response_v13("):]
    assert "pos += 34  # index, error_code, base_offset, log_append_time_ms, new_field, log_start_offset" in v13
    c13 = header[header.index("static int walk_produce_response_v13("):]
    assert "if (pos + 34 > f->n) return -1; /* index, error_code, base_offset, log_append_time_ms, new_field, " \
           "log_start_offset */" in c13
    assert "case 9: case 10: case 11: case 12:\n        return walk_produce_response_v9(f, pos, w);" in header


def test_a_spec_change_reaches_the_metadata_walks() -> None:
    # Given Kafka's specs where a Metadata answer's partition gains an int32 in v13 (as a new Kafka release may)
    specs = committed_specs()
    metadata = specs["MetadataResponse.json"]
    anchor = '{ "name": "ReplicaNodes", "type": "[]int32", "versions": "0+", "entityType": "brokerId",'
    assert anchor in metadata
    specs["MetadataResponse.json"] = metadata.replace(
        anchor, '{ "name": "NewField", "type": "int32", "versions": "13+", "about": "new" },\n' + anchor)
    # When the modules are generated
    walkers = generate(specs)[WALKERS_OUT]
    # Then v13 has partition walks of their own (the skip and the read), the fixed head 4 bytes longer, and the tables
    # say so; v9-v12 stay as they were
    for kind in ("walk", "read"):
        v13 = walkers[walkers.index(f"def {kind}_metadata_response_partitions_v13("):]
        assert "pos += 18  # error_code, partition_index, leader_id, leader_epoch, new_field" in v13
        assert f"{kind}_metadata_response_partitions_v9, {kind}_metadata_response_partitions_v13,)" in walkers
    assert "def walk_metadata_response_topics_v13(" in walkers


def test_check_fails_when_the_generated_metadata_walks_were_edited(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Given a copy of the repository's outputs in which someone edited the Metadata scan's walks by hand
    _copy_outputs(tmp_path)
    walkers = tmp_path / WALKERS_OUT
    text = walkers.read_text()
    assert "        pos += 4 * n - 3\n" in text
    walkers.write_text(text.replace("        pos += 4 * n - 3\n", "        pos += 4 * n - 2\n", 1))
    # Then --check fails and shows the line
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert re.search(r"^-\s+pos \+= 4 \* n - 2$", capsys.readouterr().out, re.M)


def test_check_fails_when_the_generated_c_walks_were_edited(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a copy of the repository's outputs in which someone edited the C walks by hand
    _copy_outputs(tmp_path)
    header = tmp_path / C_WALKERS_OUT
    header.write_text(header.read_text().replace("pos += 30;", "pos += 31;", 1))
    # Then --check fails and shows the line
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert re.search(r"^-\s+pos \+= 31;$", capsys.readouterr().out, re.M)


def test_a_new_kafka_version_is_served_only_once_its_cap_is_raised(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Given a Kafka release defining Metadata v14 with a new field
    specs = committed_specs()
    for name in ("MetadataRequest.json", "MetadataResponse.json"):
        spec = parse_spec(specs[name])
        spec["validVersions"] = "0-14"
        if name == "MetadataResponse.json":
            spec["fields"].append({"name": "NewField", "type": "int32", "versions": "14+", "about": "new"})
        specs[name] = json.dumps(spec)
    specs[KAFKA_VERSION_FILE] = "9.9.9\n"
    # When it is generated with today's caps: nothing of v14 is served, and the generator says so
    generated = generate(specs)
    assert "Kafka 9.9.9 defines MetadataResponse up to v14, the cap is v13" in capsys.readouterr().err
    assert "METADATA_MAX_VERSION: Final = 13" in generated[VERSIONS_OUT]
    assert "METADATA_RESPONSE_NEW_FIELD_SINCE: Final = 14" in generated[VERSIONS_OUT]
    # And when the cap is raised, the class and the tables say v14
    monkeypatch.setitem(config.DECODED_APIS, "Metadata", (0, 14))
    generated = generate(specs)
    assert "METADATA_MAX_VERSION: Final = 14" in generated[VERSIONS_OUT]
    assert re.search(r"class MetadataResponse\(Message\):.*?MetadataResponse: \(ApiKey.METADATA, \(0, 14\), 9\)",
                     generated[MESSAGES_OUT], re.S)
    assert 'new_field: int = kfield(INT32, "14+", default=0)' in generated[MESSAGES_OUT]


def test_a_cap_above_the_specs_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(config.DECODED_APIS, "Produce", (0, 14))
    with pytest.raises(SystemExit, match="cap v14 is above"):
        generate(committed_specs())


def test_the_runtime_never_imports_the_generator() -> None:
    # protocolgen is dev tooling: nothing of the package imports it (the generated modules stand alone)
    offenders = []
    for folder in ("insync_proxy", "protocol", "proxy", "client", "audit", "pipeline", "devcluster"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n.split(".")[0] == "protocolgen" for n in names):
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_specs_say_where_they_come_from() -> None:
    from insync_proxy.protocol.kafka_versions import KAFKA_VERSION

    assert (SPECS / KAFKA_VERSION_FILE).read_text().strip() == KAFKA_VERSION
    assert all("Licensed to the Apache Software Foundation" in (SPECS / name).read_text()
               for name in committed_specs() if name.endswith(".json") and name != "api_keys.json")


def test_every_api_key_of_the_specs_has_its_kafka_name_in_api_key() -> None:
    from insync_proxy.protocol.api_keys import FIRST_FLEXIBLE_VERSION, ApiKey

    summary = json.loads((SPECS / "api_keys.json").read_text())
    for key, entry in summary.items():
        member = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", entry["name"]).upper()
        assert ApiKey[member] == int(key)
    assert set(FIRST_FLEXIBLE_VERSION) == {int(k) for k in summary}


_CACHED_JAR = Path.home() / ".cache" / "insync-proxy" / "kafka-{v}" / "libs" / "kafka-clients-{v}.jar"


def test_the_committed_specs_are_the_jars_unchanged() -> None:
    # The jar the dev cluster fetched (when this machine has it): importing its specs changes nothing
    version = (SPECS / KAFKA_VERSION_FILE).read_text().strip()
    jar = Path(str(_CACHED_JAR).format(v=version))
    if not jar.exists():
        pytest.skip(f"no kafka-clients-{version}.jar in the dev cluster's cache")
    assert main(["--check", "--specs", str(jar)]) == 0
