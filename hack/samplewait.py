"""The wait of `make run` and `make run-kind` for their sample MySQLCluster to be Running, saying at
once what a person watching the terminal needs to know:

- the phase and readyReplicas, whenever they change;
- an image the sample's pods cannot pull (ErrImagePull, ImagePullBackOff, ...): the image and the
  kubelet's message, then the wait fails. The kubelet retries a pull for ever, so waiting on would
  only hide the cause (on kind: a cluster without a registry needs the test kit's stand-ins);
- unless that image is one the operator no longer asks for (`wanted` says which it asks for): the pod
  is a leftover of an earlier run with other settings, and a StatefulSet never replaces a pod that was
  never Ready (kubernetes/kubernetes#67250), so it would block the sample for ever. Once its
  StatefulSet's template has moved on, the pod is deleted (said once) and the StatefulSet makes it anew;
- the sample deleted while waited for (someone ran `kubectl delete`): said, and the wait ends with
  "deleted" rather than failing, because the operator is still fine and the sample can be applied
  again. The caller keeps the operator running;
- the operator exited, or the timeout passed: the wait fails with the operator's log tail.

The clock and the sleep are parameters, so a unit test steps time instead of waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import requests

Outcome = Literal["Running", "deleted"]

PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
"""The kubelet's waiting reasons that mean the image will not arrive without a change by a person
(each retry of a pull meets the same registry and the same name)."""
INSTANCE_LABEL = "app.kubernetes.io/instance"
"""The label the operator puts on every pod of a cluster, valued with the cluster's name."""
REQUEST_TIMEOUT = 10.0
"""Seconds for one GET (the clock of the whole wait is separate)."""


class WaitFailed(Exception):
    """The sample will not be Running by waiting longer; the message says why, for a person."""


class Operator(Protocol):
    @property
    def running(self) -> bool: ...

    def log_tail(self) -> str: ...


class Session(Protocol):
    def get(self, url: str, **kwargs: Any) -> requests.Response: ...

    def delete(self, url: str, **kwargs: Any) -> requests.Response: ...


@dataclass(frozen=True)
class PullFailure:
    """One container of one pod that waits for an image the kubelet cannot pull."""

    pod: str
    container: str
    image: str
    reason: str
    message: str
    """The kubelet's, as in the container's status (the registry's error is in it)."""
    uid: str = ""
    statefulset: str = ""
    """The pod's controller, when it is a StatefulSet."""

    def __str__(self) -> str:
        said = f": {self.message}" if self.message else ""
        return f"pod {self.pod}, container {self.container}: {self.reason} for image {self.image}{said}"


def pull_failures(pods: Iterable[Mapping[str, Any]]) -> list[PullFailure]:
    """Every init and app container of `pods` that waits for an image it cannot get, in pod order."""
    found = []
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        # The spec's image is what the operator asked for; a status may carry a normalised name
        # (docker.io/library/...) or none while nothing was pulled.
        asked = _images(spec)
        meta = pod.get("metadata") or {}
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), {})
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in PULL_FAILURES:
                found.append(
                    PullFailure(
                        pod=meta.get("name", "?"),
                        container=cs.get("name", "?"),
                        image=asked.get(cs.get("name", "")) or cs.get("image", "?"),
                        reason=waiting["reason"],
                        message=" ".join(str(waiting.get("message", "")).split()),
                        uid=meta.get("uid", ""),
                        statefulset=owner.get("name", "") if owner.get("kind") == "StatefulSet" else "",
                    )
                )
    return found


def _images(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    """Container name → image, init containers included."""
    containers = (pod_spec.get("initContainers") or []) + (pod_spec.get("containers") or [])
    return {c["name"]: c.get("image", "") for c in containers}


class SampleWait:
    """One wait for `namespace/name` on the apiserver at `server` (see the module's docstring)."""

    def __init__(
        self,
        session: Session,
        server: str,
        namespace: str,
        name: str,
        operator: Operator,
        *,
        say: Callable[[str], None],
        pull_hint: str = "",
        wanted: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        interval: float = 0.5,
    ) -> None:
        self.session, self.namespace, self.name, self.operator = session, namespace, name, operator
        self.say, self.pull_hint, self.wanted = say, pull_hint, wanted
        self.clock, self.sleep, self.interval = clock, sleep, interval
        self.cluster_url = f"{server}/apis/db.example.com/v1/namespaces/{namespace}/mysqlclusters/{name}"
        self.pods_url = f"{server}/api/v1/namespaces/{namespace}/pods"
        self.statefulsets_url = f"{server}/apis/apps/v1/namespaces/{namespace}/statefulsets"
        self._replaced: set[str] = set()  # uids of leftover pods deleted
        self._said: str | None = None
        self._unreachable: str | None = None

    def __call__(self, timeout: float) -> Outcome:
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            if not self.operator.running:
                raise WaitFailed(f"the operator exited; its log:\n{self.operator.log_tail()}")
            try:
                outcome = self._look()
            except requests.RequestException as exc:
                self._note_unreachable(f"cannot reach the apiserver ({type(exc).__name__}: {exc}); retrying")
                outcome = None
            if outcome is not None:
                return outcome
            self.sleep(self.interval)
        raise WaitFailed(
            f"{self.name} not Running after {timeout:.0f}s; operator log:\n{self.operator.log_tail()}"
        )

    def _look(self) -> Outcome | None:
        resp = self.session.get(self.cluster_url, timeout=REQUEST_TIMEOUT)
        if resp.status_code == 404:
            self.say(
                f"{self.namespace}/{self.name} was deleted before it was Running; the operator keeps "
                "running (apply the sample again to watch it converge)"
            )
            return "deleted"
        if resp.status_code != 200:
            # A 401 from an expired token or a 5xx during an apiserver restart: say it once, keep going.
            self._note_unreachable(f"GET {self.name}: HTTP {resp.status_code}: {_status_message(resp)}")
            return None
        self._unreachable = None
        status = resp.json().get("status") or {}
        phase, ready = status.get("phase") or "-", status.get("readyReplicas") or 0
        seen = f"{self.name}: phase={phase} readyReplicas={ready}"
        if seen != self._said:
            self.say(seen)
            self._said = seen
        if phase == "Running":
            return "Running"
        self._check_pulls()
        return None

    def _check_pulls(self) -> None:
        params = {"labelSelector": f"{INSTANCE_LABEL}={self.name}"}
        resp = self.session.get(self.pods_url, params=params, timeout=REQUEST_TIMEOUT)
        if resp.status_code != 200:
            return  # the cluster's own GET says what is wrong with the apiserver
        failures = pull_failures(resp.json().get("items") or [])
        if self.wanted is not None:
            for stale in [f for f in failures if not self.wanted(f.image)]:
                self._replace(stale)
            failures = [f for f in failures if self.wanted(f.image)]
        if failures:
            lines = "\n".join(f"  {f}" for f in failures)
            hint = f"\n{self.pull_hint}" if self.pull_hint else ""
            raise WaitFailed(
                f"{self.name} cannot be Running: the kubelet cannot pull an image of its pods "
                f"(it would retry for ever):\n{lines}{hint}"
            )

    def _replace(self, stale: PullFailure) -> None:
        """Delete `stale`'s pod once its StatefulSet asks for another image in that container (before,
        the StatefulSet would make the same pod again); the uid precondition spares a newer pod."""
        if not stale.statefulset or stale.uid in self._replaced:
            return
        resp = self.session.get(f"{self.statefulsets_url}/{stale.statefulset}", timeout=REQUEST_TIMEOUT)
        if resp.status_code != 200:
            return
        template = (resp.json().get("spec") or {}).get("template") or {}
        now = _images(template.get("spec") or {}).get(stale.container)
        if now is None or now == stale.image:
            return  # the operator has not rewritten the template yet
        url = f"{self.pods_url}/{stale.pod}"
        resp = self.session.delete(url, json={"preconditions": {"uid": stale.uid}}, timeout=REQUEST_TIMEOUT)
        if resp.status_code in (404, 409):  # gone already, or that name is a newer pod by now
            self._replaced.add(stale.uid)
        elif resp.status_code in (200, 202):
            self._replaced.add(stale.uid)
            self.say(
                f"pod {stale.pod} was stuck pulling {stale.image}, which its StatefulSet no longer asks "
                f"for (now {now}); a StatefulSet never replaces a pod that was never Ready: deleted it"
            )

    def _note_unreachable(self, message: str) -> None:
        if message != self._unreachable:
            self.say(message)
            self._unreachable = message


def _status_message(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200]
    return str(body.get("message", body)) if isinstance(body, dict) else str(body)[:200]
