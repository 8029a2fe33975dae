"""Real conflicts, answered by the apiserver: a writer of the test's own and the operator edit one
MySQLCluster from stale reads, and every write carries the resourceVersion it was computed from.

The fault proxy sits in front of the operator and only forwards (a rule holds one request in flight,
or rewrites its precondition, and then forwards it): every 409 here is the apiserver's, and the
apiserver's own /metrics count them too. The writer owns a finalizer and a label, the operator its
finalizer and the status: both sets must be in the object at the end, and in every version the
apiserver stored from the moment they were written (`conflictkit.assert_no_lost_update`). The
variants take one writer's precondition away and show those checks fail - while the end state,
healed by the loser's next write, looks fine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conflictkit import Intent, apiserver_conflicts, assert_backoff, assert_no_lost_update, stored_versions
from mysqlkit import API, FINALIZER, MySQLClusters, Timeouts

from envtest import eventually
from envtest.faults import FORWARD, Exchange, FaultProxy, Rule, no_precondition, stale_precondition
from envtest.plugin.runner import OperatorRunner

NAME = "db"
MANIFEST = {
    "apiVersion": API.removeprefix("apis/"),
    "kind": "MySQLCluster",
    "metadata": {"name": NAME},
    "spec": {"replicas": 1, "storage": {"size": "1Gi"}},
}
GROUP, RESOURCE = "db.example.com", "mysqlclusters"
WRITER = "test.example.com/writer"
"""The writer's finalizer and label: its intent, which nobody else writes."""

INTENTS = (
    Intent("the operator's finalizer", lambda o: FINALIZER in (o["metadata"].get("finalizers") or [])),
    Intent("the writer's finalizer", lambda o: WRITER in (o["metadata"].get("finalizers") or [])),
    Intent("the writer's label", lambda o: WRITER in (o["metadata"].get("labels") or {})),
)

REWINDS = 10
"""Conflicts in a row for the backoff test: the last gaps (5 ms doubling: 1.3 s, 2.6 s) dwarf any
scheduling noise, and the run stays a few seconds long."""
JITTER = 0.1
"""Seconds by which one retry gap may fall short of the one before it on the local plane (threads
of a busy 2-core machine); stretched by the backend's timeout factor."""

Obj = dict[str, Any]
Change = Callable[[Obj], Obj]


class Writer:
    """A client of the test's own, editing the cluster as `kubectl edit` does: a merge patch
    computed from what it read, sent with that read's resourceVersion; on 409 it reads again and
    recomputes. `conditional=False` sends no resourceVersion: the careless writer."""

    ATTEMPTS = 10

    def __init__(self, api: Any, clusters: MySQLClusters, timeouts: Timeouts) -> None:
        self.api, self.clusters, self.timeouts = api, clusters, timeouts
        self.conflicts = 0
        """409s the apiserver answered this writer."""

    def write(self, base: Obj, change: Change, *, conditional: bool = True) -> Obj:
        for _ in range(self.ATTEMPTS):
            patch = change(base)
            if conditional:
                patch["metadata"]["resourceVersion"] = base["metadata"]["resourceVersion"]
            resp = self.api.session.patch(
                self.api.url(self.clusters.path(NAME)),
                json=patch,
                headers={"Content-Type": "application/merge-patch+json"},
                timeout=self.timeouts(10),
            )
            if resp.status_code == 409 and conditional:
                self.conflicts += 1
                base = self.clusters.must_get(NAME)
                continue
            assert resp.status_code == 200, f"PATCH {NAME}: {resp.status_code} {resp.text[:300]}"
            return resp.json()  # type: ignore[no-any-return]
        raise AssertionError(f"{self.ATTEMPTS} conflicts in a row writing {NAME}")

    def retract(self) -> None:
        """Take the writer's finalizer out again (so the cluster can be deleted), if it is there."""
        cluster = self.clusters.get(NAME)
        if cluster is not None and WRITER in (cluster["metadata"].get("finalizers") or []):
            self.write(cluster, lambda o: {"metadata": {"finalizers": _finalizers(o, without=WRITER)}})


def _finalizers(obj: Obj, *, without: str = "", add: str = "") -> list[str]:
    kept = [f for f in obj["metadata"].get("finalizers") or [] if f != without and f != add]
    return [*kept, add] if add else kept


def intent(round_: int) -> Change:
    """The writer's change: its finalizer in the list it read, its label at this round."""
    return lambda o: {"metadata": {"finalizers": _finalizers(o, add=WRITER), "labels": {WRITER: str(round_)}}}


@pytest.fixture
def clusters(api: Any, namespace: str, timeouts: Timeouts) -> MySQLClusters:
    return MySQLClusters(api, namespace, timeouts)


@pytest.fixture
def writer(
    api: Any, clusters: MySQLClusters, timeouts: Timeouts, operator: OperatorRunner
) -> Iterator[Writer]:
    """Set up after the operator, so torn down before it: the finalizer goes while it still runs."""
    writer = Writer(api, clusters, timeouts)
    yield writer
    writer.retract()


class Seen:
    """What the apiserver saw of the cluster: its 409 count (since this object was made), the
    operator's writes through the proxy, and the versions it stored."""

    def __init__(self, api: Any, faults: FaultProxy, clusters: MySQLClusters) -> None:
        self.api, self.faults, self.clusters = api, faults, clusters
        self.timeouts = clusters.timeouts
        self.before = apiserver_conflicts(api, self.timeouts, group=GROUP, resource=RESOURCE)

    def apiserver_conflicts(self) -> int:
        """409s the apiserver counted for MySQLClusters since; other tests' may be among them."""
        return apiserver_conflicts(self.api, self.timeouts, group=GROUP, resource=RESOURCE) - self.before

    def operator_writes(self, *resources: str) -> list[Exchange]:
        """The operator's writes of the cluster (default: itself and its status), as forwarded."""
        return self.faults.exchanges(
            ("patch", "update"),
            resources or (RESOURCE, f"{RESOURCE}/status"),
            name=NAME,
            namespace=self.clusters.namespace,
            client="operator",
        )

    def history(self, created: Obj) -> list[Obj]:
        return stored_versions(self.api, self.clusters.path(), created, self.timeouts)


class Race(Seen):
    """One scripted race on the cluster's finalizers, from its creation (see `run`)."""

    def __init__(self, api: Any, faults: FaultProxy, clusters: MySQLClusters, writer: Writer) -> None:
        super().__init__(api, faults, clusters)
        self.writer = writer
        self.created: Obj = {}

    def run(self, careless: str | None = None) -> None:
        """1. The operator's first write, its finalizer patch computed from the new cluster, is held
        in flight. 2. Meanwhile the writer adds its finalizer and label from a fresh read. 3. The
        operator's patch goes on, with a resourceVersion the writer has made stale. 4. Once the
        operator has its finalizer in, the writer writes again from its own read, stale by now.
        `careless` ("operator" or "writer") sends that one's stale write without a precondition."""
        gate = threading.Event()
        held = self.faults.add(
            Rule(
                no_precondition() if careless == "operator" else FORWARD,
                verb="patch",
                resource=RESOURCE,
                subresource="",
                name=NAME,
                client="operator",
                times=1,
                hold=gate,
            )
        )
        self.created = self.clusters.create(MANIFEST)
        try:
            eventually(
                lambda: held.fired == 1 or _fail("the operator sent no patch"),
                timeout=self.timeouts(30),
                description="the operator's finalizer patch in flight",
            )
            first = self.writer.write(self.created, intent(1))
            assert self.writer.conflicts == 0, "nothing but the held operator should have written yet"
        finally:
            gate.set()
        eventually(
            lambda: self.holds(self.clusters.must_get(NAME), INTENTS[0]),
            timeout=self.timeouts(30),
            description="the operator's finalizer stored",
        )
        self.writer.write(first, intent(2), conditional=careless != "writer")

    def held_write(self) -> Exchange:
        """The operator's held finalizer patch, with what the apiserver answered it."""
        (exchange,) = [e for e in self.operator_writes(RESOURCE) if e.rule is not None]
        return exchange

    def both_intents(self) -> Obj:
        """The cluster, asserted to hold every intent now."""
        cluster = self.clusters.must_get(NAME)
        missing = [i.what for i in INTENTS if not i.held_by(cluster)]
        assert not missing, f"missing from {NAME} now: {missing}"
        return cluster

    @staticmethod
    def holds(obj: Obj, intent: Intent) -> bool:
        assert intent.held_by(obj), f"{intent.what} is not in {obj['metadata']}"
        return True


def test_racing_writers_get_the_apiservers_409_and_keep_both_intents(
    api: Any, faults: FaultProxy, clusters: MySQLClusters, writer: Writer
) -> None:
    race = Race(api, faults, clusters, writer)
    race.run()

    # The held patch met the writer's change: the apiserver answered it 409, and so it answered the
    # writer's stale write. The operator read again and wrote its finalizer beside the writer's.
    held = race.held_write()
    assert held.forwarded and held.code == "409", f"the apiserver answered the stale patch {held.code}"
    assert writer.conflicts >= 1, "the writer's stale write was accepted"
    operator_conflicts = [e for e in race.operator_writes() if e.code == "409"]
    assert all(e.forwarded for e in operator_conflicts), "the proxy answered a write alone"
    ours = len(operator_conflicts) + writer.conflicts
    counted = race.apiserver_conflicts()
    assert counted >= ours, f"the apiserver counted {counted} conflicts, we saw {ours}"

    cluster = clusters.wait_running(NAME)
    race.both_intents()
    assert cluster["metadata"]["labels"][WRITER] == "2", "the writer's latest label was overwritten"
    assert_no_lost_update(race.history(race.created), INTENTS)


@pytest.mark.parametrize("careless", ["operator", "writer"])
def test_a_write_without_its_precondition_is_caught_as_a_lost_update(
    api: Any, faults: FaultProxy, clusters: MySQLClusters, writer: Writer, careless: str
) -> None:
    # The same race, with one side's stale write sent unconditionally: the apiserver accepts it, and
    # it takes out the other side's finalizer. That side writes again, so the end state is whole.
    race = Race(api, faults, clusters, writer)
    race.run(careless=careless)
    eventually(race.both_intents, timeout=race.timeouts(30), description="both intents back")
    victim = {"operator": "the writer's finalizer", "writer": "the operator's finalizer"}[careless]
    with pytest.raises(AssertionError, match=f"lost update: {victim} was stored"):
        assert_no_lost_update(race.history(race.created), INTENTS)
    # The main test's conflict checks fail with it: the apiserver had no precondition to refuse.
    if careless == "operator":
        assert race.held_write().code == "200"
    else:
        assert writer.conflicts == 0


def test_conflicts_the_apiserver_answers_are_retried_with_growing_gaps(
    api: Any, faults: FaultProxy, operator: OperatorRunner, clusters: MySQLClusters, timeouts: Timeouts
) -> None:
    # The operator's finalizer patch goes to the apiserver REWINDS times with a stale resourceVersion.
    # Each 409 comes from the apiserver and changes nothing, so no watch event wakes the operator: its
    # retries are paced by its backoff alone, and the gaps between them are the backoff.
    rewinds = faults.add(
        Rule(
            stale_precondition(),
            verb="patch",
            resource=RESOURCE,
            subresource="",
            name=NAME,
            client="operator",
            times=REWINDS,
        )
    )
    seen = Seen(api, faults, clusters)
    clusters.create(MANIFEST)
    clusters.wait_running(NAME)
    attempts = seen.operator_writes(RESOURCE)[: REWINDS + 1]
    codes = [a.code for a in attempts]
    assert codes == ["409"] * REWINDS + ["200"], f"the apiserver answered {codes} (no precondition sent?)"
    assert rewinds.fired == REWINDS
    counted = seen.apiserver_conflicts()
    assert counted >= REWINDS, f"the apiserver counted {counted} conflicts, the operator met {REWINDS}"
    sent = [a.sent for a in attempts]
    assert None not in sent
    assert_backoff(sent, jitter=JITTER * timeouts.scale)  # type: ignore[arg-type]


def _fail(message: str) -> bool:
    raise AssertionError(message)
