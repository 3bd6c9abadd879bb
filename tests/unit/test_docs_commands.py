"""Every `python -m ...` the docs and the README show runs, interpreted and on the compiled build.

The project's own modules run with `--help`: exit 0, a usage line, and never "No code object available"
(what `python -m` says for a module scripts/compile turned into C). CI runs tests/unit again after
./scripts/compile, so the same cases prove the compiled build. Other tools' modules (pip, pytest, ruff)
are only looked up: their help is theirs.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from insync_proxy.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: `python -m module`, `python3 -m module`; line breaks inside a sentence count as spaces.
INVOCATION = re.compile(r"\bpython3? -m ([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?: ([a-z][a-z-]*))?")
#: Top-level packages of this repository whose modules the docs run.
OURS = ("insync_proxy", "harness", "tests", "benchmarks")


def _subcommands() -> set[str]:
    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(actions[0].choices)


def documented_commands() -> list[tuple[str, tuple[str, ...]]]:
    """(page, command) for every distinct `python -m` invocation: the module, and for `python -m insync_proxy`
    the subcommand that follows it."""
    subcommands = _subcommands()
    found: dict[tuple[str, ...], str] = {}
    for page in PAGES:
        text = " ".join(page.read_text(encoding="utf-8").split())
        for match in INVOCATION.finditer(text):
            module, word = match.group(1), match.group(2)
            command = (module, word) if module == "insync_proxy" and word in subcommands else (module,)
            found.setdefault(command, page.relative_to(ROOT).as_posix())
    return sorted((page, command) for command, page in found.items())


def _compiled_modules() -> set[str]:
    """setup.py's COMPILED_MODULES as module names (insync_proxy.proxy.datapath.core), read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    value = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "COMPILED_MODULES" for t in node.targets))
    paths: list[str] = ast.literal_eval(value)
    return {"insync_proxy." + p.removesuffix(".py").replace("/", ".") for p in paths}


def test_the_docs_show_commands_and_the_scan_sees_them() -> None:
    commands = [command for _, command in documented_commands()]
    # the scan would pass vacuously if it saw nothing: these two are on docs/ pages this change wrote
    assert ("insync_proxy.proxy.observability.metrics_reference",) in commands
    assert ("insync_proxy.proxy.config.reference",) in commands
    assert "insync_proxy.proxy.datapath.core" in _compiled_modules()


@pytest.mark.parametrize(("page", "command"), documented_commands(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_a_documented_python_m_command_runs(page: str, command: tuple[str, ...]) -> None:
    module = command[0]
    if module.split(".")[0] not in OURS:
        # Given another tool's module (pip, pytest, ruff); Then it is installed
        assert importlib.util.find_spec(module) is not None, f"{page}: `python -m {module}`: no such module"
        return
    # Given one of the project's modules: python -m cannot run a compiled one ("No code object available")
    assert module not in _compiled_modules(), (
        f"{page} runs `python -m {module}`, a module scripts/compile compiles: move the command into a module "
        "that is not compiled")
    # When it runs with --help, as the docs would, from the checkout (compiled modules beside their sources)
    done = subprocess.run([sys.executable, "-m", *command, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    # Then it explains itself and exits 0
    assert "No code object" not in done.stderr, f"{page}: `python -m {module}`: {done.stderr[-500:]}"
    assert done.returncode == 0, f"{page}: `python -m {' '.join(command)} --help` exited {done.returncode}: " \
                                 f"{done.stderr[-1000:]}"
    assert "usage:" in done.stdout, f"{page}: `python -m {' '.join(command)} --help` printed no usage: " \
                                    f"{done.stdout[:300]!r}"
