"""Code that finds its cluster itself, as the plugin points the process's environment at it.

An operator that finds its cluster itself — `load_kube_config()` with no file, `load_config()`,
`new_client_from_config()`, `pykube.KubeConfig.from_env()`, the async clients' loaders — acts as its
own ServiceAccount, asked of the apiserver (SelfSubjectReview). The client libraries read `KUBECONFIG`
once, at import, which in this process came before any operator ran: what they load must still be
the operator's identity, never the file the developer's shell named. And a test's own
`pykube.KubeConfig.from_env()` leaves no certificate or key in the shared temporary folder."""

from __future__ import annotations

import asyncio
import importlib
import threading
from pathlib import Path
from typing import Any

import kubernetes
import pykube
import pytest

from envtest import eventually
from envtest.adapters.threads import run_in_thread

REVIEW = "apis/authentication.k8s.io/v1/selfsubjectreviews"
BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
ASYNC_LIBRARIES = ("kubernetes.aio", "kubernetes_asyncio")

SEEN: dict[str, dict[str, str]] = {}
"""namespace → loader → the username the apiserver saw, filled by the operator below."""


def _official(api: kubernetes.client.ApiClient) -> str:
    with api:
        review = kubernetes.client.AuthenticationV1Api(api).create_self_subject_review(BODY)
        return str(review.status.user_info.username)


async def _async_whoami(library: str) -> str:
    module = importlib.import_module(library)
    configuration = module.client.Configuration()
    await module.config.load_kube_config(client_configuration=configuration)  # no file: the default
    async with module.client.ApiClient(configuration) as api:
        review = await module.client.AuthenticationV1Api(api).create_self_subject_review(BODY)
        return str(review.status.user_info.username)


def find_the_cluster_alone(stop: threading.Event, *, namespace: str, limit: float) -> None:
    """Every way a client-based operator finds its cluster without being given it."""
    seen: dict[str, str] = {}
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(client_configuration=configuration)
    seen["load_kube_config"] = _official(kubernetes.client.ApiClient(configuration))
    seen["new_client_from_config"] = _official(kubernetes.config.new_client_from_config())
    kubernetes.config.load_config()  # what many mains call: in-cluster, else the kubeconfig
    seen["load_config"] = _official(kubernetes.client.ApiClient())
    kube = pykube.HTTPClient(pykube.KubeConfig.from_env())
    response = kube.session.post(f"{kube.url}/{REVIEW}", json=BODY, timeout=limit)
    response.raise_for_status()
    seen["pykube_from_env"] = response.json()["status"]["userInfo"]["username"]
    for library in ASYNC_LIBRARIES:
        try:
            importlib.import_module(library)
        except ImportError:
            continue
        seen[library] = asyncio.run(_async_whoami(library))
    SEEN[namespace] = seen
    stop.wait()


@pytest.fixture
def envtest_operator_factory(timeouts: Any) -> Any:
    limit = timeouts(10)

    def find(stop: threading.Event, *, namespace: str) -> None:
        find_the_cluster_alone(stop, namespace=namespace, limit=limit)

    return run_in_thread(find, name="find-the-cluster-alone")


def test_an_operator_loading_its_own_configuration_is_its_service_account(
    operator: Any, namespace: str, timeouts: Any
) -> None:
    seen = eventually(lambda: SEEN[namespace], retry_on=(KeyError,), timeout=timeouts(30))
    expected = f"system:serviceaccount:{namespace}:envtest-operator"
    assert {"load_kube_config", "new_client_from_config", "load_config", "pykube_from_env"} <= set(seen)
    assert seen == dict.fromkeys(seen, expected)


def test_a_client_built_from_the_environment_leaves_no_key_in_the_shared_temp_dir(
    kube: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pykube-ng writes a kubeconfig's inline certificates and keys to `<tmp>/pykube-ng.<md5>.crt`
    (the umask's mode: any local user reads the admin's key) and never removes them; the file the
    environment names holds them as files of the session's private folder instead."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    admin = pykube.HTTPClient(pykube.KubeConfig.from_env())
    assert pykube.Namespace.objects(admin).get(name="default").exists()
    assert not list(tmp_path.glob("pykube-ng.*"))


IMPORTED: dict[str, Any] = {}
"""Clients an operator module makes as it is imported: once per process (the harness imports an
operator's modules once), in the first test that runs it, kept by every later one."""


def whoami_through_clients_made_at_import(stop: threading.Event, *, namespace: str, limit: float) -> None:
    if not IMPORTED:
        IMPORTED["default"] = kubernetes.client.AuthenticationV1Api()  # kopf's walkthrough, at module level
        kubernetes.config.load_kube_config()  # no file: what the environment names
        IMPORTED["load_kube_config"] = kubernetes.client.AuthenticationV1Api()
        IMPORTED["pykube_from_env"] = pykube.HTTPClient(pykube.KubeConfig.from_env())
    seen = {
        name: str(IMPORTED[name].create_self_subject_review(BODY).status.user_info.username)
        for name in ("default", "load_kube_config")
    }
    kube = IMPORTED["pykube_from_env"]
    response = kube.session.post(f"{kube.url}/{REVIEW}", json=BODY, timeout=limit)
    response.raise_for_status()
    seen["pykube_from_env"] = response.json()["status"]["userInfo"]["username"]
    SEEN[namespace] = seen
    stop.wait()


def test_clients_an_operator_made_at_import_act_as_the_next_tests_identity(
    envtest_context: Any, envtest_cluster: Any, namespace: str, timeouts: Any
) -> None:
    """Two operators one after the other, as two tests of one process run them, in two namespaces
    (each its own ServiceAccount): clients the first one's module made at import serve the second
    as the second's identity — not the first's, whose ServiceAccount lingers until its namespace
    is gone, nor a refused one."""
    limit = timeouts(10)

    def run(stop: threading.Event, *, namespace: str) -> None:
        whoami_through_clients_made_at_import(stop, namespace=namespace, limit=limit)

    IMPORTED.clear()
    later = envtest_context.create_namespace(envtest_cluster)
    try:
        for current in (namespace, later):
            runner = envtest_context.start_operator(
                envtest_cluster, current, run_in_thread(run, name="made-at-import")
            )
            try:
                seen = eventually(lambda: SEEN[current], retry_on=(KeyError,), timeout=timeouts(30))  # noqa: B023
            finally:
                runner.stop()
            expected = f"system:serviceaccount:{current}:envtest-operator"
            assert seen == dict.fromkeys(("default", "load_kube_config", "pykube_from_env"), expected)
    finally:
        envtest_context.release_namespace(envtest_cluster, later)
