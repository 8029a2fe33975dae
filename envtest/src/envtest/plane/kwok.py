"""kwok's part of a control plane: which of kwok's own stages to load, and the fake Node it manages.

The stage definitions are kwok's own YAML files, copied out of its Go module at install time
(`binaries.kwok_stages_dir`), so what runs here is what kwok ships rather than a look-alike. Beside
kube-controller-manager's PV binder, the volume stages are cut down to a provisioner's part
(`as_provisioner`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml

from envtest.errors import ConfigError

JobPods = Literal["complete", "hold"]

# kwok's "fast" profile: no artificial delays, so tests wait on controllers rather than on jitter.
STAGE_SETS: tuple[str, ...] = ("node/fast", "node/heartbeat-with-lease", "pod/fast", "volume/fast")

# The volume stages that do the controller-manager's PV binder's work: binding a claim and its volume,
# and releasing a volume whose claim is being deleted. Left out when the binder runs (as_provisioner).
BINDER_STAGES: frozenset[str] = frozenset({"pv-bind", "pvc-delete"})
PROVISION_STAGE = "pvc-provision"
PROVISIONER = "kwok.x-k8s.io/volume"
"""The provisioner of the StorageClass that kwok's volume stages ship."""
PROVISIONER_ANNOTATION = "volume.kubernetes.io/storage-provisioner"
"""What the PV binder writes on a claim, naming the provisioner, when it hands the claim to one."""

# The stage that moves Job-owned pods from Running to Succeeded; left out in "hold" mode so a test
# can keep a Job running (e.g. a final backup that a finalizer waits for) and decide its outcome itself.
POD_COMPLETE_STAGE = "pod-complete"

NODE_NAME = "kwok-node-0"
NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_ANNOTATION_VALUE = "fake"


def _documents(path: Path) -> Iterable[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return [d for d in docs if isinstance(d, dict)]


def load_stage_documents(stages_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(stages, cluster objects) from kwok's stage sets: Stage documents, and everything else
    those sets ship that must exist in the cluster (the default StorageClass of the volume stages)."""
    stages: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    for subdir in STAGE_SETS:
        folder = stages_dir / subdir
        if not folder.is_dir():
            raise ConfigError(
                f"{folder}: kwok stage set missing; reinstall binaries (`envtest binaries install --force`)"
            )
        for path in sorted(folder.glob("*.yaml")):
            if path.name == "kustomization.yaml":
                continue
            for doc in _documents(path):
                if doc.get("kind") == "Stage":
                    stages.append(doc)
                elif doc.get("kind") == "StorageClass":
                    # As kwok ships it: binding Immediate. WaitForFirstConsumer (kind's default class)
                    # has the scheduler poll each pod's claims once a second: a 3-replica StatefulSet
                    # is Ready in 3.2 s instead of 0.3 s (benchmarks/results/binding_mode.json).
                    objects.append(doc)
    return stages, objects


def stage_config(stages_dir: Path, job_pods: JobPods, *, binder: bool = False) -> str:
    """The multi-document YAML given to `kwok --config`. `binder`: the controller-manager runs, and
    its PV binder binds claims (as_provisioner)."""
    if job_pods not in ("complete", "hold"):
        raise ConfigError(f"job_pods must be 'complete' or 'hold', not {job_pods!r}")
    stages, _ = load_stage_documents(stages_dir)
    if job_pods == "hold":
        stages = [s for s in stages if s["metadata"]["name"] != POD_COMPLETE_STAGE]
    if binder:
        stages = as_provisioner(stages)
    return yaml.safe_dump_all(stages, sort_keys=False)


def as_provisioner(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kwok's volume stages cut down to an external provisioner's part, for a plane whose
    controller-manager runs the PV binder.

    kwok's own stages bind each claim themselves: they create its volume and patch the claim's
    annotations, volumeName and status, while the binder works on the same claim. The two fight:
    with 1,000 StatefulSets, kwok wrote 11.7 times per claim, the binder met 1.6 conflicts per claim,
    and claims were marked Lost for a moment (122 such Events). On a real cluster the work is split:
    the binder hands a claim to the StorageClass's provisioner by annotating it, the provisioner creates a
    volume pre-bound to the claim (claimRef), and the binder binds the two; when the claim is
    gone the binder releases the volume and the provisioner deletes it. So here: the provision
    stage keeps only its first step (creating the volume, kwok's template unchanged) and waits for
    the binder's annotation; the stages doing the binder's part (BINDER_STAGES) are left out; the
    stage deleting a released volume stays."""
    kept: list[dict[str, Any]] = []
    for stage in stages:
        name = stage["metadata"]["name"]
        if name in BINDER_STAGES:
            continue
        if name == PROVISION_STAGE:
            stage = copy.deepcopy(stage)
            spec = stage["spec"]
            applies = [step for step in spec.get("steps") or [] if "apply" in step]
            if len(applies) != 1:
                raise ConfigError(
                    f"kwok stage {name}: expected one apply step (the volume), found {len(applies)}"
                )
            spec["steps"] = applies
            annotations = spec.setdefault("selector", {}).setdefault("matchAnnotations", {})
            annotations[PROVISIONER_ANNOTATION] = PROVISIONER
        kept.append(stage)
    return kept


NODE_CAPACITY: dict[str, str] = {"cpu": "1k", "memory": "16Ti", "pods": "10k", "ephemeral-storage": "100Ti"}
"""The fake Node's capacity. Nothing runs on it, so it is sized never to run out: with kubelet's usual
110 pods and 32 CPUs a suite whose namespaces are deleted in the background meets random Pending pods
(300 pods at 500m need 150 CPUs). ControlPlane(node_capacity=…) overrides it."""


def fake_node(name: str = NODE_NAME, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node for kwok to manage. No taint: every pod of the tests should land on it."""
    capacity = {**NODE_CAPACITY, **(capacity or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION: NODE_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def server_args(*, port: int, cert: Path, key: Path, client_ca: Path) -> list[str]:
    """Flags of kwok's kubelet-like server (logs, exec, attach, port-forward): loopback only, HTTPS
    only, and only for clients with a certificate of ``client_ca`` (the apiserver's kubelet client).
    ``--node-port`` is what the node stage publishes as the Node's kubelet endpoint port."""
    return [
        f"--server-address=127.0.0.1:{port}",
        f"--node-port={port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        # A flag of envtest's kwok build (envtest.binaries.gobuild.kwok_patches).
        f"--tls-client-ca-file={client_ca}",
    ]


def kwok_args(*, kubeconfig: Path, config: Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        # Only the node we create: never adopt a Node that something else registered.
        f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}={NODE_ANNOTATION_VALUE}",
        "--node-ip=127.0.0.1",
        # The heartbeat-with-lease stage renews node status only every ~10 min and counts on a Lease
        # for liveness: without one the node lifecycle controller marks the node NotReady after its
        # grace period (~50 s), and the pods on it stay unready for good.
        "--node-lease-duration-seconds=40",
        "--cidr=10.244.0.1/16",
    ]
