"""The record on kind: the rendered kind config (linted here; a live cluster is `make kind-up`'s)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from envtest import kind
from envtest.record import kindaudit, policy

PROJECT_CONFIG = Path(__file__).resolve().parents[2] / "kind-config.yaml"


def _patches(doc: dict) -> list[dict]:
    return [yaml.safe_load(p) for p in doc["kubeadmConfigPatches"]]


@pytest.mark.parametrize("source", [PROJECT_CONFIG, kind.DEFAULT_CONFIG])
def test_rendered_config_keeps_the_users_and_adds_mount_flags_and_volume(
    source: Path, tmp_path: Path
) -> None:
    user = yaml.safe_load(source.read_text())
    doc = yaml.safe_load(kindaudit.config(source.read_text(), tmp_path / "audit"))
    patches = _patches(doc)
    assert patches[: len(user["kubeadmConfigPatches"])] == [
        yaml.safe_load(p) for p in user["kubeadmConfigPatches"]
    ]
    ours = patches[-1]
    assert "apiVersion" not in ours  # kind then merges it into v1beta3 and converts it for v1beta4
    args = ours["apiServer"]["extraArgs"]
    assert args["audit-policy-file"] == f"{kindaudit.NODE_DIR}/{policy.POLICY_FILE}"
    assert args["audit-log-path"] == f"{kindaudit.NODE_DIR}/{policy.LOG_FILE}"
    assert args["audit-log-mode"] == "blocking"
    assert ours["apiServer"]["extraVolumes"] == [kindaudit.VOLUME]
    (node,) = doc["nodes"]
    assert node["role"] == "control-plane"
    assert node["extraMounts"] == [{"hostPath": str(tmp_path / "audit"), "containerPath": kindaudit.NODE_DIR}]
    assert user["kubeadmConfigPatches"] == yaml.safe_load(source.read_text())["kubeadmConfigPatches"]


def test_users_own_apiserver_volumes_are_kept_beside_ours(tmp_path: Path) -> None:
    theirs = {
        "kind": "ClusterConfiguration",
        "apiServer": {"extraVolumes": [{"name": "theirs", "hostPath": "/x", "mountPath": "/x"}]},
    }
    config = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "kubeadmConfigPatches": [yaml.safe_dump(theirs)],
    }
    patches = _patches(yaml.safe_load(kindaudit.config(yaml.safe_dump(config), tmp_path)))
    assert [v["name"] for v in patches[0]["apiServer"]["extraVolumes"]] == ["theirs", "envtest-audit"]
    assert "extraVolumes" not in patches[-1]["apiServer"]  # a later list would replace theirs


def test_more_than_one_control_plane_node_gets_no_record(tmp_path: Path) -> None:
    two = {
        "kind": "Cluster",
        "nodes": [{"role": "control-plane"}, {"role": "control-plane"}, {"role": "worker"}],
    }
    with pytest.raises(ValueError, match="one control-plane node; the kind config has 2"):
        kindaudit.config(yaml.safe_dump(two), tmp_path)
    one = yaml.safe_load(kindaudit.config(yaml.safe_dump({"kind": "Cluster"}), tmp_path))
    assert one["nodes"][0]["extraMounts"][0]["containerPath"] == kindaudit.NODE_DIR


def test_host_folder_holds_the_policy_and_a_log_this_user_can_read(tmp_path: Path) -> None:
    folder = tmp_path / "c.audit"
    folder.mkdir()
    (folder / "stale.log").write_text("a previous cluster's")
    kindaudit.prepare(folder, bodies=True)
    assert sorted(p.name for p in folder.iterdir()) == sorted([policy.LOG_FILE, policy.POLICY_FILE])
    log = folder / policy.LOG_FILE
    assert stat.S_IMODE(log.stat().st_mode) == 0o644 and log.read_text() == ""
    assert "RequestResponse" in (folder / policy.POLICY_FILE).read_text()


def test_cluster_made_here_finds_its_log_and_another_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path, note = kind.audit_log("elsewhere")
    assert path is None and "envtest kind down --name elsewhere" in note
    kindaudit.prepare(kind.audit_dir("mine"))
    assert kind.audit_log("mine") == (kind.audit_dir("mine") / policy.LOG_FILE, "")
