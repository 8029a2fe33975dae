"""The distributions as a stranger gets them: built from a copy of the repository, installed into fresh
virtualenvs that hold nothing else of it. Shared by test_distributions.py and test_docs_projects.py.

A virtualenv costs a pip install with dependencies (minutes on a busy machine the first time). pip's
own cache keeps the downloaded wheels between venvs, and `harness_venv` builds the harness-only venv
once per run for every xdist worker (under a lock in the run's shared temp dir), so the documentation's
projects add seconds, not minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from filelock import FileLock

from envtest import binaries

ROOT = Path(__file__).resolve().parents[2]


def run(
    *argv: str | Path,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
) -> str:
    """stdout; with check=False the tail of both streams, whatever the exit code (the caller judges)."""
    out = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )
    if not check:
        return f"exit {out.returncode}\n{out.stdout[-6000:]}\n{out.stderr[-3000:]}"
    assert out.returncode == 0, f"{argv}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def copy_project(project: str, where: Path) -> Path:
    """A copy of envtest/ or operator/ to build from: a build in the tree leaves build/ there, and two
    xdist workers may build at once."""
    source = where / project
    shutil.copytree(ROOT / project, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    return source


def build(source: Path, out: Path, *, timeout: float, wheel_only: bool = False) -> None:
    """`python -m build`: the sdist, then the wheel from it (or the wheel alone)."""
    run(
        sys.executable,
        "-m",
        "build",
        *(["--wheel"] if wheel_only else []),
        "--outdir",
        out,
        source,
        timeout=timeout,
    )


def venv_with(requirement: str | Path, where: Path, *, timeout: float) -> Path:
    """A fresh virtualenv with `requirement` (a wheel, possibly with extras) installed; its python."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    run(
        python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(requirement), timeout=timeout
    )
    return python


def clean_env(python: Path, home: Path) -> dict[str, str]:
    """Nothing of this repository on the path (no PYTHONPATH; the caller runs outside it), the binaries
    this run already has, and a cache of its own for plane state."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV", "ENVTEST_"))
    }
    env["PATH"] = f"{python.parent}:{env.get('PATH', '')}"
    env["KUBEBUILDER_ASSETS"] = str(binaries.cache_dir())
    env["ENVTEST_KWOK_STAGES"] = str(binaries.kwok_stages_dir())
    env["XDG_CACHE_HOME"] = str(home / "cache")
    return env


HARNESS_EXTRAS = "kopf,async"
"""The extras of the run's one harness-only venv: what a kopf or asyncio user adds."""
EXAMPLES = ROOT / "examples"


def harness_venv(tmp_path_factory: pytest.TempPathFactory, *, timeout: float) -> Path:
    """The python of a venv holding only kube-envtest[kopf,async] from a wheel built here, and the
    examples' own requirements (what a stranger's project adds besides the harness), made once per run."""
    shared = tmp_path_factory.getbasetemp().parent  # one dir for the controller and every xdist worker
    where = shared / "harness-venv"
    python = where / "venv" / "bin" / "python"
    with FileLock(str(where) + ".lock"):
        if not (where / "ready").is_file():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            source = copy_project("envtest", where)
            build(source, where / "dist", timeout=timeout, wheel_only=True)
            (wheel,) = (where / "dist").glob("kube_envtest-*.whl")
            venv_with(f"{wheel}[{HARNESS_EXTRAS}]", where / "venv", timeout=timeout)
            for requirements in sorted(EXAMPLES.glob("*/requirements.txt")):
                run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", requirements,
                    timeout=timeout)  # fmt: skip
            (where / "ready").write_text("")
    return python
