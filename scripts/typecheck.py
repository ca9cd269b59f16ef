"""mypy over the one import package `rankflow`, as it is installed (`make lint` runs it).

pyproject.toml maps `rankflow.state`, `rankflow.operators`, ... to top-level folders
(`[tool.setuptools.package-dir]`). The editable install serves that mapping through an
import hook that mypy cannot follow, and mypy has no such mapping of its own. So this lays
the package out in a temporary folder, `rankflow/` with a link to each of its files and one
link per mapped subpackage, runs mypy on `-p rankflow` there (the options are pyproject's
`[tool.mypy]`), and prints mypy's paths as the repository's own (`state/rules.py`, not
`rankflow/state/rules.py`). Extra arguments go to mypy. The exit code is mypy's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, str]:
    """Each mapped subpackage's name under `rankflow` -> its folder, as pyproject maps it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapped = config["tool"]["setuptools"]["package-dir"]
    return {name.removeprefix("rankflow."): folder for name, folder in mapped.items()}


def lay_out(tree: Path, subpackages: dict[str, str]) -> None:
    """`tree/rankflow`: links to rankflow/'s entries and to each mapped subpackage's folder."""
    package = tree / "rankflow"
    package.mkdir()
    for entry in (ROOT / "rankflow").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in subpackages.items():
        (package / name).symlink_to(ROOT / folder)


def main(argv: list[str]) -> int:
    subpackages = package_dirs()
    back = re.compile(r"^rankflow/(" + "|".join(map(re.escape, subpackages)) + r")/", re.MULTILINE)
    with tempfile.TemporaryDirectory(prefix="rankflow-mypy-") as tmp:
        lay_out(Path(tmp), subpackages)
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
             "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "rankflow", *argv],
            cwd=tmp, capture_output=True, text=True,
        )
    sys.stdout.write(back.sub(lambda m: subpackages[m.group(1)] + "/", done.stdout))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
