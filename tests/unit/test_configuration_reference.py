"""The configuration reference is generated from what the plugin registers (docs/hooks/configref.py):
every ini key, option and environment variable appears in it with a description."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from envtest import environment
from envtest.plugin import settings

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("configref", ROOT / "docs" / "hooks" / "configref.py")
assert _spec and _spec.loader
configref = importlib.util.module_from_spec(_spec)
sys.modules["configref"] = configref  # its dataclasses look their module up there
_spec.loader.exec_module(configref)


def test_every_registered_key_is_documented_with_its_help() -> None:
    registered = {s.ini: s for s in configref.settings()}
    assert set(settings.ini_keys()) <= set(registered), "a key the plugin checks for is registered nowhere"
    table = configref.options_table()
    for key, setting in registered.items():
        assert setting.help.strip(), (
            f"{key} is registered without help text: the reference cannot say what it does"
        )
        assert f"| `{key}` |" in table, key
    for opt in settings.OPTIONS:
        assert f"`--envtest-{opt.name}`" in table, opt.name


def test_every_environment_variable_is_documented() -> None:
    table = configref.environment_table()
    for name, what in environment.VARIABLES.items():
        assert what.strip() and f"| `{name}` |" in table, name


def test_every_environment_variable_the_harness_names_is_known() -> None:
    """A name read somewhere but missing from the table is refused by the plugin and the CLI as a typo.
    (Quoted names only: one built by an f-string is not seen.)"""
    source = ROOT / "envtest" / "src" / "envtest"
    named = {
        name
        for path in source.rglob("*.py")
        for name in re.findall(r"[\"'](ENVTEST_[A-Z0-9_]+)[\"']", path.read_text())
    }
    assert len(named) > 10, f"found only {sorted(named)} under {source}: the scan is wrong"
    assert named <= environment.VARIABLES.keys() | environment.FOREIGN, sorted(
        named - environment.VARIABLES.keys() - environment.FOREIGN
    )


def test_the_reference_page_asks_for_both_tables_and_counts_what_it_shows() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert configref.OPTIONS_MARKER in page and configref.ENVIRONMENT_MARKER in page
    rendered = configref.render(page)
    counted = re.search(r"(\d+) command-line options, (\d+) ini keys", rendered)
    assert counted is not None
    assert int(counted[2]) == len(settings.ini_keys()) and int(counted[1]) == len(settings.OPTIONS)
    assert "<name>" not in configref.options_table(), "cells are HTML-escaped"


def test_every_marker_the_plugin_registers_is_in_the_markers_table(pytestconfig: pytest.Config) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    table = page.split("## Markers", 1)[1].split("\n## ", 1)[0]
    ours = [line.split(":", 1)[0] for line in pytestconfig.getini("markers") if line.startswith("envtest_")]
    assert ours, "the plugin registers its markers"
    for marker in ours:
        name = marker.split("(", 1)[0]
        assert re.search(rf"^\| `{name}[`(]", table, flags=re.M), f"marker {name} is not in the table"
