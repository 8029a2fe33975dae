"""What `make run` and `make run-kind` print for a person: commands with the project's kubectl (the
one on PATH may be versions away from the cluster), and for an image pull failure, what to run."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

from envtest import binaries, pins
from mysql_operator.database.images import MYSQL_ENV, Images

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


run = _load("run")
run_kind = _load("run_kind")
KUBECTL = "/cache/k8s/1.37.2-linux-amd64/kubectl"


def _commands(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in text.splitlines()[1:]]


@pytest.mark.parametrize("outcome", ["Running", "deleted"])
def test_every_printed_kubectl_is_the_projects(outcome: str, tmp_path: Path) -> None:
    text = run.hints(outcome, "sample", tmp_path / "kube config", KUBECTL, tmp_path / "op.log")
    commands = _commands(text)
    assert commands[0] == ["export", f"KUBECONFIG={tmp_path / 'kube config'}"]
    assert [c[0] for c in commands] == ["export", *[KUBECTL] * (len(commands) - 2), "tail"], text
    applies = [c for c in commands if c[1:2] == ["apply"]]
    if outcome == "deleted":
        assert text.startswith("sample was deleted.")
        assert applies == [[KUBECTL, "apply", "-n", "default", "-f", str(run.SAMPLE)]]
    else:
        assert text.startswith("the sample is Running.")
        assert applies == []
    patch = next(c for c in commands if c[1:2] == ["patch"])
    assert patch[-1] == '{"spec":{"replicas":3}}'


def _install_kubectl(version: str) -> Path:
    path = binaries.cache_dir(version) / "kubectl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("TEST_ASSET_KUBECTL", "KUBEBUILDER_ASSETS", "ENVTEST_K8S_VERSION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_run_kind_prints_the_kubectl_of_the_clusters_version_when_cached(empty_cache: Path) -> None:
    _install_kubectl(pins.PINNED.kubernetes)
    exact = _install_kubectl("1.36.4")
    assert run_kind.project_kubectl("1.36.4") == str(exact)


def test_run_kind_falls_back_to_the_pinned_kubectl_then_to_a_bare_name(empty_cache: Path) -> None:
    assert run_kind.project_kubectl("1.36.4") == "kubectl"  # nothing installed: still a command
    pinned = _install_kubectl(pins.PINNED.kubernetes)
    assert run_kind.project_kubectl("1.36.4") == str(pinned)


def test_pull_hint_without_standins_says_how_make_run_kind_sets_them() -> None:
    hint = run_kind.pull_hint("envtest", {})
    assert f"{MYSQL_ENV} is not set" in hint
    assert "`make run-kind` loads the test kit's stand-ins" in hint
    assert f"{shlex.quote(sys.executable)} tests/kit/standins.py env --name envtest" in hint


def test_pull_hint_with_standins_set_says_to_load_them() -> None:
    hint = run_kind.pull_hint("dev", {MYSQL_ENV: "envtest.local/mysql-standin"})
    assert f"{MYSQL_ENV}=envtest.local/mysql-standin" in hint
    assert "`make kind-standins` loads the stand-ins into cluster 'dev'" in hint


@pytest.mark.parametrize(
    ("image", "asked"),
    [
        ("envtest.local/mysql-standin:8.0", True),
        ("envtest.local/mysql-standin:8.4", True),
        ("envtest.local/busybox:1.35.0", True),
        ("mysql:8.0", False),
        ("busybox:1.36", False),
    ],
)
def test_the_images_the_operator_asks_for_follow_the_environment_it_was_given(
    image: str, asked: bool
) -> None:
    configured = Images(mysql_repository="envtest.local/mysql-standin", backup="envtest.local/busybox:1.35.0")
    assert run.wanted(image, configured) is asked
    assert run.wanted("mysql:8.0", Images()) is True  # the defaults: Docker Hub's
