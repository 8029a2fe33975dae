"""Which engine versions the operator accepts: the versions with the replication syntax it sends
(the CRD's CEL rule uses the same patterns; tests/e2e/test_validation.py checks the apiserver side)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mysql_operator.api.v1 import MySQLClusterSpec
from mysql_operator.database.engines import ENGINES

ACCEPTED = {
    "mysql": ["8", "8.0", "8.0.23", "8.0.40", "8.0.100", "8.4", "8.4.3", "8.4-oracle", "9", "9.1.0", "10.2"],
    "mariadb": ["10", "10.6", "10.6.21", "10.11", "10.11.9-jammy", "11", "11.4", "11.8.2", "12.1"],
}
REFUSED = {
    "mysql": ["5.7", "5.7.44", "8.0.0", "8.0.22", "8.0.9", "7", "0.9"],
    "mariadb": ["10.5", "10.4.33", "10.0", "5.5", "8.4", "9.1"],
}


def spec(engine: str, version: str | None) -> MySQLClusterSpec:
    body = {"engine": engine, "replicas": 1, "storage": {"size": "1Gi"}}
    return MySQLClusterSpec.model_validate({**body, **({"version": version} if version else {})})


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, vs in ACCEPTED.items() for v in vs])
def test_versions_with_the_syntax_used_are_accepted(engine: str, version: str) -> None:
    assert spec(engine, version).image_tag == version


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, vs in REFUSED.items() for v in vs])
def test_older_versions_are_refused_naming_the_field_and_what_is_needed(engine: str, version: str) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(engine, version)
    message = str(caught.value)
    assert "spec.version" in message and ENGINES[engine].supported in message, message


@pytest.mark.parametrize(("engine", "default"), [("mysql", "8.4"), ("mariadb", "10.11")])
def test_an_unset_version_is_the_engines_default(engine: str, default: str) -> None:
    parsed = spec(engine, None)
    assert parsed.version is None and parsed.image_tag == default
    assert ENGINES[engine].supports(default)
