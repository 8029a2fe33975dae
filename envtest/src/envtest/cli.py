"""`envtest`: a background control plane for local debugging, and binary management.

envtest up                 # start (state under ~/.cache/envtest/clusters/<name>), print exports
eval "$(envtest env)"      # point kubectl and the operator at it
envtest reset              # put it back to how it was when `up` reported it ready (≈ 0.1 s)
envtest reset --mark       # or to how it is now, at later resets
envtest down               # stop it; nothing is left behind
envtest binaries install|path|list|cleanup
envtest rbac suggest artifacts/rbac-usage.json   # the least roles covering what the operator asked

`python -m envtest.cli …` is the same without the console script on PATH.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path

from filelock import FileLock

from envtest import binaries, commands, crds
from envtest.errors import EnvtestError
from envtest.plane import supervisor, template
from envtest.plane.controlplane import ALL_COMPONENTS, parse_components


def _state_dir(name: str) -> Path:
    return supervisor.clusters_root() / name


def _exports(state: supervisor.PlaneState) -> str:
    return f"export KUBECONFIG={shlex.quote(state.kubeconfig)}"


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args.name)
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    # The lock the pytest plugin takes for a kept plane of this name: one starter at a time.
    with FileLock(str(state_dir.parent / f".{args.name}.lock")):
        return _up(args, state_dir)


def _up(args: argparse.Namespace, state_dir: Path) -> int:
    components = parse_components(args.components)
    version = binaries.k8s_version(args.k8s_version, source="--k8s-version")
    existing = supervisor.read_state(state_dir)
    if existing is not None:
        supervisor.check_reusable(
            existing,
            version=version,
            components=components,
            job_pods=args.job_pods,
            conversion=args.conversion_webhook,  # None: not given, so any (re-applied CRDs keep it)
            pod_streams=args.pod_streams,
            pod_exec=args.pod_exec,
        )
        print(f"# control plane {args.name!r} is already running (pid {existing.pid})", file=sys.stderr)
        if args.crd:  # idempotent: a CRD edited since the plane started takes effect now
            _apply_crds(existing, args.crd)
            if existing.etcd_url:  # `envtest reset` keeps these CRDs as applied now, the rest as it was
                _keep_crds_in_reset_point(existing, state_dir, args.crd)
        print(_exports(existing))
        return 0
    # Install missing binaries here, with progress on this terminal, so --timeout covers only the
    # start (a first build takes many minutes and would only show in the supervisor's log).
    conversion = _conversion(args)
    binaries.resolve_all(components, version=version)
    if "kwok" in components:
        binaries.kwok_stages_dir(version)
    print(f"# starting {', '.join(components)}; log: {state_dir / 'supervisor.log'}", file=sys.stderr)
    state = supervisor.launch(
        state_dir,
        name=args.name,
        components=components,
        version=version,
        crds=args.crd,
        job_pods=args.job_pods,
        conversion=conversion,
        timeout=args.timeout,
        pod_streams=args.pod_streams,
        pod_exec=args.pod_exec,
    )
    print(
        f"# control plane {args.name!r} ready at {state.server}; stop it with: {commands.down(args.name)}",
        file=sys.stderr,
    )
    print(f"# kubectl: {commands.kubectl(state.version)} get ns", file=sys.stderr)
    attach = args.operator_cli or project_operator_cli(Path.cwd())
    if attach:  # the project's own command; the harness knows no operator of its own
        print(
            f"# attach the operator: {commands.with_this_python(attach)} --kubeconfig "
            f"{shlex.quote(state.kubeconfig)}",
            file=sys.stderr,
        )
    print(_exports(state))
    return 0


def project_operator_cli(root: Path) -> str | None:
    """ini `envtest_operator_cli` of the pytest configuration in `root` (pytest.ini, pyproject.toml,
    tox.ini or setup.cfg, in pytest's order), or None."""
    import configparser
    import tomllib

    for name, section in (
        ("pytest.ini", "pytest"),
        ("pyproject.toml", None),
        ("tox.ini", "pytest"),
        ("setup.cfg", "tool:pytest"),
    ):
        path = root / name
        if not path.is_file():
            continue
        if section is None:
            try:
                ini = tomllib.loads(path.read_text()).get("tool", {}).get("pytest", {}).get("ini_options")
            except tomllib.TOMLDecodeError:
                continue
            if ini is not None:
                return ini.get("envtest_operator_cli") or None
            continue
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except configparser.Error:
            continue
        if parser.has_section(section):
            return parser.get(section, "envtest_operator_cli", fallback=None) or None
    return None


def _conversion(args: argparse.Namespace) -> supervisor.Conversion | None:
    """The plane's conversion server, checked here: a typo should not surface as a dead supervisor."""
    if not args.conversion_webhook:
        return None
    from envtest.webhooks.conversion import load_factory

    # The supervisor imports it as this shell would: `python -m` puts the working directory first.
    python_path = tuple(dict.fromkeys([str(Path.cwd()), *(p or str(Path.cwd()) for p in sys.path)]))
    sys.path[:0] = [p for p in python_path if p not in sys.path]
    load_factory(args.conversion_webhook)
    return supervisor.Conversion(args.conversion_webhook, args.conversion_path, python_path=python_path)


def _keep_crds_in_reset_point(state: supervisor.PlaneState, state_dir: Path, paths: list[str]) -> None:
    from envtest.plane import reset

    path = state_dir / supervisor.RESET_POINT_FILE
    try:
        point = reset.ResetPoint.load(path)
    except reset.ResetError:
        return  # none to keep up to date (a plane of an older envtest)
    now = reset.ResetPoint.settled(state.etcd_url)
    applied = reset.crd_keys(doc for _, doc in crds.load(paths))
    point.with_keys_of(now, applied).save(path)


def _apply_crds(state: supervisor.PlaneState, paths: list[str]) -> None:
    from envtest.clusters import Cluster
    from envtest.webhooks.conversion import install_crds

    client = Cluster.new_pykube_from(Path(state.kubeconfig))
    try:
        if state.conversion_url:  # a plain re-apply replaces spec and would drop the conversion
            docs = [doc for _, doc in crds.load(paths)]
            install_crds(
                client.session, str(client.url), docs, state.conversion_url, state.conversion_ca.encode()
            )
        else:
            crds.install(client.session, str(client.url), paths)
    finally:
        client.session.close()


def cmd_down(args: argparse.Namespace) -> int:
    names = [p.name for p in supervisor.plane_dirs()] if args.all else [args.name]
    rc = 0
    for name in names:
        state_dir = _state_dir(name)
        stopped = supervisor.stop(state_dir)
        if not stopped and supervisor.lock_held(state_dir):
            # A supervisor still starting has no state yet; removing its folder would orphan it.
            print(f"{name}: still starting; run this again once it is up", file=sys.stderr)
            rc = 1
            continue
        shutil.rmtree(state_dir, ignore_errors=True)
        print(f"{name}: {'stopped' if stopped else 'was not running'}", file=sys.stderr)
    return rc


def cmd_env(args: argparse.Namespace) -> int:
    state = supervisor.read_state(_state_dir(args.name))
    if state is None:
        print(
            f"envtest: no running control plane named {args.name!r}; "
            f"start one with `{commands.envtest('up', '--name', args.name)}`",
            file=sys.stderr,
        )
        return 1
    problem = supervisor.certificate_problem(state)
    if problem:  # an export that every client then fails on (x509) helps nobody
        print(f"envtest: {problem}", file=sys.stderr)
        return 1
    print(_exports(state))
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    from envtest.plane import reset

    state_dir = _state_dir(args.name)
    state = supervisor.read_state(state_dir)
    if state is None:
        print(f"envtest: no running control plane named {args.name!r}", file=sys.stderr)
        return 1
    if not state.etcd_url:
        print(
            f"envtest: control plane {args.name!r} was started by an older envtest and cannot be reset; "
            f"restart it: `{commands.envtest('down', '--name', args.name)}` and up again",
            file=sys.stderr,
        )
        return 1
    path = state_dir / supervisor.RESET_POINT_FILE
    try:
        if args.mark:
            point = reset.ResetPoint.settled(state.etcd_url)
            point.save(path)
            print(
                f"{args.name}: what it holds now is its reset point ({len(point.values)} objects)",
                file=sys.stderr,
            )
            return 0
        report = reset.reset_to(state.etcd_url, reset.ResetPoint.load(path))
    except reset.ResetError as exc:
        print(f"envtest: {exc}", file=sys.stderr)
        return 1
    print(f"{args.name}: reset: {report.summary()}", file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for state_dir in supervisor.plane_dirs():
        state = supervisor.read_state(state_dir)
        status = f"running pid {state.pid} {state.server} v{state.version}" if state else "stopped"
        print(f"{state_dir.name}\t{status}")
    return 0


def cmd_binaries(args: argparse.Namespace) -> int:
    if args.k8s_version is not None:  # resolved here, so an error names the option
        args.k8s_version = binaries.k8s_version(args.k8s_version, source="--k8s-version")
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
    elif args.action == "list":
        _list_binaries()
    else:
        return _cleanup_binaries(dry_run=args.dry_run)
    return 0


def _list_binaries() -> None:
    """One line per cached release: directory, pinned or not, its binaries, where it is."""
    from envtest.binaries import cache, versions

    by_dir: dict[str, list[Path]] = {}
    for dir_name, path in binaries.list_installed():
        by_dir.setdefault(dir_name, []).append(path)
    pinned = cache.pinned_versions()
    installed = set()
    for dir_name, paths in by_dir.items():
        version = dir_name.rsplit("-", 2)[0]
        installed.add(version)
        mark = "pinned" if version in pinned else "unpinned"
        print(f"{dir_name}\t{mark}\t{','.join(p.name for p in paths)}\t{paths[0].parent}")
    if not by_dir:
        print(f"# nothing installed in {binaries.cache_root()}", file=sys.stderr)
    if any(v not in pinned for v in installed):
        print(f"# `{commands.envtest('binaries', 'cleanup')}` removes the unpinned ones", file=sys.stderr)
    for version in sorted(pinned - installed, key=lambda v: versions.sort_key(v) or ()):
        install = commands.envtest("binaries", "install", "--k8s-version", version)
        print(f"# pinned {version} is not installed: `{install}`", file=sys.stderr)


def _cleanup_binaries(*, dry_run: bool) -> int:
    """Remove cached releases no pin names, except those a running kept plane uses (its restarts
    need them) and the one ENVTEST_K8S_VERSION selects (the next run would rebuild it)."""
    import contextlib

    from envtest.binaries import cache

    keep: dict[str, str] = {}
    for state_dir in supervisor.plane_dirs():
        state = supervisor.read_state(state_dir)
        if state is not None:
            keep.setdefault(state.version, f"used by running plane {state.name!r}")
    # A bad selector keeps nothing more; the run that reads it reports it.
    with contextlib.suppress(EnvtestError):
        if os.environ.get("ENVTEST_K8S_VERSION"):
            keep.setdefault(binaries.k8s_version(), "selected by ENVTEST_K8S_VERSION")
    rc = 0
    for directory in cache.unpinned_dirs():
        parsed = cache.parse_dir(directory)
        why = keep.get(parsed[0]) if parsed else None
        if why:
            print(f"kept {directory}: {why}", file=sys.stderr)
        elif dry_run:
            print(f"would remove {directory}")
        elif cache.remove_dir(directory):
            print(f"removed {directory}")
        else:
            print(f"kept {directory}: an install into it is running", file=sys.stderr)
            rc = 1
    for directory in template.stale():
        if dry_run:
            print(f"would remove {directory} (a plane template of binaries no longer there)")
        else:
            shutil.rmtree(directory, ignore_errors=True)
            print(f"removed {directory} (a plane template of binaries no longer there)")
    return rc


def cmd_sweep(args: argparse.Namespace) -> int:
    from envtest import runs
    from envtest.clusters import ExistingCluster

    path = args.kubeconfig or Path(os.environ.get("KUBECONFIG") or "~/.kube/config").expanduser()
    cluster = ExistingCluster(path, context=args.context)
    try:
        report = runs.sweep_dead(cluster.session, cluster.server, dry_run=args.dry_run)
    finally:
        cluster.close()
    print(runs.describe(report))
    return 0


_K8S_VERSION_HELP = (
    "Kubernetes version: 1.36, 1.36.x, ~1.36.2, an exact 1.36.2, latest or latest-on-disk "
    "(default: ENVTEST_K8S_VERSION, else the newest pin; supported: `python -m envtest.pins supported`)"
)


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
    up.add_argument("--k8s-version", help=_K8S_VERSION_HELP)
    up.add_argument("--crd", action="append", default=[], help="CRD file or directory (repeatable)")
    up.add_argument(
        "--job-pods",
        choices=["complete", "hold"],
        default="complete",
        help="hold: Job pods stay Running until a test sets their phase",
    )
    up.add_argument(
        "--pod-exec",
        action="store_true",
        help="exec on fake pods runs the command on this host in every namespace (default: only in "
        "namespaces a test allowed; elsewhere exec fails, naming the pod)",
    )
    up.add_argument(
        "--no-pod-streams",
        dest="pod_streams",
        action="store_false",
        help="no logs, exec, attach or port-forward on fake pods (kwok runs no server; starts faster)",
    )
    up.add_argument(
        "--conversion-webhook",
        metavar="PKG.MODULE:FACTORY",
        help="run this conversion server beside the plane; multi-version CRDs convert through it",
    )
    up.add_argument("--conversion-path", default="/convert", help="its endpoint path (default: /convert)")
    up.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for the start (binaries are installed before)"
    )
    up.add_argument(
        "--operator-cli",
        metavar="COMMAND",
        help="command that attaches your operator, printed with --kubeconfig "
        "(default: ini envtest_operator_cli of the project in this directory)",
    )
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop a background control plane and remove its state")
    down.add_argument("--name", default="default")
    down.add_argument("--all", action="store_true")
    down.set_defaults(func=cmd_down)

    env = sub.add_parser("env", help="print `export KUBECONFIG=…` for a running plane")
    env.add_argument("--name", default="default")
    env.set_defaults(func=cmd_env)

    rst = sub.add_parser(
        "reset",
        help="put a background control plane back to how it was when `up` last reported it ready "
        "(or at `reset --mark`): what was made since is deleted, what was changed is written back; "
        "nothing restarts",
    )
    rst.add_argument("--name", default="default")
    rst.add_argument("--mark", action="store_true", help="make what the plane holds now its reset point")
    rst.set_defaults(func=cmd_reset)

    lst = sub.add_parser("list", help="list control planes started with `envtest up`")
    lst.set_defaults(func=cmd_list)

    swp = sub.add_parser(
        "sweep",
        help="remove what provably dead test runs left on a cluster (never a live run's)",
        description="Namespaces, ClusterRoles, ClusterRoleBindings, webhook configurations and custom "
        "resources' finalizers left by runs whose process is gone (this host) or whose heartbeat "
        "stopped (another host); see envtest.runs.",
    )
    swp.add_argument("--kubeconfig", type=Path, help="default: KUBECONFIG, else ~/.kube/config")
    swp.add_argument("--context", help="kubeconfig context (default: its current one)")
    swp.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    swp.set_defaults(func=cmd_sweep)

    bins = sub.add_parser(
        "binaries",
        help="install, locate, list or clean up control-plane binaries",
        description="install: the plane's binaries (or NAMES) of a version; path: a binary's path or the "
        "version's cache directory; list: every cached version and its binaries; cleanup: remove cached "
        "versions no pin names (see `python -m envtest.pins supported`).",
    )
    bins.add_argument("action", choices=["install", "path", "list", "cleanup"])
    bins.add_argument("names", nargs="*")
    bins.add_argument("--k8s-version", help=_K8S_VERSION_HELP)
    bins.add_argument("--dry-run", action="store_true", help="cleanup: say what would go; delete nothing")
    bins.add_argument("--offline", action="store_true", help="skip release downloads; build with go")
    bins.add_argument("--force", action="store_true", help="reinstall even if cached")
    bins.set_defaults(func=cmd_binaries)
    from envtest import kind  # `envtest kind up|down|path` lives beside the kind backend

    kind.add_parser(sub)
    from envtest.record import suggest  # `envtest rbac suggest` lives beside the record it reads

    suggest.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from envtest import environment

        environment.check()  # a misspelt ENVTEST_* would otherwise be ignored without a word
        return int(args.func(args))
    except EnvtestError as exc:
        # One clear line for expected failures; a traceback would only bury the message.
        print(f"envtest: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
