"""objects.create_or_replace: a replace that loses a race to another writer reads again and retries;
one the apiserver refuses for any other reason is answered at once."""

from __future__ import annotations

from typing import Any

from envtest import objects

COLLECTION = "https://apiserver/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
DOC = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "w"}}


class Resp:
    def __init__(self, status: int, body: dict[str, Any] | None = None) -> None:
        self.status_code, self._body = status, body or {}

    def json(self) -> dict[str, Any]:
        return self._body


class Scripted:
    """Answers each request with the next scripted response for its method; records what was sent."""

    def __init__(self, **answers: list[Resp]) -> None:
        self.answers = {method.upper(): list(resps) for method, resps in answers.items()}
        self.sent: list[tuple[str, str, dict[str, Any] | None]] = []

    def _answer(self, method: str, url: str, json: dict[str, Any] | None = None, **_: Any) -> Resp:
        self.sent.append((method, url, json))
        return self.answers[method].pop(0)

    def post(self, url: str, **kw: Any) -> Resp:
        return self._answer("POST", url, **kw)

    def get(self, url: str, **kw: Any) -> Resp:
        return self._answer("GET", url, **kw)

    def put(self, url: str, **kw: Any) -> Resp:
        return self._answer("PUT", url, **kw)


def _current(rv: str) -> Resp:
    return Resp(200, {"metadata": {"name": "w", "resourceVersion": rv}})


def test_a_replace_that_meets_a_conflict_reads_again_and_carries_the_new_resource_version() -> None:
    session = Scripted(
        post=[Resp(409), Resp(409)],
        get=[_current("1"), _current("2")],
        put=[Resp(409), Resp(200, {"replaced": True})],
    )
    pauses: list[float] = []
    resp = objects.create_or_replace(session, COLLECTION, DOC, sleep=pauses.append)  # type: ignore[arg-type]
    assert resp.json() == {"replaced": True}
    puts = [body for method, _, body in session.sent if method == "PUT"]
    assert [body["metadata"]["resourceVersion"] for body in puts if body] == ["1", "2"]
    assert "resourceVersion" not in DOC["metadata"], "the caller's document is left as it was"
    assert len(pauses) == 1


def test_an_object_deleted_between_the_read_and_the_write_is_created_again() -> None:
    session = Scripted(post=[Resp(409), Resp(201, {"created": True})], get=[Resp(404)])
    resp = objects.create_or_replace(session, COLLECTION, DOC, sleep=lambda _: None)  # type: ignore[arg-type]
    assert resp.status_code == 201
    assert [method for method, _, _ in session.sent] == ["POST", "GET", "POST"]


def test_an_object_deleted_between_the_read_and_the_replace_is_created_again() -> None:
    session = Scripted(post=[Resp(409), Resp(201)], get=[_current("3")], put=[Resp(404)])
    resp = objects.create_or_replace(session, COLLECTION, DOC, sleep=lambda _: None)  # type: ignore[arg-type]
    assert resp.status_code == 201
    assert [method for method, _, _ in session.sent] == ["POST", "GET", "PUT", "POST"]


def test_a_replace_refused_for_its_content_is_answered_at_once() -> None:
    refusal = Resp(422, {"message": "spec.versions: storage version cannot be removed"})
    session = Scripted(post=[Resp(409)], get=[_current("3")], put=[refusal])
    resp = objects.create_or_replace(session, COLLECTION, DOC, sleep=lambda _: None)  # type: ignore[arg-type]
    assert resp is refusal
    assert [method for method, _, _ in session.sent] == ["POST", "GET", "PUT"]


def test_a_refusal_a_retry_cannot_change_is_answered_at_once() -> None:
    for refusal in (Resp(422, {"message": "spec.names: invalid"}), Resp(404), Resp(403)):
        session = Scripted(post=[refusal])
        resp = objects.create_or_replace(session, COLLECTION, DOC, sleep=lambda _: None)  # type: ignore[arg-type]
        assert resp is refusal
        assert len(session.sent) == 1


def test_conflicts_without_end_give_up_with_the_last_answer() -> None:
    attempts = 3
    session = Scripted(
        post=[Resp(409)] * attempts, get=[_current("7")] * attempts, put=[Resp(409)] * attempts
    )
    resp = objects.create_or_replace(  # type: ignore[arg-type]
        session, COLLECTION, DOC, attempts=attempts, sleep=lambda _: None
    )
    assert resp.status_code == 409
    assert [method for method, _, _ in session.sent] == ["POST", "GET", "PUT"] * attempts
