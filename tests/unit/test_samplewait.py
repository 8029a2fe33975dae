"""hack/samplewait.py, the wait of `make run` and `make run-kind`: a deleted sample ends it without a
crash, an image the kubelet cannot pull ends it at once with the image and the kubelet's message, and
the clock is stepped, never waited on. The pull messages below are a v1.37 kubelet's, captured on a
cluster from the offline node image asked for Docker Hub's mysql:8.0."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("samplewait", ROOT / "hack" / "samplewait.py")
assert _spec and _spec.loader
samplewait = importlib.util.module_from_spec(_spec)
sys.modules["samplewait"] = samplewait  # dataclasses look their module up by name
_spec.loader.exec_module(samplewait)

SERVER = "https://127.0.0.1:6443"
INTERVAL = 0.5
NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'mysqlclusters.db.example.com "sample" not found',
    "reason": "NotFound",
    "details": {"name": "sample", "group": "db.example.com", "kind": "mysqlclusters"},
    "code": 404,
}
PULL_MESSAGE = (
    'failed to pull and unpack image "docker.io/library/mysql:8.0": failed to resolve reference '
    '"docker.io/library/mysql:8.0": failed to do request: Head "https://registry-1.docker.io/v2/library/'
    'mysql/manifests/8.0": dial tcp: lookup registry-1.docker.io on 172.21.0.1:53: no such host'
)


def _response(code: int, body: Any) -> requests.Response:
    resp = requests.Response()
    resp.status_code = code
    resp._content = json.dumps(body).encode()
    return resp


def _waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def pod(
    init_state: dict[str, Any], app_state: dict[str, Any] | None = None, image: str = "mysql:8.0"
) -> dict[str, Any]:
    """sample-mysql-0 of StatefulSet sample-mysql: an init container and mysql, both of `image`."""
    return {
        "metadata": {
            "name": "sample-mysql-0",
            "uid": f"uid-{image}",
            "labels": {"app.kubernetes.io/instance": "sample"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sample-mysql", "controller": True}
            ],
        },
        "spec": {
            "initContainers": [{"name": "configure", "image": image}],
            "containers": [{"name": "mysql", "image": image}],
        },
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [
                {"name": "configure", "image": "mysql:8.0", "ready": False, "state": init_state}
            ],
            "containerStatuses": [
                {
                    "name": "mysql",
                    "image": "mysql:8.0",
                    "ready": False,
                    "state": app_state or _waiting("PodInitializing"),
                }
            ],
        },
    }


class World:
    """The apiserver as the wait sees it, and a clock that moves only when the wait sleeps. `steps`
    maps a sleep's number to a change of the world made during that sleep."""

    def __init__(self, steps: dict[int, Callable[[World], None]] | None = None) -> None:
        self.cluster: dict[str, Any] | None = {"metadata": {"name": "sample"}, "status": {"phase": "Pending"}}
        self.cluster_answer: tuple[int, Any] | None = None
        """Overrides the cluster's GET (an error status) while set."""
        self.unreachable = False
        self.pods: list[dict[str, Any]] = []
        self.template_image = "mysql:8.0"
        """The image the StatefulSet's pod template names now."""
        self.deleted: list[tuple[str, Any]] = []
        self.now, self.sleeps = 1000.0, 0
        self.steps = steps or {}
        self.said: list[str] = []
        self.operator_running = True

    # -- the session -------------------------------------------------------------------------------
    def get(self, url: str, **kwargs: Any) -> requests.Response:
        assert kwargs.get("timeout"), "every GET has a timeout"
        if self.unreachable:
            raise requests.ConnectionError("connection refused")
        if url.endswith("/namespaces/default/mysqlclusters/sample"):
            if self.cluster_answer is not None:
                return _response(*self.cluster_answer)
            return _response(404, NOT_FOUND) if self.cluster is None else _response(200, self.cluster)
        if url.endswith("/api/v1/namespaces/default/pods"):
            assert kwargs["params"] == {"labelSelector": "app.kubernetes.io/instance=sample"}
            return _response(200, {"kind": "PodList", "items": self.pods})
        if url.endswith("/apis/apps/v1/namespaces/default/statefulsets/sample-mysql"):
            containers = [{"name": n, "image": self.template_image} for n in ("configure", "mysql")]
            spec = {"initContainers": containers[:1], "containers": containers[1:]}
            return _response(200, {"spec": {"template": {"spec": spec}}})
        raise AssertionError(f"unexpected GET {url}")

    def delete(self, url: str, **kwargs: Any) -> requests.Response:
        assert kwargs.get("timeout"), "every DELETE has a timeout"
        assert url.endswith("/api/v1/namespaces/default/pods/sample-mysql-0"), url
        self.deleted.append((url.rsplit("/", 1)[-1], kwargs["json"]))
        self.pods = []  # the StatefulSet controller makes it anew (steps set what it becomes)
        return _response(200, {"kind": "Pod"})

    # -- the clock ---------------------------------------------------------------------------------
    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        if self.sleeps in self.steps:
            self.steps[self.sleeps](self)

    # -- the operator ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.operator_running

    def log_tail(self) -> str:
        return "operator log tail"

    def wait(self, timeout: float = 60.0, hint: str = "", wanted: Callable[[str], bool] | None = None) -> str:
        waiting = samplewait.SampleWait(
            self,
            SERVER,
            "default",
            "sample",
            self,
            say=self.said.append,
            pull_hint=hint,
            wanted=wanted,
            clock=self.clock,
            sleep=self.sleep,
            interval=INTERVAL,
        )
        return waiting(timeout)  # type: ignore[no-any-return]


def _set_phase(phase: str, ready: int = 0) -> Callable[[World], None]:
    def change(world: World) -> None:
        assert world.cluster is not None
        world.cluster["status"] = {"phase": phase, "readyReplicas": ready}

    return change


def test_running_ends_the_wait_and_progress_is_said_once_per_change() -> None:
    world = World({3: _set_phase("Pending"), 4: _set_phase("Running", 1)})
    assert world.wait() == "Running"
    assert world.said == ["sample: phase=Pending readyReplicas=0", "sample: phase=Running readyReplicas=1"]


def test_a_sample_deleted_while_waited_for_ends_the_wait_as_deleted_instead_of_crashing() -> None:
    # The apiserver's 404 is a Status object whose "status" is the string "Failure": the old wait
    # took it for the cluster's status and crashed ('str' object has no attribute 'get').
    def delete(world: World) -> None:
        world.cluster = None

    world = World({2: delete})
    assert world.wait() == "deleted"
    assert world.sleeps == 2, "the deletion ends the wait at the next look"
    assert "default/sample was deleted before it was Running; the operator keeps running" in world.said[-1]


INVALID = 'Failed to apply default image tag "mysql:8.0!": invalid reference format'
NEVER = 'Container image "mysql:8.0" is not present with pull policy of Never'
BACKOFF = f'Back-off pulling image "mysql:8.0": ErrImagePull: {PULL_MESSAGE}'
DONE = {"terminated": {"reason": "Completed", "exitCode": 0}}


@pytest.mark.parametrize(
    ("init_state", "app_state", "reason", "container"),
    [
        pytest.param(
            _waiting("ImagePullBackOff", BACKOFF), None, "ImagePullBackOff", "configure", id="backoff"
        ),
        pytest.param(
            _waiting("ErrImagePull", PULL_MESSAGE), None, "ErrImagePull", "configure", id="pull-error"
        ),
        pytest.param(
            DONE, _waiting("InvalidImageName", INVALID), "InvalidImageName", "mysql", id="invalid-name"
        ),
        pytest.param(
            _waiting("ErrImageNeverPull", NEVER), None, "ErrImageNeverPull", "configure", id="never"
        ),
    ],
)
def test_an_image_the_kubelet_cannot_pull_fails_the_wait_at_first_sight_with_its_cause(
    init_state: dict[str, Any], app_state: dict[str, Any] | None, reason: str, container: str
) -> None:
    message = (init_state if container == "configure" else app_state or {})["waiting"]["message"]

    def pulls_fail(world: World) -> None:
        world.pods = [pod(init_state, app_state)]

    world = World({1: lambda w: w.pods.append(pod(_waiting("PodInitializing"))), 3: pulls_fail})
    with pytest.raises(samplewait.WaitFailed) as failed:
        world.wait(timeout=600, hint="load the stand-ins: make kind-standins")
    assert world.sleeps == 3, "the failure is reported at the first look after the kubelet said it"
    text = str(failed.value)
    assert f"pod sample-mysql-0, container {container}: {reason} for image mysql:8.0: {message}" in text
    assert text.endswith("load the stand-ins: make kind-standins")


@pytest.mark.parametrize(
    "state",
    [
        _waiting("PodInitializing"),
        _waiting("ContainerCreating"),
        _waiting("CrashLoopBackOff", "back-off 10s restarting failed container"),
        {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        {},
    ],
    ids=["initializing", "creating", "crashloop", "running", "no-state"],
)
def test_states_that_a_wait_can_outlast_are_not_pull_failures(state: dict[str, Any]) -> None:
    assert samplewait.pull_failures([pod(state, state)]) == []
    assert samplewait.pull_failures([{"metadata": {"name": "new"}, "status": {"phase": "Pending"}}]) == []


def test_every_failing_container_of_every_pod_is_named() -> None:
    other = pod(_waiting("ErrImagePull", "x"), _waiting("ErrImagePull", "y"))
    other["metadata"]["name"] = "sample-mysql-1"
    found = samplewait.pull_failures([pod(_waiting("ImagePullBackOff", "z")), other])
    assert [(f.pod, f.container, f.message) for f in found] == [
        ("sample-mysql-0", "configure", "z"),
        ("sample-mysql-1", "configure", "x"),
        ("sample-mysql-1", "mysql", "y"),
    ]


def test_an_apiserver_error_or_outage_is_said_once_and_the_wait_goes_on() -> None:
    def outage(world: World) -> None:
        world.unreachable = True

    def error(world: World) -> None:
        world.unreachable = False
        world.cluster_answer = (500, {"kind": "Status", "message": "etcdserver: leader changed", "code": 500})

    def healed(world: World) -> None:
        world.cluster_answer = None
        _set_phase("Running", 1)(world)

    world = World({1: outage, 4: error, 6: healed})
    assert world.wait() == "Running"
    assert sum("cannot reach the apiserver" in s for s in world.said) == 1
    assert world.said.count("GET sample: HTTP 500: etcdserver: leader changed") == 1


def test_an_exited_operator_fails_the_wait_with_its_log() -> None:
    def exits(world: World) -> None:
        world.operator_running = False

    world = World({2: exits})
    with pytest.raises(samplewait.WaitFailed, match="the operator exited; its log:\noperator log tail"):
        world.wait()
    assert world.sleeps == 2


def test_the_timeout_is_measured_on_the_injected_clock() -> None:
    world = World()
    with pytest.raises(samplewait.WaitFailed, match="sample not Running after 10s"):
        world.wait(timeout=10)
    assert world.sleeps == int(10 / INTERVAL)


STANDIN = "envtest.local/mysql-standin:8.0"


def standins_only(image: str) -> bool:
    return image.startswith("envtest.local/")


def test_a_pod_left_stuck_on_an_image_no_longer_asked_for_is_replaced_not_reported() -> None:
    # An earlier run without the stand-ins left sample-mysql-0 pulling mysql:8.0 from Docker Hub; a
    # StatefulSet never replaces a pod that was never Ready. This run's operator asks for the stand-in.
    def operator_rewrites_template(world: World) -> None:
        world.template_image = STANDIN

    def new_pod_runs(world: World) -> None:
        world.pods = [pod({"terminated": {"reason": "Completed"}}, {"running": {}}, image=STANDIN)]
        _set_phase("Running", 1)(world)

    world = World({2: operator_rewrites_template, 5: new_pod_runs})
    world.pods = [pod(_waiting("ImagePullBackOff", BACKOFF))]
    assert world.wait(wanted=standins_only) == "Running"
    # Not before the template moved on (the StatefulSet would make the same pod again), then once.
    assert world.deleted == [("sample-mysql-0", {"preconditions": {"uid": "uid-mysql:8.0"}})]
    said = [s for s in world.said if "stuck pulling" in s]
    assert said == [
        f"pod sample-mysql-0 was stuck pulling mysql:8.0, which its StatefulSet no longer asks for "
        f"(now {STANDIN}); a StatefulSet never replaces a pod that was never Ready: deleted it"
    ]


def test_a_pull_failure_of_an_image_still_asked_for_is_reported_even_with_leftovers_known() -> None:
    world = World()
    world.template_image = STANDIN
    world.pods = [pod(_waiting("ErrImagePull", "not found"), image=STANDIN)]
    with pytest.raises(samplewait.WaitFailed, match=f"ErrImagePull for image {STANDIN}: not found"):
        world.wait(wanted=standins_only)
    assert world.deleted == [] and world.sleeps == 0
