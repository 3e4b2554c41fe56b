"""Tier 1: the docs hold together. Every relative link in README.md and docs/*.md reaches an
existing file (and heading, when it names one), the README stays a front page, the docs name only
declared DPMPI_* settings, and nothing points users at developer-only files they do not have."""
import re
from pathlib import Path

import pytest

from dpmpi import config

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 10_000  # bytes: the README is the front page; reference and figures live in docs/

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans (links there are not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation other than - and _
    removed, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    text = FENCE.sub("", path.read_text())
    for _hashes, title in HEADING.findall(text):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found | set(HTML_ANCHOR.findall(text))


def links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text()))


def test_the_link_and_anchor_parsers():
    assert slug("Hung ranks: the heartbeat (`DPMPI_HEARTBEAT_TIMEOUT`)") == "hung-ranks-the-heartbeat-dpmpi_heartbeat_timeout"
    assert slug("Hot swap: spare ranks (`dpmpi.init`, `Respawn`)") == "hot-swap-spare-ranks-dpmpiinit-respawn"
    assert slug("The failure watcher's interruption is opt-in") == "the-failure-watchers-interruption-is-opt-in"
    sample = "see [a](a.md#x) and [b](../b.md), `[not](c.md)`\n```\n[not](d.md)\n```\n![img](e.png)"
    assert LINK.findall(_prose(sample)) == ["a.md#x", "../b.md", "e.png"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked here
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"add these to the README's Documentation list: {orphans}"


def test_the_readme_stays_a_front_page():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes (limit {README_LIMIT}): move reference text to docs/"


def test_the_docs_name_only_declared_settings():
    declared = {v.name for v in config.VARS}
    unknown = {f"{name} ({p.relative_to(ROOT)})" for p in PAGES for name in re.findall(r"DPMPI_[A-Z0-9_]+", p.read_text())
               if name not in declared}
    assert not unknown, f"not declared in dpmpi/config.py: {sorted(unknown)}"


def test_no_file_points_at_developer_only_notes():
    needle = "shared/" + "ulfm-facts.md"  # the project's own notes: users do not have them
    hits = []
    for top in ("README.md", "Makefile", "pyproject.toml", "meson.build", "dpmpi", "cext", "docs", "tests", "bench",
                "examples"):
        base = ROOT / top
        for p in [base] if base.is_file() else (base.rglob("*") if base.is_dir() else []):
            if p.is_file() and p.suffix in {"", ".md", ".py", ".c", ".h", ".pyi", ".toml", ".build", ".txt"}:
                if needle in p.read_text(errors="replace"):
                    hits.append(str(p.relative_to(ROOT)))
    assert not hits, f"{needle} is not part of dpmpi; put what users need in docs/: {hits}"
