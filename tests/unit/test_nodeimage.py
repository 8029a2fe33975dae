"""The offline kind node image's pure parts: its tag, rendered configs, and the host decisions
(host setup itself, with a fake docker: test_host_setup.py; which image a cluster gets: test_kindimage.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from envtest import kind
from envtest.binaries import nodespec as spec
from envtest.binaries.nodeimage import builds, host
from envtest.binaries.nodeimage.host import HostError, Result
from envtest.errors import ConfigError
from envtest.pins import PINNED, SUPPORTED, MinorPins

# -- tag -----------------------------------------------------------------------------------------


def test_tag_is_stable_and_names_the_kubernetes_version() -> None:
    a, b = spec.NodeImageSpec(), spec.NodeImageSpec()
    assert a.tag() == b.tag()
    assert a.tag().startswith(f"envtest.local/kind-node:v{PINNED.kubernetes}-")
    assert spec.is_offline_image(a.tag()) and not spec.is_offline_image(PINNED.kind_node_image)


def test_tag_changes_with_any_pin() -> None:
    base = spec.NodeImageSpec()
    bumped = dataclasses.replace(base, versions=dataclasses.replace(PINNED, containerd="9.9.9"))
    assert bumped.tag() != base.tag()


def test_tag_changes_when_a_go_source_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    before = spec.NodeImageSpec().tag()
    original = spec.go_sources()
    monkeypatch.setattr(spec, "go_sources", lambda: {**original, "pause/main.go": "package main // edited"})
    assert spec.NodeImageSpec().tag() != before


# -- one recipe per Kubernetes minor -----------------------------------------------------------------


def test_the_newest_minors_recipe_is_the_default_so_its_built_image_keeps_its_tag() -> None:
    assert spec.NodeImageSpec.for_version() == spec.NodeImageSpec()
    assert spec.NodeImageSpec.for_version(SUPPORTED[-1].minor).tag() == spec.NodeImageSpec().tag()


@pytest.mark.parametrize("pins", SUPPORTED, ids=lambda p: p.minor)
def test_each_minors_recipe_carries_its_own_pins(pins: MinorPins) -> None:
    s = spec.NodeImageSpec.for_version(f"{pins.minor}.x")
    assert s.tag().startswith(f"envtest.local/kind-node:v{pins.kubernetes}-")
    assert spec.offline_image_version(s.tag()) == pins.kubernetes
    assert (s.versions.etcd, s.versions.coredns, s.versions.cri_tools) == (
        pins.etcd,
        pins.coredns,
        pins.cri_tools,
    )
    assert f'sandbox_image = "registry.k8s.io/pause:{pins.pause}"' in s.texts()["containerd/config.toml"]
    assert spec.kubeadm_patches(s) == [
        {
            "kind": "ClusterConfiguration",
            "etcd": {"local": {"imageTag": pins.etcd}},
            "dns": {"imageTag": f"v{pins.coredns}"},
        }
    ]


def test_every_minor_has_its_own_offline_image() -> None:
    tags = {spec.NodeImageSpec.for_version(p.kubernetes).tag() for p in SUPPORTED}
    assert len(tags) == len(SUPPORTED)


def test_an_unsupported_minor_has_no_recipe() -> None:
    with pytest.raises(ConfigError, match=r"1\.30.*supported minors 1\.35, 1\.36, 1\.37"):
        spec.NodeImageSpec.for_version("1.30.1")


def test_every_go_source_ships_as_package_data() -> None:
    names = {k.split("/")[0] for k in spec.go_sources()}
    assert names == set(spec.GO_SOURCES)
    assert all(f"{n}/go.mod" in spec.go_sources() for n in spec.GO_SOURCES)


# -- rendered configs ------------------------------------------------------------------------------


def test_kind_config_for_the_offline_image_keeps_the_users_patches() -> None:
    doc = yaml.safe_load(spec.kind_config(kind.DEFAULT_CONFIG.read_text(), spec.NodeImageSpec()))
    assert doc["networking"] == {"disableDefaultCNI": True, "podSubnet": spec.POD_SUBNET}
    patches = [yaml.safe_load(p) for p in doc["kubeadmConfigPatches"]]
    assert {"kind": "KubeletConfiguration", "failCgroupV1": False} in patches
    cluster = next(p for p in patches if p["kind"] == "ClusterConfiguration")
    assert cluster["etcd"]["local"]["imageTag"] == PINNED.etcd
    assert cluster["dns"]["imageTag"] == f"v{PINNED.coredns}"


def test_kind_config_refuses_more_nodes_than_the_static_cni_serves() -> None:
    two = (
        "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes: [{role: control-plane}, {role: worker}]\n"
    )
    with pytest.raises(ValueError, match="single-node"):
        spec.kind_config(two, spec.NodeImageSpec())


def test_containerd_runs_runc_through_capwrap_with_our_pause() -> None:
    text = spec.containerd_config("registry.k8s.io/pause:3.10.2")
    assert text.count('BinaryName = "/usr/local/bin/capwrap"') == 2
    assert 'sandbox_image = "registry.k8s.io/pause:3.10.2"' in text
    assert "fuse-overlayfs" not in text


def test_cni_range_is_the_nodes_share_of_the_pod_subnet() -> None:
    conf = json.loads(spec.cni_conflist())
    ranges = conf["plugins"][0]["ipam"]["ranges"]
    assert ranges == [[{"subnet": spec.NODE_POD_CIDR}]]
    assert spec.NODE_POD_CIDR.startswith(spec.POD_SUBNET.split("/")[0])


def test_storage_manifest_takes_kinds_text_with_our_images() -> None:
    go = (
        'const storageProvisionerImage = "docker.io/kindest/x"\n'
        "const defaultStorageManifest = `\nkind: Deployment\nimage: ` + storageProvisionerImage + `\n"
        "helper: ` + storageHelperImage + `\n`\n"
    )
    out = builds.render_storage_manifest(go, "envtest.local/lpp:v1", "envtest.local/busybox:1")
    assert out == "kind: Deployment\nimage: envtest.local/lpp:v1\nhelper: envtest.local/busybox:1\n"


def test_coredns_main_has_kubeadms_plugins_in_plugin_cfg_order() -> None:
    cfg = "# comment\nreload:reload\nready:ready\nerrors:errors\nlog:log\ncustom:example.com/x\n"
    main = builds.coredns_main(cfg, ("errors", "ready", "reload", "custom"))
    assert main.index('"reload",') < main.index('"ready",') < main.index('"errors",')
    assert '_ "example.com/x"' in main and "plugin/log" not in main
    with pytest.raises(Exception, match="no loop"):
        builds.coredns_main(cfg, ("loop",))


def test_the_node_preloads_nothing_of_any_project() -> None:
    s = spec.NodeImageSpec()
    assert s.workload_images() == [s.local_path_image, s.busybox_image]  # kind's default storage only
    assert set(s.dockerfiles()) == {
        "busybox", "pause", "scratch", "local-path-provisioner", "kube-proxy", "kube-proxy-wrapper"
    }  # fmt: skip
    assert "mysql" not in " ".join(s.texts().values()).lower()


# -- host decisions --------------------------------------------------------------------------------


def test_capwrap_is_needed_only_for_the_caps_error() -> None:
    assert host.needs_capwrap(Result(0, "pause", "")) is False
    caps = "docker: Error response from daemon: ... unable to apply caps: operation not permitted: unknown."
    assert host.needs_capwrap(Result(125, "", caps)) is True
    with pytest.raises(HostError, match="not for missing capabilities"):
        host.needs_capwrap(Result(125, "", "no space left on device"))


@pytest.mark.parametrize(
    ("on_path", "daemon_answers", "expected"),
    [
        ({"docker", "dockerd", "debootstrap"}, False, []),
        ({"docker", "debootstrap"}, True, []),  # a remote or socket-activated daemon: the CLI is enough
        ({"docker", "debootstrap"}, False, ["docker.io"]),  # a machine that ships the CLI alone
        ({"debootstrap"}, False, ["docker.io"]),
        ({"docker", "dockerd"}, False, ["debootstrap"]),
    ],
)
def test_packages_installed_for_what_the_host_lacks(
    on_path: set[str], daemon_answers: bool, expected: list[str]
) -> None:
    system = host.Host(
        runner=lambda argv: Result(0 if daemon_answers else 1, "", ""),
        which=lambda cmd: f"/usr/bin/{cmd}" if cmd in on_path else None,
    )
    assert host.missing_packages(system, extra=("debootstrap",)) == expected


def test_daemon_json_merge_keeps_other_settings() -> None:
    merged = json.loads(
        host.merge_daemon_json('{"data-root": "/srv/docker"}', Path("/usr/local/bin/capwrap")) or ""
    )
    assert merged == {
        "data-root": "/srv/docker",
        "runtimes": {"capwrap": {"path": "/usr/local/bin/capwrap"}},
        "default-runtime": "capwrap",
    }


def test_daemon_json_already_configured_is_left_alone() -> None:
    done = host.merge_daemon_json(None, Path("/usr/local/bin/capwrap"))
    assert done is not None
    assert host.merge_daemon_json(done, Path("/usr/local/bin/capwrap")) is None


def test_daemon_json_with_another_default_runtime_is_not_clobbered() -> None:
    with pytest.raises(HostError, match="default-runtime 'nvidia'"):
        host.merge_daemon_json('{"default-runtime": "nvidia"}', Path("/usr/local/bin/capwrap"))
