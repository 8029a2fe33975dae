"""What goes into a failed test's artifacts: Secrets redacted however they were listed, and the
operator log holding every logger's records but the harness's."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import yaml

from envtest.plugin.artifacts import LAST_APPLIED, REDACTED, redact
from envtest.plugin.runner import OperatorRunner, api_factory_for

SECRET_ITEM = {  # as an item of a list response: no kind, no apiVersion
    "metadata": {
        "name": "creds",
        "annotations": {LAST_APPLIED: '{"stringData":{"password":"hunter2"}}', "keep": "me"},
        "managedFields": [{"manager": "kubectl"}],
    },
    "data": {"password": "aHVudGVyMg=="},
    "type": "Opaque",
}


def test_secret_list_items_are_redacted_by_resource_with_their_last_applied_annotation() -> None:
    out = redact(SECRET_ITEM, ("api/v1", "secrets"))
    assert out["data"] == {"password": REDACTED}
    assert out["metadata"]["annotations"] == {LAST_APPLIED: REDACTED, "keep": "me"}
    assert "managedFields" not in out["metadata"]
    assert "hunter2" not in repr(out) and "aHVudGVyMg" not in repr(out)
    assert SECRET_ITEM["data"] == {"password": "aHVudGVyMg=="}, "the input is left alone"


def test_a_secret_known_by_its_kind_is_redacted_and_other_objects_are_not() -> None:
    whole = {"apiVersion": "v1", "kind": "Secret", **SECRET_ITEM, "stringData": {"password": "hunter2"}}
    assert "hunter2" not in repr(redact(whole))
    config_map = {"metadata": {"name": "cm", "annotations": {LAST_APPLIED: "{}"}}, "data": {"k": "v"}}
    assert redact(config_map, ("api/v1", "configmaps"))["data"] == {"k": "v"}


class _Op:
    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def start(self) -> None:
        logging.getLogger("kopf.objects").info("handler succeeded")
        logging.getLogger("myop.reconcile").debug("reconciling in detail")
        logging.getLogger("envtest.faults").warning("harness chatter")
        logging.getLogger("urllib3.connectionpool").debug("request noise")

    def stop(self, timeout: float = 10.0) -> None:
        pass


def _factory(api_factory: Any, namespace: str | None) -> _Op:
    return _Op()


_factory.__module__ = "myop.app"  # the operator's own package: captured down to DEBUG


def test_operator_log_captures_every_logger_but_the_harness_by_default(tmp_path: Path) -> None:
    root_level = logging.getLogger().level
    runner = OperatorRunner(_factory, lambda: None, namespace="ns", log_path=tmp_path / "op.log")
    runner.start()
    runner.stop()
    log = (tmp_path / "op.log").read_text()
    assert "kopf.objects: handler succeeded" in log
    assert "myop.reconcile: reconciling in detail" in log
    assert "harness chatter" not in log
    assert "request noise" not in log, "other loggers at INFO and above only"
    assert logging.getLogger().level == root_level, "levels are restored at stop"


def test_envtest_operator_loggers_narrows_the_capture(tmp_path: Path) -> None:
    runner = OperatorRunner(
        _factory, lambda: None, namespace="ns", log_path=tmp_path / "op.log", loggers=["myop"]
    )
    runner.start()
    runner.stop()
    log = (tmp_path / "op.log").read_text()
    assert "reconciling in detail" in log
    assert "handler succeeded" not in log


def test_api_factory_reads_the_kubeconfig_once_and_gives_each_caller_its_own_session(tmp_path: Path) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n").decode()
    path = tmp_path / "identity.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": ca},
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
                "current-context": "x",
            }
        )
    )
    new_client = api_factory_for(path)
    path.unlink()  # read once, up front: an operator asks for a client per informer, and more
    first, second = new_client(), new_client()
    assert first.session is not second.session, "one session per caller: long watches exhaust a pool"
    assert str(first.url) == "https://127.0.0.1:6443"
    assert first.config.user["token"] == "t0ken" and first.config.namespace == "ns"
    assert first.timeout == 30.0
