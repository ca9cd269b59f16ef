"""The documentation stays inside the repository and true: links resolve, README's commands run.

A clone has nothing beside it, so a link to ``../`` something, a file that moved, or a section
whose heading changed (README cites the semantics pages by section) is a broken promise to the
reader. Anchors are checked the way GitHub makes them from headings.

README.md is the front door: short, its first two commands ``make run`` and ``make test`` (CI and
users rely on them), and its product commands work as printed after ``make services-start``: the
last test runs them, in order, against services that ``make services-start`` starts on free ports.
The docs hold current figures and how to get them, not history: no commit hashes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rankflow.services import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OUTSIDE = "shared" + "/spec"  # spelled apart so that this file does not mention it
OLD_NAMES = ("SEMANTICS" + ".md", "BOARDS" + ".md", "WINDOWS" + ".md")
SKIP_DIRS = {".venv", ".git", "build", "dist", ".hypothesis", ".pytest_cache", "node_modules"}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
HEX_RUN = re.compile(r"\b[0-9a-f]{7,40}\b")
README_MAX_LINES = 250


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


def fenced_blocks(path: Path, language: str = "bash") -> list[list[str]]:
    """The lines of each fenced code block of ``language`` in ``path``, in order."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    lang = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        fence = line.lstrip()
        if fence.startswith("```"):
            if current is None:
                current, lang = [], fence[3:].strip()
            else:
                if lang == language:
                    blocks.append(current)
                current = None
            continue
        if current is not None:
            current.append(line)
    return blocks


def commands(block: list[str]) -> list[str]:
    """A block's commands: its lines without comments, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", "\n".join(block))
    return [c for line in joined.splitlines() if (c := line.split("  #")[0].strip()) and not c.startswith("#")]


def commit_like(text: str) -> list[str]:
    """Runs of 7 to 40 hex digits that mix letters and digits: what a commit hash looks like.

    Hashes are not checked against git (a shallow clone lacks the old commits): no
    identifier in these pages has that shape, so any such run is taken for a hash.
    """
    return [h for h in HEX_RUN.findall(text) if re.search(r"[a-f]", h) and re.search(r"[0-9]", h)]


def test_readme_is_a_short_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move details to docs/"


def test_readme_first_two_commands_are_make_run_and_make_test() -> None:
    """CI (``.ci/run``) and users rely on them: nothing comes before them."""
    first = commands(fenced_blocks(ROOT / "README.md")[0])
    assert [c.split()[:2] for c in first[:2]] == [["make", "run"], ["make", "test"]], first


def test_no_commit_hashes_in_readme_or_docs() -> None:
    found = {str(doc.relative_to(ROOT)): h for doc in DOCS if (h := commit_like(doc.read_text(encoding="utf-8")))}
    assert not found, f"commit hashes (history belongs in git, not in the docs): {found}"


def test_commit_like_runs() -> None:
    assert commit_like("measured on `a639013~1` and 5ba9e8a") == ["a639013", "5ba9e8a"]
    assert commit_like("1767225600000 deadbeef 3000000042 song_0") == []


def test_every_page_of_docs_is_reachable_from_readme() -> None:
    """A page no link leads to is lost to the reader: follow the links from README.md."""
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in links(page):
            name = target.partition("#")[0]
            dest = (page.parent / name).resolve() if name else page
            if dest.suffix == ".md" and dest.is_file():
                todo.append(dest)
    orphans = [str(p.relative_to(ROOT)) for p in DOCS if p.resolve() not in seen]
    assert not orphans, f"not linked from README.md or a page it links: {orphans}"


def readme_service_script(redis_port: int, kafka_port: int, http_port: int, local: Path) -> str:
    """README's commands from ``make services-start`` on, in order, as one bash script.

    Only what cannot be the same on a test machine is changed: the services' ports (and the
    service's) are free ones, ``make`` runs in the checkout with a private ``LOCAL``, the
    virtualenv activated is the one running the tests, and ``curl`` fails on an HTTP error.
    """
    blocks = fenced_blocks(ROOT / "README.md")
    start = next(i for i, b in enumerate(blocks) if "make services-start" in commands(b))
    stop = next(i for i, b in enumerate(blocks) if "make services-stop" in commands(b))
    assert start < stop
    script = "\n".join(c for b in blocks[start:stop] for c in commands(b))
    activate = Path(sys.executable).parent / "activate"
    replacements = {
        "make services-start": f"make --no-print-directory -C {ROOT} services-start REDIS_PORT={redis_port} "
                               f"KAFKA_PORT={kafka_port} LOCAL={local}",
        "source .venv/bin/activate": f"source {activate}" if activate.is_file()
                                     else f"export PATH={Path(sys.executable).parent}:$PATH",
        "127.0.0.1:6399": f"127.0.0.1:{redis_port}",
        "127.0.0.1:19092": f"127.0.0.1:{kafka_port}",
        "localhost:8000": f"localhost:{http_port}",
        "--port 8000": f"--port {http_port}",
        "curl -s ": "curl -s --fail-with-body ",
    }
    for old, new in replacements.items():
        assert old in script, f"README no longer has {old!r}: update this test"
        script = script.replace(old, new)
    return "set -euo pipefail -x\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script + "\n"


@pytest.mark.redis  # `make services-start`
@pytest.mark.broker
def test_readme_product_commands_work_as_printed(tmp_path: Path) -> None:
    local = tmp_path / "local"
    script = readme_service_script(free_port(), free_port(), free_port(), local)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "RANKFLOW_REDIS_URL", "RANKFLOW_SIGNING_KEY")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    try:
        r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"README's commands failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    finally:
        subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "services-stop", f"LOCAL={local}"],
                       env=env, capture_output=True, timeout=120)
    out = r.stdout
    assert "song_0" in out and "p000000" in out and "acme" in out, out[-3000:]
    assert out.count('"snapshot_id"') >= 6, out[-3000:]  # the --json readers and every curl
