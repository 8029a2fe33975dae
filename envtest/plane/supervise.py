"""`python -m envtest.plane.supervise`: run one ControlPlane until SIGTERM, recording its state.

Started by `envtest.plane.supervisor.launch`; not meant to be run by hand.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from envtest.plane.controlplane import ControlPlane
from envtest.plane.supervisor import STATE_FILE, PlaneState, pid_alive


class _Stop(BaseException):
    """Raised in the main thread by a signal while the plane is still starting (or building
    binaries): start() undoes itself on any BaseException, so nothing is left half-started."""


def _watch_owner(owner_pid: int) -> None:
    # A hard-killed pytest cannot stop us; notice it and stop ourselves, even mid start-up.
    while pid_alive(owner_pid):
        time.sleep(1.0)
    print(f"owner {owner_pid} is gone; stopping", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envtest.plane.supervise")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--components", default="all")
    parser.add_argument("--version")
    parser.add_argument("--crd", action="append", default=[])
    parser.add_argument("--job-pods", default="complete", choices=["complete", "hold"])
    parser.add_argument("--owner-pid", type=int)
    args = parser.parse_args(argv)

    stop = threading.Event()
    started = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        if not started:
            raise _Stop(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if args.owner_pid:
        threading.Thread(target=_watch_owner, args=(args.owner_pid,), daemon=True).start()

    plane = ControlPlane(
        args.components,
        version=args.version,
        crds=args.crd,
        job_pods=args.job_pods,
        workdir=args.state_dir / "plane",
        progress=lambda m: print(m, flush=True),
    )
    try:
        plane.start()
    except _Stop:
        print("stopped during start-up", flush=True)
        return 0
    started = True
    try:
        PlaneState(
            name=args.name,
            pid=os.getpid(),
            kubeconfig=str(plane.kubeconfig),
            server=plane.server,
            workdir=str(plane.workdir),
            version=plane.version,
            components=list(plane.components),
            logs={k: str(v) for k, v in plane.log_paths.items()},
            started_at=time.time(),
        ).write(args.state_dir)
        stop.wait()
    finally:
        (args.state_dir / STATE_FILE).unlink(missing_ok=True)
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
