"""`envtest`: a background control plane for local debugging, and binary management.

envtest up                 # start (state under ~/.cache/envtest/clusters/<name>), print exports
eval "$(envtest env)"      # point kubectl and the operator at it
envtest down               # stop it; nothing is left behind
envtest binaries install|path|list
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path

from envtest import binaries
from envtest.errors import EnvtestError
from envtest.plane import supervisor
from envtest.plane.controlplane import ALL_COMPONENTS, parse_components


def _state_dir(name: str) -> Path:
    return supervisor.clusters_root() / name


def _exports(state: supervisor.PlaneState) -> str:
    return f"export KUBECONFIG={shlex.quote(state.kubeconfig)}"


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args.name)
    existing = supervisor.read_state(state_dir)
    if existing is not None:
        print(f"# control plane {args.name!r} is already running (pid {existing.pid})", file=sys.stderr)
        print(_exports(existing))
        return 0
    components = parse_components(args.components)
    print(f"# starting {', '.join(components)}; log: {state_dir / 'supervisor.log'}", file=sys.stderr)
    state = supervisor.launch(
        state_dir,
        name=args.name,
        components=components,
        version=args.k8s_version,
        crds=args.crd,
        job_pods=args.job_pods,
        timeout=args.timeout,
    )
    print(
        f"# control plane {args.name!r} ready at {state.server}; "
        f"stop it with: envtest down --name {args.name}",
        file=sys.stderr,
    )
    print(
        "# attach the reference operator: python -m mysql_operator run --kubeconfig "
        f"{shlex.quote(state.kubeconfig)}",
        file=sys.stderr,
    )
    print(_exports(state))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    names = [p.name for p in supervisor.clusters_root().glob("*")] if args.all else [args.name]
    for name in names:
        state_dir = _state_dir(name)
        stopped = supervisor.stop(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        print(f"{name}: {'stopped' if stopped else 'was not running'}", file=sys.stderr)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    state = supervisor.read_state(_state_dir(args.name))
    if state is None:
        print(
            f"envtest: no running control plane named {args.name!r}; start one with `envtest up`",
            file=sys.stderr,
        )
        return 1
    print(_exports(state))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for state_dir in sorted(supervisor.clusters_root().glob("*")):
        state = supervisor.read_state(state_dir)
        status = f"running pid {state.pid} {state.server} v{state.version}" if state else "stopped"
        print(f"{state_dir.name}\t{status}")
    return 0


def cmd_binaries(args: argparse.Namespace) -> int:
    if args.action == "install":
        paths = binaries.install(
            args.names or binaries.DEFAULT_INSTALL,
            version=args.k8s_version,
            offline=args.offline or None,
            force=args.force,
        )
        for name, path in paths.items():
            print(f"{name}\t{path}")
    elif args.action == "path":
        if args.names:
            for name in args.names:
                print(binaries.resolve(name, version=args.k8s_version))
        else:
            print(binaries.cache_dir(args.k8s_version))
    else:
        for name, path in binaries.list_installed():
            print(f"{name}\t{path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envtest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start a background control plane")
    up.add_argument("--name", default="default")
    up.add_argument(
        "--components",
        default=",".join(ALL_COMPONENTS),
        help="comma-separated, or 'all' / 'minimal' (default: all)",
    )
    up.add_argument(
        "--k8s-version", help="Kubernetes version (default: ENVTEST_K8S_VERSION or the pinned one)"
    )
    up.add_argument("--crd", action="append", default=[], help="CRD file or directory (repeatable)")
    up.add_argument(
        "--job-pods",
        choices=["complete", "hold"],
        default="complete",
        help="hold: Job pods stay Running until a test sets their phase",
    )
    up.add_argument("--timeout", type=float, default=3600.0, help="seconds, including a first binary build")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop a background control plane and remove its state")
    down.add_argument("--name", default="default")
    down.add_argument("--all", action="store_true")
    down.set_defaults(func=cmd_down)

    env = sub.add_parser("env", help="print `export KUBECONFIG=…` for a running plane")
    env.add_argument("--name", default="default")
    env.set_defaults(func=cmd_env)

    lst = sub.add_parser("list", help="list control planes started with `envtest up`")
    lst.set_defaults(func=cmd_list)

    bins = sub.add_parser("binaries", help="install, locate or list control-plane binaries")
    bins.add_argument("action", choices=["install", "path", "list"])
    bins.add_argument("names", nargs="*")
    bins.add_argument("--k8s-version")
    bins.add_argument("--offline", action="store_true", help="skip release downloads; build with go")
    bins.add_argument("--force", action="store_true", help="reinstall even if cached")
    bins.set_defaults(func=cmd_binaries)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except EnvtestError as exc:
        # One clear line for expected failures; a traceback would only bury the message.
        print(f"envtest: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
