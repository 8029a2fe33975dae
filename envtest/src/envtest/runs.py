"""Runs on clusters that outlive them (kind, existing, kept planes): what each run owns, whether the
process that owns it is alive, and the sweep that removes what dead runs left.

Everything the harness creates on a cluster carries two labels: the run (shared by every xdist
worker) and the creating process (`gw0`, `gw1`, … or `main`). Each such process also keeps a **run
record** while it uses the cluster: a Lease `<run>-<worker>` in namespace `envtest-runs` whose holder
names its host, pid and process start time, renewed every `HEARTBEAT` seconds.

A (run, worker) pair is **provably dead** when

- its record's holder is on this host and that process is gone (no such pid, or a pid reused by a
  process that started at another time) — known at once, whatever the heartbeat says; or
- its holder is on another host and the heartbeat is older than `STALE_AFTER` seconds, judged by the
  apiserver's own clock (the `Date` of its answer), so a skewed local clock cannot kill a live run; or
- it has no record at all and every object it labelled is older than `STALE_AFTER` (a run records
  itself before it creates anything, so only a record already swept, or a run of a harness without
  records, leaves objects without one).

Anything else is live and never touched. The sweep (`envtest sweep`, and every process's session
start on such clusters) deletes the dead pairs' namespaces — stripping their custom resources'
finalizers first, since no operator is left to process them — their ClusterRoles,
ClusterRoleBindings and webhook configurations, then their records.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import psutil
import requests

from envtest import objects
from envtest.errors import EnvtestError, UsageProblem

RUN_LABEL = "envtest.io/run"
WORKER_LABEL = "envtest.io/worker"
RECORDS_NAMESPACE = "envtest-runs"
HEARTBEAT = 15.0
"""Seconds between two renewals of a run record."""
STALE_AFTER = 120.0
"""Seconds without a renewal after which a record of another host counts as dead (8 heartbeats)."""

LEASES = f"apis/coordination.k8s.io/v1/namespaces/{RECORDS_NAMESPACE}/leases"
RBAC_API = "apis/rbac.authorization.k8s.io/v1"
ADMISSION_API = "apis/admissionregistration.k8s.io/v1"
log = logging.getLogger(__name__)

Owner = tuple[str, str]
"""(run, worker): what one process of one run created."""


RUN_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
"""A run id names Leases (`<run>-<worker>`) and labels: a DNS-1123 label with room for the worker."""


def check_run_id(run: str, source: str = "ENVTEST_RUN_ID") -> str:
    if not RUN_ID.match(run):
        raise UsageProblem(
            f"{source}={run!r}: use 1 to 40 lower-case letters, digits and '-', starting and ending "
            "with a letter or digit (it names Kubernetes objects)"
        )
    return run


def labels(run: str, worker: str) -> dict[str, str]:
    return {RUN_LABEL: run, WORKER_LABEL: worker}


def selector(run: str, worker: str | None = None) -> str:
    """Label selector of what a process created in a run; without `worker`, of the whole run."""
    if worker is None:
        return f"{RUN_LABEL}={run}"
    return ",".join(f"{k}={v}" for k, v in labels(run, worker).items())


def _machine() -> str:
    """This kernel and PID namespace: a host name alone is shared by containers with their own pids
    (`--network host`), and by a machine before and after a reboot."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return f"{socket.gethostname()}:?"
    return f"{socket.gethostname()}:{boot}:{pidns}"


def _start_ticks(pid: int) -> str | None:
    """The process's start in clock ticks since boot (/proc/<pid>/stat, field 22): unlike a start
    *time*, it does not move when the wall clock is stepped. None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name; 22nd overall


def holder_identity(pid: int | None = None) -> str:
    """`<machine>/<pid>/<start ticks>`: the pid alone could be reused by another process later."""
    pid = pid or os.getpid()
    return f"{_machine()}/{pid}/{_start_ticks(pid)}"


def process_alive(identity: str) -> bool | None:
    """Whether the process a holder identity names still runs; None when it is not this machine's
    (another host, container or boot): then only its heartbeat can tell."""
    try:
        machine, pid, started = identity.rsplit("/", 2)
        pid_n = int(pid)
    except ValueError:
        return None
    # "host:?" (no boot id or PID namespace to read) may be another container sharing the host name.
    if machine != _machine() or machine.endswith(":?") or started == "None":
        return None
    if _start_ticks(pid_n) != started:
        return False  # gone, or the pid now names a process started at another moment
    try:
        # A zombie has finished: only its parent has not collected its exit status yet.
        return psutil.Process(pid_n).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # it exists; not ours to judge
        return True


# -- records --------------------------------------------------------------------------------------


def _lease(run: str, worker: str, holder: str, now: datetime) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"{run}-{worker}", "labels": labels(run, worker)},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": int(STALE_AFTER),
            "renewTime": _micro(now),
        },
    }


def _micro(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class RunRecord:
    """This process's record on one cluster: written by `start()`, renewed by a daemon thread,
    deleted by `stop()`. A failed renewal is logged and retried at the next beat: the worst outcome
    is a record that looks stale to another host, never a failed test."""

    def __init__(
        self,
        session: requests.Session,
        server: str,
        run: str,
        worker: str,
        *,
        interval: float = HEARTBEAT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._session, self._server = session, server
        self.run, self.worker = run, worker
        self._interval, self._clock = interval, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.url = f"{server}/{LEASES}/{run}-{worker}"

    def start(self) -> None:
        """Write the record; EnvtestError when it cannot be written: a run without one would look
        dead to every other run's sweep once its objects are a few minutes old."""
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RECORDS_NAMESPACE}}
        self._session.post(f"{self._server}/api/v1/namespaces", json=ns, timeout=10)  # 409: exists
        if not self.renew():
            raise EnvtestError(f"cannot write this run's record {self.url} (see the warning above)")
        self._thread = threading.Thread(target=self._beat, name="envtest-run-record", daemon=True)
        self._thread.start()

    def renew(self) -> bool:
        body = _lease(self.run, self.worker, holder_identity(), self._clock())
        # A Lease is never replaced without its resourceVersion (422); a merge patch needs none,
        # and this process is its record's only writer.
        resp = self._session.patch(
            self.url,
            data=json.dumps(body),
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=10,
        )
        if resp.status_code == 404:
            if self._stop.is_set():  # deleted by stop() while this heartbeat ran: leave it gone
                return False
            resp = self._session.post(f"{self._server}/{LEASES}", json=body, timeout=10)
        if resp.status_code >= 300:
            log.warning("run record %s: %s %s", self.url, resp.status_code, resp.text[:200])
            return False
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.renew()
            except requests.RequestException as exc:
                log.warning("run record %s: %s", self.url, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        try:
            self._session.delete(self.url, timeout=10)
        except requests.RequestException as exc:
            log.warning("run record %s not deleted: %s", self.url, exc)


# -- judging --------------------------------------------------------------------------------------


@dataclass
class Verdict:
    owner: Owner
    dead: bool
    why: str


def judge(record: dict[str, Any] | None, now: datetime, newest_object: datetime | None) -> tuple[bool, str]:
    """Whether the owner of `record` (None: no record) is provably dead, and why."""
    if record is None:
        if newest_object is None or (now - newest_object).total_seconds() > STALE_AFTER:
            return True, "no run record, and nothing of it is recent"
        return False, "no run record yet, but it created objects recently"
    spec = record.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    alive = process_alive(holder)
    if alive is not None:
        return (not alive), f"process {holder} {'runs' if alive else 'is gone'}"
    renewed = _parse_time(spec.get("renewTime"))
    if renewed is None:
        return False, f"record of {holder} has no renewal time"
    age = (now - renewed).total_seconds()
    if age > STALE_AFTER:
        return True, f"{holder}: no heartbeat for {age:.0f}s"
    return False, f"{holder}: heartbeat {age:.0f}s ago"


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# -- sweeping -------------------------------------------------------------------------------------


@dataclass
class SweepReport:
    removed: dict[Owner, list[str]] = field(default_factory=dict)
    """Per dead (run, worker): `Kind/name` of what was deleted."""
    live: list[Verdict] = field(default_factory=list)


def _items(session: requests.Session, url: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
    resp = session.get(url, params=params, timeout=10)
    return (resp.json().get("items") or []) if resp.ok else []


def _labelled(session: requests.Session, server: str) -> list[tuple[str, dict[str, Any]]]:
    """(collection URL, object) of everything carrying the run label that a run may leave."""
    found = []
    for url in (
        f"{server}/api/v1/namespaces",
        f"{server}/{RBAC_API}/clusterroles",
        f"{server}/{RBAC_API}/clusterrolebindings",
        f"{server}/{ADMISSION_API}/validatingwebhookconfigurations",
        f"{server}/{ADMISSION_API}/mutatingwebhookconfigurations",
        *(f"{server}/{path}" for path in cluster_custom_resource_paths(session, server)),
    ):
        found += [(url, item) for item in _items(session, url, {"labelSelector": RUN_LABEL})]
    return found


def all_custom_resource_paths(session: requests.Session, server: str) -> list[str]:
    """Paths of every namespaced custom resource the cluster serves (whose finalizers may block)."""
    return objects.custom_resource_paths(_crds(session, server))


def cluster_custom_resource_paths(session: requests.Session, server: str) -> list[str]:
    """Paths of every cluster-scoped custom resource the cluster serves: a test's that it could not
    delete itself carry its run's labels (see envtest.plugin.clusterscoped)."""
    return objects.custom_resource_paths(_crds(session, server), scope="Cluster")


def _crds(session: requests.Session, server: str) -> list[dict[str, Any]]:
    return _items(session, f"{server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions")


def remove(session: requests.Session, server: str, label_selector: str, cr_paths: Iterable[str]) -> list[str]:
    """Delete what matches `label_selector`: namespaces (their custom resources' finalizers stripped
    first), custom resources of cluster-scoped kinds (theirs too), ClusterRoles, ClusterRoleBindings,
    webhook configurations. Returns `Kind/name` of each."""
    gone = []
    for path in cluster_custom_resource_paths(session, server):
        for item in _items(session, f"{server}/{path}", {"labelSelector": label_selector}):
            url = f"{server}/{path}/{item['metadata']['name']}"
            if item["metadata"].get("finalizers"):
                objects.clear_finalizers(session, url)
            session.delete(url, timeout=10)
            gone.append(f"{item.get('kind', path.rsplit('/', 1)[1])}/{item['metadata']['name']}")
    paths = list(cr_paths)
    for ns in _items(session, f"{server}/api/v1/namespaces", {"labelSelector": label_selector}):
        name = ns["metadata"]["name"]
        objects.strip_finalizers(session, server, name, paths)
        session.delete(f"{server}/api/v1/namespaces/{name}", timeout=10)
        gone.append(f"Namespace/{name}")
    for plural, kind in (("clusterrolebindings", "ClusterRoleBinding"), ("clusterroles", "ClusterRole")):
        base = f"{server}/{RBAC_API}/{plural}"
        for item in _items(session, base, {"labelSelector": label_selector}):
            session.delete(f"{base}/{item['metadata']['name']}", timeout=10)
            gone.append(f"{kind}/{item['metadata']['name']}")
    from envtest.webhooks.install import sweep as sweep_webhooks  # deferred: ssl/http.server stay unloaded

    return gone + sweep_webhooks(session, server, label_selector)


def server_now(session: requests.Session, server: str) -> datetime:
    """The apiserver's clock (its `Date` header): heartbeats are judged by it, not by ours."""
    resp = session.get(f"{server}/version", timeout=10)
    date = resp.headers.get("Date")
    return parsedate_to_datetime(date) if date else datetime.now(UTC)


def sweep_dead(
    session: requests.Session,
    server: str,
    *,
    keep_runs: Iterable[str] = (),
    dry_run: bool = False,
    cr_paths: Iterable[str] | None = None,
) -> SweepReport:
    """Remove what provably dead runs left (see the module doc); runs in `keep_runs` are never judged."""
    keep = set(keep_runs)
    now = server_now(session, server)
    records = {
        (r["metadata"]["labels"].get(RUN_LABEL, ""), r["metadata"]["labels"].get(WORKER_LABEL, "")): r
        for r in _items(session, f"{server}/{LEASES}", {"labelSelector": RUN_LABEL})
    }
    newest: dict[Owner, datetime | None] = {}
    for _, item in _labelled(session, server):
        meta_labels = item["metadata"].get("labels") or {}
        owner = (meta_labels.get(RUN_LABEL, ""), meta_labels.get(WORKER_LABEL, ""))
        created = _parse_time(item["metadata"].get("creationTimestamp"))
        previous = newest.get(owner)
        newest[owner] = max(filter(None, (previous, created)), default=None)
    report = SweepReport()
    paths = list(cr_paths) if cr_paths is not None else None
    for owner in sorted(set(newest) | set(records)):
        run, worker = owner
        if run in keep or not run:
            continue
        dead, why = judge(records.get(owner), now, newest.get(owner))
        if not dead:
            report.live.append(Verdict(owner, False, why))
            continue
        if dry_run:
            report.removed[owner] = [f"(dry run) {why}"]
            continue
        if paths is None:
            paths = all_custom_resource_paths(session, server)
        # Objects without a worker label (older harnesses, `webhooks.install(run_id=…)`) are only
        # those: a run-wide selector would take the live workers' objects with them.
        chosen = selector(run, worker) if worker else f"{RUN_LABEL}={run},!{WORKER_LABEL}"
        report.removed[owner] = remove(session, server, chosen, paths)
        session.delete(f"{server}/{LEASES}/{run}-{worker}", timeout=10)
    return report


def describe(report: SweepReport) -> str:
    lines = []
    for (run, worker), gone in sorted(report.removed.items()):
        lines.append(f"dead run {run} ({worker or '?'}): removed {len(gone)}: {json.dumps(gone)}")
    for verdict in report.live:
        run, worker = verdict.owner
        lines.append(f"live run {run} ({worker or '?'}): left alone ({verdict.why})")
    return "\n".join(lines) or "nothing labelled by a run"
