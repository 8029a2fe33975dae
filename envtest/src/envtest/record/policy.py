"""kube-apiserver's audit policy for the record, and the flags that turn it on.

The record is the apiserver's own audit log: no proxy sits between the operator and the apiserver,
so nothing changes the requests it records. What the policy keeps, first matching rule wins:

1. the harness's sync markers (`SYNC_PATH`): a reader knows the log holds everything before one;
2. nothing of the cluster's own ServiceAccounts (kube-system's controllers on kind, …);
3. Secrets, ServiceAccount tokens and TokenReviews of every other ServiceAccount at Metadata,
   whatever level the user chose below: their bodies are credentials, never written to a log or an
   artifact (rule 6 records other users' writes at Metadata only);
4. every request of every other ServiceAccount (the operators under test; each test's is its own
   `system:serviceaccount:<test namespace>:envtest-operator`), at Metadata, or with bodies when
   asked (`bodies=True`: RequestResponse);
5. nothing of anyone else's reads, nor of the harness's bookkeeping writes (namespaces,
   ServiceAccounts, RBAC, access reviews, leases, events): the harness's admin and the control
   plane's components read far more than the operators do, and none of it says what an operator did;
6. the remaining writes of anyone else (a test's client changing a custom resource, the
   controller-manager scaling a StatefulSet), at Metadata: the hot-loop check needs to know that
   somebody else changed an object the operator keeps writing (see `envtest.record.hotloop`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SYNC_PATH = "/envtest-record-sync"
"""Non-resource path the harness GETs (a 404) to mark a point in the log; see `envtest.record.book`."""
POLICY_FILE = "audit-policy.yaml"
LOG_FILE = "audit.log"

CREDENTIALS = [
    {"group": "", "resources": ["secrets", "serviceaccounts/token"]},
    {"group": "authentication.k8s.io", "resources": ["tokenreviews"]},
]
"""Never more than Metadata: the bodies of these requests or responses are credentials."""
SYSTEM_SERVICE_ACCOUNTS = [
    "system:serviceaccounts:kube-system",
    "system:serviceaccounts:kube-public",
    "system:serviceaccounts:kube-node-lease",
    "system:serviceaccounts:local-path-storage",
]
"""The cluster's own controllers on kind (kube-controller-manager uses one ServiceAccount per
controller there): they would fill the log with traffic no test made."""
READS = ["get", "list", "watch"]
BOOKKEEPING = [
    {"group": "", "resources": ["namespaces", "namespaces/*", "serviceaccounts", "serviceaccounts/*"]},
    {"group": "", "resources": ["events"]},
    {"group": "rbac.authorization.k8s.io"},
    {"group": "authorization.k8s.io"},
    {"group": "authentication.k8s.io"},
    {"group": "coordination.k8s.io"},
    {"group": "events.k8s.io"},
]

APISERVER_FLAGS = {
    # blocking: each event is written (one small buffered file write) before the request's response
    # leaves the apiserver, so a reader that saw a request's answer finds its event already in the
    # file. A batching backend would hold events back for up to its max wait: every test's record
    # would then wait that long at teardown, for microseconds saved per request.
    "audit-log-mode": "blocking",
    "audit-log-format": "json",
    # Rotation (by size; old files kept beside it, uncompressed) bounds a long-lived kept plane's
    # disk; the reader follows a rotation (see envtest.record.follow).
    "audit-log-maxsize": "200",
    "audit-log-maxbackup": "2",
    # Large request bodies (RequestResponse) are cut rather than dropping the event.
    "audit-log-truncate-enabled": "true",
}
"""kube-apiserver flags besides the two paths, each with its reason."""


def document(bodies: bool = False) -> dict[str, Any]:
    """The audit.k8s.io/v1 Policy described in this module's docstring."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        # One event per request (two for a watch: its start and its end); RequestReceived adds
        # nothing the later stages do not carry.
        "omitStages": ["RequestReceived"],
        "omitManagedFields": True,
        "rules": [
            {"level": "Metadata", "nonResourceURLs": [f"{SYNC_PATH}/*"]},
            {"level": "None", "userGroups": SYSTEM_SERVICE_ACCOUNTS},
            {"level": "Metadata", "userGroups": ["system:serviceaccounts"], "resources": CREDENTIALS},
            {"level": "RequestResponse" if bodies else "Metadata", "userGroups": ["system:serviceaccounts"]},
            {"level": "None", "verbs": READS},
            {"level": "None", "resources": BOOKKEEPING},
            {"level": "None", "nonResourceURLs": ["*"]},
            {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        ],
    }


def write(directory: Path, bodies: bool = False) -> Path:
    """The policy file in `directory` (created); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / POLICY_FILE
    header = "# kube-apiserver audit policy of envtest's record (envtest.record.policy)\n"
    path.write_text(header + yaml.safe_dump(document(bodies), sort_keys=False))
    return path


def apiserver_flags(policy_file: str | Path, log_file: str | Path) -> dict[str, str]:
    """The flags that make kube-apiserver write the record to `log_file`."""
    return {"audit-policy-file": str(policy_file), "audit-log-path": str(log_file), **APISERVER_FLAGS}
