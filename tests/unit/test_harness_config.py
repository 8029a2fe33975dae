"""Configuration pieces of the harness that need no cluster: CRD loading, kwok stages, flags,
component lists, artifact folder names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest import crds
from envtest.errors import ConfigError, CRDError
from envtest.plane import flags, kwok
from envtest.plane.controlplane import ALL_COMPONENTS, MINIMAL_COMPONENTS, parse_components
from envtest.plugin import artifacts

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"plural": "widgets", "kind": "Widget"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}


def test_crd_directory_loads_every_document_with_its_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        yaml.safe_dump_all([CRD, {**CRD, "metadata": {"name": "b.example.com"}}])
    )
    (tmp_path / "notes.txt").write_text("ignored")
    loaded = crds.load([tmp_path])
    assert [(p.name, d["metadata"]["name"]) for p, d in loaded] == [
        ("a.yaml", "widgets.example.com"),
        ("a.yaml", "b.example.com"),
    ]


def test_crd_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed")
    with pytest.raises(CRDError, match=r"bad\.yaml: not valid YAML"):
        crds.load([bad])


def test_crd_folder_skips_non_crd_documents_with_one_note_naming_each(tmp_path: Path) -> None:
    # CRDs beside kustomize's own files, as controller-runtime reads a folder.
    (tmp_path / "kustomization.yaml").write_text("resources:\n- bases/widgets.yaml\n")
    (tmp_path / "widgets.yaml").write_text(
        yaml.safe_dump_all([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, CRD])
    )
    notes: list[str] = []
    loaded = crds.load([tmp_path], notes=notes)
    assert [d["metadata"]["name"] for _, d in loaded] == ["widgets.example.com"]
    assert notes == [
        f"{tmp_path}: skipped 2 document(s) that are not CRDs: kustomization.yaml#1 (no kind), "
        "widgets.yaml#1 (ConfigMap)"
    ]


def _kubebuilder_layout(root: Path) -> Path:
    """config/crd as `kubebuilder create api` leaves it: kustomize files, bases/, patches/."""
    crd = root / "config" / "crd"
    (crd / "bases").mkdir(parents=True)
    (crd / "patches").mkdir()
    (crd / "kustomization.yaml").write_text("resources:\n- bases/example.com_widgets.yaml\n")
    (crd / "kustomizeconfig.yaml").write_text("nameReference:\n- kind: Service\n")
    (crd / "bases" / "example.com_widgets.yaml").write_text("---\n" + yaml.safe_dump(CRD))
    # A partial CRD that kustomize merges into the base: never a CRD to install on its own.
    patch = {**CRD, "spec": {"conversion": {"strategy": "Webhook"}}}
    (crd / "patches" / "webhook_in_widgets.yaml").write_text(yaml.safe_dump(patch))
    return crd


def test_kubebuilders_config_crd_is_read_through_its_bases_never_its_patches(tmp_path: Path) -> None:
    crd = _kubebuilder_layout(tmp_path)
    notes: list[str] = []
    loaded = crds.load([crd], notes=notes)
    assert [(p.relative_to(crd).as_posix(), d["metadata"]["name"]) for p, d in loaded] == [
        ("bases/example.com_widgets.yaml", "widgets.example.com")
    ]
    assert len(notes) == 1 and "kustomization.yaml#1" in notes[0] and "kustomizeconfig.yaml#1" in notes[0]
    assert crds.load([crd / "bases"]) == loaded, "naming bases/ itself, as envtest in Go does, still works"


def test_operator_sdk_multi_document_files_load_every_crd(tmp_path: Path) -> None:
    other = {**CRD, "metadata": {"name": "gadgets.example.com"}}
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all([CRD, None, other]))
    assert [d["metadata"]["name"] for _, d in crds.load([tmp_path / "all.yaml"])] == [
        "widgets.example.com",
        "gadgets.example.com",
    ]


def test_a_path_without_any_crd_is_an_error_naming_it_and_crds_found_nearby(tmp_path: Path) -> None:
    crd = _kubebuilder_layout(tmp_path)
    (crd / "bases" / "example.com_widgets.yaml").rename(crd / "moved.yaml.txt")  # bases/ now empty
    deeper = tmp_path / "config" / "crd" / "generated" / "v1"
    deeper.mkdir(parents=True)
    (deeper / "widgets.yaml").write_text(yaml.safe_dump(CRD))
    with pytest.raises(CRDError) as caught:
        crds.load([tmp_path / "config"])
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'config'}: no CustomResourceDefinition found")
    assert f"CRDs found nearby: {deeper / 'widgets.yaml'}" in message
    assert "patches" not in message, "a kustomize patch is no CRD to suggest"


def test_a_file_of_other_kinds_is_an_error_naming_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "rbac.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}}))
    with pytest.raises(CRDError, match=r"rbac\.yaml: no CustomResourceDefinition found \(only rbac\.yaml#1"):
        crds.load([path])


def test_crd_old_api_version_is_rejected_before_the_apiserver_sees_it(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({**CRD, "apiVersion": "apiextensions.k8s.io/v1beta1"}))
    with pytest.raises(CRDError, match=r"apiVersion must be apiextensions\.k8s\.io/v1"):
        crds.load([path])


def test_missing_crd_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(CRDError, match=r"nope\.yaml: no such file"):
        crds.load([tmp_path / "nope.yaml"])


def _stage(name: str, kind: str = "Pod") -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}},
    }


@pytest.fixture
def stages_dir(tmp_path: Path) -> Path:
    layout = {
        "node/fast": [_stage("node-initialize", "Node")],
        "node/heartbeat-with-lease": [_stage("node-heartbeat-with-lease", "Node")],
        "pod/fast": [_stage("pod-ready"), _stage("pod-complete"), _stage("pod-delete")],
        "volume/fast": [
            _volume_stages()[1],
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "kwok-volume"}},
        ],
    }
    for folder, docs in layout.items():
        (tmp_path / folder).mkdir(parents=True)
        for doc in docs:
            (tmp_path / folder / f"{doc['metadata']['name']}.yaml").write_text(yaml.safe_dump(doc))  # type: ignore[index]
        (tmp_path / folder / "kustomization.yaml").write_text("resources: []\n")
    return tmp_path


def test_kwok_complete_mode_loads_every_stage_and_the_storage_class(stages_dir: Path) -> None:
    stages = list(yaml.safe_load_all(kwok.stage_config(stages_dir, "complete")))
    assert "pod-complete" in {s["metadata"]["name"] for s in stages}
    _, objects = kwok.load_stage_documents(stages_dir)
    assert [o["kind"] for o in objects] == ["StorageClass"]


def test_kwok_hold_mode_leaves_job_pods_running(stages_dir: Path) -> None:
    names = {s["metadata"]["name"] for s in yaml.safe_load_all(kwok.stage_config(stages_dir, "hold"))}
    assert "pod-complete" not in names
    assert {"pod-ready", "pod-delete", "node-initialize"} <= names


def test_kwok_bad_job_pods_value_and_missing_stage_set_are_clear(stages_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="job_pods must be 'complete' or 'hold'"):
        kwok.stage_config(stages_dir, "finish")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="kwok stage set missing"):
        kwok.stage_config(tmp_path / "empty", "complete")


def _volume_stages() -> list[dict[str, Any]]:
    provision = _stage("pvc-provision", "PersistentVolumeClaim")
    provision["spec"] = {
        "resourceRef": {"apiGroup": "v1", "kind": "PersistentVolumeClaim"},
        "selector": {"matchExpressions": [{"cel": {"expression": "!has(self.spec.volumeName)"}}]},
        "steps": [
            {"apply": {"template": "kind: PersistentVolume"}},
            {"patch": {"root": "metadata", "template": "annotations: {}"}},
            {"patch": {"root": "spec", "template": "volumeName: v"}},
            {"patch": {"root": "status", "subresource": "status", "template": "phase: Bound"}},
        ],
    }
    return [
        _stage("pod-ready"),
        provision,
        _stage("pv-bind", "PersistentVolume"),
        _stage("pvc-delete", "PersistentVolumeClaim"),
        _stage("pv-delete", "PersistentVolume"),
    ]


def test_with_the_pv_binder_kwok_only_provisions_volumes_for_claims_handed_to_it() -> None:
    stages = _volume_stages()
    kept = kwok.as_provisioner(stages)
    assert [s["metadata"]["name"] for s in kept] == ["pod-ready", "pvc-provision", "pv-delete"]
    provision = kept[1]["spec"]
    assert provision["steps"] == [{"apply": {"template": "kind: PersistentVolume"}}]
    assert provision["selector"]["matchAnnotations"] == {
        "volume.kubernetes.io/storage-provisioner": "kwok.x-k8s.io/volume"
    }
    assert provision["selector"]["matchExpressions"] == [
        {"cel": {"expression": "!has(self.spec.volumeName)"}}
    ]
    assert len(stages[1]["spec"]["steps"]) == 4, "kwok's own stage is left as loaded"


def test_kwok_stage_config_cuts_volume_stages_only_with_the_binder(stages_dir: Path) -> None:
    for extra in ("pv-bind", "pvc-delete"):
        (stages_dir / "volume/fast" / f"{extra}.yaml").write_text(
            yaml.safe_dump(_stage(extra, "PersistentVolume"))
        )
    names = lambda binder: {  # noqa: E731
        s["metadata"]["name"]
        for s in yaml.safe_load_all(kwok.stage_config(stages_dir, "complete", binder=binder))
    }
    assert {"pv-bind", "pvc-delete"} <= names(False)
    assert not {"pv-bind", "pvc-delete"} & names(True)


def test_a_provision_stage_of_another_shape_is_named() -> None:
    stages = _volume_stages()
    stages[1]["spec"]["steps"] = [{"patch": {"root": "status", "template": "phase: Bound"}}]
    with pytest.raises(ConfigError, match="kwok stage pvc-provision: expected one apply step"):
        kwok.as_provisioner(stages)


def test_the_pv_binder_runs_unless_the_controllers_flag_leaves_it_out() -> None:
    defaults = flags.CONTROLLER_MANAGER_FLAGS
    assert flags.runs_pv_binder(defaults)
    assert flags.runs_pv_binder(defaults, {"controllers": None})  # the flag removed: upstream's "*"
    assert flags.runs_pv_binder(defaults, {"controllers": "statefulset-controller,persistentvolume-binder"})
    assert not flags.runs_pv_binder(defaults, {"controllers": "*,-persistentvolume-binder-controller"})
    assert not flags.runs_pv_binder(defaults, {"controllers": "-persistentvolume-binder,*"})
    assert not flags.runs_pv_binder(defaults, {"controllers": "statefulset-controller"})
    assert not flags.runs_pv_binder(defaults, {"controllers": ""}), "an empty list runs no controller"
    # kube-controller-manager's order: the first entry naming the binder decides.
    assert flags.runs_pv_binder(defaults, {"controllers": "persistentvolume-binder,-persistentvolume-binder"})
    assert not flags.runs_pv_binder(defaults, {"enable-dynamic-provisioning": "false"})


def test_flags_later_layers_win_and_none_removes() -> None:
    argv = flags.render({"a": "1", "b": "2"}, {"b": "3", "c": None}, {"a": None})
    assert argv == ["--b=3"]


def test_apiserver_defaults_bind_loopback_and_use_rbac() -> None:
    argv = flags.render(flags.APISERVER_FLAGS)
    assert "--advertise-address=127.0.0.1" in argv
    assert "--bind-address=127.0.0.1" in argv
    assert "--authorization-mode=RBAC" in argv


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", ALL_COMPONENTS),
        ("minimal", MINIMAL_COMPONENTS),
        ("kwok", ("etcd", "kube-apiserver", "kwok")),
        (["kube-scheduler", "etcd"], ("etcd", "kube-apiserver", "kube-scheduler")),
    ],
)
def test_components_imply_etcd_and_apiserver_in_start_order(value: object, expected: tuple[str, ...]) -> None:
    assert parse_components(value) == expected  # type: ignore[arg-type]


def test_unknown_component_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown component.*kubelet.*valid: etcd, kube-apiserver"):
        parse_components("etcd,kubelet")


def test_artifact_folder_names_are_filesystem_safe() -> None:
    assert artifacts.sanitize("tests/e2e/test_x.py::test_y[a/b c]") == "tests-e2e-test_x.py-test_y-a-b-c"
    assert len(artifacts.sanitize("x" * 500)) == 200
