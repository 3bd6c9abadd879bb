"""Every relative link of README.md and docs/ leads to a file that exists, and every #anchor to a heading of it
(GitHub's anchors: the heading lower-cased, punctuation but - and _ dropped, spaces made -)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (a repeated heading gets -1, -2, ...)."""
    made: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _FENCE.sub("", page.read_text()), re.M):
        text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in made:
            n += 1
            candidate = f"{slug}-{n}"
        made.add(candidate)
    return made


def links(page: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked here (no network)
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_anchor_rule_is_githubs() -> None:
    page = ROOT / "docs" / "security.md"
    assert {"oauthbearer-oauth-20-and-oidc", "gssapi-kerberos", "aws_msk_iam-amazon-msk",
            "kerberos-clients-through-the-sidecar"} <= anchors(page)
