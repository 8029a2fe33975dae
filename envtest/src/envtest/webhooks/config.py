"""Rewrite webhook configurations and CRDs so the apiserver calls a webhook server the test runs.

Admission (per test): every webhook of a Validating/MutatingWebhookConfiguration gets

- ``clientConfig`` → ``{url: https://HOST:PORT/<path>, caBundle}``: a ``service`` reference (what
  kubebuilder/controller-gen emit) becomes a URL with the service's path; an existing URL keeps its
  path and loses its host. The apiserver cannot resolve Services of a cluster it has no nodes for, and
  the server under test runs on this host anyway.
- ``namespaceSelector`` ANDed with ``kubernetes.io/metadata.name In [<test namespace>]`` (the label the
  apiserver sets on every namespace itself): tests of other xdist workers share the plane and must not
  see this test's webhooks. It is added to ``matchExpressions``, so the user's own selector still holds.
- rules with scope ``*`` narrowed to ``Namespaced``: a namespaceSelector does not apply to
  cluster-scoped objects, so ``*`` would leak the webhook to every test. Rules that ask for ``Cluster``
  are left alone (the caller asked for a cluster-wide webhook; only a private plane isolates that).

and the configuration a per-test name (``<name>-<suffix>``) and the run label ``envtest.io/run``, so a
session sweep finds what a killed test left behind.

Conversion (per plane): `conversion_crds` sets ``spec.conversion`` of multi-version CRDs to call one
URL — see `envtest.webhooks.conversion` for why it is per plane and how the plugin runs it.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from envtest.errors import ConfigError

__all__ = [
    "ADMISSION_API",
    "NAMESPACE_NAME_LABEL",
    "RUN_LABEL",
    "WEBHOOK_KINDS",
    "client_config",
    "conversion_crds",
    "for_test",
    "load",
    "scope_to_namespace",
]

ADMISSION_API = "admissionregistration.k8s.io/v1"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
RUN_LABEL = "envtest.io/run"
NAMESPACE_LABEL = "envtest.io/namespace"
"""Label naming the test namespace a configuration was scoped to (for artifacts and humans)."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
MAX_NAME = 253
SUFFIXES = (".yaml", ".yml", ".json")

Source = str | Path | Mapping[str, Any]


def load(sources: Iterable[Source]) -> list[dict[str, Any]]:
    """Webhook configurations from files, directories (non-recursive) and dicts, in order.

    Documents of other kinds are skipped, like controller-runtime does: ``config/webhook`` output from
    kustomize carries the Service beside the configurations. A webhook kind at another apiVersion is an
    error, since v1beta1 was removed in Kubernetes 1.22.
    """
    found: list[dict[str, Any]] = []
    for source in sources:
        if isinstance(source, Mapping):
            found += _accept([(None, dict(source))])
            continue
        path = Path(source)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES)
        elif path.is_file():
            files = [path]
        else:
            raise ConfigError(f"{path}: no such file or directory")
        for file in files:
            try:
                docs = [d for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict)]
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(f"{file}: cannot read webhook configurations: {exc}") from exc
            found += _accept([(file, d) for d in docs])
    return found


def _accept(docs: list[tuple[Path | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for where, doc in docs:
        if doc.get("kind") not in WEBHOOK_KINDS:
            continue
        if doc.get("apiVersion") != ADMISSION_API:
            raise ConfigError(
                f"{where or 'webhook configuration'}: {doc['kind']} must be {ADMISSION_API}, "
                f"not {doc.get('apiVersion')!r}"
            )
        out.append(copy.deepcopy(doc))
    return out


def ca_bundle(ca_pem: bytes) -> str:
    """The base64 form the API expects in ``caBundle`` (JSON has no bytes)."""
    return base64.b64encode(ca_pem).decode()


def client_config(current: Mapping[str, Any], base_url: str, ca_pem: bytes) -> dict[str, Any]:
    """``clientConfig`` pointing at ``base_url`` (``https://HOST:PORT``) with the path the webhook had."""
    if current.get("service"):
        path = current["service"].get("path") or "/"
    elif current.get("url"):
        path = urlsplit(current["url"]).path or "/"
    else:
        raise ConfigError(f"clientConfig has neither service nor url: {dict(current)}")
    return {"url": base_url.rstrip("/") + "/" + path.lstrip("/"), "caBundle": ca_bundle(ca_pem)}


def scope_to_namespace(selector: Mapping[str, Any] | None, namespace: str) -> dict[str, Any]:
    """``selector`` AND "the namespace is ``namespace``" (a new dict; the input is left alone)."""
    merged = copy.deepcopy(dict(selector or {}))
    expressions = merged.setdefault("matchExpressions", [])
    expressions.append({"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [namespace]})
    return merged


def for_test(
    doc: Mapping[str, Any],
    *,
    base_url: str,
    ca_pem: bytes,
    namespace: str,
    suffix: str,
    run_id: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A copy of one webhook configuration, rewritten for one test (see the module docstring);
    ``labels`` are added to the run label (the plugin adds its worker label, which its sweep selects)."""
    out = copy.deepcopy(dict(doc))
    meta = out.setdefault("metadata", {})
    name = f"{meta.get('name') or out['kind'].lower()}-{suffix}"
    if len(name) > MAX_NAME:
        raise ConfigError(f"webhook configuration name {name!r} is longer than {MAX_NAME} characters")
    # Server-owned fields of a configuration read back from a cluster would make the create fail.
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        meta.pop(key, None)
    meta["name"] = name
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **(labels or {}),
        RUN_LABEL: run_id,
        NAMESPACE_LABEL: namespace,
    }
    for hook in out.get("webhooks") or []:
        hook["clientConfig"] = client_config(hook.get("clientConfig") or {}, base_url, ca_pem)
        hook["namespaceSelector"] = scope_to_namespace(hook.get("namespaceSelector"), namespace)
        for rule in hook.get("rules") or []:
            if rule.get("scope", "*") == "*":
                rule["scope"] = "Namespaced"
    return out


def conversion_crds(
    crd_docs: Iterable[Mapping[str, Any]], url: str, ca_bundle_pem: bytes
) -> list[dict[str, Any]]:
    """Copies of ``crd_docs`` whose multi-version CRDs convert through the webhook at ``url``.

    ``url`` is the full endpoint (``https://HOST:PORT/convert``). Single-version CRDs are returned
    unchanged: the apiserver never converts them, and their manifest should stay what the user wrote.
    ``conversionReviewVersions`` is ``[v1]`` only; v1beta1 reviews went with apiextensions v1beta1.
    """
    out = []
    for doc in crd_docs:
        crd = copy.deepcopy(dict(doc))
        if crd.get("kind") != "CustomResourceDefinition":
            raise ConfigError(f"conversion_crds: expected CustomResourceDefinition, got {crd.get('kind')!r}")
        if len(crd["spec"].get("versions") or []) > 1:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {"url": url, "caBundle": ca_bundle(ca_bundle_pem)},
                },
            }
        out.append(crd)
    return out
