"""The kind backend on the real pytest-kind-ng API, with fake `kind`/`docker` binaries standing in for
docker (tests/unit/kind_fakes.py). Under CI=true a missing `[kind]` extra fails instead of skipping."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kind_fakes import READY_OBJECTS, FakeKind, ready_apiserver

from envtest import kind
from envtest.binaries import PINNED
from envtest.binaries import kind as kind_binary
from envtest.binaries.nodespec import NodeImageSpec
from envtest.errors import BinaryNotFound, EnvtestError, StartTimeout, UsageProblem
from envtest.kindimage import DockerNotRunning, NodeImageUnavailable
from envtest.pins import for_minor

if os.environ.get("CI") == "true":
    import pytest_kind  # the kind job and `make unit` in CI must never skip these silently
else:
    pytest_kind = pytest.importorskip("pytest_kind")

pytest_plugins = ["pytester"]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKind:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # pytest-kind-ng makes ./.pytest-kind/<name> in the working directory
    monkeypatch.delenv("ENVTEST_KIND_IMAGE", raising=False)
    return FakeKind(tmp_path / "fake").install(monkeypatch)


# -- the kind binary ---------------------------------------------------------------------------------


def test_kind_bin_string_becomes_a_path_pytest_kind_can_use(fake: FakeKind) -> None:
    resolved = kind_binary.resolve(str(fake.kind))
    assert isinstance(resolved, Path)
    cluster = pytest_kind.KindCluster("x", kind_path=resolved)
    cluster.ensure_kind()  # would AttributeError on a str, or download v0.17.0 if it looked elsewhere
    assert not list(Path(".pytest-kind").rglob("kind-v*"))


def test_kind_on_path_is_used_when_no_kind_bin_is_given(fake: FakeKind) -> None:
    assert kind_binary.resolve() == fake.kind


def test_missing_kind_bin_is_an_error_naming_it(fake: FakeKind, tmp_path: Path) -> None:
    with pytest.raises(BinaryNotFound, match="no-such-kind"):
        kind_binary.resolve(tmp_path / "no-such-kind")


def test_without_kind_on_path_the_pinned_kind_is_built_with_go_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "go.log"
    go = bin_dir / "go"  # records how it was called and "builds" kind into $GOBIN
    go.write_text(
        f"#!{sys.executable}\nimport os, sys, json, pathlib\n"
        f"open({str(log)!r}, 'w').write(json.dumps([sys.argv[1:], os.environ.get('GOBIN'), "
        "os.environ.get('GOFLAGS')]))\n"
        "p = pathlib.Path(os.environ['GOBIN']) / 'kind'; p.write_text('#!/bin/sh\\n'); p.chmod(0o755)\n"
    )
    go.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))  # no kind here
    built = kind_binary.resolve(progress=lambda _m: None)
    import json

    argv, gobin, goflags = json.loads(log.read_text())
    assert argv == ["install", f"sigs.k8s.io/kind@v{PINNED.kind}"]
    assert Path(gobin) == built.parent == kind_binary.cache_bin_dir()
    assert goflags is None  # GOFLAGS=-mod=mod makes `go install pkg@version` refuse to run
    log.unlink()
    assert kind_binary.resolve() == built and not log.exists()  # cached: go is not run again


# -- reuse, stale, create ----------------------------------------------------------------------------


def test_running_cluster_is_reused_with_the_kubeconfig_kind_reports(fake: FakeKind) -> None:
    fake.set_clusters(envtest=True)
    cluster, created = kind.open_cluster("envtest", kind_path=fake.kind)
    assert not created
    assert "create cluster" not in fake.commands() and "delete cluster" not in fake.commands()
    text = Path(cluster.kubeconfig_path).read_text()
    assert "kind-envtest" in text  # not the empty file pytest-kind-ng alone would leave (and crash on)
    assert str(cluster.api.url).startswith("https://127.0.0.1:6443")


def test_stale_cluster_with_stopped_nodes_is_deleted_and_created_again(fake: FakeKind) -> None:
    fake.set_clusters(envtest=False)
    _, created = kind.open_cluster("envtest", kind_path=fake.kind)
    assert created
    lifecycle = [c for c in fake.commands() if c.endswith("cluster")]
    assert lifecycle == ["delete cluster", "create cluster"]
    assert fake.clusters() == {"envtest": {"running": True}}


@pytest.mark.parametrize(
    "error",
    [
        "Error response from daemon: i/o timeout",
        "error during connect: dial tcp: lookup dockerhost: no such host",
    ],
)
def test_a_node_docker_cannot_answer_for_is_no_stale_cluster_and_nothing_is_deleted(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    fake.set_clusters(envtest=True)
    monkeypatch.setenv("FAKE_DOCKER_INSPECT_ERROR", error)
    with pytest.raises(EnvtestError, match=re.escape(error)):
        kind.open_cluster("envtest", kind_path=fake.kind)
    assert not [c for c in fake.commands() if c.endswith("cluster")], "a busy daemon must not cost a cluster"
    assert fake.clusters() == {"envtest": {"running": True}}


def test_new_cluster_gets_the_pinned_node_image_and_the_project_config(fake: FakeKind) -> None:
    kind.open_cluster("envtest", kind_path=fake.kind, record=False)
    create = next(argv for argv in fake.calls() if argv[:2] == ["create", "cluster"])
    assert f"--image={PINNED.kind_node_image}" in create
    assert create[create.index("--config") + 1] == str(kind.DEFAULT_CONFIG)


def test_new_cluster_gets_the_project_config_with_the_records_audit_log(fake: FakeKind) -> None:
    kind.open_cluster("envtest", kind_path=fake.kind)
    create = next(argv for argv in fake.calls() if argv[:2] == ["create", "cluster"])
    rendered = yaml.safe_load(Path(create[create.index("--config") + 1]).read_text())
    project = yaml.safe_load(kind.DEFAULT_CONFIG.read_text())
    assert (
        rendered["kubeadmConfigPatches"][: len(project["kubeadmConfigPatches"])]
        == project["kubeadmConfigPatches"]
    )
    assert "audit-log-path" in rendered["kubeadmConfigPatches"][-1]
    assert kind.audit_log("envtest")[0] == kind.audit_dir("envtest") / "audit.log"


def test_node_image_from_the_environment_beats_the_pin(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVTEST_KIND_IMAGE", "kindest/node:local")
    monkeypatch.setenv("FAKE_DOCKER_IMAGES", "kindest/node:local")
    kind.open_cluster("envtest", kind_path=fake.kind)
    assert any("--image=kindest/node:local" in argv for argv in fake.calls())


def test_no_image_to_use_fails_before_kind_creates_anything(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_IMAGES", "")  # neither the pinned nor the offline image, no registry
    with pytest.raises(NodeImageUnavailable, match=r"no such host.*-m envtest\.cli kind image build"):
        kind.open_cluster("envtest", kind_path=fake.kind)
    assert fake.commands() == ["get clusters"]


def test_docker_not_running_fails_naming_host_setup_before_kind_runs(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_DOWN", "1")
    with pytest.raises(DockerNotRunning, match=r"-m envtest\.cli kind host-setup"):
        kind.open_cluster("envtest", kind_path=fake.kind)
    assert fake.commands() == []


# -- one Kubernetes minor per cluster ---------------------------------------------------------------


def _created_image(fake: FakeKind) -> str:
    create = next(argv for argv in fake.calls() if argv[:2] == ["create", "cluster"])
    return next(a.split("=", 1)[1] for a in create if a.startswith("--image="))


@pytest.mark.parametrize("selector", ["1.35", "1.35.x", "1.35.8"])
def test_new_cluster_gets_the_published_image_of_the_selected_minor(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch, selector: str
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_IMAGES", f"{PINNED.kind_node_image},{for_minor('1.35').kind_node_image}")
    kind.open_cluster("envtest", kind_path=fake.kind, version=selector)
    assert _created_image(fake) == for_minor("1.35").kind_node_image


def test_envtest_k8s_version_selects_the_minor_when_none_is_passed(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVTEST_K8S_VERSION", "1.36")
    monkeypatch.setenv("FAKE_DOCKER_IMAGES", f"{PINNED.kind_node_image},{for_minor('1.36').kind_node_image}")
    kind.open_cluster("envtest", kind_path=fake.kind)
    assert _created_image(fake) == for_minor("1.36").kind_node_image


def test_offline_image_of_the_selected_minor_gets_that_minors_kubeadm_tags(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline = NodeImageSpec.for_version("1.35").tag()
    # the newest minor's images are there too: they must not stand in for the minor asked for
    monkeypatch.setenv("FAKE_DOCKER_IMAGES", f"{PINNED.kind_node_image},{NodeImageSpec().tag()},{offline}")
    kind.open_cluster("envtest", kind_path=fake.kind, version="1.35")
    create = next(argv for argv in fake.calls() if argv[:2] == ["create", "cluster"])
    assert f"--image={offline}" in create
    config = yaml.safe_load(Path(create[create.index("--config") + 1]).read_text())
    patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
    cluster = next(p for p in patches if p.get("kind") == "ClusterConfiguration")
    assert (cluster["etcd"]["local"]["imageTag"], cluster["dns"]["imageTag"]) == ("3.6.6", "v1.13.1")


def test_running_cluster_of_another_minor_is_refused_with_the_commands_that_replace_it(
    fake: FakeKind,
) -> None:
    fake.set_clusters(envtest=True, version="v1.37.0")
    with pytest.raises(UsageProblem) as info:
        kind.open_cluster("envtest", kind_path=fake.kind, version="1.35")
    message = str(info.value)
    assert "running Kubernetes 1.37.0, but 1.35.8 (minor 1.35)" in message
    assert "-m envtest.cli kind down --name envtest && " in message
    assert "-m envtest.cli kind up --name envtest --k8s-version 1.35`" in message
    assert not {"create cluster", "delete cluster", "get kubeconfig"} & set(fake.commands())


def test_running_cluster_of_the_selected_minor_is_reused_whatever_its_patch(fake: FakeKind) -> None:
    fake.set_clusters(envtest=True, version="v1.37.0")  # kind publishes 1.37.0; the local pin is 1.37.2
    _, created = kind.open_cluster("envtest", kind_path=fake.kind, version="1.37.2")
    assert not created


def test_an_image_asked_for_decides_the_version_of_a_running_cluster(
    fake: FakeKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.set_clusters(envtest=True, version="v1.36.4")
    monkeypatch.setenv("ENVTEST_KIND_IMAGE", "kindest/node:v1.36.4")
    _, created = kind.open_cluster("envtest", kind_path=fake.kind, version="1.37")
    assert not created


def test_kind_image_tag_prints_the_recipe_of_the_minor_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    from envtest import cli

    assert cli.main(["kind", "image", "tag", "--k8s-version", "1.36"]) == 0
    assert capsys.readouterr().out.strip() == NodeImageSpec.for_version("1.36").tag()


def test_project_kind_config_is_one_untainted_node_without_an_image() -> None:
    import yaml

    config = yaml.safe_load(kind.DEFAULT_CONFIG.read_text())
    assert config["nodes"] == [{"role": "control-plane"}]  # image: from the pin; taint: kind drops it


# -- readiness ---------------------------------------------------------------------------------------


def _getter(objects: dict[str, Any]) -> kind.Getter:
    return lambda path: objects.get("/" + path)


def test_cluster_with_ready_node_coredns_storageclass_and_serviceaccount_is_ready() -> None:
    assert kind.readiness_problems(_getter(READY_OBJECTS)) == []


def test_wait_ready_times_out_naming_everything_still_missing() -> None:
    objects = dict(READY_OBJECTS)
    del objects["/apis/apps/v1/namespaces/kube-system/deployments/coredns"]
    objects["/apis/storage.k8s.io/v1/storageclasses"] = {"items": []}
    now = [0.0]
    with pytest.raises(StartTimeout) as err:
        kind.wait_ready(
            _getter(objects),
            name="envtest",
            timeout=10,
            clock=lambda: now[0],
            sleep=lambda s: now.__setitem__(0, now[0] + s),
        )
    assert "CoreDNS" in str(err.value) and "StorageClass" in str(err.value)
    assert "nodes" not in str(err.value)


def test_wait_ready_returns_once_the_node_turns_ready() -> None:
    calls = [0]
    not_ready = {"items": [{"metadata": {"name": "n"}, "status": {"conditions": []}}]}

    def get(path: str) -> Any:
        if path == "api/v1/nodes":
            calls[0] += 1
            return READY_OBJECTS["/api/v1/nodes"] if calls[0] >= 3 else not_ready
        return READY_OBJECTS.get("/" + path)

    kind.wait_ready(get, name="envtest", timeout=60, sleep=lambda _s: None)
    assert calls[0] == 3


# -- settings: pytest-kind-ng's options next to ours -------------------------------------------------


def test_pytest_kind_defaults_do_not_override_ours(pytester: pytest.Pytester) -> None:
    from envtest.plugin import settings

    pytester.makeini("[pytest]\nenvtest_cluster_name = mine\n")
    resolved = settings.resolve(pytester.parseconfigure())
    assert resolved.cluster_name == "mine"  # not pytest-kind-ng's default `pytest-kind`
    assert resolved.keep is False and resolved.kind_bin is None and resolved.kind_image is None


def test_pytest_kind_options_given_by_the_user_are_honoured(pytester: pytest.Pytester) -> None:
    from envtest.plugin import settings

    config = pytester.parseconfigure(
        "--cluster-name=theirs", "--keep-cluster", "--kind-bin=~/bin/kind", "--kind-image=kindest/node:x"
    )
    resolved = settings.resolve(config)
    assert (resolved.cluster_name, resolved.keep) == ("theirs", True)
    assert resolved.kind_bin == Path("~/bin/kind").expanduser()
    assert resolved.kind_image == "kindest/node:x"


def test_envtest_kind_image_beats_pytest_kinds(pytester: pytest.Pytester) -> None:
    from envtest.plugin import settings

    config = pytester.parseconfigure("--kind-image=a", "--envtest-kind-image=b")
    assert settings.resolve(config).kind_image == "b"


# -- the whole backend under xdist ------------------------------------------------------------------


KIND_SUITE = """
    import pytest

    @pytest.mark.parametrize("i", range(4))
    def test_uses_the_kind_cluster(cluster, i):
        assert cluster.backend == "kind" and cluster.version == "1.37.0"
        assert cluster.session.get(f"{cluster.server}/api/v1/nodes", timeout=5).ok
"""


@pytest.mark.parametrize(("keep", "deletes"), [(False, 1), (True, 0)], ids=["deleted", "kept"])
def test_xdist_run_creates_the_cluster_once_and_only_the_controller_deletes_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, keep: bool, deletes: int
) -> None:
    fake = FakeKind(pytester.path / "fake")
    with ready_apiserver() as server:
        fake.install(monkeypatch, server=server)
        pytester.makepyfile(KIND_SUITE)
        args = ["-n", "2", "-p", "no:cacheprovider", "--envtest-backend=kind"]
        result = pytester.runpytest_subprocess(*args, *(["--envtest-keep"] if keep else []))
    result.assert_outcomes(passed=4)
    commands = fake.commands()
    assert commands.count("create cluster") == 1
    assert commands.count("delete cluster") == deletes
    assert fake.clusters() == ({"envtest": {"running": True}} if keep else {})


def test_a_run_without_a_usable_node_image_errors_at_once_and_builds_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeKind(pytester.path / "fake")
    fake.install(monkeypatch)
    monkeypatch.setenv("FAKE_DOCKER_IMAGES", "")
    pytester.makepyfile(KIND_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--envtest-backend=kind")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*NodeImageUnavailable*-m envtest.cli kind image build*"])
    assert "create cluster" not in fake.commands()


def test_a_cluster_found_running_is_left_running(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeKind(pytester.path / "fake")
    fake.set_clusters(envtest=True)  # e.g. from `make kind-up`
    with ready_apiserver() as server:
        fake.install(monkeypatch, server=server)
        pytester.makepyfile(KIND_SUITE)
        result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--envtest-backend=kind")
    result.assert_outcomes(passed=4)
    assert "create cluster" not in fake.commands() and "delete cluster" not in fake.commands()


def test_a_run_asking_for_another_minor_than_the_running_cluster_fails_and_leaves_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeKind(pytester.path / "fake")
    fake.set_clusters(envtest=True, version="v1.37.0")
    with ready_apiserver() as server:
        fake.install(monkeypatch, server=server)
        pytester.makepyfile(KIND_SUITE)
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--envtest-backend=kind", "--envtest-k8s-version=1.36"
        )
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*running Kubernetes 1.37.0, but 1.36.4*kind up --name envtest --k8s-version 1.36*"]
    )
    assert fake.clusters() == {"envtest": {"running": True, "version": "v1.37.0"}}
    assert "create cluster" not in fake.commands() and "delete cluster" not in fake.commands()
