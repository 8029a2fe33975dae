"""What a failed test leaves for its author: the objects and events of its namespaces as YAML,
the operator's log and the control-plane logs, under `artifacts/<sanitised test id>/`."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import requests
import yaml

from envtest.plane import streams

# Control-plane logs can be large; the end is what explains a failure.
MAX_LOG_BYTES = 4 * 1024 * 1024
# Noise for an operator author, and listing them costs the most.
SKIP_RESOURCES = {"events", "bindings", "localsubjectaccessreviews", "tokenreviews", "controllerrevisions"}


def sanitize(nodeid: str) -> str:
    """A folder name for a test id: `tests/e2e/test_x.py::test_y[a-b]` → `tests-e2e-test_x.py-test_y-a-b`."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", nodeid.replace("::", "-")).strip("-.")
    return name[:200] or "test"


def namespaced_resources(session: requests.Session, server: str) -> list[tuple[str, str]]:
    """(group-version path, plural) of every listable namespaced resource the server serves."""
    paths = ["api/v1"]
    groups = session.get(f"{server}/apis", timeout=10).json().get("groups", [])
    paths += [f"apis/{g['preferredVersion']['groupVersion']}" for g in groups]
    found = []
    for path in paths:
        resp = session.get(f"{server}/{path}", timeout=10)
        if resp.status_code != 200:
            continue
        for res in resp.json().get("resources", []):
            if (
                res.get("namespaced")
                and "/" not in res["name"]
                and "list" in res.get("verbs", [])
                and res["name"] not in SKIP_RESOURCES
            ):
                found.append((path, res["name"]))
    return found


REDACTED = "<redacted>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""Written by `kubectl apply`: the whole object as applied, a Secret's values included."""


def redact(obj: dict[str, Any], resource: tuple[str, str] | None = None) -> dict[str, Any]:
    """A copy fit for CI artifacts. A Secret is known by the resource it was listed from — items of
    a list carry no `kind` — or by its kind; its values and its last-applied annotation go."""
    secret = resource == ("api/v1", "secrets") or (
        obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1"
    )
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    if secret:
        obj = {k: v for k, v in obj.items() if k != "stringData"}
        obj["data"] = dict.fromkeys(obj.get("data") or {}, REDACTED)
        if LAST_APPLIED in (meta.get("annotations") or {}):
            meta["annotations"] = {**meta["annotations"], LAST_APPLIED: REDACTED}
    return {**obj, "metadata": meta}


def collect(
    dest: Path,
    *,
    session: requests.Session,
    server: str,
    namespaces: Iterable[str],
    logs: Mapping[str, Path] = {},
    resources: list[tuple[str, str]] | None = None,
    pod_logs: Mapping[str, Path] = {},
    fake_pods: bool = False,
) -> Path:
    """Write everything to `dest` (replacing what a previous run left) and return it.
    Best effort: a part that cannot be read is noted in `errors.txt` rather than raised.
    ``fake_pods``: the namespaces' pods are kwok's (the local plane with pod streams), so every
    container of every scheduled pod gets a log, the default line where `pod_logs` has none."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    errors: list[str] = []
    try:
        kinds = resources if resources is not None else namespaced_resources(session, server)
    except Exception as exc:
        kinds = []
        errors.append(f"discovery: {exc}")
    for ns in namespaces:
        ns_dir = dest / ns
        ns_dir.mkdir()
        for path, plural in kinds:
            try:
                resp = session.get(f"{server}/{path}/namespaces/{ns}/{plural}", timeout=10)
                items = resp.json().get("items", []) if resp.status_code == 200 else []
            except Exception as exc:
                errors.append(f"{ns}/{plural}: {exc}")
                continue
            if items:
                docs = [redact(i, (path, plural)) for i in items]
                (ns_dir / f"{plural}.{path.replace('/', '_')}.yaml").write_text(
                    yaml.safe_dump_all(docs, sort_keys=False)
                )
        try:
            _write_events(session, server, ns, ns_dir)
        except Exception as exc:
            errors.append(f"{ns}/events: {exc}")
    for name, log in logs.items():
        try:
            _copy_tail(log, dest / "logs" / f"{name}.log")
        except OSError as exc:
            errors.append(f"log {name}: {exc}")
    # kwok's fake pods: each container's log file, keyed "<ns>/<pod>/<file>", beside its namespace.
    for key, log in pod_logs.items():
        ns, pod, name = key.split("/", 2)
        try:
            _copy_tail(log, dest / ns / "pod-logs" / pod / name)
        except OSError as exc:
            errors.append(f"pod log {key}: {exc}")
    if fake_pods:
        for ns in namespaces:
            try:
                _write_unwritten_pod_logs(session, server, ns, dest / ns / "pod-logs", set(pod_logs))
            except Exception as exc:
                errors.append(f"{ns}/pod logs: {exc}")
    if errors:
        (dest / "errors.txt").write_text("\n".join(errors) + "\n")
    return dest


def _write_unwritten_pod_logs(
    session: requests.Session, server: str, ns: str, pod_logs_dir: Path, written: set[str]
) -> None:
    """The line `kubectl logs` shows for each container no log file exists for (kwok creates the file
    only when something reads it): without it, a failed test's artifacts would miss those containers
    and look as though the pod had none."""
    resp = session.get(f"{server}/api/v1/namespaces/{ns}/pods", timeout=10)
    resp.raise_for_status()
    for pod in resp.json().get("items", []):
        spec, name = pod.get("spec") or {}, pod["metadata"]["name"]
        if not spec.get("nodeName"):  # not on kwok's node yet: `kubectl logs` has nothing to ask
            continue
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            if f"{ns}/{name}/{container['name']}.log" in written:
                continue
            path = pod_logs_dir / name / f"{container['name']}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(streams.cri_lines(streams.no_log_yet(ns, name, container["name"])))


def _write_events(session: requests.Session, server: str, ns: str, ns_dir: Path) -> None:
    items = session.get(f"{server}/api/v1/namespaces/{ns}/events", timeout=10).json().get("items", [])
    items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    (ns_dir / "events.yaml").write_text(yaml.safe_dump_all([redact(e) for e in items], sort_keys=False))
    lines = [
        f"{e.get('lastTimestamp') or e.get('eventTime')}\t{e.get('type')}\t{e.get('reason')}\t"
        f"{e['involvedObject'].get('kind')}/{e['involvedObject'].get('name')}\t{e.get('message', '').strip()}"
        for e in items
    ]
    (ns_dir / "events.txt").write_text("\n".join(lines) + "\n")


def _copy_tail(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    size = src.stat().st_size
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        if size > MAX_LOG_BYTES:
            fin.seek(size - MAX_LOG_BYTES)
            fout.write(f"[... {size - MAX_LOG_BYTES} earlier bytes omitted ...]\n".encode())
        shutil.copyfileobj(fin, fout)
