"""proxy/observability/compiled.py: which modules run compiled, and a stale in-place build is caught."""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

from insync_proxy.proxy.observability.compiled import compiled_modules, describe

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _package(root: Path, in_place: bool) -> Path:
    package = root / "insync_proxy"
    (package / "proxy").mkdir(parents=True)
    (package / "proxy" / "core.py").write_text("")
    (package / "proxy" / f"core{SUFFIX}").write_bytes(b"")
    (package / "proxy" / "metrics.py").write_text("")
    (package / f"_data_path__mypyc{SUFFIX}").write_bytes(b"")
    if in_place:
        (root / "setup.py").write_text("")
    return package


def _age(path: Path, seconds: float) -> None:
    stat = path.stat()
    os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))


def test_an_interpreted_package_says_how_to_compile(tmp_path: Path) -> None:
    package = tmp_path / "insync_proxy"
    package.mkdir()
    (package / "core.py").write_text("")
    assert compiled_modules(package) == []
    assert describe([]).startswith("interpreted")


def test_compiled_modules_are_named_and_the_shared_runtime_is_not_one(tmp_path: Path) -> None:
    modules = compiled_modules(_package(tmp_path, in_place=True))
    assert [m.name for m in modules] == ["insync_proxy.proxy.core"]
    assert describe(modules) == "compiled with mypyc: 1 modules"


def test_a_c_module_is_judged_by_its_c_source(tmp_path: Path) -> None:
    # the hand-written core (setup.py: C_MODULES) has a .c source beside it, no .py
    package = _package(tmp_path, in_place=True)
    (package / "proxy" / "_wire.c").write_text("")
    (package / "proxy" / f"_wire{SUFFIX}").write_bytes(b"")
    _age(package / "proxy" / "_wire.c", 60)
    modules = compiled_modules(package)
    wire = next(m for m in modules if m.name == "insync_proxy.proxy._wire")
    assert wire.source == package / "proxy" / "_wire.c" and not wire.stale
    assert describe(modules) == "compiled with mypyc: 1 modules, and 1 in C"
    _age(package / "proxy" / f"_wire{SUFFIX}", 120)
    assert wire.stale


def test_a_c_module_is_stale_when_its_generated_header_is_newer(tmp_path: Path) -> None:
    # Given the core built after its C source (protocol/_wire.c) and its generated walks (_wire_walkers.h)
    package = _package(tmp_path, in_place=True)
    for name in ("_wire.c", "_wire_walkers.h"):
        (package / "proxy" / name).write_text("")
        _age(package / "proxy" / name, 60)
    (package / "proxy" / f"_wire{SUFFIX}").write_bytes(b"")
    wire = next(m for m in compiled_modules(package) if m.name == "insync_proxy.proxy._wire")
    assert not wire.stale
    # When the walks are generated again after the build (scripts/generate-protocol); Then the build is stale
    os.utime(package / "proxy" / "_wire_walkers.h")
    _age(package / "proxy" / f"_wire{SUFFIX}", 30)
    assert wire.stale


def test_a_source_edited_after_an_in_place_build_is_stale(tmp_path: Path) -> None:
    package = _package(tmp_path, in_place=True)
    _age(package / "proxy" / f"core{SUFFIX}", 60)
    [module] = compiled_modules(package)
    assert module.stale
    assert "older than their source" in describe([module]) and "scripts/compile" in describe([module])


def test_an_installed_wheel_is_never_stale(tmp_path: Path) -> None:
    # pip unpacks every file of a wheel at its own moment: the order of mtimes means nothing there
    package = _package(tmp_path, in_place=False)
    _age(package / "proxy" / f"core{SUFFIX}", 60)
    [module] = compiled_modules(package)
    assert not module.stale
