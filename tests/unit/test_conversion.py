"""MySQLCluster conversion, v1alpha1 ⇄ v1beta1 (the hub): the shape changes, lossless round trips in
both directions over generated objects (a seeded generator: every failure names its seed), and the
annotation that carries what v1alpha1 cannot hold."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from mysql_operator import api, api_v1alpha1
from mysql_operator.conversion import FIELDS_ANNOTATION, ConversionError, convert

ALPHA = "db.example.com/v1alpha1"
BETA = "db.example.com/v1beta1"
SEEDS = range(500)


def alpha(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": ALPHA, "kind": "MySQLCluster", "metadata": {"name": "db"}, "spec": spec}


def beta(**spec: Any) -> dict[str, Any]:
    return {**alpha(**spec), "apiVersion": BETA}


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


def gen_common(rng: random.Random, spec: dict[str, Any]) -> None:
    maybe(rng, spec, "version", rng.choice(["8.0", "8.4.3", "9"]))
    maybe(rng, spec, "resources", {"cpu": rng.choice(["500m", "2"]), "memory": "1Gi"})


CRONS = ["0 2 * * *", "@daily", "*/5 * * * *", "30 1 * * 1-5"]
ZONES = ["Etc/UTC", "Europe/Berlin", "America/New_York"]


def gen_alpha(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": rng.randint(1, 9), "storageSize": rng.choice(["1Gi", "10Gi", "500M"])}
    gen_common(rng, spec)
    if rng.random() < 0.6:
        backup: dict[str, Any] = {}
        maybe(rng, backup, "enabled", rng.random() < 0.5)
        maybe(rng, backup, "schedule", rng.choice(CRONS))
        maybe(rng, backup, "retentionDays", rng.randint(1, 3650))
        spec["backup"] = backup
    obj = {"apiVersion": ALPHA, "kind": "MySQLCluster", "metadata": gen_meta(rng), "spec": spec}
    maybe(rng, obj, "status", gen_status(rng))
    return obj


def gen_beta(rng: random.Random) -> dict[str, Any]:
    storage: dict[str, Any] = {"size": rng.choice(["1Gi", "10Gi", "500M"])}
    maybe(rng, storage, "storageClassName", rng.choice(["standard", "fast.ssd"]))
    spec: dict[str, Any] = {"replicas": rng.randint(1, 9), "storage": storage}
    gen_common(rng, spec)
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
    obj = {"apiVersion": BETA, "kind": "MySQLCluster", "metadata": gen_meta(rng), "spec": spec}
    maybe(rng, obj, "status", gen_status(rng))
    return obj


# -- properties -----------------------------------------------------------------------------------------


def test_v1alpha1_round_trip_through_the_hub_is_the_identity() -> None:
    for seed in SEEDS:
        obj = gen_alpha(random.Random(seed))
        hub = convert(obj, BETA)
        assert hub["apiVersion"] == BETA and "storageSize" not in hub["spec"], seed
        api.MySQLClusterModel.model_validate(hub)  # a valid v1alpha1 object is a valid v1beta1 one
        assert convert(hub, ALPHA) == obj, f"seed {seed}"


def test_v1beta1_round_trip_through_v1alpha1_is_the_identity() -> None:
    for seed in SEEDS:
        obj = gen_beta(random.Random(seed))
        spoke = convert(obj, ALPHA)
        assert spoke["apiVersion"] == ALPHA and "storage" not in spoke["spec"], seed
        api_v1alpha1.MySQLClusterModel.model_validate(spoke)
        assert convert(spoke, BETA) == obj, f"seed {seed}"


def test_generators_reach_every_case_the_annotation_handles() -> None:
    # A property test is only as good as its inputs: make sure some carry each lossy field.
    kept = [json.loads(a) for s in SEEDS for a in _annotations(convert(gen_beta(random.Random(s)), ALPHA))]
    assert any("storage" in k for k in kept) and any("backup" in k for k in kept)
    assert any("cron" not in (k.get("backup") or {}).get("schedule", {"cron": 1}) for k in kept)


def _annotations(obj: dict[str, Any]) -> list[str]:
    value = (obj["metadata"].get("annotations") or {}).get(FIELDS_ANNOTATION)
    return [value] if value else []


def test_conversion_never_changes_its_input() -> None:
    for seed in range(50):
        for obj, to in ((gen_alpha(random.Random(seed)), BETA), (gen_beta(random.Random(seed)), ALPHA)):
            before = json.dumps(obj, sort_keys=True)
            convert(obj, to)
            assert json.dumps(obj, sort_keys=True) == before, f"seed {seed}"


# -- the shape change, by example ---------------------------------------------------------------------------


def test_storage_size_and_cron_string_move_into_objects() -> None:
    hub = convert(alpha(replicas=1, storageSize="5Gi", backup={"enabled": True, "schedule": "@daily"}), BETA)
    assert hub["spec"] == {
        "replicas": 1,
        "storage": {"size": "5Gi"},
        "backup": {"enabled": True, "schedule": {"cron": "@daily"}},
    }
    assert "annotations" not in hub["metadata"]


def test_fields_v1alpha1_cannot_hold_travel_in_one_annotation() -> None:
    obj = beta(
        replicas=1,
        storage={"size": "5Gi", "storageClassName": "fast"},
        backup={"schedule": {"cron": "0 3 * * *", "timeZone": "Europe/Berlin"}},
    )
    spoke = convert(obj, ALPHA)
    assert spoke["spec"] == {"replicas": 1, "storageSize": "5Gi", "backup": {"schedule": "0 3 * * *"}}
    kept = json.loads(spoke["metadata"]["annotations"][FIELDS_ANNOTATION])
    assert kept == {
        "storage": {"storageClassName": "fast"},
        "backup": {"schedule": {"timeZone": "Europe/Berlin"}},
    }


def test_a_v1alpha1_edit_keeps_the_fields_it_cannot_see() -> None:
    spoke = convert(beta(replicas=1, storage={"size": "5Gi", "storageClassName": "fast"}), ALPHA)
    spoke["spec"]["replicas"] = 3  # read-modify-write by a v1alpha1 client: metadata comes along
    hub = convert(spoke, BETA)
    assert hub["spec"] == {"replicas": 3, "storage": {"size": "5Gi", "storageClassName": "fast"}}


def test_a_stale_annotation_on_the_hub_is_dropped_not_carried_into_v1alpha1() -> None:
    obj = beta(replicas=1, storage={"size": "1Gi"})
    obj["metadata"]["annotations"] = {FIELDS_ANNOTATION: '{"storage": {"storageClassName": "old"}}', "x": "y"}
    assert convert(obj, ALPHA)["metadata"]["annotations"] == {"x": "y"}


def test_a_broken_annotation_costs_its_fields_not_the_object() -> None:
    obj = alpha(replicas=1, storageSize="1Gi")
    obj["metadata"]["annotations"] = {FIELDS_ANNOTATION: "{not json"}
    hub = convert(obj, BETA)
    assert hub["spec"]["storage"] == {"size": "1Gi"} and "annotations" not in hub["metadata"]


def test_unknown_versions_are_refused_by_name() -> None:
    with pytest.raises(ConversionError, match=r"db\.example\.com/v2"):
        convert(beta(replicas=1), "db.example.com/v2")
    with pytest.raises(ConversionError, match="v0"):
        convert({**beta(replicas=1), "apiVersion": "db.example.com/v0"}, BETA)
