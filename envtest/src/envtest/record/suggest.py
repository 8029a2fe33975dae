"""`envtest rbac suggest RECORD`: the least RBAC roles that allow every request a record holds, the
way audit2rbac turns an audit log into roles.

RECORD is any of: the run's report (`rbac-usage.json`), one test's `record/requests.jsonl`, an
artifacts folder (every `record/requests.jsonl` under it), or a kube-apiserver audit log (JSON lines
of audit.k8s.io Events; `--user` picks the identity, default every envtest operator identity).

Two roles come out. `<name>` holds what was asked inside a namespace: bind it with a RoleBinding in
each namespace the operator serves (`--role` makes it a Role). `<name>-cluster` holds cluster-scoped
resources, requests across all namespaces and non-resource URLs: bind it with a ClusterRoleBinding.
Rules are compacted per API group (resources with the same verbs share a rule). A verb that only
ever named one cluster-scoped object is limited to it with resourceNames (a create never is: the
authorizer sees no name then). Unlike audit2rbac, namespaced objects never are: in a test suite
their names are the tests' data (`sample`), not names production would use. Requests denied when
recorded are included (the operator needed them); what every authenticated user may do already
(discovery, self reviews) is left out, and what no request shows (the owner's `finalizers` update
that admission checks for blockOwnerDeletion) is named in a comment, not granted. An exec, attach or
port-forward over WebSocket is recorded as `get` but also authorized as `create` (Kubernetes 1.35+):
both are suggested.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from envtest.errors import ConfigError
from envtest.record import events
from envtest.record.usage import Shape, Usage, checked_verbs

VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
EVERYONE_URLS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/version",
    "/healthz",
    "/livez",
    "/readyz",
    "/openapi/*",
)
"""Non-resource URLs the bootstrap system:discovery / system:public-info-viewer roles give everyone."""
EVERYONE_RESOURCES = {
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
}
"""Created by every authenticated user (system:basic-user)."""

Seen = dict[Shape, set[str] | None]
"""Each request shape → the names the authorizer saw (None: too many to keep)."""
NAMES_KEPT = 5
"""More names than this for one request shape: the rule is not limited by `resourceNames`."""


def _everyones(shape: Shape) -> bool:
    if not shape.resource:
        return any(
            u == shape.path or (u.endswith("*") and shape.path.startswith(u[:-1])) for u in EVERYONE_URLS
        )
    return (shape.group, shape.resource) in EVERYONE_RESOURCES


def _from_requests(requests: Iterable[events.Request]) -> tuple[Seen, int, int]:
    usage = Usage()
    operators: set[str] = set()
    items = []
    for r in requests:
        operators.add(r.user)
        items.append(r)
    usage.add("record", items, operators)
    return _from_usage(usage)


def _from_usage(usage: Usage) -> tuple[Seen, int, int]:
    seen: Seen = {}
    denied = 0
    for (shape, _, code), count in usage.counts.items():
        names = usage.names.get(shape, set())
        seen[shape] = set(names) if len(names) <= NAMES_KEPT else None
        denied += count if code == 403 else 0
    return seen, usage.requests, denied


def _from_report(data: dict[str, Any]) -> tuple[Seen, int, int]:
    seen: Seen = {}
    for entry in data.get("exercised") or []:
        names = entry.get("names")
        seen[Shape.from_json(entry)] = set(names) if isinstance(names, list) else None
    denied = sum(int(d.get("count", 0)) for d in data.get("denied") or [])
    return seen, int(data.get("requests", 0)), denied


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                yield number, line


def _read_lines(path: Path, user: str | None) -> Iterator[events.Request]:
    for number, line in _lines(path):
        try:
            data = json.loads(line)
        except ValueError:
            raise ConfigError(f"{path}:{number}: not a JSON line") from None
        if isinstance(data, dict) and data.get("kind") == "Event":
            request = events.from_event(data)
            wanted = (lambda u: u == user) if user else (lambda u: events.operator_namespace(u) is not None)
            if request is not None and wanted(request.user):
                yield request
            continue
        request = events.Request.from_json(data) if isinstance(data, dict) else None
        if request is None:
            raise ConfigError(f"{path}:{number}: neither an audit Event nor a recorded request")
        if user is None or request.user == user:
            yield request


def load(path: Path, user: str | None = None) -> tuple[Seen, int, int]:
    """(request shapes with their names, requests, denied requests) of the record at `path`."""
    if path.is_dir():
        files = sorted(path.rglob("record/requests.jsonl"))
        if not files:
            raise ConfigError(f"{path}: no record/requests.jsonl under it (run with --envtest-record=all)")
        return _from_requests(r for f in files for r in _read_lines(f, user))
    if not path.is_file():
        raise ConfigError(f"{path}: no such file or folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        data = None
    if isinstance(data, dict) and "exercised" in data:
        return _from_report(data)
    return _from_requests(_read_lines(path, user))


def load_all(paths: Iterable[Path], user: str | None = None) -> tuple[Seen, int, int]:
    """`load` of several records at once (a local run's and a kind run's, say): every shape either
    saw, with the names both saw (None when either kept too many), the requests and denials summed."""
    seen: Seen = {}
    total = denied = 0
    for path in paths:
        more, n, d = load(path, user)
        total, denied = total + n, denied + d
        for shape, names in more.items():
            if shape not in seen:
                seen[shape] = None if names is None else set(names)
            elif seen[shape] is not None:
                merged = None if names is None else seen[shape] | names  # type: ignore[operator]
                seen[shape] = merged if merged is None or len(merged) <= NAMES_KEPT else None
    return seen, total, denied


def _verbs(verbs: Iterable[str]) -> list[str]:
    return sorted(set(verbs), key=lambda v: (VERB_ORDER.index(v) if v in VERB_ORDER else len(VERB_ORDER), v))


def rules_for(seen: Seen, *, namespaced: bool) -> list[dict[str, Any]]:
    """The compact rules that allow every shape in `seen` (see the module's docstring)."""
    by_resource: dict[tuple[str, str], dict[str, set[str] | None]] = defaultdict(dict)
    urls: dict[str, set[str]] = defaultdict(set)
    for shape, names in seen.items():
        if _everyones(shape):
            continue
        if not shape.resource:
            urls[shape.path].add(shape.verb)
            continue
        res = f"{shape.resource}/{shape.subresource}" if shape.subresource else shape.resource
        for verb in checked_verbs(shape):  # one shape per verb within a scope
            by_resource[(shape.group, res)][verb] = names
    named: dict[tuple[str, str, tuple[str, ...]], set[str]] = defaultdict(set)  # (group, res, names) → verbs
    unnamed: dict[tuple[str, frozenset[str]], list[str]] = defaultdict(list)  # (group, verbs) → resources
    for (group, res), verbs in sorted(by_resource.items()):
        free = set()
        for verb, names in verbs.items():
            one = (
                not namespaced
                and names is not None
                and len(names) == 1
                and "" not in names
                and verb not in events.UNNAMED
            )
            if one:
                named[(group, res, tuple(sorted(names)))].add(verb)  # type: ignore[arg-type]
            else:
                free.add(verb)
        if free:
            unnamed[(group, frozenset(free))].append(res)
    out: list[dict[str, Any]] = []
    for (group, verbs), resources in sorted(unnamed.items(), key=lambda i: (i[0][0], sorted(i[1]))):
        out.append({"apiGroups": [group], "resources": sorted(resources), "verbs": _verbs(verbs)})
    for (group, res, names), verbs in sorted(named.items()):
        out.append(
            {"apiGroups": [group], "resources": [res], "resourceNames": list(names), "verbs": _verbs(verbs)}
        )
    out.sort(key=lambda r: (r["apiGroups"][0], r["resources"][0]))
    by_verbs: dict[frozenset[str], list[str]] = defaultdict(list)
    for url, verbs in urls.items():
        by_verbs[frozenset(verbs)].append(url)
    for verbs, paths in sorted(by_verbs.items(), key=lambda i: sorted(i[1])):
        out.append({"nonResourceURLs": sorted(paths), "verbs": _verbs(verbs)})
    return out


def roles(seen: Seen, name: str, *, role: bool = False) -> list[dict[str, Any]]:
    """`<name>` for the namespaced requests, `<name>-cluster` for the rest; either left out if empty."""
    inside = {s: n for s, n in seen.items() if s.namespaced}
    outside = {s: n for s, n in seen.items() if not s.namespaced}
    docs = []
    for kind, role_name, part in (
        ("Role" if role else "ClusterRole", name, inside),
        ("ClusterRole", f"{name}-cluster", outside),
    ):
        found = rules_for(part, namespaced=part is inside)
        if found:
            docs.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": role_name},
                    "rules": found,
                }
            )
    return docs


def render(path: Path | Sequence[Path], name: str, *, role: bool = False, user: str | None = None) -> str:
    paths = [path] if isinstance(path, Path) else list(path)
    seen, total, denied = load_all(paths, user)
    docs = roles(seen, name, role=role)
    head = [
        f"# `envtest rbac suggest {' '.join(map(str, paths))}`: the least rules that allow the {total} "
        "requests recorded",
        f"# ({denied} of them denied then); discovery and self-reviews, which everyone may make, left out.",
        "# Not in any request, so not here: `update <owner resource>/finalizers`, which the apiserver checks",
        "# when an object the operator writes has an ownerReference with blockOwnerDeletion: add it if so.",
    ]
    if not docs:
        return "\n".join([*head, "# nothing to grant"]) + "\n"
    notes = {
        name: f"# {name}: requests inside a namespace; a RoleBinding in each namespace served grants it.",
        f"{name}-cluster": f"# {name}-cluster: cluster-wide requests; bind it with a ClusterRoleBinding.",
    }
    body = [notes[d["metadata"]["name"]] + "\n" + yaml.safe_dump(d, sort_keys=False) for d in docs]
    return "\n".join(head) + "\n" + "---\n".join(body)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("rbac", help="RBAC from the record: the least roles an operator needs")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = actions.add_parser("suggest", help="print the least Role/ClusterRole covering a record's requests")
    s.add_argument(
        "record",
        type=Path,
        nargs="+",
        help="rbac-usage.json, a requests.jsonl, an artifacts folder or an audit log; several: their union",
    )
    s.add_argument("--name", default="operator", help="name of the roles (default: operator)")
    s.add_argument(
        "--role", action="store_true", help="the namespaced part as a Role instead of a ClusterRole"
    )
    s.add_argument("--user", help="in an audit log: this identity (default: every envtest operator identity)")
    p.set_defaults(func=cmd_rbac)


def cmd_rbac(args: argparse.Namespace) -> int:
    print(render(args.record, args.name, role=args.role, user=args.user), end="")
    return 0
