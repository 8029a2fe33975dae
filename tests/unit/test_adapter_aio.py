"""The asyncio adapter without a cluster: `run` gets the stop event and what it names, built on its
own loop; stop() ends it, a `run` that ignores the stop is cancelled after its grace, an exception
fails the operator, and mistakes in `run`'s signature are config errors when the factory is made."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest.adapters.aio import async_operator
from envtest.errors import ConfigError
from envtest.plugin.runner import factory_call


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "identity.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_run_gets_its_clients_on_its_own_loop_and_returns_when_stopped(kubeconfig: Path) -> None:
    seen: dict[str, Any] = {}
    running = threading.Event()

    async def run(stop: asyncio.Event, *, namespace: str, async_k8s: Any, k8s_asyncio: Any) -> None:
        seen.update(
            namespace=namespace,
            host=async_k8s.configuration.host,
            other=k8s_asyncio.configuration.host,
            loop=asyncio.get_running_loop(),
        )
        running.set()
        await stop.wait()
        seen["stopped"] = True

    factory = async_operator(run)
    assert factory_call(factory).keywords == ("namespace", "kubeconfig"), "clients are built on its loop"
    operator = factory(None, namespace="ns", kubeconfig=kubeconfig)
    operator.start()
    running.wait()
    operator.stop(timeout=30)
    assert operator.errors == []
    assert seen["namespace"] == "ns" and seen["stopped"]
    assert seen["host"] == seen["other"] == "https://127.0.0.1:1"
    assert seen["loop"].is_closed(), "its loop ended with it"


def test_a_run_that_ignores_the_stop_is_cancelled_after_its_grace(kubeconfig: Path) -> None:
    cancelled = threading.Event()
    running = threading.Event()

    async def stubborn(stop: asyncio.Event) -> None:
        running.set()
        try:
            await asyncio.Event().wait()  # never returns by itself
        except asyncio.CancelledError:
            cancelled.set()
            raise

    operator = async_operator(stubborn, grace=0.0)(None, namespace="ns", kubeconfig=kubeconfig)
    operator.start()
    running.wait()
    operator.stop(timeout=30)
    assert cancelled.is_set() and operator.errors == [], "a cancelled run is a stop, not a crash"


def test_an_exception_escaping_run_fails_the_operator(kubeconfig: Path) -> None:
    async def broken(stop: asyncio.Event) -> None:
        raise RuntimeError("watch failed for good")

    operator = async_operator(broken)(None, namespace="ns", kubeconfig=kubeconfig)
    operator.start()
    operator.stop(timeout=30)
    assert [str(e) for e in operator.errors] == ["watch failed for good"]


def test_signature_mistakes_are_config_errors_when_the_factory_is_made() -> None:
    def not_async(stop: object) -> None: ...

    async def no_stop() -> None: ...

    async def unknown(stop: object, *, database: str) -> None: ...

    with pytest.raises(ConfigError, match=r"async_operator\(not_async\): expected an `async def`"):
        async_operator(not_async)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"first parameter must take the stop event"):
        async_operator(no_stop)
    with pytest.raises(ConfigError, match=r"async_operator\(unknown\).*database"):
        async_operator(unknown)
