"""App wiring and the command line (no cluster: the manager is built, not started)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pykube
import pytest
from cli_logging import cli_handlers

from mysql_operator import build_manager
from mysql_operator.cli import logs
from mysql_operator.cli.main import main
from mysql_operator.controller.kinds import (
    CronJob,
    MySQLCluster,
    PersistentVolumeClaim,
    Pod,
    Secret,
    Service,
    StatefulSet,
)
from mysql_operator.controller.reconciler import MySQLClusterReconciler
from mysql_operator.controller.wiring import cluster_of
from mysql_operator.runtime import leader


def factory() -> pykube.HTTPClient:
    return pykube.HTTPClient(pykube.KubeConfig.from_url("http://127.0.0.1:1"))


def test_app_wires_one_controller_for_mysqlclusters_and_their_children() -> None:
    manager = build_manager(factory, namespace="team-a", workers=3, leader_elect=True, identity="me")
    (controller,) = manager.controllers
    assert controller.kinds == [
        MySQLCluster,
        StatefulSet,
        Service,
        CronJob,
        Secret,
        Pod,
        PersistentVolumeClaim,
    ]
    assert controller.owned == [StatefulSet, Service, CronJob], "the retained Secret is not owned"
    assert controller.workers == 3
    assert isinstance(controller.reconciler, MySQLClusterReconciler)
    assert controller.reconciler.recorder is not None
    assert (manager.options.namespaces, manager.options.leader_elect, manager.identity) == (
        ("team-a",),
        True,
        "me",
    )
    assert (manager.options.metrics_port, manager.options.health_port) == (0, 0)


def test_children_are_watched_by_our_label_and_the_secret_as_metadata_only() -> None:
    manager = build_manager(factory, namespace="team-a")
    ours = "app.kubernetes.io/managed-by=mysql-operator"
    options = manager._informer_options
    for kind in (StatefulSet, Service, CronJob, Pod, PersistentVolumeClaim):
        assert options[kind] == {"label_selector": ours, "metadata_only": False}, kind.kind
    assert options[Secret] == {"label_selector": ours, "metadata_only": True}
    assert MySQLCluster not in options, "every MySQLCluster is ours to reconcile"


def test_secret_events_map_to_the_cluster_named_by_its_label() -> None:
    labels = {"app.kubernetes.io/managed-by": "mysql-operator", "app.kubernetes.io/instance": "db"}
    secret = {"metadata": {"name": "db-credentials", "namespace": "ns", "labels": labels}}
    assert cluster_of(secret) == ["ns/db"]
    labels["app.kubernetes.io/managed-by"] = "someone-else"
    assert cluster_of(secret) == []


def test_a_lost_lease_exits_only_the_process_not_an_in_process_manager() -> None:
    assert build_manager(factory).options.exit_on_lost_lease is False


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    return str(path)


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.mark.parametrize(
    ("content", "args", "expected"),
    [
        (None, [], "no such file"),
        ("clusters: [", [], "cannot read it"),
        ("{}", [], "invalid"),
        (KUBECONFIG, ["--context", "other"], "no context 'other' (contexts: c)"),
        (KUBECONFIG, ["--workers", "0"], "--workers"),
    ],
)
@pytest.mark.usefixtures("restore_cli_logging")
def test_bad_input_is_one_line_naming_it_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, args: list[str], expected: str
) -> None:
    path = write(tmp_path, content) if content is not None else str(tmp_path / "missing")
    assert main(["run", "--kubeconfig", path, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err
    if "--workers" not in args:
        assert path in err or str(Path(path)) in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--queue-qps", "0"], "--queue-qps: must be > 0"),
        (["--queue-burst", "0"], "--queue-burst: must be at least 1"),
        (["--leader-elect"], "--leader-election-namespace"),
        (["--webhook-memory-budget", "0"], "--webhook-memory-budget: must be at least 1 (MiB)"),
    ],
)
@pytest.mark.usefixtures("restore_cli_logging")
def test_bad_runtime_flags_are_one_line_naming_them_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    expected: str,
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)  # out of a cluster: no namespace to guess
    monkeypatch.setattr(leader, "SERVICEACCOUNT_NAMESPACE", tmp_path / "absent")
    assert main(["run", "--kubeconfig", write(tmp_path, KUBECONFIG), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err
    assert cli_handlers() == [], "refused before the logs are set up: nothing of the run is left behind"


def test_queue_rate_limits_and_the_event_sender_are_wired() -> None:
    manager = build_manager(factory, queue_qps=2.5, queue_burst=7)
    (controller,) = manager.controllers
    assert (controller.qps, controller.burst) == (2.5, 7)
    assert manager._runnables == [controller.reconciler.recorder], "the Event sender runs with the manager"


def test_key_value_log_lines_carry_extra_fields() -> None:
    record = logging.LogRecord(
        "mysql_operator.controller.reconciler", logging.INFO, "f", 1, "created", (), None
    )
    record.kind, record.object = "Service", "db headless"
    line = logs.KeyValueFormatter().format(record)
    assert "level=info" in line and "msg=created" in line and "kind=Service" in line
    assert 'object="db headless"' in line


def test_json_log_lines_parse() -> None:
    record = logging.LogRecord("x", logging.WARNING, "f", 1, "hello %s", ("you",), None)
    record.cluster = "db"
    parsed = json.loads(logs.JsonFormatter().format(record))
    assert parsed["msg"] == "hello you" and parsed["cluster"] == "db" and parsed["level"] == "warning"
