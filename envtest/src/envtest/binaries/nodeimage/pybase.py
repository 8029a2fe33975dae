"""A Python base image for `docker build` where no registry (and no package index) is reachable.

``FROM python:3.11-slim`` needs Docker Hub and ``pip install .`` in the build needs an index; here
neither is there. This image is Debian's own python3 (3.11 on bookworm) on the debootstrapped base,
with a venv first on PATH (so ``pip``/``python`` are the venv's and PEP 668 does not apply), and a
wheelhouse of the project's dependencies plus its build backend, built on this machine with the
host's pip (which reaches the index, or its find-links). ``PIP_NO_INDEX=1`` + ``PIP_FIND_LINKS``
make an unchanged ``RUN pip install .`` install from that wheelhouse only.

Use: ``docker build --build-arg BASE_IMAGE=$(envtest kind image pybase DIR) …``, DIR holding the
pyproject.toml of what the image installs.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from envtest.binaries.nodeimage.host import run
from envtest.binaries.nodeimage.images import check, docker_build, exists
from envtest.binaries.nodespec import NodeImageSpec
from envtest.errors import InstallError

Progress = Callable[[str], None]

DOCKERFILE = """FROM {base}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
      python3 python3-venv passwd ca-certificates && rm -rf /var/lib/apt/lists/* \\
 && python3 -m venv /opt/venv
COPY wheels/ /wheels/
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
"""
BUILD_BACKEND = ("setuptools", "wheel")


def wheelhouse(project: Path, out: Path, progress: Progress) -> None:
    """Wheels of the project's dependencies and its build backend (the project's own wheel lands
    there too; the image's Dockerfile still installs the project from its source)."""
    progress(f"pip wheel {project} (dependencies and build backend)")
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(out), str(project), *BUILD_BACKEND]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InstallError(f"pip wheel exited {proc.returncode}:\n{proc.stderr.strip()[-1500:]}")


def build(project: Path, progress: Progress, spec: NodeImageSpec | None = None) -> str:
    """The base image's tag (built when missing), keyed by the Dockerfile and the project's pyproject."""
    spec = spec or NodeImageSpec()
    dockerfile = DOCKERFILE.format(base=spec.base_image)
    digest = hashlib.sha256((dockerfile + (project / "pyproject.toml").read_text()).encode()).hexdigest()[:12]
    tag = f"envtest.local/python:3-{spec.versions.debian_suite}-{digest}"
    if exists(tag):
        return tag
    if not exists(spec.base_image):
        from envtest.binaries.nodeimage import assemble

        with tempfile.TemporaryDirectory(prefix="envtest-pybase-") as work:
            assemble.base_image(spec, Path(work), progress)
    with tempfile.TemporaryDirectory(prefix="envtest-wheels-") as wd:
        wheels = Path(wd)
        wheelhouse(project, wheels, progress)
        files: dict[str, Path | str] = {f"wheels/{w.name}": w for w in wheels.glob("*.whl")}
        if not files:
            raise InstallError(f"pip wheel {project} produced no wheels")
        progress(f"python base image {tag} ({len(files)} wheels)")
        docker_build(tag, dockerfile, files)
    check_python = [
        "docker",
        "run",
        "--rm",
        "--entrypoint",
        "python",
        tag,
        "-c",
        "import sys; print(sys.version)",
    ]
    check(run(check_python), "python in the base image")
    return tag
