"""Which node image a new kind cluster gets (`envtest.kindimage.choose`), with a fake docker: one that
docker has or can pull, else the offline one if it is built, else an error at once that names the
command building it. Never a build, never a host change — and the plugin never loads the builder."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from envtest import kindimage
from envtest.binaries.nodespec import NodeImageSpec
from envtest.pins import PINNED, for_minor

PUBLISHED = PINNED.kind_node_image
OFFLINE = NodeImageSpec().tag()
NO_REGISTRY = "Error response from daemon: Get https://registry-1.docker.io/v2/: dial tcp: no route to host"


class FakeDocker:
    """`docker info|image inspect|pull` answered from sets; every call recorded as (argv, timeout)."""

    def __init__(
        self, present: Sequence[str] = (), pullable: Sequence[str] = (), running: bool = True
    ) -> None:
        self.present, self.pullable, self.running = set(present), set(pullable), running
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        argv = list(argv)
        self.calls.append((argv, timeout))
        if argv[1] == "info":
            return (0, "") if self.running else (1, "Cannot connect to the Docker daemon")
        if argv[1:3] == ["image", "inspect"]:
            return (0, "") if argv[-1] in self.present else (1, f"Error: No such image: {argv[-1]}")
        if argv[1] == "pull":
            return (0, "") if argv[-1] in self.pullable else (1, f"pulling...\n{NO_REGISTRY}")
        raise AssertionError(f"unexpected docker call {argv}")

    def verbs(self) -> list[str]:
        return [" ".join(a[1:3]) if a[1] == "image" else a[1] for a, _ in self.calls]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVTEST_KIND_IMAGE", raising=False)
    monkeypatch.delenv("ENVTEST_OFFLINE", raising=False)


def test_published_image_docker_has_is_used_without_pulling() -> None:
    docker = FakeDocker(present=[PUBLISHED])
    assert kindimage.choose(docker=docker) == PUBLISHED
    assert docker.verbs() == ["info", "image inspect"]


def test_published_image_is_pulled_within_the_pull_timeout() -> None:
    docker = FakeDocker(pullable=[PUBLISHED])
    assert kindimage.choose(docker=docker, pull_timeout=12.0) == PUBLISHED
    assert (["docker", "pull", PUBLISHED], 12.0) in docker.calls


def test_unpullable_published_image_falls_back_to_a_built_offline_image() -> None:
    said: list[str] = []
    docker = FakeDocker(present=[OFFLINE])
    assert kindimage.choose(docker=docker, progress=said.append) == OFFLINE
    assert any("no route to host" in line and OFFLINE in line for line in said)


def test_nothing_to_use_fails_at_once_with_the_pull_error_and_the_build_command() -> None:
    docker = FakeDocker()
    with pytest.raises(kindimage.NodeImageUnavailable) as caught:
        kindimage.choose(docker=docker)
    message = str(caught.value)
    assert NO_REGISTRY in message and OFFLINE in message
    assert f"{sys.executable} -m envtest.cli kind image build" in message
    assert docker.verbs() == ["info", "image inspect", "pull", "image inspect"]  # and nothing else


def test_offline_mode_never_pulls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVTEST_OFFLINE", "1")
    docker = FakeDocker(present=[OFFLINE], pullable=[PUBLISHED])
    assert kindimage.choose(docker=docker) == OFFLINE
    assert "pull" not in docker.verbs()


def test_an_image_asked_for_is_used_when_present_or_pullable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kindimage.choose("my/node:v1", docker=FakeDocker(present=["my/node:v1"])) == "my/node:v1"
    monkeypatch.setenv("ENVTEST_KIND_IMAGE", "env/node:v2")
    assert kindimage.choose(docker=FakeDocker(pullable=["env/node:v2"])) == "env/node:v2"


def test_an_image_asked_for_is_never_swapped_for_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVTEST_KIND_IMAGE", "kindest/node:v1.30.0")
    docker = FakeDocker(present=[OFFLINE, PUBLISHED])
    with pytest.raises(kindimage.NodeImageUnavailable, match=r"kindest/node:v1\.30\.0 .*no route to host"):
        kindimage.choose(docker=docker)


def test_docker_not_running_names_host_setup_and_starts_nothing() -> None:
    docker = FakeDocker(present=[PUBLISHED], running=False)
    with pytest.raises(kindimage.DockerNotRunning, match=r"-m envtest\.cli kind host-setup"):
        kindimage.choose(docker=docker)
    assert docker.verbs() == ["info"]


# -- one image per Kubernetes minor ------------------------------------------------------------------

OLDEST = for_minor("1.35")
OLDEST_OFFLINE = NodeImageSpec.for_version("1.35").tag()


def test_the_selected_minors_published_image_is_used_not_the_newest() -> None:
    docker = FakeDocker(present=[PUBLISHED, OLDEST.kind_node_image])
    assert kindimage.choose(version="1.35.8", docker=docker) == OLDEST.kind_node_image


def test_the_selected_minors_offline_image_is_the_fallback_not_the_newest() -> None:
    docker = FakeDocker(present=[PUBLISHED, OFFLINE, OLDEST_OFFLINE])
    assert kindimage.choose(version="1.35", docker=docker) == OLDEST_OFFLINE
    assert (["docker", "pull", OLDEST.kind_node_image], kindimage.PULL_TIMEOUT) in docker.calls


def test_no_image_of_the_selected_minor_names_its_build_command_even_with_the_newest_present() -> None:
    docker = FakeDocker(present=[PUBLISHED, OFFLINE])
    with pytest.raises(kindimage.NodeImageUnavailable) as caught:
        kindimage.choose(version="1.35", docker=docker)
    message = str(caught.value)
    assert OLDEST.kind_node_image in message and OLDEST_OFFLINE in message
    assert f"{sys.executable} -m envtest.cli kind image build --k8s-version 1.35`" in message


def test_an_unsupported_minor_is_refused_naming_the_supported_ones() -> None:
    with pytest.raises(kindimage.NodeImageUnavailable, match=r"1\.30.*1\.35, 1\.36, 1\.37"):
        kindimage.choose(version="1.30", docker=FakeDocker(present=[PUBLISHED]))


# -- the plugin stays off the builder -------------------------------------------------------------------

PROBE = """
import json, sys
from pathlib import Path
import envtest.plugin, envtest.plugin.session, envtest.clusters, envtest.kind, envtest.kindimage
tag = envtest.kindimage.offline_tag()
rendered = envtest.kind.offline_config(envtest.kind.DEFAULT_CONFIG, tag, "probe")
print(json.dumps({
    "builder": sorted(m for m in sys.modules if m.startswith("envtest.binaries.nodeimage")),
    "tag": tag,
    "rendered": str(rendered),
}))
"""


def test_plugin_and_kind_backend_never_import_the_image_builder(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["builder"] == []
    assert seen["tag"] == OFFLINE  # the recipe alone gives the builder's tag
    assert "disableDefaultCNI: true" in Path(seen["rendered"]).read_text()
