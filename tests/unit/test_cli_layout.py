"""The command line is the application above the rooms: insync_proxy/cli.py, imported by none of them."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_room_imports_the_command_line() -> None:
    offenders = []
    for folder in ("protocol", "audit", "proxy", "client", "pipeline", "devcluster"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names
                             if n == "insync_proxy.cli" or n.startswith("insync_proxy.cli.")]
    assert not offenders
    assert not (ROOT / "proxy" / "cli.py").exists()


def test_the_console_script_and_python_m_run_the_same_main() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"insync-proxy": "insync_proxy.cli:main"}
    done = subprocess.run([sys.executable, "-m", "insync_proxy", "--version"], capture_output=True, text=True,
                          check=True)
    assert done.stdout.startswith("insync-proxy ")
