"""`python -m envtest.supervise`: run one ControlPlane until SIGTERM, recording its state.

Started by `envtest.detached.launch`; not meant to be run by hand.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from envtest.controlplane import ControlPlane
from envtest.detached import STATE_FILE, PlaneState, pid_alive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envtest.supervise")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--components", default="all")
    parser.add_argument("--version")
    parser.add_argument("--crd", action="append", default=[])
    parser.add_argument("--job-pods", default="complete", choices=["complete", "hold"])
    parser.add_argument("--owner-pid", type=int)
    args = parser.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())

    plane = ControlPlane(
        args.components,
        version=args.version,
        crds=args.crd,
        job_pods=args.job_pods,
        workdir=args.state_dir / "plane",
        progress=lambda m: print(m, flush=True),
    )
    plane.start()
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
        while not stop.wait(1.0):
            if args.owner_pid and not pid_alive(args.owner_pid):
                print(f"owner {args.owner_pid} is gone; stopping", flush=True)
                break
    finally:
        (args.state_dir / STATE_FILE).unlink(missing_ok=True)
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
