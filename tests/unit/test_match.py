"""assert_matches / mismatches: subset maps, ordered and unordered lists, matchers, paths, object kinds."""

from __future__ import annotations

import re
from typing import Any

import pytest

from envtest.match import ABSENT, MISSING, Mismatch, assert_matches, by_key, condition, mismatches


def sts() -> dict[str, Any]:
    """A trimmed StatefulSet as the API server returns it."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "db",
            "namespace": "t1",
            "uid": "5d1c",
            "labels": {"app.kubernetes.io/name": "mysql", "app.kubernetes.io/instance": "db"},
        },
        "spec": {
            "replicas": 3,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "mysql",
                            "image": "mysql:8.0",
                            "ports": [{"name": "mysql", "containerPort": 3306}],
                            "env": [
                                {
                                    "name": "MYSQL_ROOT_PASSWORD",
                                    "valueFrom": {"secretKeyRef": {"name": "db"}},
                                },
                                {"name": "MYSQL_DATABASE", "value": "app"},
                            ],
                        },
                        {"name": "exporter", "image": "prom/mysqld-exporter:v0.15.1"},
                    ]
                }
            },
        },
        "status": {
            "readyReplicas": 3,
            "observedGeneration": 2,
            "conditions": [
                {"type": "Progressing", "status": "True", "reason": "Rolled"},
                {"type": "Ready", "status": "True"},
            ],
        },
    }


def paths(live: Any, expected: Any, **kwargs: Any) -> list[str]:
    return [m.path for m in mismatches(live, expected, **kwargs)]


# --- maps ------------------------------------------------------------------------------------------


def test_map_is_a_subset_extra_live_keys_ignored() -> None:
    assert_matches(sts(), {"metadata": {"name": "db"}, "spec": {"replicas": 3}})
    assert_matches(sts(), {})


def test_missing_key_is_reported_with_its_path() -> None:
    (m,) = mismatches(sts(), {"spec": {"serviceName": "db"}})
    assert m == Mismatch("spec.serviceName", "db", MISSING, "missing key")
    assert str(m) == "spec.serviceName: missing key (expected 'db')"


def test_scalar_must_equal() -> None:
    (m,) = mismatches(sts(), {"spec": {"replicas": 1}})
    assert (m.path, m.expected, m.actual, m.reason) == ("spec.replicas", 1, 3, "differs")
    assert str(m) == "spec.replicas: expected 1, got 3"


def test_bool_never_equals_int() -> None:
    assert paths({"a": 1}, {"a": True}) == ["a"]
    assert paths({"a": True}, {"a": 1}) == ["a"]
    assert paths({"a": 1.0}, {"a": 1}) == []


def test_mapping_where_live_has_a_list_is_a_type_mismatch() -> None:
    (m,) = mismatches({"spec": [1]}, {"spec": {"replicas": 3}})
    assert m.reason == "type differs"
    assert "expected a mapping" in str(m)


def test_absent_accepts_missing_or_null_and_rejects_a_value() -> None:
    assert paths({"metadata": {"name": "x"}}, {"metadata": {"deletionTimestamp": ABSENT}}) == []
    assert paths({"metadata": {"deletionTimestamp": None}}, {"metadata": {"deletionTimestamp": ABSENT}}) == []
    (m,) = mismatches(
        {"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}},
        {"metadata": {"deletionTimestamp": ABSENT}},
    )
    assert m.reason == "not absent"
    assert str(m) == "metadata.deletionTimestamp: expected absent, got '2024-01-01T00:00:00Z'"


# --- paths -----------------------------------------------------------------------------------------


def test_nested_path_through_list_indices() -> None:
    expected = {"spec": {"template": {"spec": {"containers": [{"image": "mysql:8.0"}, {"image": "nope"}]}}}}
    assert paths(sts(), expected) == ["spec.template.spec.containers[1].image"]


def test_keys_with_dots_or_slashes_are_bracketed_and_quoted() -> None:
    expected = {"metadata": {"labels": {"app.kubernetes.io/name": "mariadb"}}}
    (m,) = mismatches(sts(), expected)
    assert m.path == 'metadata.labels["app.kubernetes.io/name"]'
    assert str(m) == "metadata.labels[\"app.kubernetes.io/name\"]: expected 'mariadb', got 'mysql'"


def test_root_scalar_mismatch_has_root_path() -> None:
    (m,) = mismatches(3, 4)
    assert m.path == ""
    assert str(m).startswith("(root): ")


# --- ordered lists ---------------------------------------------------------------------------------


def test_lists_match_in_order_elementwise_as_subsets() -> None:
    containers = [{"name": "mysql"}, {"name": "exporter"}]
    assert_matches(sts(), {"spec": {"template": {"spec": {"containers": containers}}}})
    swapped = containers[::-1]
    assert paths(sts(), {"spec": {"template": {"spec": {"containers": swapped}}}}) == [
        "spec.template.spec.containers[0].name",
        "spec.template.spec.containers[1].name",
    ]


def test_list_length_differs_reports_extra_items_and_still_compares_the_rest() -> None:
    expected = {"spec": {"template": {"spec": {"containers": [{"image": "mysql:5.7"}]}}}}
    found = mismatches(sts(), expected)
    assert [(m.path, m.reason) for m in found] == [
        ("spec.template.spec.containers", "length differs"),
        ("spec.template.spec.containers[0].image", "differs"),
    ]
    assert "expected 1 item, got 2" in str(found[0])
    assert "extra items:" in str(found[0])
    assert "exporter" in str(found[0])


def test_list_shorter_than_expected_reports_missing_items() -> None:
    (m,) = mismatches({"finalizers": []}, {"finalizers": ["db.example.com/final-backup"]})
    assert m.reason == "length differs"
    assert "missing items: ['db.example.com/final-backup']" in str(m)


def test_empty_expected_list_requires_empty_live_list() -> None:
    # The way to assert "the finalizer was really removed".
    assert paths({"metadata": {"finalizers": ["x"]}}, {"metadata": {"finalizers": []}}) == [
        "metadata.finalizers"
    ]
    assert paths({"metadata": {"finalizers": []}}, {"metadata": {"finalizers": []}}) == []


# --- unordered lists -------------------------------------------------------------------------------


def test_unordered_true_applies_to_every_list() -> None:
    expected = {
        "spec": {"template": {"spec": {"containers": [{"name": "exporter"}, {"name": "mysql"}]}}},
        "status": {"conditions": [{"type": "Ready"}]},
    }
    assert paths(sts(), expected) != []
    assert_matches(sts(), expected, unordered=True)


def test_unordered_by_path_only_affects_that_path() -> None:
    expected = {
        "spec": {"template": {"spec": {"containers": [{"name": "exporter"}, {"name": "mysql"}]}}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert paths(sts(), expected, unordered=["status.conditions"]) == [
        "spec.template.spec.containers[0].name",
        "spec.template.spec.containers[1].name",
    ]


def test_unordered_path_may_be_a_single_string() -> None:
    assert_matches(sts(), {"status": {"conditions": [{"type": "Ready"}]}}, unordered="status.conditions")


def test_unordered_path_inside_list_elements_ignores_indices() -> None:
    env = [{"name": "MYSQL_DATABASE", "value": "app"}, {"name": "MYSQL_ROOT_PASSWORD"}]
    expected = {"spec": {"template": {"spec": {"containers": [{"env": env}, {}]}}}}
    assert_matches(sts(), expected, unordered=["spec.template.spec.containers.env"])
    assert_matches(sts(), expected, unordered=["spec.template.spec.containers[*].env"])
    assert_matches(sts(), expected, unordered=["spec.template.spec.containers[0].env"])


def test_unordered_each_expected_element_needs_a_distinct_live_element() -> None:
    live = {"items": [{"a": 1}]}
    (m,) = mismatches(live, {"items": [{"a": 1}, {"a": 1}]}, unordered=True)
    assert (m.path, m.reason) == ("items", "no matching element")
    assert "already matched by expected[0]" in str(m)


def test_unordered_finds_an_assignment_greedy_matching_would_miss() -> None:
    live = {"items": [{"a": 1, "b": 2}, {"a": 1}]}
    assert_matches(live, {"items": [{"a": 1}, {"a": 1, "b": 2}]}, unordered=True)


def test_unordered_failure_names_the_closest_element_by_type() -> None:
    live = sts()
    live["status"]["conditions"][1]["status"] = "False"
    (m,) = mismatches(live, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, unordered=True)
    assert m.path == "status.conditions"
    # Progressing has status True too; the useful neighbour is the Ready condition that is False.
    assert "closest is [1]: status.conditions[1].status: expected 'True', got 'False'" in str(m)


def test_unordered_against_empty_list_says_so() -> None:
    (m,) = mismatches({"c": []}, {"c": [{"type": "Ready"}]}, unordered=True)
    assert "the list is empty" in str(m)


# --- predicates and regexes ------------------------------------------------------------------------


def test_predicate_passes_on_truthy_result() -> None:
    assert_matches(sts(), {"status": {"readyReplicas": lambda n: n >= 3}})


def test_predicate_rejection_is_a_mismatch() -> None:
    (m,) = mismatches(sts(), {"status": {"readyReplicas": lambda n: n > 3}})
    assert (m.path, m.actual, m.reason) == ("status.readyReplicas", 3, "predicate failed")
    assert "<lambda>" in str(m)


def test_predicate_that_raises_is_a_mismatch_naming_the_error() -> None:
    (m,) = mismatches({"status": {"readyReplicas": None}}, {"status": {"readyReplicas": lambda n: n >= 3}})
    assert m.reason == "predicate failed"
    assert "TypeError" in m.detail


def test_type_as_expected_value_is_an_isinstance_check() -> None:
    assert_matches(sts(), {"metadata": {"uid": str}, "spec": {"replicas": int}})
    (m,) = mismatches(sts(), {"spec": {"replicas": str}})
    assert str(m) == "spec.replicas: expected an instance of str, got 3"


def test_regex_must_fullmatch_a_string() -> None:
    assert_matches(
        sts(), {"spec": {"template": {"spec": {"containers": [{"image": re.compile(r"mysql:8\.\d+")}, {}]}}}}
    )
    # fullmatch, not search: a prefix is not enough
    assert paths({"image": "mysql:8.0-debian"}, {"image": re.compile(r"mysql:8\.\d+")}) == ["image"]
    (m,) = mismatches({"replicas": 3}, {"replicas": re.compile(r"\d+")})
    assert m.reason == "no regex match"


# --- every mismatch and the message ----------------------------------------------------------------


def test_every_mismatch_is_reported() -> None:
    expected = {
        "metadata": {"labels": {"app.kubernetes.io/name": "mariadb", "team": "db"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"image": "mysql:5.7"}, {}]}}},
        "status": {"readyReplicas": lambda n: n > 5, "conditions": [{"type": "Degraded"}]},
    }
    with pytest.raises(AssertionError) as info:
        assert_matches(sts(), expected, unordered=["status.conditions"])
    message = str(info.value)
    assert message.startswith("StatefulSet t1/db does not match (6 mismatches):")
    for line in [
        "metadata.labels[\"app.kubernetes.io/name\"]: expected 'mariadb', got 'mysql'",
        "metadata.labels.team: missing key (expected 'db')",
        "spec.replicas: expected 1, got 3",
        "spec.template.spec.containers[0].image: expected 'mysql:5.7', got 'mysql:8.0'",
        "status.readyReplicas: expected a value accepted by",
        "status.conditions: no element matches",
    ]:
        assert line in message


def test_failure_message_ends_with_a_diff_trimmed_to_asserted_keys() -> None:
    with pytest.raises(AssertionError) as info:
        assert_matches(sts(), {"spec": {"replicas": 1}, "metadata": {"name": "db"}})
    diff = str(info.value).split("\n\n", 1)[1]
    assert diff.splitlines()[:2] == ["--- expected", "+++ live (trimmed)"]
    assert "-  replicas: 1" in diff
    assert "+  replicas: 3" in diff
    assert " metadata:" in diff and "   name: db" in diff  # matching keys stay as context
    # keys the test did not ask about stay out of the diff
    for unasked in ("uid", "template", "status", "labels"):
        assert unasked not in diff


def test_passing_predicate_does_not_show_in_diff() -> None:
    with pytest.raises(AssertionError) as info:
        assert_matches(sts(), {"spec": {"replicas": 1}, "status": {"readyReplicas": lambda n: n == 3}})
    diff = str(info.value).split("\n\n", 1)[1]
    assert "<lambda>" not in diff
    assert " readyReplicas: 3" in diff


def test_no_error_when_everything_matches() -> None:
    assert mismatches(sts(), sts()) == []
    assert_matches(sts(), sts())


# --- live object kinds -----------------------------------------------------------------------------


class FakePykubeObject:
    """What matters of pykube.objects.APIObject: the raw JSON in .obj."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj


def test_pykube_object_is_matched_by_its_obj() -> None:
    assert_matches(FakePykubeObject(sts()), {"spec": {"replicas": 3}})
    with pytest.raises(AssertionError, match=r"StatefulSet t1/db does not match"):
        assert_matches(FakePykubeObject(sts()), {"spec": {"replicas": 2}})


def test_kubernetes_model_is_matched_in_camel_case() -> None:
    from kubernetes.client import V1ConfigMap, V1ObjectMeta

    cm = V1ConfigMap(metadata=V1ObjectMeta(name="x", resource_version="7"), data={"a": "b"})
    assert_matches(cm, {"metadata": {"name": "x", "resourceVersion": "7"}, "data": {"a": "b"}})
    # snake_case is the python attribute name, not the API's
    assert paths(cm, {"metadata": {"resource_version": "7"}}) == ["metadata.resource_version"]
    assert paths(cm, {"data": {"a": "c"}}) == ["data.a"]


def test_kubernetes_model_as_expected_value() -> None:
    from kubernetes.client import V1ConfigMap

    assert_matches({"kind": "ConfigMap", "data": {"a": "b", "c": "d"}}, V1ConfigMap(data={"a": "b"}))


# --- helpers ---------------------------------------------------------------------------------------


def test_by_key_indexes_conditions_by_type() -> None:
    conditions = by_key(sts()["status"]["conditions"])
    assert set(conditions) == {"Progressing", "Ready"}
    assert conditions["Ready"]["status"] == "True"
    assert by_key(sts()["spec"]["template"]["spec"]["containers"], "name")["exporter"]["image"].startswith(
        "prom/"
    )
    assert by_key(None) == {}


def test_by_key_rejects_duplicates_and_missing_keys() -> None:
    with pytest.raises(ValueError, match="duplicate type='Ready'"):
        by_key([{"type": "Ready"}, {"type": "Ready"}])
    with pytest.raises(ValueError, match="item 1 has no 'type'"):
        by_key([{"type": "Ready"}, {"status": "True"}])


def test_condition_finds_entry_by_type() -> None:
    assert condition(sts(), "Ready") == {"type": "Ready", "status": "True"}
    assert condition(sts(), "Degraded") is None
    assert condition({"metadata": {}}, "Ready") is None
    assert condition({"status": {"conditions": None}}, "Ready") is None
    assert condition(FakePykubeObject(sts()), "Progressing")["reason"] == "Rolled"  # type: ignore[index]
