"""The record in the plugin: each test's operator requests read from the audit log, its hot loops
warned, its artifacts written, and the run's RBAC usage gathered (across xdist workers) and reported.

`--envtest-record` (ini `envtest_record`): `failed` (default) writes a failed test's requests into its
artifacts, `all` every test's, `off` starts the plane without an audit log and reads nothing. Nothing
here fails a test by itself: an unreadable or rotated log, a marker that never shows, a malformed
line make the record incomplete, which its notes and the run's report say. Only `HotLoop`, a
warning, can fail one, where a project turns it into an error.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtest import timeouts
from envtest.record import events, hotloop, usage
from envtest.record.book import SYNC_TIMEOUT, RecordBook
from envtest.record.events import Request

if TYPE_CHECKING:
    from envtest.clusters import Cluster

log = logging.getLogger(__name__)

MODES = ("failed", "all", "off")
WORKER_KEY = "envtest_record"
"""Key of `config.workeroutput` under which an xdist worker hands its share to the controller."""
REPORT = "rbac-usage.json"
"""The run's report, in the artifacts folder."""


@dataclass(frozen=True)
class RecordSettings:
    mode: str = "failed"
    bodies: bool = False
    limits: hotloop.Limits = field(default_factory=hotloop.Limits)
    account: str = events.OPERATOR_ACCOUNT

    @property
    def on(self) -> bool:
        return self.mode != "off"


class SessionRecord:
    """One process's record of the run (see the module's docstring)."""

    def __init__(self, settings: RecordSettings) -> None:
        self.settings = settings
        self.book = RecordBook(settings.account)
        self.usage = usage.Usage()
        self.grants: dict[str, list[dict[str, Any]]] = {}
        """"Kind/name" → rules of the roles the operator was bound to."""
        self.unavailable: set[str] = set()
        self.incomplete: list[str] = []
        self.hot_loops = 0
        self.namespaces = 0
        """Test namespaces recorded: the run's report is written only when some were."""
        self.peaks: dict[str, Any] = {"writes": [0, ""], "rate": [0.0, ""]}
        """The largest write run and busiest rate any test showed, with the test (tuning N and M)."""
        self._merged: list[dict[str, Any]] = []  # workers' shares of what the book itself counts

    def log_of(self, cluster: Cluster) -> Path | None:
        """The audit log of `cluster`, or None (its reason noted, once per run)."""
        if not self.settings.on:
            return None
        if cluster.audit_log is None:
            self.unavailable.add(cluster.audit_note)
        return cluster.audit_log

    def add_peaks(self, test: str, peaks: hotloop.Peaks) -> None:
        if peaks.writes > self.peaks["writes"][0]:
            self.peaks["writes"] = [peaks.writes, test]
        if peaks.rate > self.peaks["rate"][0]:
            self.peaks["rate"] = [round(peaks.rate, 2), test]

    # -- across xdist ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "usage": self.usage.to_json(),
            "grants": self.grants,
            "unavailable": sorted(self.unavailable),
            "incomplete": self.incomplete,
            "hot_loops": self.hot_loops,
            "namespaces": self.namespaces,
            "peaks": self.peaks,
            "malformed": self.book.malformed,
            "rotations": self.book.rotations(),
            "problems": self.book.problems(),
        }

    def merge(self, data: Any) -> None:
        """A worker's `to_json()`; anything malformed in it is skipped."""
        if not isinstance(data, dict):
            return
        self.usage.merge(data.get("usage") or {})
        for role, rules in (data.get("grants") or {}).items():
            self.grants.setdefault(str(role), list(rules))
        self.unavailable.update(str(u) for u in data.get("unavailable") or [])
        self.incomplete += [str(t) for t in data.get("incomplete") or []]
        self.hot_loops += int(data.get("hot_loops") or 0)
        self.namespaces += int(data.get("namespaces") or 0)
        for key in ("writes", "rate"):
            value, test = (data.get("peaks") or {}).get(key) or (0, "")
            if value > self.peaks[key][0]:
                self.peaks[key] = [value, test]
        self._merged.append(data)

    # -- the run's report -----------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        data = usage.report(self.usage, self.grants)
        shares = [self.to_json(), *self._merged]
        limits = self.settings.limits
        data["hot_loops"] = {
            "limits": {"writes": limits.writes, "rate": limits.rate, "window_seconds": hotloop.WINDOW},
            "found": self.hot_loops,
            "peaks": self.peaks,
        }
        data["record"] = {
            "unavailable": sorted(self.unavailable),
            "incomplete_tests": self.incomplete,
            "malformed_lines": sum(int(s.get("malformed") or 0) for s in shares),
            "rotations": sum(int(s.get("rotations") or 0) for s in shares),
            "problems": sorted({str(p) for s in shares for p in s.get("problems") or []}),
        }
        return data

    def finish(self, artifacts_dir: Path) -> list[str]:
        """Write the run's report (when anything was recorded); its summary lines."""
        lines = [f"envtest: record unavailable: {reason}" for reason in sorted(self.unavailable)]
        if not self.settings.on or not self.namespaces:
            return lines
        data = self.report()
        path = artifacts_dir / REPORT
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=1) + "\n")
        except OSError as exc:
            return [*lines, f"envtest: record: cannot write {path}: {exc}"]
        lines += usage.summary(data, str(path))
        if self.incomplete:
            lines.append(f"  incomplete record: {len(self.incomplete)} test(s), e.g. {self.incomplete[0]}")
        return lines


class TestRecord:
    """One test's record: the namespaces it watches, on which logs, and what was read for them."""

    __test__ = False

    def __init__(self, session: SessionRecord, nodeid: str) -> None:
        self.session = session
        self.nodeid = nodeid
        self._logs: dict[str, Path] = {}  # namespace → the audit log it lives on
        self._taken: dict[str, list[Request]] = {}  # requests of namespaces whose plane has gone
        self._reported: set[hotloop.ObjectKey] = set()
        self.notes: list[str] = []
        """Why this test's record may miss requests."""
        self.keep = False
        """Write the record into the artifacts even in mode `failed`: set when any phase of the test
        failed, or a hot loop was found."""

    def watch(self, cluster: Cluster, namespace: str) -> None:
        path = self.session.log_of(cluster)
        if path is not None:
            self.session.book.watch(path, namespace)
            self._logs[namespace] = path
            self.session.namespaces += 1

    def sync(self, cluster: Cluster) -> None:
        """Read the cluster's log up to now (a marker request; see envtest.record.book)."""
        path = cluster.audit_log
        if path is None or path not in self._logs.values():
            return

        def ping(url_path: str) -> object:
            return cluster.session.get(f"{cluster.server}{url_path}", timeout=5)

        if not self.session.book.sync(path, ping, timeout=timeouts.scaled(cluster, SYNC_TIMEOUT)):
            self._note(f"the audit log of {cluster.name} did not show a sync marker: the end may be missing")

    def hot_loops(self, cluster: Cluster, namespace: str) -> list[hotloop.HotLoop]:
        """Hot loops in `namespace` not reported yet (its operator has just stopped)."""
        if namespace not in self._logs:
            return []
        self.sync(cluster)
        requests = self.session.book.requests(namespace)
        operator = events.operator_user(namespace, self.session.settings.account)
        found, _ = hotloop.analyse(requests, {operator}, self.session.settings.limits)
        new = [loop for loop in found if loop.key not in self._reported]
        self._reported.update(loop.key for loop in new)
        self.session.hot_loops += len(new)
        self.keep = self.keep or bool(new)
        return new

    def closing(self, cluster: Cluster) -> None:
        """`cluster` (a private plane) stops now: keep what its log holds for this test."""
        path = cluster.audit_log
        if path is None:
            return
        self.sync(cluster)
        for namespace in [n for n, p in self._logs.items() if p == path]:
            self._taken[namespace] = self.session.book.take(namespace)
            del self._logs[namespace]
        self.session.book.forget(path)

    def finish(self, clusters: dict[str, Cluster], artifacts: Path) -> Path | None:
        """The test is over: its requests counted in the run's usage, and written to `artifacts`
        (`record/` in it) when it failed or the mode is `all`; the folder written, if any."""
        for cluster in {id(c): c for n, c in clusters.items() if n in self._logs}.values():
            self.sync(cluster)
        for namespace in list(self._logs):
            self._taken[namespace] = self.session.book.take(namespace)
        self._logs.clear()
        if not self._taken:
            return None
        account = self.session.settings.account
        operators = {events.operator_user(n, account) for n in self._taken}
        requests = [r for items in self._taken.values() for r in items]
        self.session.usage.add(self.nodeid, requests, operators)
        _, peaks = hotloop.analyse(requests, operators, self.session.settings.limits)
        self.session.add_peaks(self.nodeid, peaks)
        if self.notes:
            self.session.incomplete.append(self.nodeid)
        if not (self.keep or self.session.settings.mode == "all"):
            return None
        return write(artifacts / "record", requests, operators, self.notes)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def write(dest: Path, requests: list[Request], operators: set[str], notes: list[str]) -> Path | None:
    """`requests.jsonl` (the operators' requests in the order made) and `timeline.txt` (theirs and
    other users' writes) in `dest`; best effort: a failure to write is logged, not raised."""
    mine = sorted((r for r in requests if r.user in operators), key=lambda r: (r.received, r.at))
    try:
        dest.mkdir(parents=True, exist_ok=True)
        with open(dest / "requests.jsonl", "w") as fh:
            fh.writelines(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in mine)
        (dest / "timeline.txt").write_text(events.timeline(requests, operators))
        if notes:
            (dest / "notes.txt").write_text("\n".join(notes) + "\n")
    except OSError as exc:
        log.warning("cannot write the record to %s: %s", dest, exc)
        return None
    return dest
