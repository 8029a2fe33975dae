"""A spec the schema admits but the operator cannot act on: reported once, not retried in a loop,
and no obstacle to other clusters.

The schema only bounds `spec.backup.schedule.cron` by length; whether it is a cron schedule is the
operator's call (the CronJob it would write is rejected by the apiserver otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from mysqlkit import MySQLClusters, reconciles, sample, writes

from envtest import OperatorRunner, assert_matches, condition, consistently, eventually
from envtest.clusters import Cluster
from envtest.plugin.context import TestContext

MINIMAL = sample("mysqlcluster_minimal.yaml")


def with_schedule(schedule: str) -> dict[str, Any]:
    return {
        **MINIMAL,
        "metadata": {"name": "bad-schedule"},
        "spec": {**MINIMAL["spec"], "backup": {"enabled": True, "schedule": {"cron": schedule}}},
    }


def assert_failed_naming_schedule(mysql: MySQLClusters, name: str) -> dict[str, Any]:
    cr = mysql.must_get(name)
    naming = re.compile(r".*spec\.backup\.schedule\.cron.*")
    assert_matches(
        cr,
        {
            "status": {
                "phase": "Failed",
                "observedGeneration": cr["metadata"]["generation"],
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "InvalidSchedule", "message": naming},
                    {"type": "Degraded", "status": "True", "reason": "InvalidSchedule", "message": naming},
                ],
            }
        },
        unordered=["status.conditions"],
    )
    return cr


@pytest.fixture
def neighbour(
    envtest_context: TestContext, cluster: Cluster, api: Any, envtest_operator_factory: Any
) -> Iterator[tuple[MySQLClusters, OperatorRunner]]:
    """A second namespace with an operator of its own, as the `operator` fixture runs it."""
    namespace = envtest_context.create_namespace(cluster)
    try:
        runner = envtest_context.start_operator(
            cluster, namespace, envtest_operator_factory, name="neighbour"
        )
        try:
            yield MySQLClusters(api, namespace), runner
        finally:
            envtest_context.stop_operator(cluster, runner)
    finally:
        envtest_context.release_namespace(cluster, namespace)


def test_unparseable_schedule_fails_once_while_others_converge(
    mysql: MySQLClusters,
    operator: OperatorRunner,
    neighbour: tuple[MySQLClusters, OperatorRunner],
) -> None:
    elsewhere, _ = neighbour
    # Backups on, and kwok finishes no final-backup pod: let teardown delete it without one.
    mysql.create(with_schedule("61 * * * *"), skip_final_backup=True)
    elsewhere.create(MINIMAL)

    eventually(lambda: assert_failed_naming_schedule(mysql, "bad-schedule"), timeout=mysql.timeouts(30))
    elsewhere.wait_running("sample")

    # This operator has only the bad cluster to look at, so its counters are that key's alone.
    manager = operator.operator
    reconciled, written = reconciles(manager), writes(manager)

    def no_retry_storm() -> None:
        # One more pass may still come from the watch event of the Failed status itself.
        assert reconciles(manager) - reconciled <= 1, f"{reconciles(manager) - reconciled} more reconciles"
        assert writes(manager) == written, "the operator keeps writing about a spec it cannot act on"

    consistently(no_retry_storm, duration=mysql.timeouts(5.0), interval=0.5)
    assert reconciles(manager) <= 6, f"{reconciles(manager)} reconciles of one cluster that cannot change"
    assert mysql.child("statefulset", "bad-schedule") is None, "children were made from a rejected spec"

    # Nothing was lost: once the field is fixed the cluster converges.
    mysql.patch("bad-schedule", {"spec": {"backup": {"schedule": {"cron": "0 3 * * *"}}}})
    mysql.wait_running("bad-schedule")
    assert_matches(mysql.child("cronjob", "bad-schedule"), {"spec": {"schedule": "0 3 * * *"}})


def cronjob_status(mysql: MySQLClusters, schedule: str) -> int:
    """What the apiserver answers to a CronJob with `schedule` (server-side dry run: nothing is made)."""
    container = {"name": "c", "image": "busybox:1.36"}
    body = {
        "metadata": {"name": "schedule-probe"},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
            },
        },
    }
    url = mysql.api.url(f"apis/batch/v1/namespaces/{mysql.namespace}/cronjobs")
    return int(
        mysql.api.session.post(
            url, json=body, params={"dryRun": "All"}, timeout=mysql.timeouts(10)
        ).status_code
    )


@pytest.mark.parametrize(
    "schedule",
    ["not a cron", "* * * * * *", "0 25 * * *", "@fortnightly"],
    ids=["words", "six-fields", "hour-25", "unknown-macro"],
)
def test_schedule_a_cronjob_would_refuse_fails_the_cluster(
    mysql: MySQLClusters, operator: OperatorRunner, schedule: str
) -> None:
    # The operator judges the schedule as the apiserver would judge its CronJob.
    assert cronjob_status(mysql, schedule) == 422, "the apiserver takes this schedule: a bad example"
    mysql.create(with_schedule(schedule))

    cr = eventually(lambda: assert_failed_naming_schedule(mysql, "bad-schedule"), timeout=mysql.timeouts(30))

    ready = condition(cr, "Ready")
    assert ready is not None and repr(schedule) in ready["message"], ready
    assert mysql.child("cronjob", "bad-schedule") is None
