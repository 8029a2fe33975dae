"""Reset: put a running plane back to what it held at a reset point, in a fraction of a new start.

A reset point is what the plane's etcd holds under `/registry/` at one moment: every key and value,
read in one request. Resetting deletes every key made since and writes back every key changed or
deleted since, straight in etcd, while kube-apiserver, kube-controller-manager, the scheduler and
kwok keep running. kube-apiserver watches etcd, so its caches, its watchers and every informer see
the reset as ordinary events, and revisions only go forward: no process restarts and no client
sees time run backwards.

Left alone are keys whose holders keep renewing them (coordination Leases, the apiserver's peer
leases) and keys with an etcd lease (Events expire by themselves): those present at the point stay
as they are, those made since are deleted. Passes repeat, SETTLE apart, until one finds nothing to
do: what a controller writes in reaction meanwhile is undone by the next one.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from envtest.errors import EnvtestError
from envtest.loopback import direct_session
from envtest.plane.etcdkv import b64, prefix_end

PREFIX = b"/registry/"
"""kube-apiserver's keys (its default --etcd-prefix); its compaction marker lives outside and stays."""

LIVE_PREFIXES: tuple[bytes, ...] = (
    # Renewed every few seconds by their holders (kwok's node, the apiserver's identity): writing an
    # old copy back would only make them stale.
    b"/registry/leases/",
    b"/registry/peerserverleases/",
)


MAX_TXN_OPS = 128
"""etcd's default --max-txn-ops: a reset writes in transactions of at most this many operations."""

MAX_TXN_BYTES = 1024 * 1024
"""Values per transaction, under etcd's default --max-request-bytes (1.5 MiB) with room for the rest."""

MAX_PASSES = 10
"""Passes before giving up: each one after the first only mends what processes wrote meanwhile."""

SETTLE = 0.05
"""Seconds between passes, so what controllers still do in reaction lands before the next look."""

QUIET = 0.3
"""Seconds without a write (but to live keys) before a settled point is taken."""

SETTLE_TIMEOUT = 10.0
"""Seconds a settled point waits for the plane to go quiet (then it is taken as it is)."""

LATE_KEYS: tuple[bytes, ...] = (
    # Made by kube-apiserver once all of /readyz is ok, which a template plane reports ready before
    # (envtest.plane.template): a point without it would have every reset delete it.
    b"/registry/services/specs/default/kubernetes",
)


def crd_keys(crds: Iterable[Mapping[str, Any]]) -> set[bytes]:
    """The keys applying these CRDs writes: each CRD's, and the APIService kube-apiserver registers for
    each of its served versions (it would make that again after a reset that deleted it)."""
    keys: set[bytes] = set()
    for crd in crds:
        keys.add(
            f"/registry/apiextensions.k8s.io/customresourcedefinitions/{crd['metadata']['name']}".encode()
        )
        group = crd.get("spec", {}).get("group", "")
        for version in crd.get("spec", {}).get("versions") or []:
            keys.add(f"/registry/apiregistration.k8s.io/apiservices/{version['name']}.{group}".encode())
    return keys


class ResetError(EnvtestError):
    """The plane could not be put back to its reset point."""


@dataclass(frozen=True)
class ResetPoint:
    """Every key under /registry/ and its value at one etcd revision (live keys: only that they existed)."""

    revision: int
    values: Mapping[bytes, bytes]
    live: frozenset[bytes] = frozenset()

    @classmethod
    def capture(cls, etcd_url: str) -> ResetPoint:
        """What the plane holds now."""
        with direct_session() as session:
            revision, kvs = _range(session, etcd_url)
        return cls._of(revision, kvs)

    @classmethod
    def settled(
        cls,
        etcd_url: str,
        *,
        quiet: float = QUIET,
        timeout: float = SETTLE_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> ResetPoint:
        """What the plane holds once its components are done with their start: LATE_KEYS there and no
        key but live ones written for ``quiet`` seconds (or ``timeout`` passed). A point taken while
        kube-controller-manager still makes each namespace's ServiceAccount and root CA would have
        every reset delete them and the controller make them again, pass after pass."""
        deadline = clock() + timeout
        with direct_session() as session:
            revision, kvs = _range(session, etcd_url)
            quiet_since = clock()
            while clock() < deadline:
                stamp = _stamp(kvs)
                if clock() - quiet_since >= quiet and all(k in kvs for k in LATE_KEYS):
                    break
                sleep(min(0.05, quiet))
                revision, kvs = _range(session, etcd_url)
                if _stamp(kvs) != stamp:
                    quiet_since = clock()
        return cls._of(revision, kvs)

    @classmethod
    def _of(cls, revision: int, kvs: Mapping[bytes, Mapping[str, Any]]) -> ResetPoint:
        values, live = {}, set()
        for key, kv in kvs.items():
            if _is_live(key, kv):
                live.add(key)
            else:
                values[key] = base64.b64decode(kv.get("value", ""))
        return cls(revision, values, frozenset(live))

    def with_keys_of(self, other: ResetPoint, keys: Collection[bytes]) -> ResetPoint:
        """This point, with ``other``'s value of each of ``keys`` instead of its own (one ``other`` lacks
        is dropped: it is not on the plane either): CRDs applied since, and the rest kept as it was."""
        values = {k: v for k, v in self.values.items() if k not in keys}
        values |= {k: other.values[k] for k in keys if k in other.values}
        return ResetPoint(other.revision, values, self.live)

    def save(self, path: Path) -> None:
        """As JSON (keys and values in base64), written beside and renamed: never half a point."""
        data = {
            "revision": self.revision,
            "values": {b64(k): b64(v) for k, v in self.values.items()},
            "live": sorted(b64(k) for k in self.live),
        }
        staging = path.with_name(f".{path.name}.tmp")
        staging.write_text(json.dumps(data))
        staging.chmod(0o600)  # Secrets' values are in it
        staging.replace(path)

    @classmethod
    def load(cls, path: Path) -> ResetPoint:
        try:
            data = json.loads(path.read_text())
            values = {base64.b64decode(k): base64.b64decode(v) for k, v in data["values"].items()}
            return cls(int(data["revision"]), values, frozenset(base64.b64decode(k) for k in data["live"]))
        except FileNotFoundError:
            raise ResetError(f"{path}: no reset point (the plane was started by an older envtest)") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ResetError(f"{path}: not a reset point ({exc})") from None


@dataclass
class ResetReport:
    deleted: int = 0
    """Objects deleted (each counted once, however many passes deleted it)."""
    restored: int = 0
    """Objects written back (each counted once)."""
    passes: int = 0
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)
    """Objects deleted or restored per resource (`pods`, `namespaces`, …)."""

    def summary(self) -> str:
        top = ", ".join(f"{n} {kind}" for kind, n in sorted(self.kinds.items(), key=lambda kv: -kv[1])[:5])
        return (
            f"{_count(self.deleted, 'object')} deleted, {self.restored} restored in {self.seconds:.2f}s "
            f"({_count(self.passes, 'pass')}){': ' + top if top else ''}"
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "es" if noun.endswith("s") else "s")


def reset_to(etcd_url: str, point: ResetPoint, *, max_passes: int = MAX_PASSES) -> ResetReport:
    """Put the plane whose etcd is at ``etcd_url`` back to ``point``: passes until one finds nothing
    to do. Raises ResetError when writers keep changing it (an operator still running)."""
    max_passes = max(max_passes, 0)
    report = ResetReport()
    deleted: set[bytes] = set()
    restored: set[bytes] = set()
    began = time.monotonic()
    with direct_session() as session:
        for _ in range(max_passes + 1):  # the last pass only looks
            _, current = _range(session, etcd_url)
            ops = list(_operations(point, current))
            report.passes += 1
            if not ops:
                report.deleted, report.restored = len(deleted), len(restored)
                for key in deleted | restored:
                    kind = _resource(key)
                    report.kinds[kind] = report.kinds.get(kind, 0) + 1
                report.seconds = time.monotonic() - began
                return report
            if report.passes > max_passes:
                break
            for batch in _batches([op for _, op in ops]):
                _txn(session, etcd_url, batch)
            for key, op in ops:
                (restored if "request_put" in op else deleted).add(key)
            time.sleep(SETTLE)
    left = [key.decode(errors="replace") for key, _ in ops]
    raise ResetError(
        f"the plane kept changing during {max_passes} reset passes; still differing: "
        f"{', '.join(left[:5])}{' …' if len(left) > 5 else ''} (is an operator or a test still writing?)"
    )


def _operations(
    point: ResetPoint, current: Mapping[bytes, Mapping[str, Any]]
) -> Iterator[tuple[bytes, dict[str, Any]]]:
    for key in sorted(k for k in current if k not in point.values and k not in point.live):
        yield key, {"request_delete_range": {"key": b64(key)}}
    for key, value in point.values.items():
        kv = current.get(key)
        if kv is None or base64.b64decode(kv.get("value", "")) != value:
            yield key, {"request_put": {"key": b64(key), "value": b64(value)}}


def _batches(ops: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """In order, as few transactions as etcd's limits on operations and request size allow."""
    batch: list[dict[str, Any]] = []
    size = 0
    for op in ops:
        op_size = len(op.get("request_put", {}).get("value", ""))
        if batch and (len(batch) == MAX_TXN_OPS or size + op_size > MAX_TXN_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(op)
        size += op_size
    if batch:
        yield batch


def _stamp(kvs: Mapping[bytes, Mapping[str, Any]]) -> dict[bytes, str]:
    """Each key's last write, live keys left out: equal stamps mean nothing but their holders wrote."""
    return {key: str(kv.get("mod_revision")) for key, kv in kvs.items() if not _is_live(key, kv)}


def _is_live(key: bytes, kv: Mapping[str, Any]) -> bool:
    return key.startswith(LIVE_PREFIXES) or int(kv.get("lease", 0) or 0) != 0


def _resource(key: bytes) -> str:
    parts = key[len(PREFIX) :].split(b"/")
    # /registry/<resource>/… or /registry/<group>/<resource>/… (CRDs' objects, apiregistration, …)
    name = parts[1] if b"." in parts[0] and len(parts) > 2 else parts[0]
    return name.decode(errors="replace")


def _range(session: requests.Session, etcd_url: str) -> tuple[int, dict[bytes, dict[str, Any]]]:
    body = {"key": b64(PREFIX), "range_end": b64(prefix_end(PREFIX))}
    answer = _post(session, f"{etcd_url}/v3/kv/range", body)
    kvs = {base64.b64decode(kv["key"]): kv for kv in answer.get("kvs", [])}
    return int(answer["header"]["revision"]), kvs


def _txn(session: requests.Session, etcd_url: str, ops: list[dict[str, Any]]) -> None:
    _post(session, f"{etcd_url}/v3/kv/txn", {"success": ops})


def _post(session: requests.Session, url: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        resp = session.post(url, json=body, timeout=30)
    except requests.RequestException as exc:
        raise ResetError(f"etcd at {url.split('/v3/')[0]} did not answer: {exc}") from None
    if resp.status_code != 200:
        raise ResetError(f"etcd refused {url.rsplit('/', 1)[-1]}: {resp.status_code} {resp.text[:300]}")
    return dict(resp.json())
