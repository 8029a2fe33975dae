"""`envtest up`: a kept plane whose fake pods refuse exec, naming the pod, until exec is allowed for
their namespace, while their logs still work; and `envtest up --pod-exec` (exec everywhere) refuses
to reuse it (see supervisor.differences)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL
from mysqlkit import Timeouts

from envtest import binaries, eventually
from envtest.plane import streams, supervisor

pytestmark = pytest.mark.envtest_local  # the plane runs from the local binaries, with kwok


def test_envtest_up_refuses_exec_naming_the_pod_until_its_namespace_is_allowed(
    tmp_path: Path, timeouts: Timeouts
) -> None:
    name = f"no-exec-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # only the plane's state is temporary
        "KUBEBUILDER_ASSETS": str(binaries.cache_dir()),
        "ENVTEST_KWOK_STAGES": str(binaries.kwok_stages_dir()),
    }

    def envtest(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envtest.cli", *args],
            env=env, capture_output=True, text=True, timeout=timeouts(300),
        )  # fmt: skip

    try:
        up = envtest("up", "--name", name)
        assert up.returncode == 0, up.stderr
        state = supervisor.read_state(tmp_path / "cache" / "envtest" / "clusters" / name)
        assert state is not None and (state.pod_streams, state.pod_exec) == (True, False)

        with_exec = envtest("up", "--name", name, "--pod-exec")
        assert with_exec.returncode == 1
        assert "pod_exec: running off, asked for on" in with_exec.stderr

        core = k8s_client.CoreV1Api(k8s_config.new_client_from_config(config_file=state.kubeconfig))
        pod = {"metadata": {"name": "quiet"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
        core.create_namespaced_pod("default", pod)

        def ready() -> None:
            conditions = core.read_namespaced_pod("quiet", "default").status.conditions or []
            assert any(c.type == "Ready" and c.status == "True" for c in conditions)

        eventually(ready, timeout=timeouts(30))
        resp = stream(
            core.connect_get_namespaced_pod_exec, "quiet", "default",
            command=["true"], stdout=True, stderr=True, stdin=False, tty=False, _preload_content=False,
        )  # fmt: skip
        resp.run_forever(timeout=timeouts(30))
        status = json.loads(resp.read_channel(ERROR_CHANNEL))
        assert status["status"] == "Failure"
        assert "exec in pod default/quiet is off" in status["message"]
        assert "no log written yet" in core.read_namespaced_pod_log("quiet", "default")

        streams.allow_exec(Path(state.workdir) / "pods", "default")
        out = stream(
            core.connect_get_namespaced_pod_exec, "quiet", "default",
            command=["echo", "now allowed"], stdout=True, stderr=True, stdin=False, tty=False,
        )  # fmt: skip
        assert out.strip() == "now allowed"
    finally:
        down = envtest("down", "--name", name)
    assert down.returncode == 0, down.stderr  # checked only here: a failure above says more
