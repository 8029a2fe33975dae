"""What each built distribution holds: its package and the licence, and nothing a checkout collects
beside them (tests, caches, compiled files). `make dist` runs it on dist/ after building, so CI and the
release workflow check the very archives they upload.

    python hack/check_dists.py dist/

Exit 1 naming each archive and what is wrong with it; exit 1 too when a distribution lacks its sdist
or its wheel.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"kube_envtest": "envtest", "mysqlcluster_operator": "mysql_operator"}
"""Each distribution's file-name prefix and the import package it ships."""


def members(archive: Path) -> list[str]:
    """File names inside ``archive``; an sdist's without its top folder (`name-version/`)."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            return zf.namelist()
    with tarfile.open(archive) as tf:
        return [m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name and m.isfile()]


def _licence(archive: Path, names: list[str]) -> str | None:
    wanted = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")] or ["LICENSE"]
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            return zf.read(wanted[0]).decode() if wanted[0] in names else None
    with tarfile.open(archive) as tf:
        top = tf.getnames()[0].split("/", 1)[0]
        try:
            member = tf.extractfile(f"{top}/LICENSE")
        except KeyError:
            return None
        return member.read().decode() if member else None


def problems(archive: Path, package: str, licence: str) -> list[str]:
    """What is wrong with one sdist or wheel of ``package``."""
    names = members(archive)
    found = []
    if not any(n == f"{package}/__init__.py" or n.endswith(f"/{package}/__init__.py") for n in names):
        found.append(f"no {package}/__init__.py")
    if _licence(archive, names) != licence:
        found.append("the repository's LICENSE is missing or differs")
    strays = [
        n
        for n in names
        if "__pycache__/" in n or n.endswith((".pyc", ".pyo")) or ".pytest_cache/" in n
        or n.startswith("tests/") or "/tests/" in n or Path(n).name.startswith("test_")
    ]  # fmt: skip
    found += [f"holds {n}" for n in strays]
    return found


def check(dist: Path) -> list[str]:
    licence = (ROOT / "LICENSE").read_text()
    report = []
    for prefix, package in PACKAGES.items():
        archives = sorted(dist.glob(f"{prefix}-*.tar.gz")) + sorted(dist.glob(f"{prefix}-*.whl"))
        kinds = sorted(".whl" if a.suffix == ".whl" else ".tar.gz" for a in archives)
        if kinds != [".tar.gz", ".whl"]:
            report.append(f"{prefix}: expected one sdist and one wheel in {dist}, found {kinds}")
        report += [f"{a.name}: {p}" for a in archives for p in problems(a, package, licence)]
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="check_dists.py", description="Check what each built distribution in a folder holds."
    )
    parser.add_argument("dist", nargs="?", default="dist", help="the folder of sdists and wheels (dist)")
    dist = parser.parse_args(argv).dist
    if not Path(dist).is_dir():
        print(f"check_dists: {dist}: no such folder (build it first: make dist)", file=sys.stderr)
        return 2
    report = check(Path(dist))
    for line in report:
        print(f"check_dists: {line}", file=sys.stderr)
    if not report:
        print(
            f"check_dists: {', '.join(PACKAGES)}: sdist and wheel hold the package and LICENSE; "
            "no tests, caches or compiled files"
        )
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
