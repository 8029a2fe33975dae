"""What a release needs and CI cannot see without publishing: one version per distribution, read from
one place; the licence shipped beside each; a changelog in Keep a Changelog's shape."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import envtest
import mysql_operator

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "envtest": ("envtest.__version__", envtest),
    "operator": ("mysql_operator.__version__", mysql_operator),
}


def test_each_distribution_reads_its_version_from_its_package_alone() -> None:
    for project, (attr, module) in PACKAGES.items():
        meta = tomllib.loads((ROOT / project / "pyproject.toml").read_text())
        assert "version" not in meta["project"], f"{project}: a second, hand-set version"
        assert meta["project"]["dynamic"] == ["version"]
        assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": attr}
        assert re.fullmatch(r"\d+\.\d+\.\d+", module.__version__), module.__version__
    # Released together: one version for both.
    assert envtest.__version__ == mysql_operator.__version__


def test_both_distributions_ship_the_licence_of_the_repository() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    for project in PACKAGES:
        meta = tomllib.loads((ROOT / project / "pyproject.toml").read_text())["project"]
        assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
        assert (ROOT / project / "LICENSE").read_text() == licence, f"{project}/LICENSE differs"


def test_the_changelog_keeps_a_changelog_and_has_the_current_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, flags=re.M)
    assert versions[0] == ("Unreleased", ""), "the first section collects what is not released yet"
    released = [v for v, date in versions[1:] if date]
    assert len(released) == len(versions) - 1, "every released section is dated (YYYY-MM-DD)"
    assert released[0] == envtest.__version__, "the newest release is the packages' version"
    sections = set(re.findall(r"^### (\w+)$", text, flags=re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, sections
