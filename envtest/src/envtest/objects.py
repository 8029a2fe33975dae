"""Small generic operations on live objects shared by the plugin's fixtures: server-side apply of
manifests, and listing/deleting the custom resources of a namespace."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import requests
import yaml
from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_random_exponential

from envtest.errors import ConfigError, EnvtestError

FIELD_MANAGER = "envtest"


def load_manifests(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in paths:
        files = (
            sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        )
        for file in files:
            try:
                docs += [(file, d) for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict)]
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(f"{file}: cannot read manifest: {exc}") from exc
    return docs


def resource_url(session: requests.Session, server: str, obj: dict[str, Any]) -> str:
    """The object's URL, found through discovery (so any kind the server serves works)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    base = f"{server}/api/{api_version}" if "/" not in api_version else f"{server}/apis/{api_version}"
    resp = session.get(base, timeout=10)
    resp.raise_for_status()
    for res in resp.json()["resources"]:
        if res["kind"] == kind and "/" not in res["name"]:
            ns = obj["metadata"].get("namespace")
            scope = f"/namespaces/{ns}" if res["namespaced"] and ns else ""
            return f"{base}{scope}/{res['name']}/{obj['metadata']['name']}"
    raise EnvtestError(f"the server does not serve {kind} in {api_version}")


def apply(
    session: requests.Session,
    server: str,
    obj: dict[str, Any],
    *,
    source: Path | None = None,
    url: str | None = None,
) -> None:
    """Server-side apply: idempotent and safe when several xdist workers apply the same object.
    `url` spares the discovery request when the caller knows where the object lives."""
    url = url or resource_url(session, server, obj)
    resp = session.patch(
        url,
        data=json.dumps(obj),
        params={"fieldManager": FIELD_MANAGER, "force": "true"},
        headers={"Content-Type": "application/apply-patch+yaml"},
        timeout=30,
    )
    if resp.status_code not in (200, 201):
        where = f"{source}: " if source else ""
        raise EnvtestError(
            f"{where}applying {obj['kind']}/{obj['metadata']['name']} failed "
            f"({resp.status_code}): {resp.text[:300]}"
        )


REPLACE_ATTEMPTS = 8


def create_or_replace(
    session: requests.Session,
    collection: str,
    doc: dict[str, Any],
    *,
    attempts: int = REPLACE_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> requests.Response:
    """Create `doc` in `collection` (a URL), or replace the object of that name with it; the last
    answer is returned for the caller to judge.

    A replace carries the resourceVersion just read, so it can meet a 409 Conflict: another run
    installing the same CRDs, or the apiserver's own controllers writing a CRD's status right after
    it was created. Then it is read and tried again, as client-go's RetryOnConflict does; an object
    deleted in between is created again."""
    url = f"{collection}/{doc['metadata']['name']}"

    def once() -> tuple[str, requests.Response]:
        resp = session.post(collection, json=doc, timeout=30)
        if resp.status_code != 409:  # created, or refused for a reason a retry cannot change
            return "POST", resp
        current = session.get(url, timeout=10)
        if current.status_code != 200:
            return "GET", current
        update = copy.deepcopy(doc)
        update["metadata"]["resourceVersion"] = current.json()["metadata"]["resourceVersion"]
        return "PUT", session.put(url, json=update, timeout=30)

    def lost_a_race(outcome: tuple[str, requests.Response]) -> bool:
        method, resp = outcome
        return resp.status_code == 409 or (resp.status_code == 404 and method != "POST")

    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_result(lost_a_race),
        retry_error_callback=lambda state: state.outcome.result(),  # type: ignore[union-attr]
        sleep=sleep,
    )
    return retrying(once)[1]


def custom_resource_paths(crds: Iterable[dict[str, Any]], *, scope: str = "Namespaced") -> list[str]:
    """`apis/<group>/<version>/<plural>` for the storage version of each CRD of `scope`
    (`Namespaced`, or `Cluster`)."""
    paths = []
    for crd in crds:
        spec = crd["spec"]
        if spec.get("scope", "Namespaced") != scope:
            continue
        version = next((v["name"] for v in spec["versions"] if v.get("storage")), spec["versions"][0]["name"])
        paths.append(f"apis/{spec['group']}/{version}/{spec['names']['plural']}")
    return paths


def namespaced_url(server: str, path: str, namespace: str) -> str:
    """`apis/<group>/<version>/<plural>` in `namespace`: `…/<version>/namespaces/<ns>/<plural>`."""
    prefix, plural = path.rsplit("/", 1)
    return f"{server}/{prefix}/namespaces/{namespace}/{plural}"


def strip_finalizers(session: requests.Session, server: str, namespace: str, paths: list[str]) -> None:
    """Last resort so a namespace can go away when its operator could not finish (e.g. it crashed)."""
    for path in paths:
        url = namespaced_url(server, path, namespace)
        for item in _items(session, url):
            if item["metadata"].get("finalizers"):
                clear_finalizers(session, f"{url}/{item['metadata']['name']}")


def clear_finalizers(session: requests.Session, url: str) -> None:
    """Remove every finalizer of the object at `url` (a merge patch of null; gone already is fine)."""
    session.patch(
        url,
        data=json.dumps({"metadata": {"finalizers": None}}),
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=10,
    )


def _items(session: requests.Session, url: str) -> list[dict[str, Any]]:
    resp = session.get(url, timeout=10)
    return resp.json().get("items", []) if resp.status_code == 200 else []
