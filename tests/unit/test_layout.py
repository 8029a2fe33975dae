"""Moved paths break silently elsewhere (entry points, `-m` argv, CI cache keys, docs): pin each one."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import envtest

ROOT = Path(__file__).resolve().parents[2]


def test_pytest11_entry_point_resolves_to_the_plugin_module():
    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "envtest"]
    assert ep.value == "envtest.plugin"
    assert hasattr(ep.load(), "pytest_configure")


def test_console_script_and_supervisor_modules_run_with_this_python():
    scripts = tomllib.loads((ROOT / "envtest/pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = scripts["envtest"].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    for mod in ("envtest.cli", "envtest.plane.supervise", "envtest.webhooks.detached", "envtest.pins"):
        out = subprocess.run(
            [sys.executable, "-m", mod, "--help"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, f"{mod}: {out.stderr}"


def test_supervisor_launches_the_module_that_exists():
    source = (ROOT / "envtest/src/envtest/plane/supervisor.py").read_text()
    (module,) = re.findall(r'"-m",\s*"([\w.]+)"', source)
    assert importlib.util.find_spec(module) is not None


def test_every_lazy_export_resolves():
    for name in envtest.__all__:
        assert getattr(envtest, name) is not None, name


def test_paths_named_by_ci_and_the_docs_exist():
    texts = [p.read_text() for p in (ROOT / ".github/workflows").glob("*.yml")]
    docs = [ROOT / "README.md", ROOT / "operator" / "README.md", *(ROOT / "docs").rglob("*.md")]
    docs += [*(ROOT / "operator" / "docs").rglob("*.md")]
    texts += [p.read_text() for p in docs]
    named = {
        m
        for t in texts
        for m in re.findall(r"(?<![\w/-])((?:envtest|operator|api|hack|benchmarks)/[\w/.-]+\.\w+)", t)
    }
    assert named, "nothing matched: the pattern is wrong"
    missing = sorted(p for p in named if not (ROOT / p).exists() and not (PACKAGE / p).exists())
    assert missing == []


PACKAGE = ROOT / "operator" / "mysql_operator"


def test_the_operator_readme_names_modules_where_they_are():
    """Its module paths are the package's (`controller/roles.py`) or the repository's; a bare file name
    must be one the repository holds: a module moved into a package leaves no stale name behind."""
    text = (ROOT / "operator" / "README.md").read_text()
    named = set(re.findall(r"`([\w/.-]+\.py)`", text))
    assert len(named) > 10, "nothing matched: the pattern is wrong"
    held = {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    missing = sorted(
        p
        for p in named
        if not (ROOT / p).exists()
        and not (PACKAGE / p).exists()
        and not (p.startswith("mysql_operator/") and (ROOT / "operator" / p).exists())
        and ("/" in p or p not in held)
    )
    assert missing == []


def test_package_data_globs_match_files():
    data = tomllib.loads((ROOT / "envtest/pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for package, globs in data.items():
        for glob in globs:
            assert list((ROOT / "envtest/src" / package).glob(glob)), f"{package}: {glob} matches nothing"


def test_no_test_module_name_is_used_twice():
    # rootdir-relative imports without __init__.py: a second test_x.py would fail collection of both.
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_readme_is_a_front_door():
    # What the project is, the two commands, links: the rest lives in docs/ and operator/README.md.
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    assert "make run" in "\n".join(lines[:8]) and "make test" in "\n".join(lines[:8])


def _documents() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return [ROOT / p for p in out.stdout.split()]


def test_every_make_target_the_documents_name_exists():
    targets = set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    # `make x` written as a command: in backticks or a code block, not the verb in a sentence.
    named = {
        m
        for doc in _documents()
        for m in re.findall(r"(?:`|^\s*)make ([a-z][\w-]*)", doc.read_text(), flags=re.M)
    }
    assert {"run", "test", "docs", "dist"} <= named, named
    assert sorted(named - targets) == []


def test_every_envtest_command_the_documents_name_parses():
    from envtest.cli import build_parser

    commands = {
        m.strip()
        for doc in _documents()
        for m in re.findall(r"`envtest ((?:[a-z][a-z-]* ?)+)", doc.read_text())
    }
    assert {"up", "down", "kind host-setup", "binaries install"} <= commands, commands
    parser = build_parser()
    failed = []
    for command in sorted(commands):
        words = command.split()
        # the longest prefix that is a command: `envtest up --name x` → up; `envtest kind image build`
        for end in range(len(words), 0, -1):
            try:
                parser.parse_args([*words[:end], "--help"])
            except SystemExit as done:
                if done.code == 0:
                    break
        else:
            failed.append(command)
    assert failed == []
