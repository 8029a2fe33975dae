"""MySQLCluster conversion between v1alpha1, v1beta1 and v1 (the hub): the shape changes, lossless round
trips between every pair of versions over generated objects (a seeded generator: every failure names its
seed), and the annotation that carries what v1alpha1 cannot hold.

Generated objects are what the apiserver sends: defaulted at their own version (a v1alpha1 object always
has `version`, v1alpha1's default being 8.0; a v1beta1 or v1 object always has `engine`)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from mysql_operator.api import v1 as hub_api
from mysql_operator.api import v1alpha1, v1beta1
from mysql_operator.api.conversion import FIELDS_ANNOTATION, ConversionError, convert

ALPHA = "db.example.com/v1alpha1"
BETA = "db.example.com/v1beta1"
V1 = "db.example.com/v1"
SEEDS = range(500)
VERSIONS = [ALPHA, BETA, V1]
MODELS = {
    ALPHA: v1alpha1.MySQLClusterModel,
    BETA: v1beta1.MySQLClusterModel,
    V1: hub_api.MySQLClusterModel,
}


def alpha(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": ALPHA, "kind": "MySQLCluster", "metadata": {"name": "db"}, "spec": spec}


def beta(**spec: Any) -> dict[str, Any]:
    return {**alpha(**spec), "apiVersion": BETA}


def v1(**spec: Any) -> dict[str, Any]:
    return {**alpha(**spec), "apiVersion": V1}


# -- generators: any subset of the fields, any valid value --------------------------------------------


def maybe(rng: random.Random, out: dict[str, Any], key: str, value: Any) -> None:
    if rng.random() < 0.6:
        out[key] = value


def gen_meta(rng: random.Random) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": rng.choice(["db", "a", "orders-1"]), "namespace": "ns", "uid": "u-1"}
    maybe(rng, meta, "labels", {"team": rng.choice(["x", "y"])})
    if rng.random() < 0.4:  # never an empty map: the apiserver omits those (omitempty)
        meta["annotations"] = {"note": rng.choice(["", "keep me", '{"json": true}'])}
    return meta


def gen_status(rng: random.Random) -> dict[str, Any]:
    status: dict[str, Any] = {}
    maybe(rng, status, "phase", rng.choice(["Pending", "Running", "Failed"]))
    maybe(rng, status, "readyReplicas", rng.randint(0, 9))
    maybe(rng, status, "observedGeneration", rng.randint(1, 50))
    return status


VERSIONS_OF = {"mysql": ["8.0", "8.4.3", "9"], "mariadb": ["10.11", "11.4", "10.6.18"]}


def gen_common(rng: random.Random, spec: dict[str, Any], engine: str = "mysql") -> None:
    maybe(rng, spec, "version", rng.choice(VERSIONS_OF[engine]))
    maybe(rng, spec, "resources", {"cpu": rng.choice(["500m", "2"]), "memory": "1Gi"})


CRONS = ["0 2 * * *", "@daily", "*/5 * * * *", "30 1 * * 1-5"]
ZONES = ["Etc/UTC", "Europe/Berlin", "America/New_York"]


def gen_alpha(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": rng.randint(1, 9), "storageSize": rng.choice(["1Gi", "10Gi", "500M"])}
    gen_common(rng, spec)
    spec.setdefault("version", "8.0")  # v1alpha1's default: never absent on the wire
    if rng.random() < 0.6:
        backup: dict[str, Any] = {}
        maybe(rng, backup, "enabled", rng.random() < 0.5)
        maybe(rng, backup, "schedule", rng.choice(CRONS))
        maybe(rng, backup, "retentionDays", rng.randint(1, 3650))
        spec["backup"] = backup
    obj = {"apiVersion": ALPHA, "kind": "MySQLCluster", "metadata": gen_meta(rng), "spec": spec}
    maybe(rng, obj, "status", gen_status(rng))
    return obj


def gen_beta(rng: random.Random, api_version: str = BETA) -> dict[str, Any]:
    """A v1beta1 object, or (api_version=V1) a v1 one: the same shape."""
    storage: dict[str, Any] = {"size": rng.choice(["1Gi", "10Gi", "500M"])}
    maybe(rng, storage, "storageClassName", rng.choice(["standard", "fast.ssd"]))
    engine = rng.choice(["mysql", "mariadb"])
    spec: dict[str, Any] = {"replicas": rng.randint(1, 9), "engine": engine, "storage": storage}
    gen_common(rng, spec, engine)
    if rng.random() < 0.6:
        backup: dict[str, Any] = {}
        maybe(rng, backup, "enabled", rng.random() < 0.5)
        if rng.random() < 0.6:
            schedule: dict[str, Any] = {}
            maybe(rng, schedule, "cron", rng.choice(CRONS))  # it has a default: absent is valid
            maybe(rng, schedule, "timeZone", rng.choice(ZONES))
            backup["schedule"] = schedule
        maybe(rng, backup, "retentionDays", rng.randint(1, 3650))
        spec["backup"] = backup
    obj = {"apiVersion": api_version, "kind": "MySQLCluster", "metadata": gen_meta(rng), "spec": spec}
    maybe(rng, obj, "status", gen_status(rng))
    return obj


def gen(rng: random.Random, api_version: str) -> dict[str, Any]:
    return gen_alpha(rng) if api_version == ALPHA else gen_beta(rng, api_version)


# -- properties -----------------------------------------------------------------------------------------


def test_v1alpha1_round_trip_through_the_hub_is_the_identity() -> None:
    for seed in SEEDS:
        obj = gen_alpha(random.Random(seed))
        hub = convert(obj, V1)
        assert hub["apiVersion"] == V1 and "storageSize" not in hub["spec"], seed
        assert hub["spec"]["engine"] == "mysql", seed
        hub_api.MySQLClusterModel.model_validate(hub)  # a valid v1alpha1 object is a valid v1 one
        assert convert(hub, ALPHA) == obj, f"seed {seed}"


def test_v1beta1_round_trip_through_v1alpha1_is_the_identity() -> None:
    for seed in SEEDS:
        obj = gen_beta(random.Random(seed))
        spoke = convert(obj, ALPHA)
        assert spoke["apiVersion"] == ALPHA and "storage" not in spoke["spec"], seed
        assert "engine" not in spoke["spec"] and "version" in spoke["spec"], seed
        v1alpha1.MySQLClusterModel.model_validate(spoke)
        assert convert(spoke, BETA) == obj, f"seed {seed}"


@pytest.mark.parametrize("start", VERSIONS)
@pytest.mark.parametrize("via", VERSIONS)
def test_every_round_trip_between_the_three_versions_is_the_identity(start: str, via: str) -> None:
    for seed in range(200):
        obj = gen(random.Random(seed), start)
        there = convert(obj, via)
        assert there["apiVersion"] == via, seed
        MODELS[via].model_validate(there)
        assert convert(there, start) == obj, f"{start} → {via} → {start}, seed {seed}"


def test_v1beta1_and_v1_differ_only_in_api_version() -> None:
    for seed in SEEDS:
        obj = gen_beta(random.Random(seed))
        assert convert(obj, V1) == {**obj, "apiVersion": V1}, f"seed {seed}"
        assert convert({**obj, "apiVersion": V1}, BETA) == obj, f"seed {seed}"


def test_the_path_through_every_version_arrives_where_it_started() -> None:
    for seed in range(200):
        obj = gen_beta(random.Random(seed), V1)
        assert convert(convert(convert(obj, BETA), ALPHA), V1) == obj, f"seed {seed}"


def test_generators_reach_every_case_the_annotation_handles() -> None:
    # A property test is only as good as its inputs: make sure some carry each lossy field.
    kept = [json.loads(a) for s in SEEDS for a in _annotations(convert(gen_beta(random.Random(s)), ALPHA))]
    assert any("storage" in k for k in kept) and any("backup" in k for k in kept)
    assert any(k.get("engine") == "mariadb" for k in kept) and any("engine" not in k for k in kept)
    assert any("version" in k and k["version"] is None for k in kept)
    assert any("cron" not in (k.get("backup") or {}).get("schedule", {"cron": 1}) for k in kept)


def _annotations(obj: dict[str, Any]) -> list[str]:
    value = (obj["metadata"].get("annotations") or {}).get(FIELDS_ANNOTATION)
    return [value] if value else []


def test_conversion_never_changes_its_input() -> None:
    for seed in range(50):
        pairs = [(gen(random.Random(seed), start), to) for start in VERSIONS for to in VERSIONS]
        for obj, to in pairs:
            before = json.dumps(obj, sort_keys=True)
            convert(obj, to)
            assert json.dumps(obj, sort_keys=True) == before, f"seed {seed}"


# -- the shape change, by example ---------------------------------------------------------------------------


def test_storage_size_and_cron_string_move_into_objects() -> None:
    hub = convert(alpha(replicas=1, storageSize="5Gi", backup={"enabled": True, "schedule": "@daily"}), V1)
    assert hub["spec"] == {
        "replicas": 1,
        "engine": "mysql",
        "storage": {"size": "5Gi"},
        "backup": {"enabled": True, "schedule": {"cron": "@daily"}},
    }
    assert "annotations" not in hub["metadata"]


def test_fields_v1alpha1_cannot_hold_travel_in_one_annotation() -> None:
    obj = v1(
        replicas=1,
        engine="mariadb",
        version="11.4",
        storage={"size": "5Gi", "storageClassName": "fast"},
        backup={"schedule": {"cron": "0 3 * * *", "timeZone": "Europe/Berlin"}},
    )
    spoke = convert(obj, ALPHA)
    assert spoke["spec"] == {
        "replicas": 1,
        "version": "11.4",
        "storageSize": "5Gi",
        "backup": {"schedule": "0 3 * * *"},
    }
    kept = json.loads(spoke["metadata"]["annotations"][FIELDS_ANNOTATION])
    assert kept == {
        "engine": "mariadb",
        "storage": {"storageClassName": "fast"},
        "backup": {"schedule": {"timeZone": "Europe/Berlin"}},
    }


def test_mysql_needs_no_annotation_in_v1alpha1() -> None:
    spoke = convert(v1(replicas=1, engine="mysql", version="8.4", storage={"size": "1Gi"}), ALPHA)
    assert spoke["spec"] == {"replicas": 1, "version": "8.4", "storageSize": "1Gi"}
    assert "annotations" not in spoke["metadata"]


@pytest.mark.parametrize(("engine", "default"), [("mysql", "8.4"), ("mariadb", "10.11")])
def test_an_unset_version_shows_as_the_engines_default_and_comes_back_unset(
    engine: str, default: str
) -> None:
    obj = v1(replicas=1, engine=engine, storage={"size": "1Gi"})
    spoke = convert(obj, ALPHA)
    # Explicit: left out, the apiserver would fill in v1alpha1's default (8.0) on the client's next write.
    assert spoke["spec"]["version"] == default
    assert json.loads(spoke["metadata"]["annotations"][FIELDS_ANNOTATION])["version"] is None
    assert "version" not in convert(spoke, V1)["spec"]


def test_a_version_a_v1alpha1_client_sets_is_kept_over_the_unset_marker() -> None:
    spoke = convert(v1(replicas=1, engine="mariadb", storage={"size": "1Gi"}), ALPHA)
    spoke["spec"]["version"] = "11.4"
    hub = convert(spoke, V1)
    assert hub["spec"]["version"] == "11.4" and hub["spec"]["engine"] == "mariadb"
    hub_api.MySQLClusterModel.model_validate(hub)


def test_a_v1alpha1_edit_keeps_the_fields_it_cannot_see() -> None:
    obj = v1(
        replicas=1, engine="mariadb", version="10.11", storage={"size": "5Gi", "storageClassName": "fast"}
    )
    spoke = convert(obj, ALPHA)
    spoke["spec"]["replicas"] = 3  # read-modify-write by a v1alpha1 client: metadata comes along
    hub = convert(spoke, V1)
    assert hub["spec"] == {
        "replicas": 3,
        "engine": "mariadb",
        "version": "10.11",
        "storage": {"size": "5Gi", "storageClassName": "fast"},
    }


def test_a_stale_annotation_on_the_hub_is_dropped_not_carried_into_v1alpha1() -> None:
    obj = v1(replicas=1, version="8.4", storage={"size": "1Gi"})
    obj["metadata"]["annotations"] = {FIELDS_ANNOTATION: '{"storage": {"storageClassName": "old"}}', "x": "y"}
    assert convert(obj, ALPHA)["metadata"]["annotations"] == {"x": "y"}


def test_a_broken_annotation_costs_its_fields_not_the_object() -> None:
    obj = alpha(replicas=1, storageSize="1Gi")
    obj["metadata"]["annotations"] = {FIELDS_ANNOTATION: "{not json"}
    hub = convert(obj, V1)
    assert hub["spec"]["storage"] == {"size": "1Gi"} and "annotations" not in hub["metadata"]


def test_unknown_versions_are_refused_by_name() -> None:
    with pytest.raises(ConversionError, match=r"db\.example\.com/v2"):
        convert(beta(replicas=1), "db.example.com/v2")
    with pytest.raises(ConversionError, match="v0"):
        convert({**beta(replicas=1), "apiVersion": "db.example.com/v0"}, V1)


def test_the_hub_is_v1_and_every_version_is_served() -> None:
    from mysql_operator.api.conversion import HUB, served

    assert HUB == V1 == hub_api.API_VERSION
    assert sorted(served()) == sorted(VERSIONS)
