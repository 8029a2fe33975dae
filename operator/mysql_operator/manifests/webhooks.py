"""`operator/config/webhook.yaml`, `certificate.yaml` and `crd_conversion_patch.yaml`, generated
(controller-gen style: `clientConfig.service` with a path; the CA comes from cert-manager).

Certificates: cert-manager issues `SECRET` for the Service's DNS names (`certificate.yaml`: a
self-signed Issuer and a Certificate); its CA injector copies the CA into every `caBundle` of objects
annotated `cert-manager.io/inject-ca-from` — both webhook configurations and, once patched with
`crd_conversion_patch.yaml`, the CRD. Without cert-manager: create the Secret yourself
(`kubectl -n mysql-operator-system create secret tls mysql-operator-webhook-cert --cert=… --key=…`)
and put the CA's base64 PEM into each `caBundle`.

Choices, each on purpose:
- DELETE is in no rule: no admission check is worth blocking a delete, and a down webhook with
  `failurePolicy: Fail` would otherwise make clusters undeletable.
- The finalizer's removal is an UPDATE of an object already being deleted: `matchConditions` skip
  those, for the same reason (so deletes finish while the webhook is down; E2E-tested).
- Validating: `failurePolicy: Fail` — a schedule the CronJob controller cannot parse must not get in
  because the webhook was restarting (the reconciler still checks, as a second line).
- Defaulting: `failurePolicy: Fail` — it pins `spec.version` at create; a cluster created unpinned
  while the webhook restarted would follow a later operator's default over its kept data (a start then
  refuses it: `database.identity`). CREATE only, so a down webhook never blocks an edit or a delete.
- Rules name the hub (v1) with `matchPolicy: Equivalent`: v1beta1 and v1alpha1 requests are converted
  and checked too.
"""

from __future__ import annotations

from typing import Any

from ..api import v1
from ..webhooks.server import CONVERT_PATH, MUTATE_PATH, VALIDATE_PATH
from . import rbac

NAMESPACE = rbac.LEADER_ELECTION_NAMESPACE
SERVICE = "mysql-operator-webhook"
SECRET = "mysql-operator-webhook-cert"
CERTIFICATE = "mysql-operator-webhook"
INJECT_CA = {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{CERTIFICATE}"}
PORT = 9443
LABELS = {"app.kubernetes.io/name": "mysql-operator"}
NOT_BEING_DELETED = {"name": "not-being-deleted", "expression": "!has(object.metadata.deletionTimestamp)"}


def _client(path: str) -> dict[str, Any]:
    return {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": path, "port": 443}}


def _webhook(name: str, path: str, operations: list[str], policy: str) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client(path),
        "failurePolicy": policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "matchConditions": [NOT_BEING_DELETED],
        "rules": [
            {
                "apiGroups": [v1.GROUP],
                "apiVersions": [v1.VERSION],
                "operations": operations,
                "resources": [v1.PLURAL],
                "scope": "Namespaced",
            }
        ],
    }


def webhook_docs() -> list[dict[str, Any]]:
    meta = {"labels": LABELS, "annotations": INJECT_CA}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": LABELS},
            "spec": {"selector": LABELS, "ports": [{"name": "webhook", "port": 443, "targetPort": PORT}]},
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mysql-operator-defaulting", **meta},
            "webhooks": [_webhook(f"m{v1.SINGULAR}.{v1.GROUP}", MUTATE_PATH, ["CREATE"], "Fail")],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "mysql-operator-validating", **meta},
            "webhooks": [_webhook(f"v{v1.SINGULAR}.{v1.GROUP}", VALIDATE_PATH, ["CREATE", "UPDATE"], "Fail")],
        },
    ]


def certificate_docs() -> list[dict[str, Any]]:
    host = f"{SERVICE}.{NAMESPACE}.svc"
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": "mysql-operator-selfsigned", "namespace": NAMESPACE},
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": CERTIFICATE, "namespace": NAMESPACE},
            "spec": {
                "secretName": SECRET,
                "dnsNames": [host, f"{host}.cluster.local"],
                "issuerRef": {"kind": "Issuer", "name": "mysql-operator-selfsigned"},
            },
        },
    ]


def crd_conversion_patch(versions: list[dict[str, Any]]) -> dict[str, Any]:
    """A merge patch for the deployed CRD (`kubectl patch crd … --type merge --patch-file`): the
    committed CRD says strategy None and serves only the stored shape, since only the installer
    knows where conversion is served. `versions` (every version, served) replaces the list whole, in
    the same request as the webhook: a version that needs conversion is never served without it."""
    return {
        "metadata": {"annotations": INJECT_CA},
        "spec": {
            "versions": versions,
            "conversion": {
                "strategy": "Webhook",
                "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": _client(CONVERT_PATH)},
            },
        },
    }
