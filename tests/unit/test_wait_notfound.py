"""`eventually` waits for an object to appear: an object's NotFound from each client is "not yet",
while a 404 for an unknown resource (a typo, a CRD not installed) fails at once. The exceptions are
built by hand exactly as each library raises them; the clock is fake."""

from __future__ import annotations

import json
from collections.abc import Callable

import pykube.exceptions
import pytest
import requests
from kubernetes.client.exceptions import ApiException, NotFoundException
from stepclock import StepClock

from envtest.notfound import is_object_not_found
from envtest.wait import eventually

OBJECT_NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'configmaps "cm" not found',
    "reason": "NotFound",
    "details": {"name": "cm", "kind": "configmaps"},
    "code": 404,
}
RESOURCE_NOT_FOUND = {  # GET /api/v1/namespaces/ns/configmapz/cm: a known group, an unknown resource
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "details": {},
    "code": 404,
}
PAGE_NOT_FOUND = "404 page not found\n"  # an unknown group: the apiserver's plain-text mux answer


def _response(status: int, body: dict[str, object] | str) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = (json.dumps(body) if isinstance(body, dict) else body).encode()
    resp.headers["content-type"] = "application/json" if isinstance(body, dict) else "text/plain"
    resp.url = "https://127.0.0.1:6443/api/v1/namespaces/ns/configmaps/cm"
    return resp


def _requests_error(status: int, body: dict[str, object] | str) -> requests.HTTPError:
    resp = _response(status, body)
    return requests.HTTPError(f"{status} Client Error", response=resp)


def _pykube_error(status: int, body: dict[str, object] | str) -> pykube.exceptions.HTTPError:
    # As pykube's raise_for_status raises it: while handling requests' HTTPError, with the message only.
    try:
        raise _requests_error(status, body)
    except requests.HTTPError:
        try:
            raise pykube.exceptions.HTTPError(status, body["message"] if isinstance(body, dict) else body)
        except pykube.exceptions.HTTPError as exc:
            return exc


def _kube_error(
    status: int, body: dict[str, object] | str, cls: type[ApiException] = ApiException
) -> ApiException:
    return cls(status=status, reason="Not Found", body=json.dumps(body) if isinstance(body, dict) else body)


OBJECT_MISSING: dict[str, Callable[[], BaseException]] = {
    "kubernetes ApiException": lambda: _kube_error(404, OBJECT_NOT_FOUND),
    "kubernetes NotFoundException": lambda: _kube_error(404, OBJECT_NOT_FOUND, NotFoundException),
    "pykube ObjectDoesNotExist": lambda: pykube.exceptions.ObjectDoesNotExist("cm does not exist."),
    "pykube HTTPError": lambda: _pykube_error(404, OBJECT_NOT_FOUND),
    "pykube HTTPError without its cause": lambda: pykube.exceptions.HTTPError(
        404, 'configmaps "cm" not found'
    ),
    "requests HTTPError": lambda: _requests_error(404, OBJECT_NOT_FOUND),
}
RESOURCE_MISSING: dict[str, Callable[[], BaseException]] = {
    "kubernetes, unknown resource": lambda: _kube_error(404, RESOURCE_NOT_FOUND),
    "kubernetes, unknown group": lambda: _kube_error(404, PAGE_NOT_FOUND),
    "pykube HTTPError, unknown resource": lambda: _pykube_error(404, RESOURCE_NOT_FOUND),
    "pykube HTTPError without its cause, unknown resource": lambda: pykube.exceptions.HTTPError(
        404, "the server could not find the requested resource"
    ),
    "requests, unknown resource": lambda: _requests_error(404, RESOURCE_NOT_FOUND),
    "requests, unknown group": lambda: _requests_error(404, PAGE_NOT_FOUND),
    "kubernetes, forbidden": lambda: _kube_error(403, {**OBJECT_NOT_FOUND, "reason": "Forbidden"}),
    "requests, server error": lambda: _requests_error(500, OBJECT_NOT_FOUND),
}


def _appears_on(call: int, missing: Callable[[], BaseException]) -> Callable[[], str]:
    calls = 0

    def read() -> str:
        nonlocal calls
        calls += 1
        if calls < call:
            raise missing()
        return f"found on call {calls}"

    return read


@pytest.mark.parametrize("make", OBJECT_MISSING.values(), ids=OBJECT_MISSING.keys())
def test_eventually_waits_through_an_objects_not_found(make: Callable[[], BaseException]) -> None:
    assert is_object_not_found(make())
    clock = StepClock()
    assert eventually(_appears_on(4, make), timeout=5, clock=clock, sleep=clock.sleep) == "found on call 4"


@pytest.mark.parametrize("make", RESOURCE_MISSING.values(), ids=RESOURCE_MISSING.keys())
def test_eventually_fails_at_once_on_an_unknown_resource(make: Callable[[], BaseException]) -> None:
    assert not is_object_not_found(make())
    clock = StepClock()
    with pytest.raises(type(make())):
        eventually(_appears_on(4, make), timeout=5, clock=clock, sleep=clock.sleep)
    assert clock.now == 0.0, "it waited for something waiting cannot fix"


def test_timeout_on_a_missing_object_reports_it_as_last_observed() -> None:
    clock = StepClock()
    never = _appears_on(10**6, OBJECT_MISSING["pykube ObjectDoesNotExist"])
    with pytest.raises(
        AssertionError, match=r"last observed:\nObjectDoesNotExist: cm does not exist"
    ) as info:
        eventually(never, timeout=1, clock=clock, sleep=clock.sleep)
    assert isinstance(info.value.__cause__, pykube.exceptions.ObjectDoesNotExist)


def test_retry_on_adds_to_the_defaults_instead_of_replacing_them() -> None:
    clock = StepClock()
    failures: list[BaseException] = [
        ValueError("added by retry_on"),
        AssertionError("still retried"),
        OBJECT_MISSING["requests HTTPError"](),
    ]

    def check() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    assert eventually(check, retry_on=(ValueError,), timeout=5, clock=clock, sleep=clock.sleep) == "done"
