"""kind clusters for the `kind` backend and `envtest kind up|down`, on pytest-kind-ng's `KindCluster`.

pytest-kind-ng (the optional `[kind]` extra) creates and deletes; what it leaves out is done here:

- **reuse with the real kubeconfig**: for a cluster that already exists it only touches an empty
  kubeconfig and then fails to parse it, so ``kind get kubeconfig`` is written there first;
- **stale clusters**: a cluster whose node containers are stopped (a reboot, ``docker stop``) is still
  listed by ``kind get clusters`` but can never answer; it is deleted and created again;
- **readiness**: ``kind create`` returns before the cluster can take a suite (nodes NotReady, no
  CoreDNS, no ServiceAccounts yet), so `wait_ready` waits for what the tests rely on;
- **one minor per cluster**: a new cluster gets the node image of the selected Kubernetes minor
  (`envtest.kindimage.choose`); a running one at another minor is refused with the commands that
  replace it, as a kept local plane at another version is (tests must run on the minor asked for).

The container CLI is ``docker``, or what ``KIND_EXPERIMENTAL_PROVIDER`` names (podman, nerdctl: both
answer ``inspect -f``), since kind put the node containers there.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtest.binaries import kind as kind_binary
from envtest.errors import ConfigError, EnvtestError, StartTimeout, UsageProblem
from envtest.pins import SUPPORTED, for_minor, minor_of

if TYPE_CHECKING:
    import pytest_kind

Getter = Callable[[str], "dict[str, Any] | None"]
"""GET an API path ("api/v1/nodes"); the parsed body, or None for 404."""

DEFAULT_CONFIG = Path(__file__).resolve().parent / "data" / "kind-config.yaml"
READY_TIMEOUT = 300.0
"""Seconds for a new cluster to become usable; a 2-CPU runner needs ~60 s after `kind create`."""


class State(Enum):
    ABSENT = "absent"
    RUNNING = "running"
    STALE = "stale"  # listed by kind, but a node container is stopped or gone


def node_image(version: str | None = None) -> str:
    """ENVTEST_KIND_IMAGE, else the node image published with the pinned kind for the minor of
    ``version`` (None, or a minor without pins: the newest)."""
    pins = (for_minor(version) if version else None) or SUPPORTED[-1]
    return os.environ.get("ENVTEST_KIND_IMAGE") or pins.kind_node_image


def kubeconfig_path(name: str) -> Path:
    """Stable across runs, so a kept cluster's `export KUBECONFIG=…` stays valid."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "envtest" / "kind" / "clusters" / f"{name}.kubeconfig"


class KindCli:
    """The few kind and container-CLI calls pytest-kind-ng does not make."""

    def __init__(self, kind: Path, container_cli: str | None = None) -> None:
        self.kind = kind
        self.container_cli = container_cli or os.environ.get("KIND_EXPERIMENTAL_PROVIDER") or "docker"

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)

    def _kind(self, *args: str) -> str:
        proc = self._run(str(self.kind), *args)
        if proc.returncode != 0:
            tail = proc.stderr.strip()[-500:]
            raise EnvtestError(f"`kind {' '.join(args)}` exited {proc.returncode}: {tail}")
        return proc.stdout

    def _lines(self, *args: str) -> list[str]:
        return [line.strip() for line in self._kind(*args).splitlines() if line.strip()]

    def clusters(self) -> list[str]:
        return self._lines("get", "clusters")

    def nodes(self, name: str) -> list[str]:
        """Node container names; stopped ones too (kind lists containers by label, running or not)."""
        return self._lines("get", "nodes", "--name", name)

    def running(self, container: str) -> bool:
        """Whether the node container runs. Only a clear answer counts: a stale cluster is deleted
        and created again, and a daemon slow to answer on a loaded machine is no reason to."""
        proc = self._run(self.container_cli, "inspect", "-f", "{{.State.Running}}", container)
        if proc.returncode == 0:
            return proc.stdout.strip() == "true"
        gone = ("no such object", "no such container")  # docker, podman; not "no such host"
        if any(words in proc.stderr.lower() for words in gone):
            return False
        tail = proc.stderr.strip()[-500:]
        raise EnvtestError(f"`{self.container_cli} inspect {container}` exited {proc.returncode}: {tail}")

    def state(self, name: str) -> State:
        if name not in self.clusters():
            return State.ABSENT
        nodes = self.nodes(name)
        return State.RUNNING if nodes and all(self.running(n) for n in nodes) else State.STALE

    def volumes(self, name: str) -> list[str]:
        """Named and anonymous volumes mounted into the cluster's node containers."""
        fmt = "{{range .Mounts}}{{if .Name}}{{.Name}} {{end}}{{end}}"
        out: list[str] = []
        for node in self.nodes(name) if name in self.clusters() else []:
            proc = self._run(self.container_cli, "inspect", "-f", fmt, node)
            out += proc.stdout.split() if proc.returncode == 0 else []
        return out

    def volume_exists(self, volume: str) -> bool:
        return self._run(self.container_cli, "volume", "inspect", volume).returncode == 0

    def kubeconfig(self, name: str) -> str:
        return self._kind("get", "kubeconfig", "--name", name)

    def node_version(self, name: str) -> str | None:
        """The Kubernetes release of a running cluster (``1.37.0``), read where kind itself reads it:
        ``/kind/version`` in its control-plane node, written by every node image build. None when it
        cannot be read."""
        nodes = self.nodes(name)
        node = next((n for n in nodes if n.endswith("-control-plane")), nodes[0] if nodes else None)
        if node is None:
            return None
        proc = self._run(self.container_cli, "exec", node, "cat", "/kind/version")
        version = proc.stdout.strip().removeprefix("v")
        return version if proc.returncode == 0 and version else None


def _pytest_kind() -> Any:
    try:
        import pytest_kind
    except ImportError as exc:
        raise ConfigError(
            "the kind backend needs the optional extra (GPL-3.0): pip install 'kube-envtest[kind]'"
        ) from exc
    return pytest_kind


def open_cluster(
    name: str,
    *,
    kind_path: Path,
    kubeconfig: Path | None = None,
    config_file: Path | None = DEFAULT_CONFIG,
    image: str | None = None,
    version: str | None = None,
    progress: Callable[[str], None] = lambda _m: None,
    record: bool = True,
    record_bodies: bool = False,
) -> tuple[pytest_kind.KindCluster, bool]:
    """The running cluster `name`, reused or (re-)created; returns it and whether this call created it.

    ``version``: the Kubernetes release selected (None: ``ENVTEST_K8S_VERSION``, else the newest pin).
    A new cluster gets its minor's node image docker has or can pull (`envtest.kindimage.choose`); a
    running cluster at another minor is a `UsageProblem` naming the commands that replace it. An
    image asked for (``image``, ENVTEST_KIND_IMAGE) decides the version itself: nothing is compared.
    A cluster this call creates writes the record's audit log into `audit_dir` (``record``; with
    request bodies: ``record_bodies``), see `envtest.record.kindaudit`.
    Nothing here starts daemons, edits docker's configuration or builds an image."""
    from envtest import kindimage
    from envtest.binaries import k8s_version

    version = k8s_version(version, source="--k8s-version")
    asked = image or os.environ.get("ENVTEST_KIND_IMAGE")
    kubeconfig = kubeconfig or kubeconfig_path(name)
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    cli = KindCli(kind_path)
    kindimage.check_runtime(cli.container_cli)  # before kind, whose own error would not say what to run
    state = cli.state(name)
    if state is State.RUNNING and not asked:
        check_minor(name, cli.node_version(name), version)
    if state is not State.RUNNING:
        image = kindimage.choose(image, version=version, cli=cli.container_cli, progress=progress)
    config_file = offline_config(config_file, image, name)
    if record and state is not State.RUNNING:
        config_file = _with_record(config_file, name, record_bodies, progress)
    cluster = _pytest_kind().KindCluster(
        name, kubeconfig=kubeconfig, image=image or node_image(version), kind_path=kind_path
    )
    if state is State.STALE:
        progress(f"kind cluster {name!r} exists but its nodes are not running: deleting and re-creating it")
        cluster.delete()
    if state is State.RUNNING:
        _write_atomically(kubeconfig, cli.kubeconfig(name))
    else:
        kubeconfig.unlink(missing_ok=True)  # kind merges into an existing file; start clean
        progress(f"creating kind cluster {name!r} ({image or node_image()}; ~1 min)")
    cluster.create(config_file=config_file)
    return cluster, state is not State.RUNNING


def check_minor(name: str, running: str | None, version: str) -> None:
    """Refuse a running cluster whose minor is not ``version``'s (an unreadable one passes: kind
    could not have created it without /kind/version, so that is a cluster kind does not manage)."""
    if running is None or minor_of(running) == minor_of(version):
        return
    from envtest import commands

    minor = minor_of(version)
    replace = " && ".join(
        [
            commands.envtest("kind", "down", "--name", name),
            commands.envtest("kind", "up", "--name", name, "--k8s-version", minor),
        ]
    )
    raise UsageProblem(
        f"kind cluster {name!r} is already running Kubernetes {running}, but {version} (minor {minor}) "
        f"is asked for; replace it with `{replace}`, or ask for {minor_of(running)}"
    )


def offline_config(config_file: Path | None, image: str | None, name: str) -> Path | None:
    """For the offline node image, the kind config with what it needs (static CNI, kubeadm's
    etcd/CoreDNS tags of the image's minor: `nodespec.kind_config`), written beside the kubeconfig;
    else as given."""
    from envtest.binaries.nodespec import NodeImageSpec, is_offline_image, kind_config, offline_image_version

    if not image or not is_offline_image(image):
        return config_file
    spec = NodeImageSpec.for_version(offline_image_version(image))
    user = config_file.read_text() if config_file else "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n"
    rendered = kubeconfig_path(name).with_name(f"{name}.kind-config.yaml")
    rendered.parent.mkdir(parents=True, exist_ok=True)
    rendered.write_text(kind_config(user, spec))
    return rendered


def audit_dir(name: str) -> Path:
    """The host folder a cluster made here writes its audit log into (the record)."""
    return kubeconfig_path(name).with_name(f"{name}.audit")


def audit_log(name: str) -> tuple[Path | None, str]:
    """(the cluster's audit log, or None; why there is none)."""
    from envtest.record import policy

    path = audit_dir(name) / policy.LOG_FILE
    if path.is_file():
        return path, ""
    return None, (
        f"kind cluster {name!r} writes no audit log this host can read (made without `envtest kind up`, "
        f"or before the record existed): recreate it with `envtest kind down --name {name}` and `up`"
    )


def _with_record(
    config_file: Path | None, name: str, bodies: bool, progress: Callable[[str], None]
) -> Path | None:
    from envtest.record import kindaudit

    user = config_file.read_text() if config_file else "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n"
    try:
        rendered_text = kindaudit.config(user, audit_dir(name))
    except ValueError as exc:
        progress(f"kind cluster {name!r} gets no record: {exc}")
        return config_file
    kindaudit.prepare(audit_dir(name), bodies=bodies)
    rendered = kubeconfig_path(name).with_name(f"{name}.kind-config.yaml")
    rendered.parent.mkdir(parents=True, exist_ok=True)
    rendered.write_text(rendered_text)
    return rendered


def delete_cluster(name: str, *, kind_path: Path, kubeconfig: Path | None = None) -> None:
    kubeconfig = kubeconfig or kubeconfig_path(name)
    _pytest_kind().KindCluster(name, kubeconfig=kubeconfig, kind_path=kind_path).delete()


KIND_NETWORK = "kind"


def remove_idle_network(container_cli: str = "docker") -> bool:
    """Remove kind's bridge network once no container is attached: `kind delete` leaves it for the
    next cluster, so a machine that is done with kind keeps it forever otherwise."""
    fmt = "{{len .Containers}}"
    attached = subprocess.run([container_cli, "network", "inspect", "-f", fmt, KIND_NETWORK],
                              capture_output=True, text=True, check=False)  # fmt: skip
    if attached.returncode != 0 or attached.stdout.strip() != "0":
        return False
    rm = subprocess.run([container_cli, "network", "rm", KIND_NETWORK], capture_output=True, check=False)
    return rm.returncode == 0


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    # 0600 from creation: the kubeconfig holds the admin's private key.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


# -- readiness ---------------------------------------------------------------------------------------


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def readiness_problems(get: Getter, namespace: str = "default") -> list[str]:
    """What still keeps the cluster from taking a suite; empty when it can."""
    problems = []
    nodes = (get("api/v1/nodes") or {}).get("items") or []
    not_ready = [n["metadata"]["name"] for n in nodes if not _condition(n, "Ready")]
    if not nodes or not_ready:
        problems.append(f"nodes not Ready: {not_ready or 'none registered'}")
    coredns = get("apis/apps/v1/namespaces/kube-system/deployments/coredns")
    if coredns is None or not _condition(coredns, "Available"):
        problems.append("CoreDNS Deployment not Available")
    classes = (get("apis/storage.k8s.io/v1/storageclasses") or {}).get("items") or []
    annotation = "storageclass.kubernetes.io/is-default-class"
    if not any((c["metadata"].get("annotations") or {}).get(annotation) == "true" for c in classes):
        problems.append("no default StorageClass")
    # The ServiceAccount controller runs: every test namespace will get its `default` SA too.
    if get(f"api/v1/namespaces/{namespace}/serviceaccounts/default") is None:
        problems.append(f"no ServiceAccount {namespace}/default yet")
    return problems


def wait_ready(
    get: Getter,
    *,
    name: str,
    timeout: float = READY_TIMEOUT,
    interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    started = clock()
    while True:
        try:
            problems = readiness_problems(get)
        except Exception as exc:  # the apiserver may still be coming up after a re-create
            problems = [f"API not answering: {exc}"]
        if not problems:
            return
        if clock() - started >= timeout:
            raise StartTimeout(f"kind cluster {name!r} not ready after {timeout:.0f}s: {'; '.join(problems)}")
        sleep(interval)


def getter(session: Any, server: str) -> Getter:
    def get(path: str) -> dict[str, Any] | None:
        resp = session.get(f"{server}/{path}", timeout=10)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        return resp.json()  # type: ignore[no-any-return]

    return get


# -- `envtest kind up|down|path|host-setup|image` -----------------------------------------------------


def cmd_kind(args: argparse.Namespace) -> int:
    if args.action == "host-setup":
        from envtest.binaries import nodeimage  # the builder: only behind this explicit command

        nodeimage.host_setup(progress=_say, dry_run=args.dry_run)
        return 0
    if args.action == "image":
        return _cmd_image(args)
    kind_path = kind_binary.resolve(args.kind_bin, progress=_say)
    if args.action == "down":
        cli = KindCli(kind_path)
        volumes = cli.volumes(args.name)
        delete_cluster(args.name, kind_path=kind_path)
        left = [v for v in volumes if cli.volume_exists(v)]
        if left:  # kind removes its nodes' anonymous /var volumes; a failure there fills the disk
            raise EnvtestError(f"kind cluster {args.name!r} deleted, but its volumes remain: {left}")
        kubeconfig_path(args.name).unlink(missing_ok=True)
        kubeconfig_path(args.name).with_name(f"{args.name}.kind-config.yaml").unlink(missing_ok=True)
        shutil.rmtree(audit_dir(args.name), ignore_errors=True)
        remove_idle_network(KindCli(kind_path).container_cli)
        return 0
    if args.action == "path":
        print(kind_path)
        return 0
    # Like the pytest backend: an image docker has or can pull, else an error naming the command
    # that builds one; no dockerd started, no host changed (`envtest kind host-setup` does that).
    _, created = open_cluster(
        args.name,
        kind_path=kind_path,
        config_file=args.config,
        image=args.image,
        version=args.k8s_version,
        progress=_say,
    )
    from envtest.clusters import Cluster

    client = Cluster.new_pykube_from(kubeconfig_path(args.name))
    try:
        wait_ready(getter(client.session, str(client.url)), name=args.name, timeout=args.timeout)
    finally:
        client.session.close()
    _say(f"kind cluster {args.name!r} {'created' if created else 'reused'} and ready")
    print(f"export KUBECONFIG={shlex.quote(str(kubeconfig_path(args.name)))}")
    return 0


def _cmd_image(args: argparse.Namespace) -> int:
    if args.image_action in ("tag", "build"):
        from envtest.binaries import k8s_version
        from envtest.binaries.nodespec import NodeImageSpec

        spec = NodeImageSpec.for_version(k8s_version(args.k8s_version, source="--k8s-version"))
        if args.image_action == "tag":  # the recipe alone: no docker, no builder
            print(spec.tag())
            return 0
    from envtest.binaries import nodeimage

    if args.image_action == "build":
        print(nodeimage.build(spec, progress=_say, force=args.force))
    else:
        from envtest.binaries.nodeimage import pybase

        print(pybase.build(args.project.resolve(), progress=_say))
    return 0


_K8S_MINOR_HELP = (
    "Kubernetes version selector (1.36, 1.36.x, latest, …; default: ENVTEST_K8S_VERSION, else the "
    "newest pin): the node image is that minor's (`python -m envtest.pins supported`)"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("kind", help="kind clusters for --envtest-backend=kind, and the docker host they need")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def kind_bin(parser: argparse.ArgumentParser) -> None:
        help_ = "kind binary (default: kind on PATH, else built with go)"
        parser.add_argument("--kind-bin", type=Path, help=help_)

    up = actions.add_parser("up", help="create (or reuse) a cluster; print `export KUBECONFIG=…`")
    up.add_argument("--name", default="envtest")
    up.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    up.add_argument(
        "--image",
        help="node image (default: ENVTEST_KIND_IMAGE, else the one pinned for --k8s-version's minor, "
        "else that minor's offline one)",
    )
    up.add_argument("--timeout", type=float, default=READY_TIMEOUT, help="seconds to wait for readiness")
    up.add_argument("--k8s-version", help=f"{_K8S_MINOR_HELP}; a running cluster of another minor is refused")
    kind_bin(up)
    down = actions.add_parser("down", help="delete a cluster and what kind leaves behind")
    down.add_argument("--name", default="envtest")
    kind_bin(down)
    kind_bin(actions.add_parser("path", help="print the kind binary used"))
    setup = actions.add_parser(
        "host-setup",
        help="make docker usable for kind: install docker.io, start dockerd, capwrap where needed "
        "(prints every change; a second run changes nothing)",
    )
    setup.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    image = actions.add_parser("image", help="the offline node image (no registry needed)")
    image_actions = image.add_subparsers(dest="image_action", required=True, metavar="ACTION")
    build = image_actions.add_parser(
        "build", help="set up the host, then build it (cold ~25 min; cached by content); print its tag"
    )
    build.add_argument("--force", action="store_true", help="rebuild even if docker has it")
    build.add_argument("--k8s-version", help=_K8S_MINOR_HELP)
    tag = image_actions.add_parser("tag", help="print its tag (from the recipe; nothing is built)")
    tag.add_argument("--k8s-version", help=_K8S_MINOR_HELP)
    pybase = image_actions.add_parser("pybase", help="a python3 base image for offline `docker build`s")
    pybase.add_argument(
        "project", type=Path, help="directory of the pyproject.toml whose dependencies it carries"
    )
    p.set_defaults(func=cmd_kind)


def _say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)
