"""The operator's test kit (tests/kit/standins.py) decides from the cluster's node image whether the
operator needs stand-ins: only a cluster from envtest's offline image (no registry) does. Docker and
kind are faked here; the stand-in itself runs for real in test_mysqlstandin.py."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from envtest.binaries.nodeimage.host import Result
from envtest.binaries.nodespec import NodeImageSpec
from envtest.pins import PINNED
from mysql_operator.database.images import BACKUP_ENV, MARIADB_ENV, MYSQL_ENV

KIT = Path(__file__).resolve().parents[1] / "kit"
_spec = importlib.util.spec_from_file_location("standins", KIT / "standins.py")
assert _spec and _spec.loader
standins = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(KIT))  # the kit's scripts import their siblings, as when run from their folder
try:
    _spec.loader.exec_module(standins)
finally:
    sys.path.remove(str(KIT))


def _node_runs(monkeypatch: pytest.MonkeyPatch, image: str | None) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: Sequence[str], timeout: float | None = 300) -> Result:
        calls.append(list(argv))
        if image is None:
            return Result(1, "", "Error: No such object: envtest-control-plane")
        return Result(0, image + "\n", "")

    monkeypatch.setattr(standins.images, "run", run)
    return calls


def test_env_points_the_operator_at_the_stand_ins_only_on_the_offline_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _node_runs(monkeypatch, NodeImageSpec().tag())
    assert standins.env("envtest") == {
        MYSQL_ENV: "envtest.local/mysql-standin",
        MARIADB_ENV: "envtest.local/mariadb",
        BACKUP_ENV: NodeImageSpec().busybox_image,
    }
    _node_runs(monkeypatch, PINNED.kind_node_image)
    assert standins.env("envtest") == {}


def test_a_cluster_that_pulls_real_images_gets_nothing_built_or_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _node_runs(monkeypatch, PINNED.kind_node_image)
    monkeypatch.setattr(
        standins, "build", lambda *a, **k: pytest.fail("built stand-ins for a published image")
    )
    assert standins.load("envtest", progress=lambda _m: None) == []
    assert calls == [["docker", "inspect", "-f", "{{.Config.Image}}", "envtest-control-plane"]]


def test_a_missing_cluster_names_the_command_that_makes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _node_runs(monkeypatch, None)
    with pytest.raises(standins.KitError, match=r"no kind cluster 'envtest'.*make kind-up"):
        standins.env("envtest")


def test_stand_ins_need_the_busybox_the_offline_image_build_leaves_in_docker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(standins.images, "exists", lambda tag, runner=None: False)
    with pytest.raises(standins.KitError, match=r"envtest\.local/busybox.*envtest kind image build"):
        standins.build(progress=lambda _m: None)


def test_every_mysql_version_the_suite_uses_gets_a_tag() -> None:
    assert standins.mysql_images() == ["envtest.local/mysql-standin:8.0", "envtest.local/mysql-standin:8.4"]
