"""Hot loops in a test's record: writes nobody else explains, and requeues faster than a limit."""

from __future__ import annotations

from record_fakes import NS, OPERATOR, request

from envtest.record.hotloop import WINDOW, Limits, analyse

ADMIN = "envtest-admin"
LIMITS = Limits(writes=5, rate=2.0)


def test_status_write_that_triggers_itself_trips_the_write_check() -> None:
    loop = [request("patch", subresource="status", at=0.1 * i) for i in range(6)]
    found, peaks = analyse(loop, {OPERATOR}, LIMITS)
    assert [(f.check, f.key, len(f.requests)) for f in found] == [
        ("writes", ("example.com", "widgets", NS, "w"), 6)
    ]
    assert "wrote widgets.example.com" in found[0].describe() and "patch/status x6" in found[0].describe()
    assert peaks.writes == 6


def test_at_the_limit_is_no_hot_loop() -> None:
    found, _ = analyse([request("patch", at=float(i)) for i in range(5)], {OPERATOR}, LIMITS)
    assert found == []


def test_a_spec_change_by_someone_else_explains_the_next_write() -> None:
    items = []
    for i in range(10):  # a slow convergence: each of the operator's writes answers a change
        items.append(request("patch", user=ADMIN, at=i))
        items.append(request("patch", subresource="status", at=i + 0.5))
    found, peaks = analyse(items, {OPERATOR}, LIMITS)
    assert found == [] and peaks.writes == 1


def test_status_writes_answer_any_change_in_the_namespace_but_spec_writes_only_their_own() -> None:
    status, spec = [], []
    for i in range(10):  # a child's status moves (the controller-manager), the operator reports it
        child = request("update", user="system:kube-controller-manager", resource="statefulsets",
                        group="apps", name="w-db", subresource="status", at=i)  # fmt: skip
        status += [child, request("patch", subresource="status", at=i + 0.5)]
        # ... but rewriting the child's spec on every status change of it is a loop with the controller
        spec += [child, request("patch", resource="statefulsets", group="apps", name="w-db", at=i + 0.5)]
    assert analyse(status, {OPERATOR}, LIMITS)[0] == []
    found, _ = analyse(spec, {OPERATOR}, LIMITS)
    assert [(f.check, f.key[1], len(f.requests)) for f in found] == [("writes", "statefulsets", 10)]


def test_failed_writes_do_not_count_as_writes() -> None:
    conflicts = [request("update", code=409, at=i) for i in range(10)]
    assert analyse(conflicts, {OPERATOR}, LIMITS)[0] == []


def test_requeue_reading_the_object_too_often_trips_the_rate_check() -> None:
    reads = [request("get", at=0.1 * i) for i in range(int(2.0 * WINDOW) + 1)]  # 10/s, no writes
    found, peaks = analyse(reads, {OPERATOR}, LIMITS)
    assert [f.check for f in found] == ["rate"]
    assert "get x11" in found[0].describe()
    assert peaks.rate > LIMITS.rate


def test_busy_reads_between_other_users_writes_are_no_requeue_loop() -> None:
    items = []
    for i in range(40):  # pods start one by one: every reconcile answers one of them
        items.append(
            request("update", user="system:kwok", resource="pods", group="", name=f"p{i}", at=0.1 * i)
        )
        items.append(request("get", at=0.1 * i + 0.05))
    found, peaks = analyse(items, {OPERATOR}, LIMITS)
    assert found == [] and peaks.rate <= 1 / WINDOW


def test_watches_and_lists_are_no_object_and_other_tests_users_are_others() -> None:
    items = [request("watch", name="", at=i) for i in range(30)]
    items += [request("list", name="", at=i) for i in range(30)]
    items += [request("patch", user="system:serviceaccount:x:envtest-operator", at=i) for i in range(30)]
    assert analyse(items, {OPERATOR}, LIMITS)[0] == []


def test_children_rewritten_while_a_test_edits_their_parent_are_no_hot_loop() -> None:
    operator = OPERATOR
    parent_edits = [
        request("patch", user="envtest-admin", resource="mysqlclusters", name="db", at=i * 0.2)
        for i in range(30)
    ]
    child_writes = [
        request("patch", user=operator, resource="statefulsets", name="db-mysql", at=i * 0.2 + 0.05)
        for i in range(30)
    ]
    loops, _ = analyse(parent_edits + child_writes, {operator})
    assert loops == [], "a test editing the parent explains each rewrite of the child"
    # the same writes answering only a controller's status updates of the child are one
    status_updates = [
        request("update", user="system:kube-controller-manager", resource="statefulsets", name="db-mysql",
             subresource="status", at=i * 0.2)
        for i in range(30)
    ]  # fmt: skip
    loops, _ = analyse(status_updates + child_writes, {operator})
    assert [loop.check for loop in loops] == ["writes"]
