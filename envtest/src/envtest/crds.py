"""Install, update and uninstall CustomResourceDefinitions from files or directories.

Works with any authenticated `requests.Session` and server URL: a ControlPlane's admin session,
or `api.session, api.url` of a pykube HTTPClient for an existing cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import requests
import yaml

from envtest import objects
from envtest.errors import CRDError
from envtest.wait import poll_pause

CRD_API = "apis/apiextensions.k8s.io/v1/customresourcedefinitions"
SUFFIXES = (".yaml", ".yml", ".json")
log = logging.getLogger(__name__)


LAYOUT_FOLDERS = ("bases",)
"""Where kubebuilder and operator-sdk keep the generated CRDs under `config/crd`: read when the folder
named holds none itself. Never its `patches/`: those are partial CRDs (a conversion stanza, a CA
injection) that kustomize merges into the bases, not CRDs to install."""
NEARBY_DEPTH = 4
"""How deep below a path that yielded no CRD the error looks for CRD files to suggest."""


def load(paths: Iterable[str | Path], *, notes: list[str] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every CRD document in `paths`, with its file. A file may hold several documents; a folder is
    read non-recursively, as controller-runtime's envtest reads it, except that a folder holding no
    CRD of its own is read through its `bases/` (kubebuilder's and operator-sdk's `config/crd`).

    Other documents (kustomize's `kustomization.yaml`, `kustomizeconfig.yaml`) are skipped, as
    controller-runtime's envtest skips them, with one note per path naming them — appended to
    `notes`, or logged when no list is given. A CRD that cannot work (old apiVersion, no name) is an
    error, and so is a path that yields no CRD at all: the error names it and lists CRD files found
    near it."""
    found: list[tuple[Path, dict[str, Any]]] = []
    for raw in paths:
        path = Path(raw)
        skipped: list[str] = []
        crds = _load_path(path, skipped)
        if not crds:
            raise CRDError(_nothing_found(path, skipped))
        found += crds
        if skipped:
            note = f"{path}: skipped {len(skipped)} document(s) that are not CRDs: {', '.join(skipped)}"
            if notes is None:
                log.info(note)
            else:
                notes.append(note)
    return found


def _load_path(path: Path, skipped: list[str]) -> list[tuple[Path, dict[str, Any]]]:
    if path.is_file():
        return _load_file(path, skipped)
    if not path.is_dir():
        raise CRDError(f"{path}: no such file or directory")
    crds = [crd for file in _yaml_files(path) for crd in _load_file(file, skipped)]
    for name in LAYOUT_FOLDERS:
        if not crds and (path / name).is_dir():
            crds = [crd for file in _yaml_files(path / name) for crd in _load_file(file, skipped)]
    return crds


def _yaml_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES)


def _load_file(path: Path, skipped: list[str]) -> list[tuple[Path, dict[str, Any]]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as exc:
        raise CRDError(f"{path}: not valid YAML: {exc}") from exc
    except OSError as exc:
        raise CRDError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    found = []
    for index, doc in enumerate(d for d in docs if d is not None):
        where = f"{path} (document {index + 1})"
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            skipped.append(f"{path.name}#{index + 1} ({kind or 'no kind'})")
            continue
        if doc.get("apiVersion") != "apiextensions.k8s.io/v1":
            raise CRDError(
                f"{where}: apiVersion must be apiextensions.k8s.io/v1, not {doc.get('apiVersion')!r}"
            )
        if not doc.get("metadata", {}).get("name"):
            raise CRDError(f"{where}: metadata.name is missing")
        found.append((path, doc))
    return found


def _nothing_found(path: Path, skipped: list[str]) -> str:
    message = f"{path}: no CustomResourceDefinition found"
    if skipped:
        message += f" (only {', '.join(skipped[:5])}{', …' if len(skipped) > 5 else ''})"
    nearby = _nearby_crd_files(path if path.is_dir() else path.parent)
    if nearby:
        message += "; CRDs found nearby: " + ", ".join(str(p) for p in nearby)
    elif path.is_dir():
        message += f"; none below it either (looked {NEARBY_DEPTH} folders deep)"
    return message


def _nearby_crd_files(folder: Path, limit: int = 5) -> list[Path]:
    """Files under `folder` (a few levels deep, `patches/` aside) whose text names the CRD kind."""
    hits: list[Path] = []
    for depth in range(1, NEARBY_DEPTH + 1):
        for file in sorted(folder.glob("/".join(["*"] * depth))):
            if file.suffix not in SUFFIXES or "patches" in file.parts or not file.is_file():
                continue
            try:
                text = file.read_text(errors="replace")
            except OSError:
                continue
            if "kind: CustomResourceDefinition" in text or '"kind": "CustomResourceDefinition"' in text:
                hits.append(file)
                if len(hits) == limit:
                    return hits
    return hits


def install(
    session: requests.Session, server: str, paths: Sequence[str | Path], *, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """Create each CRD, or update it in place if it exists; then wait until every one is
    Established and every served version is listed by discovery (what clients actually need)."""
    applied = apply(session, server, paths)
    wait_all_ready(session, server, applied, timeout=timeout)
    return [crd for _, crd in applied]


def apply(
    session: requests.Session, server: str, paths: Sequence[str | Path]
) -> list[tuple[Path, dict[str, Any]]]:
    """Create or update each CRD without waiting; (source file, the apiserver's answer) of each."""
    return [(path, _apply(session, server, path, crd)) for path, crd in load(paths)]


def wait_all_ready(
    session: requests.Session, server: str, applied: Sequence[tuple[Path, dict[str, Any]]], *, timeout: float
) -> None:
    """`wait_ready` for each of `apply`'s results, within one deadline."""
    deadline = time.monotonic() + timeout
    for path, crd in applied:
        wait_ready(session, server, crd, timeout=max(deadline - time.monotonic(), 1.0), source=path)


def uninstall(
    session: requests.Session, server: str, paths: Sequence[str | Path], *, timeout: float = 30.0
) -> None:
    """Delete each CRD (and so every object of it) and wait until it is gone."""
    names = [crd["metadata"]["name"] for _, crd in load(paths)]
    for name in names:
        resp = session.delete(f"{server}/{CRD_API}/{name}", timeout=10)
        if resp.status_code not in (200, 202, 404):
            raise CRDError(f"deleting CRD {name}: {resp.status_code} {_message(resp)}")
    deadline = time.monotonic() + timeout
    for name in names:
        while session.get(f"{server}/{CRD_API}/{name}", timeout=10).status_code != 404:
            if time.monotonic() > deadline:
                raise CRDError(f"CRD {name} still present {timeout:.0f}s after delete")
            time.sleep(0.2)


def _apply(session: requests.Session, server: str, path: Path, crd: dict[str, Any]) -> dict[str, Any]:
    name = crd["metadata"]["name"]
    resp = objects.create_or_replace(session, f"{server}/{CRD_API}", crd)
    if resp.status_code not in (200, 201):
        raise CRDError(
            f"{path}: CRD {name} rejected by the apiserver ({resp.status_code}): {_message(resp)}",
            status=resp.status_code,
        )
    return resp.json()


def wait_ready(
    session: requests.Session, server: str, crd: dict[str, Any], *, timeout: float, source: Path | None = None
) -> None:
    name = crd["metadata"]["name"]
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    versions = [v["name"] for v in crd["spec"]["versions"] if v.get("served", True)]
    deadline = time.monotonic() + timeout
    missing: list[str] = ["Established"]
    polls = 0
    while time.monotonic() < deadline:
        live = session.get(f"{server}/{CRD_API}/{name}", timeout=10).json()
        conditions = {c["type"]: c for c in (live.get("status") or {}).get("conditions") or []}
        missing = []
        if conditions.get("Established", {}).get("status") != "True":
            missing.append("Established")
        for version in versions:
            if not _discovered(session, f"{server}/apis/{group}/{version}", plural):
                missing.append(f"discovery of {group}/{version}")
        if not missing:
            return
        time.sleep(poll_pause(polls))
        polls += 1
    where = f"{source}: " if source else ""
    raise CRDError(f"{where}CRD {name} not ready after {timeout:.0f}s; waiting for: {', '.join(missing)}")


def _discovered(session: requests.Session, url: str, plural: str) -> bool:
    resp = session.get(url, timeout=10)
    return resp.status_code == 200 and any(r["name"] == plural for r in resp.json().get("resources", []))


def _message(resp: requests.Response) -> str:
    try:
        return str(resp.json().get("message", resp.text))
    except ValueError:
        return resp.text[:500]
