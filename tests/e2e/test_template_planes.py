"""A plane started from a template holds, when it reports ready, what a fresh plane holds at ready."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envtest import ControlPlane, eventually
from envtest.loopback import direct_session
from envtest.plane import flags, template
from envtest.plane.ports import free_port
from envtest.plane.process import ManagedProcess
from envtest.timeouts import Timeouts

pytestmark = pytest.mark.envtest_local
timeouts = Timeouts("local")  # not the fixture: that one starts the session's plane, unused here

# What the skipped hooks write, and what the template drops and the plane writes again.
COLLECTIONS = (
    "apis/rbac.authorization.k8s.io/v1/clusterroles",
    "apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "apis/rbac.authorization.k8s.io/v1/roles",
    "apis/rbac.authorization.k8s.io/v1/rolebindings",
    "apis/scheduling.k8s.io/v1/priorityclasses",
    "api/v1/namespaces",
    "api/v1/namespaces/kube-system/configmaps",
)
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
HOOKS_WRITE = COLLECTIONS[:5]
IDENTITY = "apiserver.kubernetes.io/identity=kube-apiserver"


def _items(plane: ControlPlane, path: str) -> list[dict[str, Any]]:
    resp = plane.admin_session().get(f"{plane.server}/{path}", timeout=timeouts(10))
    resp.raise_for_status()
    return resp.json()["items"]  # type: ignore[no-any-return]


def _key(path: str, meta: dict[str, Any]) -> str:
    return f"{path}/{meta.get('namespace', '')}/{meta['name']}"


def _versions(plane: ControlPlane) -> dict[str, str]:
    """resourceVersion of everything the skipped hooks write."""
    return {
        f"{path}/{i['metadata'].get('namespace', '')}/{i['metadata']['name']}": i["metadata"][
            "resourceVersion"
        ]
        for path in HOOKS_WRITE
        for i in _items(plane, path)
    }


def _settles_as_a_fresh_plane_does(plane: ControlPlane) -> None:
    """Once every check passes: the `kubernetes` Service points at this apiserver's port, and the
    only apiserver identity Lease is this one's (none of the template's is left)."""

    def all_checks() -> None:
        assert plane.admin_session().get(f"{plane.server}/readyz", timeout=timeouts(10)).status_code == 200

    eventually(all_checks, timeout=timeouts(30), description="/readyz with every check")

    def settled() -> None:
        url = f"{plane.server}/api/v1/namespaces/default/services/kubernetes"
        resp = plane.admin_session().get(url, timeout=timeouts(10))
        assert resp.status_code == 200, resp.text
        assert [p["targetPort"] for p in resp.json()["spec"]["ports"]] == [plane.api_port]
        leases = _items(
            plane, f"apis/coordination.k8s.io/v1/namespaces/kube-system/leases?labelSelector={IDENTITY}"
        )
        assert len(leases) == 1, [lease["metadata"]["name"] for lease in leases]

    eventually(settled, timeout=timeouts(30), description="the kubernetes Service and one identity Lease")


def _snapshot(plane: ControlPlane, today: set[str]) -> dict[str, dict[str, Any]]:
    session = plane.admin_session()
    out: dict[str, dict[str, Any]] = {}
    for path in COLLECTIONS:
        resp = session.get(f"{plane.server}/{path}", timeout=timeouts(10))
        resp.raise_for_status()
        for item in resp.json()["items"]:
            meta = item["metadata"]
            for key in SERVER_SET:
                meta.pop(key, None)
            item.pop("status", None)
            data = item.get("data", {})
            if "client-ca-file" in data:  # each plane's own CA, compared on its own below
                data["client-ca-file"] = "<the plane's CA>"
            if data.get("since") in today:  # the day tracking began: this plane's own
                data["since"] = "<today>"
            out[_key(path, meta)] = item
    return out


def _client_ca(plane: ControlPlane) -> str:
    url = f"{plane.server}/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
    resp = plane.admin_session().get(url, timeout=timeouts(10))
    resp.raise_for_status()
    return str(resp.json()["data"]["client-ca-file"])


def test_a_template_plane_holds_at_ready_what_a_fresh_plane_holds(tmp_path: Path) -> None:
    today = {datetime.now(UTC).date().isoformat()}
    snapshots = {}
    for use_template in (False, True):
        plane = ControlPlane(
            "minimal", workdir=tmp_path / str(use_template), record=False, use_template=use_template
        )
        with plane:
            assert plane.from_template is use_template
            # Read at once: nothing has been waited for beyond the plane's own readiness.
            snapshots[use_template] = _snapshot(plane, today | {datetime.now(UTC).date().isoformat()})
            assert plane.ca is not None
            assert _client_ca(plane).strip() == plane.ca.cert_pem.decode().strip(), (
                "the plane trusts another plane's CA"
            )
            at_ready = _versions(plane)
            _settles_as_a_fresh_plane_does(plane)
            if use_template:  # the skipped hooks ran since, and found nothing to change
                assert _versions(plane) == at_ready
    fresh, templated = snapshots[False], snapshots[True]
    assert sorted(templated) == sorted(fresh)
    differing = [key for key in fresh if templated[key] != fresh[key]]
    assert not differing, json.dumps({k: [fresh[k], templated[k]] for k in differing[:3]}, indent=1)
    # The two hooks whose wait is skipped wrote these: the template must really hold them.
    assert sum("/clusterroles/" in key for key in templated) > 50
    assert "apis/scheduling.k8s.io/v1/priorityclasses//system-node-critical" in templated


def test_a_kept_planes_data_is_never_replaced_by_the_template(tmp_path: Path) -> None:
    workdir = tmp_path / "kept"
    with ControlPlane("minimal", workdir=workdir, record=False) as plane:
        url = f"{plane.server}/api/v1/namespaces"
        body = {"metadata": {"name": "kept-data"}}
        created = plane.admin_session().post(url, json=body, timeout=timeouts(10))
        created.raise_for_status()
    (workdir / "admin.kubeconfig").unlink()  # what a second start writes anew
    with ControlPlane("minimal", workdir=workdir, record=False) as again:
        assert not again.from_template
        resp = again.admin_session().get(f"{again.server}/api/v1/namespaces/kept-data", timeout=timeouts(10))
        assert resp.status_code == 200, resp.text


def test_extra_flags_start_without_a_template_and_wait_for_every_check(tmp_path: Path) -> None:
    extra = {"kube-apiserver": {"feature-gates": "AllAlpha=false"}}
    with ControlPlane("minimal", workdir=tmp_path / "p", record=False, extra_args=extra) as plane:
        assert not plane.from_template
        assert plane.admin_session().get(f"{plane.server}/readyz", timeout=timeouts(10)).status_code == 200


SNAPSHOT_STEP = int(flags.ETCD_FLAGS.get("snapshot-count") or 0)
CATCH_UP_ENTRIES = 5000
"""etcd's --snapshot-catchup-entries: its in-memory compaction goes down to index 1, or to this many
entries below the applied index once past it. A restart whose newest snapshot is above that index
replays nothing that compaction can reach, whatever raft has counted as applied."""


def _newest_snapshot(data: Path) -> int:
    """The raft index of the newest snapshot in an etcd data directory (named <term>-<index>.snap)."""
    indexes = [int(snap.stem.split("-")[1], 16) for snap in (data / "member" / "snap").glob("*.snap")]
    assert indexes, f"no snapshot on disk in {data}"
    return max(indexes)


def _healthy(etcd_url: str) -> bool:
    with direct_session() as session:
        return session.get(f"{etcd_url}/health", timeout=timeouts(1)).ok


def _raft_index(etcd_url: str) -> int:
    with direct_session() as session:
        resp = session.post(f"{etcd_url}/v3/maintenance/status", json={}, timeout=timeouts(10))
        resp.raise_for_status()
        return int(resp.json()["raftIndex"])


def _safe_to_replay(snapshot: int, index: int) -> None:
    assert snapshot > 0 and index - snapshot < CATCH_UP_ENTRIES, (snapshot, index)


def test_a_template_restarts_from_a_snapshot_past_what_etcds_compaction_reaches(tmp_path: Path) -> None:
    """Replaying a log with no snapshot, etcd compacts its in-memory log (every 100 applied entries)
    before raft counts the replay as applied, and an election tick then panics. A template holds a
    snapshot on disk within 100 entries of its end, so its copies start from it."""
    plane = ControlPlane("minimal", workdir=tmp_path / "plane", record=False, use_template=True)
    with plane:
        assert plane.from_template and plane.template_dir is not None
        etcd = plane.processes["etcd"].argv[0]
    data = tmp_path / "copy"
    template.copy_data(plane.template_dir / "etcd", data)
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    own = {
        "data-dir": str(data),
        "listen-client-urls": client,
        "advertise-client-urls": client,
        "listen-peer-urls": peer,
        "initial-advertise-peer-urls": peer,
        "initial-cluster": f"envtest={peer}",
    }
    alone = ManagedProcess(
        "etcd",
        [etcd, *flags.render(flags.ETCD_FLAGS, own)],
        log_path=tmp_path / "etcd.log",
        ready=lambda: _healthy(client),
        start_timeout=timeouts(30),
    )
    alone.start()
    try:
        index = _raft_index(client)  # the template's entries and the few etcd writes as it starts
    finally:
        alone.stop()
    _safe_to_replay(_newest_snapshot(data), index)


def test_a_running_plane_keeps_a_snapshot_near_its_raft_index(tmp_path: Path) -> None:
    """A restart of the plane's own etcd (restart("etcd"), a kept plane) starts from its newest
    snapshot: one is taken as the plane writes."""
    with ControlPlane("minimal", workdir=tmp_path / "plane", record=False) as plane:
        before = _newest_snapshot(plane.workdir / "etcd")
        session = plane.admin_session()
        url = f"{plane.server}/api/v1/namespaces/default/configmaps"
        written = max(3 * SNAPSHOT_STEP, 1)
        for n in range(written):
            body = {"metadata": {"name": f"write-{n}"}, "data": {"n": str(n)}}
            session.post(url, json=body, timeout=timeouts(10)).raise_for_status()
        after = _newest_snapshot(plane.workdir / "etcd")
        assert after > before, (before, after)
        _safe_to_replay(after, _raft_index(plane.etcd_url))
        plane.restart("etcd")

        def last_write_reads() -> None:
            resp = session.get(f"{url}/write-{written - 1}", timeout=timeouts(10))
            assert resp.status_code == 200, resp.text

        eventually(last_write_reads, timeout=timeouts(30), description="the last write, after the restart")
