"""The operator's images come from configuration (flags beat env beat defaults) and stay versioned."""

from __future__ import annotations

import pytest

from mysql_operator.database import images
from mysql_operator.database.images import Images


def test_images_come_from_the_environment_unless_flags_say_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(images.MYSQL_ENV, "registry.local/mysql")
    monkeypatch.setenv(images.BACKUP_ENV, "registry.local/busybox:1.36")
    from_env = Images.from_env()
    assert from_env.mysql("8.4") == "registry.local/mysql:8.4"
    assert from_env.backup == "registry.local/busybox:1.36"
    assert Images.from_env(backup="busybox:1.37").backup == "busybox:1.37"


@pytest.mark.parametrize("backup", ["busybox", "busybox:latest", "reg:5000/busybox"])
def test_unversioned_images_are_refused_so_local_images_are_never_pulled_always(backup: str) -> None:
    with pytest.raises(ValueError, match="version tag"):
        Images(backup=backup)


def test_pinned_digest_and_registry_port_are_versioned() -> None:
    Images(backup="reg:5000/busybox:1.36")
    Images(backup="busybox@sha256:" + "a" * 64)
