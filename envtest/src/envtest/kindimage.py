"""The node image a new kind cluster starts from: one docker already has or can pull, never one
built here. Used by the kind backend (pytest) and `envtest kind up`; neither changes the host.

Lookup order (first hit wins):

1. the image asked for — ``--envtest-kind-image`` (or pytest-kind-ng's ``--kind-image``,
   ``envtest kind up --image``), else ``ENVTEST_KIND_IMAGE`` — if docker has it or pulls it;
   an image asked for by name is never swapped for another: when it cannot be had, that fails;
2. otherwise the published image pinned for the selected minor (``envtest.pins.for_minor(v)``:
   kind_node_image) if docker has it or (unless ``ENVTEST_OFFLINE=1``) pulls it within
   ``PULL_TIMEOUT``;
3. the offline image of that minor, ``envtest.local/kind-node:v<k8s>-<recipe hash>``, if docker has
   it (built by ``envtest kind image build --k8s-version <minor>``; its tag comes from the recipe,
   `envtest.binaries.nodespec`, without loading the builder);
4. else `NodeImageUnavailable`, at once, with the pull error and the command that builds (3).

Before any of that docker itself must answer; when it does not, the error names
``envtest kind host-setup`` (which starts dockerd, and more where needed) instead of starting it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from envtest import commands
from envtest.binaries.nodespec import NodeImageSpec
from envtest.errors import EnvtestError
from envtest.pins import SUPPORTED, for_minor, minor_of

Progress = Callable[[str], None]
Docker = Callable[[Sequence[str], float], "tuple[int, str]"]
"""Runs a container-CLI argv with a timeout; returns (exit code, stderr). Injected in tests."""

PULL_TIMEOUT = 90.0
"""Seconds for `docker pull` of a node image (~400 MB): a registry that cannot be reached fails in
seconds; this bounds a network that swallows packets instead of refusing them."""
QUERY_TIMEOUT = 30.0


def build_command(version: str | None = None) -> str:
    """Exactly what to paste: this interpreter's CLI (the `envtest` script may not be on PATH),
    for the minor of ``version`` when given."""
    if version is None:
        return commands.envtest("kind", "image", "build")
    return commands.envtest("kind", "image", "build", "--k8s-version", minor_of(version))


def host_setup_command() -> str:
    return commands.envtest("kind", "host-setup")


class NodeImageUnavailable(EnvtestError):
    """No node image can be had without building one: the message says why and what to run."""


class DockerNotRunning(EnvtestError):
    """The container runtime kind uses does not answer."""


def _docker(argv: Sequence[str], timeout: float) -> tuple[int, str]:
    import subprocess

    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=timeout)
    except FileNotFoundError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timeout:.0f}s"
    return p.returncode, p.stderr


def _offline_mode() -> bool:
    return os.environ.get("ENVTEST_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def offline_tag(version: str | None = None) -> str:
    """The offline image's tag for the minor of ``version`` (None: the newest)."""
    return NodeImageSpec.for_version(version).tag()


def _last_line(err: str) -> str:
    return (err.strip().splitlines() or ["(no output)"])[-1][:300]


def check_runtime(cli: str = "docker", docker: Docker = _docker) -> None:
    """Raise DockerNotRunning, naming the command that fixes it, unless the runtime answers."""
    # With a format that needs the server, a client that answers alone cannot pass for a daemon.
    argv = [cli, "info", "--format", "{{.ServerVersion}}"] if cli == "docker" else [cli, "info"]
    rc, err = docker(argv, QUERY_TIMEOUT)
    if rc != 0:
        raise DockerNotRunning(
            f"`{cli} info` fails ({_last_line(err)}): kind needs a running container runtime. "
            f"Start it, or run `{host_setup_command()}` (starts dockerd; installs docker.io where "
            "missing; sets up capwrap where privileged containers fail)"
        )


def choose(
    explicit: str | None = None,
    *,
    version: str | None = None,
    cli: str = "docker",
    docker: Docker = _docker,
    pull_timeout: float = PULL_TIMEOUT,
    progress: Progress = lambda _m: None,
) -> str:
    """The node image for a new cluster of the minor of ``version`` (an exact release or a minor;
    None: the newest), in the module docstring's order."""
    check_runtime(cli, docker)
    pins = SUPPORTED[-1] if version is None else for_minor(version)
    if pins is None:
        supported = ", ".join(p.minor for p in SUPPORTED)
        raise NodeImageUnavailable(
            f"no kind node image for Kubernetes {version}: supported minors {supported}"
        )

    def present(image: str) -> bool:
        return docker([cli, "image", "inspect", "--format", "{{.Id}}", image], QUERY_TIMEOUT)[0] == 0

    def pull(image: str) -> str | None:
        """None once pulled; else why not."""
        if _offline_mode():
            return "not pulled: ENVTEST_OFFLINE is set"
        progress(f"{cli} pull {image} (up to {pull_timeout:.0f}s)")
        rc, err = docker([cli, "pull", image], pull_timeout)
        return None if rc == 0 else _last_line(err)

    asked = explicit or os.environ.get("ENVTEST_KIND_IMAGE")
    if asked:
        if present(asked):
            return asked
        why = pull(asked)
        if why is None:
            return asked
        raise NodeImageUnavailable(
            f"kind node image {asked} (asked for by --envtest-kind-image or ENVTEST_KIND_IMAGE) is not "
            f"in {cli} and cannot be pulled: {why}. Pull or load it, or leave it unset to use the pinned "
            f"image or the offline one (`{build_command()}`)"
        )
    published = pins.kind_node_image
    if present(published):
        return published
    why = pull(published)
    if why is None:
        return published
    offline = offline_tag(pins.kubernetes)
    if present(offline):
        progress(f"cannot pull {published} ({why}); using the offline node image {offline}")
        return offline
    raise NodeImageUnavailable(
        f"no kind node image: {published} is not in {cli} and cannot be pulled ({why}), and the "
        f"offline image {offline} is not built. Build it once (~25 min cold, Go and debootstrap; "
        f"it also sets up the docker host): `{build_command(pins.kubernetes)}`, "
        "or pull the published image on a machine that can and `docker load` it here"
    )
