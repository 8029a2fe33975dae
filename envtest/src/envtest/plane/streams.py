"""What kubectl logs, exec, attach and port-forward do on kwok's fake pods, and where their files live.

kwok serves the kubelet's streaming endpoints itself (its Exec, Logs, Attach and PortForward rules);
the plane gives it one cluster-wide rule of each kind. envtest's kwok build (see
envtest.binaries.gobuild.kwok_patches) replaces ``$(POD_NAMESPACE)``, ``$(POD_NAME)``,
``$(CONTAINER_NAME)`` and ``$(PORT)`` in those rules, so every pod gets its own directory:

    <pods root>/<namespace>/<pod>/
        logs/<container>.log            what `kubectl logs` and `attach` read (CRI log format)
        logs/<container>.previous.log   what `kubectl logs --previous` reads, if it exists
        sandbox/                        where `kubectl exec` runs commands (+ the container's workingDir)
        ports/<port>                    "host:port" that `kubectl port-forward` to that pod port reaches

Semantics, chosen to be useful without containers:

- **exec** is off unless something allowed it for the pod's namespace (`allow_exec`: the plugin
  does so for tests that ask — the ``fake_pods`` fixture, ``@pytest.mark.envtest_pod_exec``,
  ``envtest_pod_exec = true``); a refused exec fails naming the pod. Allowed, it runs the command **on
  this host**, as the user running the plane, in the pod's sandbox directory (joined with the
  container's ``workingDir``; not a chroot: absolute paths are the host's), with the plane's
  environment plus the container's literal ``env`` values (``valueFrom`` is not resolved). Exit codes
  come back as they do from a kubelet. ``ControlPlane(pod_exec=True)`` allows it in every namespace.
- **logs** read the container's log file; a container nothing wrote for shows one line saying so.
  Tests write with ``write_log`` (the ``fake_pods`` fixture). ``-f`` follows later writes.
- **attach** follows the same log file from its end (stdin is not delivered anywhere).
- **port-forward** connects to the target registered for that pod port (``register_port``; the
  fixture can also bind a local handler); an unregistered port fails with an error naming the file.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envtest.errors import ConfigError

KWOK_API = "kwok.x-k8s.io/v1alpha1"
RULE_NAME = "envtest-fake-pods"
_NS, _POD, _CONTAINER, _PORT = "$(POD_NAMESPACE)", "$(POD_NAME)", "$(CONTAINER_NAME)", "$(PORT)"
FORWARD_SCRIPT = Path(__file__).with_name("forward.py")
"""Relays a port-forward stream to the registered target; stdlib only, so it starts fast."""


def pod_dir(root: Path, namespace: str, pod: str) -> Path:
    for what, value in (("namespace", namespace), ("pod", pod)):
        if not value or "/" in value or value in (".", ".."):
            raise ConfigError(f"{what} {value!r} is not a valid object name")
    return root / namespace / pod


def log_path(root: Path, namespace: str, pod: str, container: str, *, previous: bool = False) -> Path:
    if not container or "/" in container:
        raise ConfigError(f"container {container!r} is not a valid container name")
    suffix = ".previous.log" if previous else ".log"
    return pod_dir(root, namespace, pod) / "logs" / f"{container}{suffix}"


def sandbox_path(root: Path, namespace: str, pod: str) -> Path:
    return pod_dir(root, namespace, pod) / "sandbox"


def port_path(root: Path, namespace: str, pod: str, port: int) -> Path:
    if not 0 < int(port) < 65536:
        raise ConfigError(f"port {port!r} is not a TCP port")
    return pod_dir(root, namespace, pod) / "ports" / str(int(port))


EXEC_ALLOWED = ".exec-allowed"
"""In a namespace's folder of the pods root: exec is allowed there while this file exists (no pod
name starts with a dot, so it never meets a pod's folder)."""
EXEC_GATE_ENV = "KWOK_EXEC_REQUIRES_FILE"
"""The Exec rule's env that envtest's kwok build reads as "run only if this file exists"
(envtest.binaries.gobuild.kwok_patches); it is not passed to the command."""


def exec_allowed_path(root: Path, namespace: str) -> Path:
    return pod_dir(root, namespace, "_").parent / EXEC_ALLOWED


def allow_exec(root: Path, namespace: str) -> None:
    """Let `kubectl exec` into `namespace`'s fake pods run commands on this host."""
    path = exec_allowed_path(root, namespace)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)


def forbid_exec(root: Path, namespace: str) -> None:
    exec_allowed_path(root, namespace).unlink(missing_ok=True)


def exec_allowed(root: Path, namespace: str) -> bool:
    return exec_allowed_path(root, namespace).exists()


def rules(root: Path, *, exec_: bool = False, python: str = sys.executable) -> list[dict[str, Any]]:
    """kwok's cluster-wide Logs, Attach, PortForward and Exec rules over ``root``; exec runs only in
    namespaces allowed by `allow_exec`, or (``exec_``) in every namespace."""
    base = f"{root}/{_NS}/{_POD}"
    logs = f"{base}/logs/{_CONTAINER}.log"
    docs: list[dict[str, Any]] = [
        _rule(
            "ClusterLogs",
            {"logs": [{"logsFile": logs, "previousLogsFile": f"{base}/logs/{_CONTAINER}.previous.log"}]},
        ),
        _rule("ClusterAttach", {"attaches": [{"logsFile": logs}]}),
        _rule(
            "ClusterPortForward",
            {"forwards": [{"command": [python, "-I", str(FORWARD_SCRIPT), f"{base}/ports/{_PORT}"]}]},
        ),
    ]
    local: dict[str, Any] = {"workDir": f"{base}/sandbox"}
    if not exec_:
        local["envs"] = [{"name": EXEC_GATE_ENV, "value": f"{root}/{_NS}/{EXEC_ALLOWED}"}]
    docs.append(_rule("ClusterExec", {"execs": [{"local": local}]}))
    return docs


def _rule(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": KWOK_API, "kind": kind, "metadata": {"name": RULE_NAME}, "spec": spec}


def cri_lines(text: str, *, stream: str = "stdout", now: dt.datetime | None = None) -> str:
    """``text`` in the CRI log format the kubelet (and kwok) read: one ``<time> <stream> F <line>`` each."""
    if stream not in ("stdout", "stderr"):
        raise ConfigError(f"stream must be 'stdout' or 'stderr', not {stream!r}")
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lines = text.splitlines() or [""]
    return "".join(f"{stamp} {stream} F {line}\n" for line in lines)


def no_log_yet(namespace: str, pod: str, container: str) -> str:
    """What `kubectl logs` shows for a container nothing wrote for: the line envtest's kwok build
    writes into a missing log file when it is first read (patch 0003's sandboxLogsFile)."""
    return f'container "{container}" of pod {namespace}/{pod} is fake (kwok): no log written yet'


def append_log(path: Path, text: str, *, stream: str = "stdout") -> None:
    """Append ``text`` to a container log file (created with its folders); one write, so a
    follower never sees half a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = cri_lines(text, stream=stream).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def register_port(path: Path, host: str, port: int) -> None:
    """Make ``path`` (a port_path) name ``host:port``; replaced atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{host}:{int(port)}\n")
    os.replace(tmp, path)


def pod_logs(root: Path, namespaces: Iterable[str]) -> dict[str, Path]:
    """Every container log file under ``root`` for these namespaces, keyed ``<ns>/<pod>/<file>``."""
    found: dict[str, Path] = {}
    for ns in namespaces:
        for path in sorted((root / ns).glob("*/logs/*.log")):
            found[f"{ns}/{path.parent.parent.name}/{path.name}"] = path
    return found
