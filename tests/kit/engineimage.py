"""The real database for offline kind clusters: MariaDB from Debian's packages, built here.

No MySQL server package is reachable from an offline machine; Debian's ``mariadb-server`` (10.11 on
bookworm) is, through the same package mirror the offline node image is built from. The recipe is
``tests/kit/mariadb/`` (a Dockerfile on envtest's debootstrapped base, and an entrypoint with the
official image's contract). The image is tagged ``envtest.local/mariadb:<series>`` — the operator
asks for ``<repository>:<spec.version>`` — and labelled with the hash of its recipe: an unchanged
recipe finds its image in docker and builds nothing; a changed one builds again (``docker build``
keeps the package layer cached while the Dockerfile's first lines are unchanged).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from envtest.binaries.nodeimage import images
from envtest.binaries.nodespec import NodeImageSpec
from envtest.errors import EnvtestError

Progress = Callable[[str], None]

RECIPE = Path(__file__).resolve().parent / "mariadb"
REPOSITORY = "envtest.local/mariadb"
SERIES = "10.11"
"""Debian bookworm's mariadb-server series: the tag, and the spec.version E2E clusters ask for."""
RECIPE_LABEL = "envtest.kit.recipe"


class EngineImageError(EnvtestError):
    """The database image cannot be built; the message says what to run."""


def tag() -> str:
    return f"{REPOSITORY}:{SERIES}"


def _dockerfile(base: str) -> str:
    text = (RECIPE / "Dockerfile").read_text()
    if "FROM ${BASE_IMAGE}" not in text:
        raise EngineImageError(f"{RECIPE / 'Dockerfile'}: expected a `FROM ${{BASE_IMAGE}}` line")
    return text.replace("FROM ${BASE_IMAGE}", f"FROM {base}")


def recipe_hash(base: str) -> str:
    digest = hashlib.sha256(_dockerfile(base).encode())
    digest.update((RECIPE / "docker-entrypoint.sh").read_bytes())
    return digest.hexdigest()[:16]


def _label(image: str) -> str | None:
    template = f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}'
    r = images.run(["docker", "image", "inspect", "--format", template, image])
    return r.out.strip() if r.rc == 0 else None


def build(progress: Progress) -> str:
    """The MariaDB image in docker (built when missing or when its recipe changed); its tag."""
    base = NodeImageSpec().base_image
    if not images.exists(base):
        raise EngineImageError(
            f"docker has no {base}, the database image's base: it is built with the offline node image "
            "(`envtest kind image build`, `make kind-image`)"
        )
    wanted = recipe_hash(base)
    if _label(tag()) == wanted:
        return tag()
    progress(f"image {tag()} (mariadb-server from Debian's packages; cold ≈ 2 min)")
    dockerfile = _dockerfile(base) + f'LABEL {RECIPE_LABEL}="{wanted}"\n'
    images.docker_build(tag(), dockerfile, {"docker-entrypoint.sh": RECIPE / "docker-entrypoint.sh"})
    return tag()
