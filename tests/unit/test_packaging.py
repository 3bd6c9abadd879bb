"""Packaging: one distinctive top-level name, and no import of the source folders by their bare names."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.source_tree import ROOT, SOURCE_FOLDERS


def _python_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines()]


def test_no_module_imports_a_source_folder_by_its_bare_name() -> None:
    # Given every tracked Python file; When their imports are read; Then each goes through insync_proxy.
    offenders = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                          if n.split(".")[0] in SOURCE_FOLDERS]
    assert not offenders, "import these as insync_proxy.<folder>: " + ", ".join(offenders)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy of the tree: setuptools builds in the source's build/ folder, which another worker's
    # build of the same tree (or an in-place compile) may be changing at the same moment.
    source = tmp_path_factory.mktemp("source") / "tree"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", "*.so", ".*_cache", ".hypothesis", "bench-results", "test-logs",
        "spark-warehouse", "metastore_db"))
    directory = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(directory), str(source)], check=True)
    (built,) = directory.glob("*.whl")
    return built


def test_wheel_installs_only_the_insync_proxy_top_level_name(wheel: Path) -> None:
    # Given the project; When a wheel is built from it; Then everything sits under insync_proxy/.
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"insync_proxy"}
    for module in ("insync_proxy/proxy/server.py", "insync_proxy/protocol/produce.py",
                   "insync_proxy/pipeline/report.py", "insync_proxy/devcluster/pom.xml",
                   "insync_proxy/audit/events.py", "insync_proxy/audit/schema-v1.json",
                   "insync_proxy/audit/schema-v2.json", "insync_proxy/protocol/py.typed"):
        assert module in names
    assert not [n for n in names if n.startswith("insync_proxy/") and (n.endswith(".so") or "/build/" in n)]


def test_the_installed_wheel_imports_from_anywhere(wheel: Path, tmp_path: Path) -> None:
    # Given the wheel installed into a directory of its own (the source folders are mapped into the
    # package at build time, so the installed tree is plain folders); When Python runs elsewhere
    # Then every subpackage comes from that directory, the JSON schemas beside the contract.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                    str(wheel)], check=True)
    code = ("import json, insync_proxy.proxy.config.settings as c, insync_proxy.audit.events as e, insync_proxy.protocol as p; "
            "print(json.dumps([c.__file__, e.__file__, p.__file__, e.SCHEMA_FILES[2].is_file()]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)},
                         capture_output=True, text=True, check=True)
    *files, schema_found = json.loads(out.stdout)
    assert all(Path(f).is_relative_to(target / "insync_proxy") for f in files), files
    assert schema_found


def test_proxy_runtime_does_not_import_dev_cluster_or_partitioner() -> None:
    # The process that serves clients loads neither the dev cluster nor the producer-side partitioner.
    code = (
        "import sys, insync_proxy.proxy.server, insync_proxy.cli; "
        "print(sorted(m for m in sys.modules if 'devcluster' in m or 'partitioner' in m or 'pyspark' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
