"""`envtest list|down|up` run as users run them (`python -m envtest.cli`), against fake state in a
temporary cache: no control plane is started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from supervisor_fakes import bystander, lock_holder, reap, write_state


@pytest.fixture
def clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ENVTEST_K8S_VERSION", raising=False)
    root = tmp_path / "envtest" / "clusters"
    root.mkdir(parents=True)
    (root / ".kept.lock").touch()  # what every kept run leaves beside the plane folders
    return root


def envtest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envtest.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )


def test_list_shows_planes_and_ignores_lock_files(clusters: Path) -> None:
    holder = lock_holder(clusters / "live")
    try:
        write_state(clusters / "live", holder.pid)
        write_state(clusters / "kept", os.getpid())  # stale: nobody holds its lock
        out = envtest("list")
    finally:
        reap(holder)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "kept\tstopped"
    assert lines[1].startswith(f"live\trunning pid {holder.pid} ")
    assert len(lines) == 2


def test_down_all_removes_stale_planes_and_ignores_lock_files(clusters: Path) -> None:
    other = bystander()
    try:
        write_state(clusters / "kept", other.pid)  # the supervisor died; its pid was reused
        out = envtest("down", "--all")
        assert out.returncode == 0, out.stderr
        assert "kept: was not running" in out.stderr
        assert not (clusters / "kept").exists()
        assert other.poll() is None, "down signalled a process that was not the supervisor"
    finally:
        reap(other)


def test_down_stops_the_supervisor_that_holds_the_lock(clusters: Path) -> None:
    holder = lock_holder(clusters / "kept")
    try:
        write_state(clusters / "kept", holder.pid)
        out = envtest("down", "--name", "kept")
        assert out.returncode == 0, out.stderr
        assert "kept: stopped" in out.stderr
        assert holder.wait(timeout=5) != 0
        assert not (clusters / "kept").exists()
    finally:
        reap(holder)


def test_up_with_other_settings_than_the_running_plane_fails_naming_them(clusters: Path) -> None:
    holder = lock_holder(clusters / "kept")
    try:
        write_state(clusters / "kept", holder.pid, components=["etcd", "kube-apiserver"], job_pods="complete")
        out = envtest("up", "--name", "kept", "--components", "minimal", "--job-pods", "hold")
        same = envtest("up", "--name", "kept", "--components", "minimal")
        assert holder.poll() is None
    finally:
        reap(holder)
    assert out.returncode == 1
    assert "job_pods: running complete, asked for hold" in out.stderr
    assert f"{sys.executable} -m envtest.cli down --name kept" in out.stderr
    assert "components" not in out.stderr.split("other settings")[1]
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("export KUBECONFIG=")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.ini", "[pytest]\nenvtest_operator_cli = python -m myop run\n"),
        ("pyproject.toml", '[tool.pytest.ini_options]\nenvtest_operator_cli = "python -m myop run"\n'),
        ("setup.cfg", "[tool:pytest]\nenvtest_operator_cli = python -m myop run\n"),
    ],
)
def test_the_attach_hint_is_the_projects_own_command(tmp_path: Path, name: str, text: str) -> None:
    from envtest.cli import project_operator_cli

    (tmp_path / name).write_text(text)
    assert project_operator_cli(tmp_path) == "python -m myop run"


def test_no_attach_hint_without_the_projects_command(tmp_path: Path) -> None:
    from envtest.cli import project_operator_cli

    assert project_operator_cli(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-q'\n")
    assert project_operator_cli(tmp_path) is None


@pytest.mark.parametrize(
    ("flags", "streams", "exec_"),
    [((), True, False), (("--pod-exec",), True, True), (("--no-pod-streams",), False, False)],
)
def test_up_parses_the_fake_pod_switches(flags: tuple[str, ...], streams: bool, exec_: bool) -> None:
    from envtest import cli

    args = cli.build_parser().parse_args(["up", "--name", "x", *flags])
    assert (args.pod_streams, args.pod_exec) == (streams, exec_)


def test_up_refuses_a_running_plane_with_other_pod_exec(clusters: Path) -> None:
    kwok = "etcd,kube-apiserver,kwok"
    holder = lock_holder(clusters / "kept")
    try:
        write_state(clusters / "kept", holder.pid, components=kwok.split(","), pod_exec=True)
        other = envtest("up", "--name", "kept", "--components", kwok)
        same = envtest("up", "--name", "kept", "--components", kwok, "--pod-exec")
        assert holder.poll() is None
    finally:
        reap(holder)
    assert other.returncode == 1
    assert "pod_exec: running on, asked for off" in other.stderr
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("export KUBECONFIG=")
