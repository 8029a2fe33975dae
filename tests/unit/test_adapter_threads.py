"""`run_in_thread`: a blocking `run(stop, **what_it_names)` as an operator — given only what it names,
built as the operator's identity, stopped through its event, its crash failing the test."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from envtest.adapters.threads import run_in_thread
from envtest.errors import ConfigError, OperatorFailed
from envtest.plugin.runner import OperatorRunner


class _Session:
    closed = False

    def close(self) -> None:
        self.closed = True


class _Kube:
    def __init__(self) -> None:
        self.session = _Session()


class _ApiFactory:
    def __init__(self) -> None:
        self.made: list[_Kube] = []

    def __call__(self) -> _Kube:
        self.made.append(_Kube())
        return self.made[-1]


def _runner(factory: Any, api: _ApiFactory, tmp_path: Path) -> OperatorRunner:
    return OperatorRunner(factory, api, namespace="ns", kubeconfig=tmp_path / "identity.kubeconfig")


def test_run_gets_what_it_names_and_returns_when_stop_is_set(tmp_path: Path) -> None:
    got: dict[str, Any] = {}
    running = threading.Event()

    def run(stop: threading.Event, *, namespace: str, kubeconfig: Path) -> None:
        got.update(namespace=namespace, kubeconfig=kubeconfig, thread=threading.current_thread().name)
        running.set()
        stop.wait()
        got["stopped"] = True

    api = _ApiFactory()
    runner = _runner(run_in_thread(run), api, tmp_path)
    runner.start()
    assert running.wait(10)
    runner.stop()
    assert got == {
        "namespace": "ns",
        "kubeconfig": tmp_path / "identity.kubeconfig",
        "thread": "run",
        "stopped": True,
    }
    assert api.made == [], "no client is built for a run that names none"
    runner.check()


def test_kube_and_api_factory_are_given_to_a_run_that_names_them_and_kube_is_closed(tmp_path: Path) -> None:
    got: dict[str, Any] = {}

    def run(stop: threading.Event, *, kube: Any, api_factory: Any) -> None:
        got.update(kube=kube, api_factory=api_factory)

    api = _ApiFactory()
    runner = _runner(run_in_thread(run, name="mirror"), api, tmp_path)
    runner.start()
    runner.stop()
    assert got["api_factory"] is api
    assert got["kube"] is api.made[0] and len(api.made) == 1
    assert api.made[0].session.closed, "closed after run returned"


def test_an_exception_escaping_run_fails_the_test(tmp_path: Path) -> None:
    def run(stop: threading.Event) -> None:
        raise RuntimeError("watch broke")

    runner = _runner(run_in_thread(run), _ApiFactory(), tmp_path)
    runner.start()
    runner.stop()
    with pytest.raises(OperatorFailed, match="RuntimeError: watch broke"):
        runner.check()


def test_a_parameter_the_harness_cannot_fill_is_a_config_error_when_the_factory_is_made() -> None:
    def run(stop: threading.Event, *, workers: int) -> None: ...

    with pytest.raises(ConfigError, match=r"run_in_thread\(run\).*'workers'.*api_factory"):
        run_in_thread(run)


def test_run_must_take_the_stop_event_first() -> None:
    def run(*, namespace: str) -> None: ...

    with pytest.raises(ConfigError, match=r"first parameter must take the stop event"):
        run_in_thread(run)


def test_the_factory_belongs_to_runs_module_so_its_debug_log_is_captured() -> None:
    def run(stop: threading.Event) -> None: ...

    run.__module__ = "myop.main"
    assert run_in_thread(run).__module__ == "myop.main"
