"""The wheel installs one import package, ``rankflow``, and works outside the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson

from tests.events import ev, ranking

ROOT = Path(__file__).resolve().parents[2]
# What setuptools prints when pyproject.toml leaves a folder of the package undeclared, or uses a
# configuration it is dropping: a first ``make run`` printed 25 lines of it.
SETUPTOOLS_NOISE = re.compile(r"Package would be ignored|SetuptoolsDeprecationWarning|SetuptoolsWarning|"
                              r"BuildBackendWarning|is absent from the `packages`")


def _source_copy(tmp_path: Path) -> Path:
    """The checkout without its local state: setuptools leaves build/ behind, and stale files there would ship."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".local", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache", "data",
        "bench-results", "test-artifacts", "*.jsonl", "target", "_native.*.so"))
    return source


def _cargo_env() -> dict[str, str]:
    """The environment of a build from the copy: cargo keeps its work in the checkout's
    native/target, so the crate's dependencies compiled once serve every build (only the
    crate itself, at its new path, is compiled again)."""
    return {**os.environ, "CARGO_TARGET_DIR": str(ROOT / "native" / "target")}


def _makefile_pythonwarnings() -> str:
    """The ``PYTHONWARNINGS`` the Makefile installs with (its one filter of setuptools' informational line)."""
    [value] = re.findall(r'^PIP_INSTALL := PYTHONWARNINGS="([^"]*)"', (ROOT / "Makefile").read_text(), re.M)
    return value


def test_building_and_installing_print_no_setuptools_warnings(tmp_path):
    """A wheel build and the Makefile's editable install say nothing about the packaging, and the wheel
    holds the package data (the Lua scripts, the dashboard's static files)."""
    source = _source_copy(tmp_path)
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(source)],
                           env=_cargo_env(), capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    noise = [line for line in (built.stdout + built.stderr).splitlines() if SETUPTOOLS_NOISE.search(line)]
    assert noise == [], "\n".join(noise)
    [wheel] = dist.glob("rankflow-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    static = {f"rankflow/api/static/{path.name}" for path in (ROOT / "api" / "static").iterdir() if path.is_file()}
    lua = {f"rankflow/connectors/lua/{path.name}" for path in (ROOT / "connectors" / "lua").glob("*.lua")}
    assert static and lua and (static | lua) <= names, sorted((static | lua) - names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**_cargo_env(), "PYTHONWARNINGS": _makefile_pythonwarnings()}
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "-e", str(source)],
                               env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    assert (installed.stdout + installed.stderr).strip() == "", installed.stdout + installed.stderr


def test_the_wheel_is_one_package_that_runs_from_a_new_venv(tmp_path, redis_url, namespace):
    source = _source_copy(tmp_path)
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(source)],
                           env=_cargo_env(), capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    [wheel] = dist.glob("rankflow-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"rankflow"}, f"top-level names in the wheel: {sorted(top)}"
    assert "rankflow/api/static/dashboard.html" in names
    assert "rankflow/_native.pyi" in names and any(re.fullmatch(r"rankflow/_native\..*\.so", n) for n in names), \
        "the Rust kernel (native/) is missing from the wheel"
    assert {"rankflow/bench/rig.py", "rankflow/bench/boards/__init__.py", "rankflow/bench/activity/__init__.py",
            "rankflow/bench/baseline.py"} <= set(names)
    lua = {f"rankflow/connectors/lua/{path.name}" for path in (ROOT / "connectors" / "lua").glob("*.lua")}
    assert lua and lua <= set(names), f"Lua scripts missing from the wheel: {sorted(lua - set(names))}"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "-c", str(ROOT / "constraints.txt"),
                                str(wheel)], capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    log = outside / "events.jsonl"
    log.write_bytes(b"\n".join([ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1),
                                ev("u3", "p3", "song_b", "START", 1), b"not json"]) + b"\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    rankflow = str(venv / "bin" / "rankflow")
    run = subprocess.run([rankflow, "run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url,
                          "--namespace", namespace, "--dead-letter", f"jsonl:{outside / 'dead.jsonl'}"],
                         cwd=outside, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    top_k = subprocess.run([rankflow, "top", "--json", "--redis", redis_url, "--namespace", namespace],
                           cwd=outside, env=env, capture_output=True, text=True, timeout=60)
    assert top_k.returncode == 0, top_k.stderr
    assert ranking(orjson.loads(top_k.stdout)) == [("song_b", 2), ("song_a", 1)]
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import rankflow.flows.listeners as m, importlib.util as u; print(m.__file__); "
                            "print([n for n in ('flows', 'operators', 'state', 'connectors', 'api', 'bench') "
                            "if u.find_spec(n) is not None])"],
                           cwd=outside, env=env, capture_output=True, text=True, timeout=60)
    module_file, leaked = where.stdout.splitlines()
    assert module_file.startswith(str(venv)), "imported from the installed wheel, not the checkout"
    assert leaked == "[]", f"top-level modules installed: {leaked}"


def _modules_after(code: str) -> list[str]:
    """The ``rankflow.bench`` modules loaded once ``code`` ran, in a fresh interpreter."""
    probe = f"import sys\n{code}\nprint([m for m in sys.modules if m.startswith('rankflow.bench')])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_rankflow_starts_without_the_benchmarks():
    """The benchmarks are not the runtime: ``rankflow`` (its parser, every command's options,
    bench-activity's too) loads none of them; a bench command loads its own when it runs."""
    assert _modules_after("import rankflow.cli") == []
    assert _modules_after("import rankflow.cli\nrankflow.cli.build_parser().parse_args(['bench-activity'])") == []
    help_all = subprocess.run([sys.executable, "-c", "import sys, rankflow.cli\n"
                               "try:\n    rankflow.cli.main(['bench-activity', '--help'])\n"
                               "except SystemExit:\n    pass\n"
                               "print([m for m in sys.modules if m.startswith('rankflow.bench')], file=sys.stderr)"],
                              capture_output=True, text=True, timeout=120)
    assert "--memory-pairs" in help_all.stdout
    assert help_all.stderr.strip().splitlines()[-1] == "[]"
