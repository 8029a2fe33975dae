"""The container images the operator puts into pods, from configuration as a deployed operator takes them:
flags (`--mysql-image`, `--mariadb-image`, `--backup-image`) beat environment variables
(MYSQL_OPERATOR_MYSQL_IMAGE, MYSQL_OPERATOR_MARIADB_IMAGE, MYSQL_OPERATOR_BACKUP_IMAGE), which beat
the defaults (Docker Hub's official `mysql` and `mariadb`). An air-gapped cluster or a kind cluster with
locally loaded images points these at its own registry or tags.

Every image must carry a version tag (or digest): Kubernetes then defaults imagePullPolicy to
IfNotPresent, so an image loaded into the node (`kind load docker-image`) is used as is, whereas
`:latest` or no tag would mean Always and a pull that fails offline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MYSQL_ENV = "MYSQL_OPERATOR_MYSQL_IMAGE"
MARIADB_ENV = "MYSQL_OPERATOR_MARIADB_IMAGE"
BACKUP_ENV = "MYSQL_OPERATOR_BACKUP_IMAGE"


def split_reference(image: str) -> tuple[str, str | None]:
    """(repository, tag) of an image reference: `registry:5000/mysql:8.4@sha256:…` → (`registry:5000/
    mysql`, `8.4`); the tag is None without one (a registry's port is no tag)."""
    name = image.split("@", 1)[0]
    if ":" not in name.rsplit("/", 1)[-1]:
        return name, None
    repository, tag = name.rsplit(":", 1)
    return repository, tag


def _check_versioned(image: str, what: str) -> str:
    tag = split_reference(image)[1]
    if "@" not in image and tag in (None, "latest"):
        raise ValueError(f"{what} {image!r} needs a version tag (untagged or :latest is pulled Always)")
    return image


@dataclass(frozen=True)
class Images:
    mysql_repository: str = "mysql"
    """Repository of the mysql engine's image; the tag is the cluster's `spec.version`."""
    mariadb_repository: str = "mariadb"
    """Repository of the mariadb engine's image; the tag is the cluster's `spec.version`."""
    backup: str = "busybox:1.36"
    """Image of the final-backup Job (tar and find with no surprises)."""

    def __post_init__(self) -> None:
        _check_versioned(self.backup, "backup image")
        for engine, repository in (("mysql", self.mysql_repository), ("mariadb", self.mariadb_repository)):
            if ":" in repository.rsplit("/", 1)[-1]:
                raise ValueError(f"{engine} image {repository!r}: give a repository; the tag is spec.version")

    def database(self, engine: str, version: str) -> str:
        """The image of `engine` (spec.engine) at `version` (its tag)."""
        repository = self.mariadb_repository if engine == "mariadb" else self.mysql_repository
        return f"{repository}:{version}"

    def mysql(self, version: str) -> str:
        return self.database("mysql", version)

    @classmethod
    def from_env(
        cls, mysql: str | None = None, backup: str | None = None, mariadb: str | None = None
    ) -> Images:
        defaults = cls()
        return cls(
            mysql_repository=mysql or os.environ.get(MYSQL_ENV) or defaults.mysql_repository,
            mariadb_repository=mariadb or os.environ.get(MARIADB_ENV) or defaults.mariadb_repository,
            backup=backup or os.environ.get(BACKUP_ENV) or defaults.backup,
        )


_current: Images | None = None


def current() -> Images:
    """The configured images (from the environment until `configure` is called)."""
    return _current or Images.from_env()


def configure(images: Images) -> None:
    """Set by `python -m mysql_operator run` from its flags."""
    global _current
    _current = images
