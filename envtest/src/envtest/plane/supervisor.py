"""A control plane that outlives the process that asked for it: a supervisor process runs the
ControlPlane and records its state in `<state dir>/state.json`.

Used by `envtest up` (survives the shell) and by the pytest plugin under xdist (one plane shared by
all workers, stopped by the xdist controller). The supervisor's children die with it (PDEATHSIG),
and with `owner_pid` the supervisor itself stops when its owner disappears, so a SIGKILLed pytest
leaves nothing behind.

Liveness protocol. A pid alone proves nothing: after a hard kill the pid can be reused by an
unrelated process, which a bare `kill(pid, 0)` would take for the supervisor (and `down` would then
signal). So the supervisor holds an exclusive flock on `<state dir>/supervisor.lock` for its whole
life; the kernel drops it when the process dies, however it dies. Readers try to take that lock
without blocking: if they can, the supervisor is gone and the state is stale. Before signalling,
`stop` checks again that the lock is held *and* that the pid still has the start time recorded in
the state, so it never signals a process that is not the supervisor.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Protocol, TypeVar

from envtest import commands
from envtest.errors import EnvtestError, ProcessError, StartTimeout, UsageProblem
from envtest.pki import private_dir
from envtest.plane import expiry

STATE_FILE = "state.json"
RESET_POINT_FILE = "reset-point.json"
"""The plane as it was when ready, written by the supervisor before the state (`envtest reset`)."""
LOCK_FILE = "supervisor.lock"
R = TypeVar("R")


def clusters_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative values are invalid and must be ignored (as the binary cache does).
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "envtest" / "clusters"


def plane_dirs(root: Path | None = None) -> list[Path]:
    """State directories under `root` (default clusters_root()), sorted. Only directories: lock files
    (`.NAME.lock`, taken by the plugin while it starts a kept plane) live beside them."""
    root = root or clusters_root()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


@dataclass(frozen=True)
class PlaneState:
    name: str
    pid: int
    """The supervisor's pid; signal it to stop the plane (only while it holds the lock)."""
    kubeconfig: str
    server: str
    workdir: str
    version: str
    components: list[str]
    logs: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    job_pods: str = "complete"
    """kwok's Job pod mode the plane was started with (reusing it with another one is an error)."""
    pid_start: int = 0
    """The supervisor's start time (/proc/PID/stat field 22); 0 if unknown. Guards against pid reuse."""
    conversion_webhook: str = ""
    """``package.module:factory`` of the conversion server the supervisor runs; "" when none."""
    conversion_url: str = ""
    """Full URL of that endpoint (path included): every CRD re-apply must point at it."""
    conversion_ca: str = ""
    """PEM of the CA the apiserver trusts for it (the CRDs' caBundle)."""
    pod_streams: bool = True
    """Whether kwok serves logs/exec/attach/port-forward for fake pods (ControlPlane's pod_streams)."""
    pod_exec: bool = True
    """With pod_streams: exec runs commands on this host in every namespace (False: only where
    allowed, see envtest.plane.streams). True in states written before exec could be allowed per
    namespace, when it was on everywhere."""
    audit_log: str = ""
    """kube-apiserver's audit log (the record); "" when the plane runs without one."""
    etcd_url: str = ""
    """The plane's etcd (what `envtest reset` writes to); "" in states written before reset existed."""

    def write(self, state_dir: Path) -> None:
        tmp = state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, state_dir / STATE_FILE)


def pid_alive(pid: int) -> bool:
    """Whether *some* process has this pid: good enough for the owner watch, not for the supervisor."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])  # field 22 overall; fields[0] here is field 3
    except (IndexError, ValueError):
        return None


# -- the lock -------------------------------------------------------------------------------------


class AlreadySupervised(EnvtestError):
    """Another live supervisor holds the lock of this state directory."""


def hold_lock(state_dir: Path, *, timeout: float = 5.0) -> IO[bytes]:
    """Take the supervisor lock and return its file; keep the file open for as long as you live.

    Readers hold the lock for microseconds while they test it, so a short retry tells them apart
    from another supervisor (which holds it for good): that one makes us raise AlreadySupervised.
    The descriptor is not inherited (PEP 446), so the plane's processes never keep the lock alive.
    """
    private_dir(state_dir)
    fh = open(state_dir / LOCK_FILE, "ab")  # noqa: SIM115 - held open for the process's life
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fh
        except BlockingIOError:
            if time.monotonic() >= deadline:
                fh.close()
                raise AlreadySupervised(
                    f"another supervisor holds {state_dir / LOCK_FILE}; stop it first"
                ) from None
            time.sleep(0.02)


def lock_held(state_dir: Path) -> bool:
    """Whether a live supervisor holds `<state_dir>/supervisor.lock` (tested by trying to take it)."""
    try:
        fh = open(state_dir / LOCK_FILE, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


class Recorded(Protocol):
    """What the liveness protocol needs of a state file: the recording process and its start time.
    `PlaneState` and the detached conversion endpoint's state (`envtest.webhooks.detached`) both fit."""

    @property
    def pid(self) -> int: ...

    @property
    def pid_start(self) -> int: ...


def _is_supervisor(state_dir: Path, state: Recorded) -> bool:
    """The lock is held and `state.pid` is still the process that was recorded (not a reused pid)."""
    if not lock_held(state_dir):
        return False
    if state.pid_start:
        return pid_start_time(state.pid) == state.pid_start
    return pid_alive(state.pid)


def read_state(state_dir: Path) -> PlaneState | None:
    """The recorded state, or None when there is none or its supervisor is gone (stale)."""
    try:
        state = PlaneState(**json.loads((state_dir / STATE_FILE).read_text()))
    except (FileNotFoundError, NotADirectoryError, ValueError, TypeError):
        return None
    return state if _is_supervisor(state_dir, state) else None


def is_live(state_dir: Path, state: Recorded) -> bool:
    """Whether `state`'s process still holds `state_dir`'s lock (for readers of other state files)."""
    return _is_supervisor(state_dir, state)


def watch_owner(owner_pid: int, *, interval: float = 1.0) -> None:
    """Block until `owner_pid` is gone, then SIGTERM this process (run it in a daemon thread).

    A hard-killed pytest cannot stop what it launched; this is how a detached process notices and
    stops itself, even mid start-up (its SIGTERM handler decides what stopping means).
    """
    while pid_alive(owner_pid):
        time.sleep(interval)
    print(f"owner {owner_pid} is gone; stopping", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


def differences(
    state: PlaneState,
    *,
    version: str,
    components: Sequence[str],
    job_pods: str,
    conversion: str | None = None,
    pod_streams: bool = True,
    pod_exec: bool = False,
) -> list[str]:
    """How a running plane differs from the settings a caller wants to reuse it with (empty: none).
    ``conversion`` None: not compared (`envtest up` without the option); "" asks for none.
    Pod streams and exec are compared by what they do: neither means anything without kwok, nor
    exec without streams, so asking for exec off on a plane without streams is the same plane."""
    found: list[str] = []
    if state.version != version:
        found.append(f"k8s version: running {state.version}, asked for {version}")
    if sorted(state.components) != sorted(components):
        found.append(f"components: running {','.join(state.components)}, asked for {','.join(components)}")
    if state.job_pods != job_pods:
        found.append(f"job_pods: running {state.job_pods}, asked for {job_pods}")
    running_streams, running_exec = _pod_features(state.components, state.pod_streams, state.pod_exec)
    wanted_streams, wanted_exec = _pod_features(components, pod_streams, pod_exec)
    if running_streams != wanted_streams:
        found.append(f"pod_streams: running {_on(running_streams)}, asked for {_on(wanted_streams)}")
    elif running_exec != wanted_exec:
        found.append(f"pod_exec: running {_on(running_exec)}, asked for {_on(wanted_exec)}")
    if conversion is not None and state.conversion_webhook != conversion:
        running = state.conversion_webhook or "none"
        found.append(f"conversion webhook: running {running}, asked for {conversion or 'none'}")
    return found


def _pod_features(components: Sequence[str], streams: bool, exec_: bool) -> tuple[bool, bool]:
    """(streams, exec) as the plane serves them: kwok runs the streaming server, exec lives in it."""
    served = streams and "kwok" in components
    return served, served and exec_


def _on(value: bool) -> str:
    return "on" if value else "off"


def check_reusable(
    state: PlaneState,
    *,
    version: str,
    components: Sequence[str],
    job_pods: str,
    conversion: str | None = None,
    now: dt.datetime | None = None,
    pod_streams: bool = True,
    pod_exec: bool = False,
) -> None:
    """Raise UsageProblem naming every differing setting and the command that stops the plane: a
    plane silently reused with other settings would make tests pass or fail for the wrong reason.
    So is one whose certificates have expired or end within a day (`certificate_problem`)."""
    found = differences(
        state,
        version=version,
        components=components,
        job_pods=job_pods,
        conversion=conversion,
        pod_streams=pod_streams,
        pod_exec=pod_exec,
    )
    if found:
        raise UsageProblem(
            f"control plane {state.name!r} is already running with other settings ({'; '.join(found)}); "
            f"stop it with `{commands.down(state.name)}` or ask for the same settings"
        )
    problem = certificate_problem(state, now=now)
    if problem:
        raise UsageProblem(problem)


def certificate_problem(state: PlaneState, *, now: dt.datetime | None = None) -> str | None:
    """Why the plane of `state` must not be handed out (its certificates end within
    `expiry.RENEW_MARGIN` of `now`, default the current time), or None when they are good."""
    now = now or dt.datetime.now(dt.UTC)
    extra = {"conversion webhook CA": state.conversion_ca.encode()} if state.conversion_ca else {}
    found = expiry.expiring(Path(state.workdir), now=now, extra=extra)
    if not found:
        return None
    return expiry.describe(state.name, found, now=now, replace=commands.down(state.name))


# -- start and stop -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conversion:
    """The conversion server a supervisor runs beside its plane (see envtest.webhooks.conversion)."""

    factory: str
    """``package.module:factory``, imported by the supervisor."""
    path: str = "/convert"
    python_path: tuple[str, ...] = ()
    """sys.path entries of the caller, so the supervisor imports the factory as the caller would."""


def supervise_argv(
    state_dir: Path,
    *,
    name: str,
    components: Sequence[str],
    version: str | None = None,
    crds: Sequence[str | Path] = (),
    job_pods: str = "complete",
    owner_pid: int | None = None,
    conversion: Conversion | None = None,
    pod_streams: bool = True,
    pod_exec: bool = False,
    record: bool = True,
    record_bodies: bool = False,
) -> list[str]:
    """The command line of `envtest.plane.supervise` (its parser reads back exactly these)."""
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
    if not pod_streams:
        argv.append("--no-pod-streams")
    if pod_exec:
        argv.append("--pod-exec")
    if not record:
        argv.append("--no-record")
    if record_bodies:
        argv.append("--record-bodies")
    for crd in crds:
        argv += ["--crd", str(Path(crd).resolve())]
    if owner_pid:
        argv += ["--owner-pid", str(owner_pid)]
    if conversion is not None:
        argv += ["--conversion-webhook", conversion.factory, "--conversion-path", conversion.path]
        for entry in conversion.python_path:
            argv += ["--python-path", entry]
    return argv


def launch(
    state_dir: Path,
    *,
    name: str,
    components: Sequence[str],
    version: str | None = None,
    crds: Sequence[str | Path] = (),
    job_pods: str = "complete",
    owner_pid: int | None = None,
    conversion: Conversion | None = None,
    timeout: float = 600.0,
    pod_streams: bool = True,
    pod_exec: bool = False,
    record: bool = True,
    record_bodies: bool = False,
) -> PlaneState:
    """Start a supervisor for a new plane and wait until it reports ready. Resolve the binaries first
    (callers do, with progress the user sees): otherwise `timeout` must cover a first-time build,
    whose progress would only reach `<state_dir>/supervisor.log`."""
    private_dir(state_dir)  # the plane's keys, kubeconfigs and etcd data live under it
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    argv = supervise_argv(
        state_dir,
        name=name,
        components=components,
        version=version,
        crds=crds,
        job_pods=job_pods,
        owner_pid=owner_pid,
        conversion=conversion,
        pod_streams=pod_streams,
        pod_exec=pod_exec,
        record=record,
        record_bodies=record_bodies,
    )
    return spawn(argv, state_dir, read_state, timeout=timeout, what="control plane")


def spawn(
    argv: Sequence[str],
    state_dir: Path,
    read: Callable[[Path], R | None],
    *,
    timeout: float,
    what: str,
) -> R:
    """Start `argv` detached, logging to `<state_dir>/supervisor.log`, and wait until `read(state_dir)`
    sees its live state; a child that exits or times out first raises with the log's tail."""
    log_path = state_dir / "supervisor.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )  # its own session: Ctrl-C in the shell is not for it
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read(state_dir)
        if state is not None:
            return state
        if proc.poll() is not None:
            raise ProcessError(
                f"{what} supervisor exited with {proc.returncode}; log {log_path}:\n{_tail(log_path)}"
            )
        time.sleep(0.2)
    _stop_child(proc)
    raise StartTimeout(f"{what} not ready after {timeout:.0f}s; log {log_path}:\n{_tail(log_path)}")


def stop(state_dir: Path, *, timeout: float = 60.0) -> bool:
    """Stop the plane recorded in `state_dir`; True if one was running. A process that does not hold
    the supervisor lock (a stale state, a reused pid) is never signalled."""
    state = read_state(state_dir)
    if state is None:
        return False
    return stop_recorded(state_dir, state, timeout=timeout)


def stop_recorded(state_dir: Path, state: Recorded, *, timeout: float = 60.0) -> bool:
    """SIGTERM the process recorded by `state` (a live one: see `is_live`), SIGKILL after `timeout`."""
    _signal_if_supervisor(state_dir, state, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_supervisor(state_dir, state) or _zombie(state.pid):
            return True
        time.sleep(0.1)
    _signal_if_supervisor(state_dir, state, signal.SIGKILL)  # its children die with it (PDEATHSIG)
    return True


def _signal_if_supervisor(state_dir: Path, state: Recorded, sig: signal.Signals) -> None:
    # Checked right before the kill: the window for a pid to be reused in between is microseconds.
    if _is_supervisor(state_dir, state):
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, sig)


def _stop_child(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Our own child: its pid cannot be reused before we reap it, so Popen may signal it safely."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
