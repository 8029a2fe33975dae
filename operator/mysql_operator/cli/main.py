"""`python -m mysql_operator run [options]`: the operator as a process.
`python -m mysql_operator migrate-storage [options]`: re-store every object at the storage version once
after an upgrade, then trim the CRD's storedVersions (`storage_migration`).

Exit codes: 0 after a signal-driven stop, 1 when a runtime thread crashed or start failed,
2 for bad input (options, kubeconfig) - reported as one line naming the file or option.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from ..controller.wiring import build_manager
from ..database import images
from ..runtime.leader import NoElectionNamespace, election_namespace
from ..runtime.manager import ManagerError
from ..runtime.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from ..runtime.webhook import MiB, ServerOptions
from . import logs
from .kubeconfig import UsageError, client_factory, load_config, one_line

log = logging.getLogger("mysql_operator")

USAGE_ERROR = 2


def namespace_list(value: str) -> tuple[str, ...]:
    """`a,b` → ("a", "b"): each a DNS-1123 label, none twice."""
    names = tuple(n.strip() for n in value.split(","))
    bad = [n for n in names if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", n)]
    if bad:
        raise argparse.ArgumentTypeError(f"not a namespace name: {', '.join(repr(b) for b in bad)}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a namespace given twice in {value!r}")
    return names


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m mysql_operator", description="MySQLCluster operator")
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the operator until SIGINT/SIGTERM")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("--context", help="kubeconfig context (default: its current-context)")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "--watch-namespaces",
        type=namespace_list,
        default=(),
        metavar="NS[,NS...]",
        help="watch only these namespaces (a Role in each suffices: operator/config/namespaced/); "
        "default: every namespace (the ClusterRole of operator/config/rbac.yaml)",
    )
    scope.add_argument("--namespace", help="watch only this namespace (the same as --watch-namespaces NS)")
    run.add_argument("--workers", type=int, default=2, help="concurrent reconciles (default 2)")
    run.add_argument("--leader-elect", action="store_true", help="run as one of several replicas")
    run.add_argument(
        "--leader-election-namespace",
        help="namespace of the Lease (default: $POD_NAMESPACE, else the pod's ServiceAccount namespace; "
        "required out of a cluster)",
    )
    run.add_argument(
        "--queue-qps",
        type=float,
        default=DEFAULT_QPS,
        help=f"failed/requeued reconciles retried per second, all keys together (default {DEFAULT_QPS:g})",
    )
    run.add_argument(
        "--queue-burst",
        type=int,
        default=DEFAULT_BURST,
        help=f"retries allowed at once before --queue-qps applies (default {DEFAULT_BURST})",
    )
    run.add_argument("--metrics-port", type=int, default=8080, help="/metrics port; 0 = any free port")
    run.add_argument("--health-port", type=int, default=8081, help="/healthz and /readyz port")
    run.add_argument("--bind-address", default="127.0.0.1", help="0.0.0.0 in a pod, for kubelet probes")
    run.add_argument("--shutdown-timeout", type=float, default=10.0, help="seconds to finish on stop")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    run.add_argument("--log-format", default="kv", choices=["kv", "json"])
    run.add_argument("--mysql-image", help=f"mysql repository (tag: spec.version) (${images.MYSQL_ENV})")
    run.add_argument(
        "--mariadb-image", help=f"mariadb repository (tag: spec.version) (${images.MARIADB_ENV})"
    )
    run.add_argument(
        "--cert-dir",
        type=Path,
        help="serve the webhooks (conversion, validating, defaulting) with tls.crt/tls.key from here",
    )
    run.add_argument("--webhook-port", type=int, default=9443, help="webhook HTTPS port (with --cert-dir)")
    run.add_argument("--webhook-bind-address", default="0.0.0.0", help="webhook listen address")
    run.add_argument(
        "--webhook-memory-budget",
        type=int,
        default=ServerOptions.memory_budget // MiB,
        metavar="MIB",
        help="MiB that webhook request bodies and their parses may hold at once (keep it well under the "
        "container's memory limit; 96 fits the Deployment's 256 MiB)",
    )
    run.add_argument("--backup-image", help=f"final-backup Job image, versioned (${images.BACKUP_ENV})")
    migrate = sub.add_parser(
        "migrate-storage",
        help="after an upgrade: re-store every MySQLCluster at the storage version, then trim storedVersions",
    )
    migrate.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    migrate.add_argument("--context", help="kubeconfig context (default: its current-context)")
    migrate.add_argument(
        "--ready-timeout", type=float, default=60.0, help="seconds to wait until the apiserver stores at v1"
    )
    migrate.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    migrate.add_argument("--log-format", default="kv", choices=["kv", "json"])
    return top


def migrate_storage(args: argparse.Namespace) -> int:
    from .storage_migration import MigrationError, migrate

    config = load_config(args.kubeconfig, args.context)
    logs.configure(args.log_level, args.log_format)
    try:
        outcome = migrate(client_factory(config)(), ready_timeout=args.ready_timeout)
    except MigrationError as exc:
        log.error("storage migration failed", extra={"error": str(exc)})
        return 1
    if outcome.failed:
        log.error("storage migration incomplete, storedVersions untouched", extra={"failed": outcome.failed})
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise UsageError(f"--workers: must be at least 1, got {args.workers}")
    try:
        images.configure(images.Images.from_env(args.mysql_image, args.backup_image, args.mariadb_image))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.queue_qps <= 0:
        raise UsageError(f"--queue-qps: must be > 0, got {args.queue_qps:g}")
    if args.queue_burst < 1:
        raise UsageError(f"--queue-burst: must be at least 1, got {args.queue_burst}")
    if args.webhook_memory_budget < 1:
        raise UsageError(
            f"--webhook-memory-budget: must be at least 1 (MiB), got {args.webhook_memory_budget}"
        )
    lease_namespace = args.leader_election_namespace
    if args.leader_elect:
        try:
            lease_namespace = election_namespace(lease_namespace)
        except NoElectionNamespace as exc:
            raise UsageError(str(exc)) from None
    config = load_config(args.kubeconfig, args.context)
    logs.configure(args.log_level, args.log_format)
    try:
        manager = build_manager(
            client_factory(config),
            namespaces=(args.namespace,) if args.namespace else args.watch_namespaces,
            workers=args.workers,
            leader_elect=args.leader_elect,
            leader_election_namespace=lease_namespace,
            queue_qps=args.queue_qps,
            queue_burst=args.queue_burst,
            metrics_port=args.metrics_port,
            health_port=args.health_port,
            bind_address=args.bind_address,
            # A process that lost the lease exits at once; the Deployment restarts it as a standby.
            exit_on_lost_lease=True,
        )
    except ValueError as exc:  # ManagerOptions validates ports
        raise UsageError(str(exc)) from exc
    hooks = None
    if args.cert_dir:
        from ..webhooks.server import from_cert_dir

        try:
            hooks = from_cert_dir(
                args.cert_dir,
                client_factory(config),
                bind_address=args.webhook_bind_address,
                port=args.webhook_port,
                options=ServerOptions(memory_budget=args.webhook_memory_budget * MiB),
                # controller-runtime's webhook metrics, on the manager's /metrics.
                registry=manager.registry,
            )
            # Before the manager: every replica serves webhooks, leader or not, and the apiserver
            # cannot convert (or read at v1alpha1) while none does.
            hooks.start()
        except (OSError, ValueError) as exc:
            raise UsageError(f"webhooks: {one_line(exc)}") from exc
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stopping.set()
        # A second signal kills at once; stop() runs off the main thread so start() can abort.
        signal.signal(signum, signal.SIG_DFL)
        threading.Thread(target=manager.stop, args=(args.shutdown_timeout,), daemon=True).start()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        manager.start()
    except ManagerError as exc:
        if not stopping.is_set():
            log.error("start failed", extra={"error": str(exc), "cause": repr(exc.__cause__)})
            manager.stop(args.shutdown_timeout)
            if hooks is not None:
                hooks.stop()
            return 1
    log.info(
        "running",
        extra={
            "identity": manager.identity,
            "metrics": manager.metrics_address,
            "health": manager.health_address,
            "webhooks": f"{args.webhook_bind_address}:{hooks.port}" if hooks else None,
        },
    )
    try:
        while not manager.wait(1.0):
            pass
    finally:
        if hooks is not None:
            hooks.stop()
    if manager.errors:
        log.error("stopped after a crash", extra={"errors": [repr(e) for e in manager.errors]})
        return 1
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return migrate_storage(args) if args.command == "migrate-storage" else run(args)
    except UsageError as exc:
        print(f"mysql-operator: error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
