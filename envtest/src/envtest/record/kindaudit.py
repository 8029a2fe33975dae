"""The record on kind: a cluster made by `envtest kind up` (or by the kind backend) writes the same
audit log as the local plane, into a folder of this host.

The user's kind config stays theirs: a rendered copy gets, for the control-plane node, an
extraMount of the host folder, and a kubeadm ClusterConfiguration patch with the apiserver's audit
flags and a hostPath volume of that folder into the apiserver's static pod. The patch names no
apiVersion and gives extraArgs as a map, which kind merges into kubeadm's v1beta3 config and
converts for v1beta4 (Kubernetes 1.36+). A list is replaced whole by a merge patch, so when the
user's own patches mount volumes into the apiserver already, ours joins their list instead.

The host folder holds the policy and a pre-created `audit.log`: the apiserver (root in the node)
appends to it and rotates it keeping its owner and mode, so the user running the tests can read it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from envtest.record import policy

NODE_DIR = "/var/log/envtest-audit"
"""Where the host folder appears in the node and in the apiserver's container."""
VOLUME = {
    "name": "envtest-audit",
    "hostPath": NODE_DIR,
    "mountPath": NODE_DIR,
    "readOnly": False,
    "pathType": "DirectoryOrCreate",
}


def prepare(host_dir: Path, bodies: bool = False) -> None:
    """A fresh folder with the policy and an empty log this user owns (a previous cluster's goes)."""
    shutil.rmtree(host_dir, ignore_errors=True)
    policy.write(host_dir, bodies=bodies)
    log = host_dir / policy.LOG_FILE
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.close(fd)
    os.chmod(log, 0o644)  # whatever the umask: the apiserver keeps this mode across rotations


def _user_volume_patch(patches: list[Any]) -> tuple[int, dict[str, Any]] | None:
    """The last of the user's ClusterConfiguration patches that lists apiServer.extraVolumes."""
    found = None
    for i, text in enumerate(patches):
        doc = yaml.safe_load(text) if isinstance(text, str) else None
        cluster_config = isinstance(doc, dict) and doc.get("kind") == "ClusterConfiguration"
        if cluster_config and isinstance((doc.get("apiServer") or {}).get("extraVolumes"), list):
            found = (i, doc)
    return found


def config(user_config: str, host_dir: Path) -> str:
    """The kind config `user_config` with the record's mount, flags and volume (see above).

    Raises ValueError for a config the record cannot serve (more than one control-plane node: the
    load balancer would spread the operator's requests over logs of several apiservers)."""
    doc = yaml.safe_load(user_config) or {}
    if not isinstance(doc, dict):
        raise ValueError("the kind config is not a mapping")
    nodes = doc.get("nodes") or [{"role": "control-plane"}]
    planes = [n for n in nodes if isinstance(n, dict) and n.get("role", "control-plane") == "control-plane"]
    if len(planes) != 1:
        raise ValueError(f"the record needs one control-plane node; the kind config has {len(planes)}")
    mounts = planes[0].setdefault("extraMounts", [])
    mounts.append({"hostPath": str(host_dir), "containerPath": NODE_DIR})
    doc["nodes"] = nodes
    patches = list(doc.get("kubeadmConfigPatches") or [])
    flags = policy.apiserver_flags(f"{NODE_DIR}/{policy.POLICY_FILE}", f"{NODE_DIR}/{policy.LOG_FILE}")
    ours: dict[str, Any] = {"kind": "ClusterConfiguration", "apiServer": {"extraArgs": flags}}
    theirs = _user_volume_patch(patches)
    if theirs is None:
        ours["apiServer"]["extraVolumes"] = [VOLUME]
    else:
        index, doc_with_volumes = theirs
        doc_with_volumes["apiServer"]["extraVolumes"].append(VOLUME)
        patches[index] = yaml.safe_dump(doc_with_volumes, sort_keys=False)
    patches.append(yaml.safe_dump(ours, sort_keys=False))
    doc["kubeadmConfigPatches"] = patches
    return "# rendered by envtest: the record's audit log (envtest.record.kindaudit)\n" + yaml.safe_dump(
        doc, sort_keys=False
    )
