"""The documentation stays inside the repository: every relative link of README.md and docs/ resolves.

A clone has nothing beside it, so a link to ``../`` something, a file that moved, or a section
whose heading changed (README cites the semantics pages by section) is a broken promise to the
reader. Anchors are checked the way GitHub makes them from headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OUTSIDE = "shared" + "/spec"  # spelled apart so that this file does not mention it
OLD_NAMES = ("SEMANTICS" + ".md", "BOARDS" + ".md", "WINDOWS" + ".md")
SKIP_DIRS = {".venv", ".git", "build", "dist", ".hypothesis", ".pytest_cache", "node_modules"}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks, inline code removed (a link in code is no link)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file; a repeated heading gets ``-1``, ``-2``... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m[1])
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return [t for line in prose_lines(path) for t in LINK.findall(CODE_SPAN.sub("", line))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: lead elsewhere


def broken(path: Path, target: str) -> str | None:
    """Why ``target``, a relative link in ``path``, does not resolve in the repository, or None."""
    name, _, anchor = target.partition("#")
    dest = (path.parent / name).resolve() if name else path
    if not dest.is_relative_to(ROOT):
        return "points outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading with anchor #{anchor} in {dest.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(doc: Path) -> None:
    problems = [f"{target}: {why}" for target in links(doc) if (why := broken(doc, target))]
    assert not problems, f"{doc.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_semantics_pages_are_there_and_linked_from_readme() -> None:
    readme = set(links(ROOT / "README.md"))
    for page in ("listeners", "boards", "windows"):
        assert (ROOT / "docs" / "semantics" / f"{page}.md").is_file()
        assert any(t.split("#")[0] == f"docs/semantics/{page}.md" for t in readme), page


def test_the_docs_name_no_file_outside_the_repository() -> None:
    """The contracts live in docs/semantics/: README and docs cite those pages, not files a clone lacks."""
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for word in (OUTSIDE, "../seeds", *OLD_NAMES):
            assert word not in text, f"{doc.relative_to(ROOT)} mentions {word}"


def test_no_source_file_names_the_outside_spec() -> None:
    sources = [p for p in ROOT.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    assert len(sources) > 50
    named = [str(p.relative_to(ROOT)) for p in sources
             if any(word in p.read_text(encoding="utf-8") for word in (OUTSIDE, *OLD_NAMES))]
    assert not named, f"these name {OUTSIDE} or its files instead of docs/semantics/: {named}"


def test_anchors_follow_githubs_rules() -> None:
    assert slug("5. Approximate global ranking (`--global-summary N`)") == "5-approximate-global-ranking---global-summary-n"
    assert slug("Game score boards (`--flow boards`)") == "game-score-boards---flow-boards"
    assert slug("6. Disconnect detection (off unless configured)") == "6-disconnect-detection-off-unless-configured"
