"""The checkout's layout, for tests that read the source: its root, and the package's source folders.

The folders are read off the package itself: insync_proxy/ holds a relative link to each top-level source folder
(insync_proxy/proxy -> ../proxy), and those links are the one list of them (insync_proxy/__init__.py).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "insync_proxy"
#: The source folders by subpackage name, e.g. "proxy" -> ROOT / "proxy" (the links' targets).
SOURCE_FOLDERS: dict[str, Path] = {link.name: link.resolve() for link in sorted(PACKAGE.iterdir()) if link.is_symlink()}
