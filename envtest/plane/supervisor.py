"""A control plane that outlives the process that asked for it: a supervisor process runs the
ControlPlane and records its state in `<state dir>/state.json`.

Used by `envtest up` (survives the shell) and by the pytest plugin under xdist (one plane shared by
all workers, stopped by the xdist controller). The supervisor's children die with it (PDEATHSIG),
and with `owner_pid` the supervisor itself stops when its owner disappears, so a SIGKILLed pytest
leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from envtest.errors import ProcessError, StartTimeout

STATE_FILE = "state.json"


def clusters_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "envtest" / "clusters"


@dataclass(frozen=True)
class PlaneState:
    name: str
    pid: int
    """The supervisor's pid; signal it to stop the plane."""
    kubeconfig: str
    server: str
    workdir: str
    version: str
    components: list[str]
    logs: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0

    def write(self, state_dir: Path) -> None:
        tmp = state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, state_dir / STATE_FILE)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(state_dir: Path) -> PlaneState | None:
    """The recorded state, or None when there is none or its supervisor is gone (stale)."""
    try:
        state = PlaneState(**json.loads((state_dir / STATE_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None
    return state if pid_alive(state.pid) else None


def launch(
    state_dir: Path,
    *,
    name: str,
    components: Sequence[str],
    version: str | None = None,
    crds: Sequence[str | Path] = (),
    job_pods: str = "complete",
    owner_pid: int | None = None,
    timeout: float = 600.0,
) -> PlaneState:
    """Start a supervisor for a new plane and wait until it reports ready. `timeout` covers a
    first-time binary build, whose progress goes to `<state_dir>/supervisor.log`."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "envtest.plane.supervise",
        "--state-dir",
        str(state_dir),
        "--name",
        name,
        "--components",
        ",".join(components),
        "--job-pods",
        job_pods,
    ]
    if version:
        argv += ["--version", version]
    for crd in crds:
        argv += ["--crd", str(Path(crd).resolve())]
    if owner_pid:
        argv += ["--owner-pid", str(owner_pid)]
    log_path = state_dir / "supervisor.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )  # its own session: Ctrl-C in the shell is not for it
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(state_dir)
        if state is not None:
            return state
        if proc.poll() is not None:
            raise ProcessError(
                f"control plane supervisor exited with {proc.returncode}; log {log_path}:\n{_tail(log_path)}"
            )
        time.sleep(0.2)
    stop_pid(proc.pid)
    raise StartTimeout(f"control plane not ready after {timeout:.0f}s; log {log_path}:\n{_tail(log_path)}")


def stop(state_dir: Path, *, timeout: float = 60.0) -> bool:
    """Stop the plane recorded in `state_dir`; True if one was running."""
    state = read_state(state_dir)
    if state is None:
        return False
    stop_pid(state.pid, timeout=timeout)
    return True


def stop_pid(pid: int, *, timeout: float = 60.0) -> None:
    """SIGTERM (the supervisor stops its plane cleanly), then SIGKILL (its children die with it)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _zombie(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (OSError, IndexError):
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
