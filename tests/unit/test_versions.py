"""Reading the tag the pods run, and which version changes count as a downgrade."""

from __future__ import annotations

import pytest

from mysql_operator.api.v1 import MySQLClusterSpec
from mysql_operator.controller.versions import (
    ENGINE_IMMUTABLE,
    VERSION_DOWNGRADE,
    choose,
    image_tag,
    older,
    rolls_back,
    running_engine,
    running_tag,
    started_tags,
)
from mysql_operator.database import images


@pytest.mark.parametrize(
    ("image", "tag"),
    [
        ("mysql:8.4", "8.4"),
        ("registry.local:5000/db/mysql:8.0.36-oracle", "8.0.36-oracle"),
        ("mysql:8.4@sha256:" + "0" * 64, "8.4"),
        ("registry.local:5000/mysql", None),
        ("mysql@sha256:" + "0" * 64, None),
    ],
)
def test_image_tag(image: str, tag: str | None) -> None:
    assert image_tag(image) == tag


def test_running_tag_reads_the_server_container_only() -> None:
    sts = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "replication", "image": "x:1"}, {"name": "mysql", "image": "m:9"}]
                }
            }
        }
    }
    assert running_tag(sts) == "9"
    assert running_tag(None) is None
    assert running_tag({"spec": {}}) is None


@pytest.mark.parametrize(
    ("wanted", "running", "refused"),
    [
        ("8.0", "8.4", True),
        ("8.0.36", "8.4.3", True),
        ("10.6", "10.11", True),  # numeric, not string, order
        ("8.4", "9.1", True),
        ("8.4.2", "8.4.3", False),  # patch releases are not compared
        ("8.4", "8.4.3", False),
        ("8", "8.4", False),  # `8` is the newest 8.x
        ("8.0", "8", True),  # ... which may have been 8.4
        ("8.4", "8", True),  # a pin must name what ran or newer
        ("8", "8", False),
        ("10.6", "10", True),
        ("9", "8.4", False),
        ("lts", "8.4", False),  # not comparable: the engine's rule refuses such tags anyway
        ("10.11", "10.6", False),
        ("8.4-oracle", "8.4", False),
    ],
)
def test_older_compares_major_and_minor(wanted: str, running: str, refused: bool) -> None:
    assert older(wanted, running) is refused


def sts(image: str, command: list[str] | None = None) -> dict[str, object]:
    server: dict[str, object] = {"name": "mysql", "image": image}
    if command is not None:
        server["command"] = command
    return {"spec": {"template": {"spec": {"containers": [server]}}}}


def spec(**fields: object) -> MySQLClusterSpec:
    return MySQLClusterSpec.model_validate({"replicas": 1, "storage": {"size": "1Gi"}, **fields})


def test_the_engine_is_read_from_the_server_program_else_the_repository() -> None:
    assert running_engine(sts("registry.local/x:10.11", ["sh", "-c", "...", "sh", "mariadbd"])) == "mariadb"
    assert running_engine(sts(images.current().database("mariadb", "10.11"))) == "mariadb"  # older templates
    assert running_engine(sts(images.current().database("mysql", "8.0"))) == "mysql"
    assert running_engine(sts("registry.local/other:1")) is None


def test_an_unset_version_keeps_the_template_then_what_ran_then_the_default() -> None:
    assert choose(spec(), None, None).tag == "8.4"
    assert choose(spec(), sts("mysql:8.0"), None).tag == "8.0"
    assert choose(spec(), None, "8.0").tag == "8.0", "a StatefulSet deleted with --cascade=orphan"
    assert choose(spec(), sts("mysql:8.4.2"), "8.0").tag == "8.4.2", "a rollout under way is not undone"
    assert choose(spec(), sts("mysql:lts"), None).tag == "8.4", "a tag the engine cannot run is not kept"


def test_choose_refuses_a_downgrade_from_what_ran_not_from_the_template() -> None:
    refused = choose(spec(version="8.0"), sts("mysql:9.9"), "8.4")
    assert (refused.tag, refused.reason) == ("8.4", VERSION_DOWNGRADE)
    assert choose(spec(version="8.4"), sts("mysql:9.9"), "8.4").reason is None


def test_choose_keeps_the_engine_the_pods_run() -> None:
    kept = choose(spec(engine="mysql", version="8.4"), sts("mariadb:10.11", ["sh", "mariadbd"]), "10.11")
    assert (kept.engine, kept.tag, kept.reason) == ("mariadb", "10.11", ENGINE_IMMUTABLE)


def pod(image: str, state: dict[str, object], last: dict[str, object] | None = None) -> dict[str, object]:
    status = {"name": "mysql", "state": state, "lastState": last or {}}
    return {
        "spec": {"containers": [{"name": "mysql", "image": image}]},
        "status": {"containerStatuses": [status]},
    }


def test_started_tags_are_those_of_servers_that_ran() -> None:
    pods = [
        pod("mysql:9.9", {"running": {}}),
        pod("mysql:9.8", {"waiting": {"reason": "CrashLoopBackOff"}}, {"terminated": {"exitCode": 1}}),
        pod("mysql:9.7", {"waiting": {"reason": "ImagePullBackOff"}}),  # never ran
        pod("mysql:9.6", {"terminated": {"exitCode": 0}}),
        {"spec": {"containers": [{"name": "mysql", "image": "mysql:9.5"}]}},  # no status yet
    ]
    assert started_tags(pods) == ["9.9", "9.8", "9.6"]


def test_an_upgrade_some_pod_started_cannot_be_taken_back() -> None:
    template = sts("mysql:9.9")
    back = spec(version="8.4")
    assert rolls_back(back, template)
    assert choose(back, template, "8.4", []).reason is None, "no pod started 9.9: a typo, say"
    refused = choose(back, template, "8.4", ["8.4", "9.9"])
    assert (refused.tag, refused.reason) == ("9.9", VERSION_DOWNGRADE)
    assert not rolls_back(spec(version="9.9"), template)
    assert not rolls_back(spec(), template)


def test_an_unset_version_does_not_follow_a_rollout_undone_by_hand() -> None:
    assert choose(spec(), sts("mysql:8.0"), "8.4").tag == "8.4"


def test_the_engine_kept_gets_a_tag_it_can_run() -> None:
    kept = choose(spec(engine="mysql"), sts("mariadb:lts", ["sh", "mariadbd"]), "11.4")
    assert (kept.engine, kept.tag) == ("mariadb", "11.4")
    digest = choose(spec(engine="mysql"), sts("mariadb@sha256:" + "0" * 64, ["sh", "mariadbd"]), None)
    assert (digest.engine, digest.tag) == ("mariadb", "10.11")


def test_one_repository_for_both_engines_tells_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        images, "current", lambda: images.Images(mysql_repository="reg/db", mariadb_repository="reg/db")
    )
    assert running_engine(sts("reg/db:8.4")) is None
    assert running_engine(sts("reg/db:8.4", ["sh", "-c", "...", "sh", "mysqld"])) == "mysql"
