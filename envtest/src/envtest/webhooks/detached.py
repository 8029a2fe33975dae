"""`python -m envtest.webhooks.detached`: the run's conversion endpoint in a process of its own.

On kind and existing clusters under xdist there is no plane of ours, and so no plane supervisor, to run
the endpoint beside; yet it must outlive whichever worker happened to need it first. The first worker
launches this process (`launch`, under the run's lock) owned by the xdist controller's pid, every worker
reads url and CA from ``<state dir>/state.json`` (`read_state`), and the controller's session end stops it
(`stop`). It is the plane supervisor's protocol (`envtest.plane.supervisor`) without a plane: the same
flock held for life (readers trust the lock, never a bare pid), the same owner watch (a SIGKILLed pytest
leaves nothing behind), the same spawn and stop helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType

from envtest.errors import EnvtestError
from envtest.pki import private_dir
from envtest.plane import supervisor

__all__ = ["EndpointState", "argv", "launch", "read_state", "stop"]


@dataclass(frozen=True)
class EndpointState:
    pid: int
    """The endpoint process; signalled only while it holds ``<state dir>/supervisor.lock``."""
    pid_start: int
    """Its start time (/proc/PID/stat field 22): a reused pid never passes for it."""
    factory: str
    """``package.module:factory`` it serves."""
    url: str
    """Full endpoint URL, path included: what every CRD's clientConfig points at."""
    ca: str
    """PEM the apiserver trusts for it (the CRDs' caBundle)."""
    host: str
    """The address in the certificate and the URL (the one the apiserver dials)."""
    started_at: float = 0.0

    def write(self, state_dir: Path) -> None:
        tmp = state_dir / (supervisor.STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, state_dir / supervisor.STATE_FILE)  # readers never see half a file


def read_state(state_dir: Path) -> EndpointState | None:
    """The recorded endpoint, or None when there is none or its process is gone (stale)."""
    try:
        state = EndpointState(**json.loads((state_dir / supervisor.STATE_FILE).read_text()))
    except (FileNotFoundError, NotADirectoryError, ValueError, TypeError):
        return None
    return state if supervisor.is_live(state_dir, state) else None


def argv(
    state_dir: Path,
    *,
    factory: str,
    host: str,
    path: str = "/convert",
    owner_pid: int | None = None,
    python_path: Sequence[str] = (),
) -> list[str]:
    """The command line `build_parser` reads back."""
    args = [sys.executable, "-m", "envtest.webhooks.detached", "--state-dir", str(state_dir)]
    args += ["--factory", factory, "--host", host, "--path", path]
    if owner_pid:
        args += ["--owner-pid", str(owner_pid)]
    for entry in python_path:
        args += ["--python-path", entry]
    return args


def launch(
    state_dir: Path,
    *,
    factory: str,
    host: str,
    path: str = "/convert",
    owner_pid: int | None = None,
    python_path: Sequence[str] = (),
    timeout: float = 60.0,
) -> EndpointState:
    """Start the endpoint process and wait until it records its URL; errors carry its log's tail.
    AlreadySupervised if one runs in `state_dir`: its state file must not be cleared under it (that
    would make it unstoppable)."""
    if supervisor.lock_held(state_dir):
        raise supervisor.AlreadySupervised(f"a conversion endpoint already runs in {state_dir}")
    private_dir(state_dir)  # its serving key is written under it
    (state_dir / supervisor.STATE_FILE).unlink(missing_ok=True)
    command = argv(
        state_dir, factory=factory, host=host, path=path, owner_pid=owner_pid, python_path=python_path
    )
    return supervisor.spawn(command, state_dir, read_state, timeout=timeout, what="conversion endpoint")


def stop(state_dir: Path, *, timeout: float = 30.0) -> bool:
    """Stop the endpoint recorded in `state_dir`; True if one was running."""
    state = read_state(state_dir)
    return supervisor.stop_recorded(state_dir, state, timeout=timeout) if state else False


# -- the process ------------------------------------------------------------------------------------


class _Stop(BaseException):
    """Raised by a signal while the factory is still starting: nothing half-started is recorded."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m envtest.webhooks.detached")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--factory", required=True, help="package.module:factory of the conversion server")
    parser.add_argument("--host", required=True, help="address in the certificate, the URL and the bind")
    parser.add_argument("--path", default="/convert")
    parser.add_argument("--owner-pid", type=int)
    parser.add_argument("--python-path", action="append", default=[], help="prepended to sys.path")
    return parser


def main(args_: list[str] | None = None) -> int:
    from envtest.webhooks.conversion import load_factory, start_endpoint

    args = build_parser().parse_args(args_)
    try:
        lock = supervisor.hold_lock(args.state_dir)  # held until we die, however we die
    except supervisor.AlreadySupervised as exc:
        print(exc, flush=True)
        return 1
    stopping = threading.Event()
    started = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        if not started:
            raise _Stop(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if args.owner_pid:
        threading.Thread(target=supervisor.watch_owner, args=(args.owner_pid,), daemon=True).start()
    # The caller's import path, so `pkg.module` resolves here as it did in pytest (rootdir, src/, …).
    sys.path[:0] = [p for p in args.python_path if p not in sys.path]
    try:
        factory = load_factory(args.factory)
        server, url, ca = start_endpoint(factory, args.state_dir / "certs", host=args.host, path=args.path)
    except _Stop:
        print("stopped during start-up", flush=True)
        return 0
    except (EnvtestError, OSError) as exc:  # the reason, not a traceback: launch() shows the log tail
        print(f"conversion webhook {args.factory} on {args.host}: {exc}", flush=True)
        return 1
    started = True
    try:
        print(f"conversion webhook {args.factory} serving at {url}", flush=True)
        EndpointState(
            pid=os.getpid(),
            pid_start=supervisor.pid_start_time(os.getpid()) or 0,
            factory=args.factory,
            url=url,
            ca=ca.decode(),
            host=args.host,
            started_at=time.time(),
        ).write(args.state_dir)
        stopping.wait()
        print("stopping", flush=True)
    finally:
        (args.state_dir / supervisor.STATE_FILE).unlink(missing_ok=True)
        try:
            server.stop()
        finally:
            lock.close()  # only now may a reader see the endpoint as gone
    return 0


if __name__ == "__main__":
    sys.exit(main())
