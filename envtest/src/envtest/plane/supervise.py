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
from envtest.plane.expiry import KEPT_CERT_VALID_DAYS
from envtest.plane.supervisor import (
    RESET_POINT_FILE,
    STATE_FILE,
    AlreadySupervised,
    PlaneState,
    hold_lock,
    pid_start_time,
    watch_owner,
)
from envtest.webhooks.conversion import (
    DEFAULT_PATH,
    ConversionServer,
    load_factory,
    start_endpoint,
    write_crds,
)


class _Stop(BaseException):
    """Raised in the main thread by a signal while the plane is still starting (or building
    binaries): start() undoes itself on any BaseException, so nothing is left half-started."""


def build_parser() -> argparse.ArgumentParser:
    """Reads what `supervisor.supervise_argv` writes."""
    parser = argparse.ArgumentParser(prog="python -m envtest.plane.supervise")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--components", default="all")
    parser.add_argument("--version")
    parser.add_argument("--crd", action="append", default=[])
    parser.add_argument("--job-pods", default="complete", choices=["complete", "hold"])
    parser.add_argument("--owner-pid", type=int)
    parser.add_argument("--no-pod-streams", dest="pod_streams", action="store_false")
    parser.add_argument("--pod-exec", action="store_true", help="exec on fake pods in every namespace")
    parser.add_argument("--no-record", dest="record", action="store_false", help="no audit log")
    parser.add_argument("--record-bodies", action="store_true", help="the audit log keeps bodies")
    parser.add_argument("--conversion-webhook", help="package.module:factory of the conversion server")
    parser.add_argument("--conversion-path", default=DEFAULT_PATH)
    parser.add_argument("--python-path", action="append", default=[], help="prepended to sys.path")
    return parser


def _start_conversion(args: argparse.Namespace) -> tuple[ConversionServer, str, bytes, list[str]]:
    """The conversion server, and the CRD paths rewritten to point at it (the plane's CRDs then never
    exist without their conversion, not even for the instant between create and patch)."""
    # The caller's import path, so `pkg.module` resolves here as it did in pytest (rootdir, src/, …).
    sys.path[:0] = [p for p in args.python_path if p not in sys.path]
    factory = load_factory(args.conversion_webhook)
    server, url, ca = start_endpoint(
        factory,
        args.state_dir / "conversion-certs",
        path=args.conversion_path,
        valid_days=KEPT_CERT_VALID_DAYS,  # the apiserver calls it for as long as the plane lives
    )
    print(f"conversion webhook {args.conversion_webhook} serving at {url}", flush=True)
    try:
        crd_dir = write_crds(args.crd, url, ca, args.state_dir / "conversion-crds") if args.crd else None
    except BaseException:
        server.stop()
        raise
    return server, url, ca, [str(crd_dir)] if crd_dir else []


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # Held until this process dies, however it dies: readers test it instead of trusting a pid.
        lock = hold_lock(args.state_dir)
    except AlreadySupervised as exc:
        print(exc, flush=True)
        return 1

    stop = threading.Event()
    started = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        if not started:
            raise _Stop(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if args.owner_pid:
        threading.Thread(target=watch_owner, args=(args.owner_pid,), daemon=True).start()

    conversion: ConversionServer | None = None
    url, ca, crd_paths = "", b"", list(args.crd)
    try:
        if args.conversion_webhook:
            conversion, url, ca, crd_paths = _start_conversion(args)
        plane = ControlPlane(
            args.components,
            version=args.version,
            crds=crd_paths,
            job_pods=args.job_pods,
            pod_streams=args.pod_streams,
            pod_exec=args.pod_exec,
            record=args.record,
            record_bodies=args.record_bodies,
            workdir=args.state_dir / "plane",
            progress=lambda m: print(m, flush=True),
            # A supervised plane may be kept for months; reuse refuses it a day before this ends.
            cert_valid_days=KEPT_CERT_VALID_DAYS,
        )
        plane.start()
    except BaseException as exc:
        if conversion is not None:
            conversion.stop()
        if isinstance(exc, _Stop):
            print("stopped during start-up", flush=True)
            return 0
        raise
    started = True
    try:
        if not args.owner_pid:  # a kept plane (`envtest up`, --envtest-keep): `envtest reset` needs it
            plane.mark_reset_point().save(args.state_dir / RESET_POINT_FILE)
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
            job_pods=args.job_pods,
            pid_start=pid_start_time(os.getpid()) or 0,
            conversion_webhook=args.conversion_webhook or "",
            conversion_url=url,
            conversion_ca=ca.decode(),
            pod_streams=args.pod_streams,
            pod_exec=args.pod_exec,
            audit_log=str(plane.audit_log or ""),
            etcd_url=plane.etcd_url,
        ).write(args.state_dir)
        stop.wait()
    finally:
        (args.state_dir / STATE_FILE).unlink(missing_ok=True)
        (args.state_dir / RESET_POINT_FILE).unlink(missing_ok=True)
        try:
            plane.stop()
        finally:
            if conversion is not None:  # after the plane: nothing may call it once it is gone
                conversion.stop()
            lock.close()  # only now may a reader see the plane as gone
    return 0


if __name__ == "__main__":
    sys.exit(main())
