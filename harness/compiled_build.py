"""Which build of the proxy this checkout holds: the data path's C extensions ./scripts/compile made in place.

The scenario runner picks the build it runs from this, and its test asks for the same one.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compiled_extensions() -> tuple[list[Path], list[Path]]:
    """The data path's C extensions in this checkout (./scripts/compile builds them in place), and the stale ones
    (older than their source)."""
    found = [so for folder in ("protocol", "audit", "proxy", "pipeline") for so in (ROOT / folder).rglob("*.cpython-*.so")]
    stale = [so for so in found if not so.with_name(so.name.split(".")[0] + ".py").exists()
             or so.with_name(so.name.split(".")[0] + ".py").stat().st_mtime > so.stat().st_mtime]
    return found, stale
