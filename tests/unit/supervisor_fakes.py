"""Fake supervisors for the liveness protocol: a child process that holds (or not) the lock, and
state files written by hand. No control plane is started."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from envtest.plane.supervisor import LOCK_FILE, PlaneState, pid_start_time

# Plain python, no envtest import: starts in a few milliseconds.
_HOLDER = """
import fcntl, sys, time
fh = open(sys.argv[1], "ab")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


def lock_holder(state_dir: Path) -> subprocess.Popen[str]:
    """A child holding `<state_dir>/supervisor.lock`, as a live supervisor does; returns once it holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(state_dir / LOCK_FILE)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert select.select([proc.stdout], [], [], 60)[0], "the lock holder never said it holds the lock"
    assert proc.stdout.readline().strip() == "locked"
    return proc


def bystander() -> subprocess.Popen[str]:
    """A live process unrelated to any plane: what a reused pid points at."""
    return subprocess.Popen(["sleep", "120"], text=True)


def write_state(
    state_dir: Path,
    pid: int,
    *,
    pid_start: int | None = None,
    version: str = "1.37.2",
    components: Sequence[str] = ("etcd", "kube-apiserver"),
    job_pods: str = "complete",
    pod_streams: bool = True,
    pod_exec: bool = True,
) -> PlaneState:
    state_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig = state_dir / "plane" / "admin.kubeconfig"
    state = PlaneState(
        name=state_dir.name,
        pid=pid,
        kubeconfig=str(kubeconfig),
        server="https://127.0.0.1:1",
        workdir=str(state_dir / "plane"),
        version=version,
        components=list(components),
        job_pods=job_pods,
        pod_streams=pod_streams,
        pod_exec=pod_exec,
        pid_start=pid_start_time(pid) or 0 if pid_start is None else pid_start,
    )
    state.write(state_dir)
    return state


def reap(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
