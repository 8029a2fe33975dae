"""Reading the tag the pods run, and which version changes count as a downgrade."""

from __future__ import annotations

import pytest

from mysql_operator.versions import image_tag, older, running_tag


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
        ("9", "8.4", False),
        ("10.11", "10.6", False),
        ("8.4-oracle", "8.4", False),
    ],
)
def test_older_compares_major_and_minor(wanted: str, running: str, refused: bool) -> None:
    assert older(wanted, running) is refused
