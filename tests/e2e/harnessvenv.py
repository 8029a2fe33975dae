"""A virtualenv holding the harness's own wheel and nothing else of this repository — what
`pip install 'kube-envtest[kopf,async]'` gives a stranger — built once per run and shared by the xdist
workers (under a lock beside the run's base temp dir): a fresh venv costs a wheel build and a minute
of pip, which every test that needs one would otherwise pay again."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str | Path, timeout: float, cwd: Path | None = None) -> str:
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert out.returncode == 0, f"{argv}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def harness_wheel(dest: Path, *, timeout: float) -> Path:
    """kube-envtest's wheel, built from a copy of envtest/ (a build in the tree leaves build/ there)."""
    source = dest / "src"
    shutil.copytree(
        ROOT / "envtest", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    run(sys.executable, "-m", "build", "--wheel", "--outdir", dest, source, timeout=timeout)
    (wheel,) = dest.glob("kube_envtest-*.whl")
    return wheel


def shared_python(
    base: Path, *, extras: str = "kopf,async", requirements: Sequence[Path] = (), timeout: float
) -> Path:
    """The python of the run's harness-only venv (made by the first caller, reused by the rest)."""
    folder = base / "harness-venv"
    python = folder / "bin" / "python"
    with FileLock(str(base / "harness-venv.lock")):
        if (folder / "ready").exists():
            return python
        shutil.rmtree(folder, ignore_errors=True)  # half made by a run that died
        wheel = harness_wheel(base / "harness-wheel", timeout=timeout)
        venv.create(folder, with_pip=True)
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        run(
            *pip, f"{wheel}[{extras}]", *(arg for req in requirements for arg in ("-r", req)), timeout=timeout
        )
        (folder / "ready").write_text(str(wheel))
    return python
