"""The docker host kind needs, set up only by an explicit command (`envtest kind host-setup`, and
`envtest kind image build` / `make kind-image` before they build): never by pytest, never by
`envtest kind up`, which fail naming that command instead.

Order (each step only when the one before is not enough), every change printed as it is made:

1. no ``docker`` CLI, or no daemon answers and no ``dockerd`` binary (a machine may ship the CLI
   alone): ``apt-get install docker.io`` (as root on Debian/Ubuntu; otherwise an error saying what
   to install);
2. ``docker info`` fails: start ``dockerd`` detached, log in ``<cache>/dockerd.log``, wait for it;
3. ``docker run --rm --privileged <probe> /pause -v`` fails with "unable to apply caps" (a container
   whose bounding set lacks a capability docker grants to --privileged, e.g. CAP_SYS_RESOURCE):
   install capwrap and a two-line runtime script that runs it with this host's runc (found on PATH
   or where distributions put it: Debian /usr/sbin/runc, Docker CE /usr/bin/runc), register that
   script as dockerd's default runtime in /etc/docker/daemon.json — merged into the user's file,
   never overwriting a default-runtime someone else set — and reload dockerd (SIGHUP reloads
   runtimes and default-runtime without restarting containers). If the probe still fails, the
   previous daemon.json is put back (or removed, if there was none) and dockerd reloaded again.
   Any other probe failure is reported as is: capwrap fixes exactly one thing.

A second run finds everything in place and changes nothing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envtest.errors import EnvtestError

Progress = Callable[[str], None]

DAEMON_JSON = Path("/etc/docker/daemon.json")
BACKUP_SUFFIX = ".before-envtest"
"""daemon.json's content before envtest first changed it, kept beside it for the user."""
CAPWRAP_RUNTIME = "capwrap"
CAPWRAP_BINARY = "capwrap"
RUNTIME_SCRIPT = "capwrap-docker"
"""What daemon.json names: capwrap with CAPWRAP_RUNC set to the runc found on this host."""
RUNC_PATHS = ("/usr/bin/runc", "/usr/sbin/runc", "/usr/local/bin/runc", "/usr/local/sbin/runc")
"""Where runc is installed when it is not on PATH (sudo's secure_path may omit /usr/sbin):
Docker CE's containerd.io ships /usr/bin/runc, Debian's runc package /usr/sbin/runc."""
CAPS_ERROR = "unable to apply caps"
PROBE_IMAGE = "envtest.local/probe:pause"
DOCKERD_START_TIMEOUT = 60.0
RELOAD_TIMEOUT = 15.0
"""Seconds for dockerd to pick up a reloaded daemon.json (asynchronous after SIGHUP) before the
re-probe counts as failed."""


@dataclass(frozen=True)
class Result:
    rc: int
    out: str
    err: str


Runner = Callable[[Sequence[str]], Result]
"""Runs an argv and returns its outcome; injected so the decisions below are testable without docker."""


def run(argv: Sequence[str], timeout: float | None = 300) -> Result:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=timeout)
    except FileNotFoundError as exc:
        return Result(127, "", str(exc))
    except subprocess.TimeoutExpired:
        return Result(124, "", f"timed out after {timeout}s")
    return Result(p.returncode, p.stdout, p.stderr)


class HostError(EnvtestError):
    """The machine cannot run kind's node containers, and envtest cannot fix it."""


def _dockerd_pid() -> int | None:
    for pidfile in (Path("/run/docker.pid"), Path("/var/run/docker.pid")):
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            return pid
    return None


def reload_dockerd() -> None:
    pid = _dockerd_pid()
    if pid is None:
        raise HostError("dockerd runs but its pid file is missing: restart dockerd to load daemon.json")
    os.kill(pid, signal.SIGHUP)


def spawn_dockerd(log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        # Own session: it must outlive this command (kind's nodes live as long as dockerd does).
        return subprocess.Popen(
            ["dockerd"], stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
        )


@dataclass
class Host:
    """Everything host setup reads, runs or changes. The defaults are this machine; tests swap in
    fakes (a docker that answers from a script, daemon.json in a temporary directory, …)."""

    runner: Runner = run
    which: Callable[[str], str | None] = shutil.which
    executable: Callable[[str], bool] = field(default=lambda p: os.access(p, os.X_OK))
    is_root: Callable[[], bool] = field(default=lambda: os.geteuid() == 0)
    daemon_json: Path = DAEMON_JSON
    bin_dir: Path = Path("/usr/local/bin")
    reload_dockerd: Callable[[], None] = reload_dockerd
    spawn_dockerd: Callable[[Path], subprocess.Popen[bytes]] = spawn_dockerd
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


# -- pure decisions ----------------------------------------------------------------------------------


def needs_capwrap(probe: Result) -> bool:
    """True only for the one failure capwrap fixes; raises for any other failed probe."""
    if probe.rc == 0:
        return False
    if CAPS_ERROR in probe.err:
        return True
    raise HostError(
        f"`docker run --privileged` fails, and not for missing capabilities:\n{probe.err.strip()}"
    )


def merge_daemon_json(existing: str | None, runtime: Path) -> str | None:
    """daemon.json with `runtime` registered as capwrap and made the default; None when already so.

    Keeps every other setting. Refuses (HostError) when another default runtime is configured:
    replacing it silently would change how all of the user's containers run."""
    try:
        conf = json.loads(existing) if existing and existing.strip() else {}
    except json.JSONDecodeError as exc:
        raise HostError(f"{DAEMON_JSON} is not valid JSON ({exc}); fix it first") from None
    if not isinstance(conf, dict):
        raise HostError(f"{DAEMON_JSON} is not a JSON object")
    runtimes = conf.setdefault("runtimes", {})
    current = conf.get("default-runtime")
    if current not in (None, "runc", CAPWRAP_RUNTIME):
        raise HostError(
            f"{DAEMON_JSON} sets default-runtime {current!r}; kind needs capwrap there on this machine. "
            f"Add runtimes.{CAPWRAP_RUNTIME} = {{path: {runtime}}} and make it the default by hand."
        )
    wanted = {"path": str(runtime)}
    if current == CAPWRAP_RUNTIME and runtimes.get(CAPWRAP_RUNTIME) == wanted:
        return None
    runtimes[CAPWRAP_RUNTIME] = wanted
    conf["default-runtime"] = CAPWRAP_RUNTIME
    return json.dumps(conf, indent=2) + "\n"


def runtime_script(capwrap: Path, runc: str) -> str:
    return (
        "#!/bin/sh\n"
        "# Written by `envtest kind host-setup`: dockerd's default runtime on this host (see daemon.json).\n"
        f'CAPWRAP_RUNC={shlex.quote(runc)} exec {shlex.quote(str(capwrap))} "$@"\n'
    )


def find_runc(host: Host) -> str:
    """The runc dockerd runs: on PATH, else where the distributions install it."""
    found = host.which("runc")
    if found:
        return found
    for path in RUNC_PATHS:
        if host.executable(path):
            return path
    raise HostError(
        f"no runc on PATH or in {', '.join(RUNC_PATHS)}: install it (Debian: runc; Docker CE ships it "
        "in containerd.io) and run `envtest kind host-setup` again"
    )


def missing_packages(host: Host, extra: Sequence[str] = ()) -> list[str]:
    """Debian packages to install: a CLI alone is enough only when a daemon already answers it.
    `extra`: packages named like the command they provide (debootstrap, for the image build)."""
    missing = []
    if not host.which("docker") or (not host.which("dockerd") and not docker_running(host.runner)):
        missing.append("docker.io")
    missing += [p for p in extra if not host.which(p)]
    return missing


def docker_running(runner: Runner = run) -> bool:
    return runner(["docker", "info", "--format", "{{.ServerVersion}}"]).rc == 0


# -- setup ------------------------------------------------------------------------------------------


class _Changes:
    """What setup changed (or, dry, would change), each printed as it happens."""

    def __init__(self, progress: Progress, dry_run: bool) -> None:
        self.progress, self.dry_run = progress, dry_run
        self.made: list[str] = []

    def __call__(self, what: str) -> None:
        self.made.append(what)
        self.progress(f"{'would ' if self.dry_run else ''}{what}")


def setup(
    host: Host,
    *,
    capwrap: Callable[[], Path],
    pause: Callable[[], Path],
    log_dir: Path,
    progress: Progress,
    packages: Sequence[str] = (),
    dry_run: bool = False,
) -> list[str]:
    """Make docker usable for kind (the module docstring's order); returns what was changed.

    `capwrap` and `pause` build those binaries (go) and are called only when needed; `dry_run`
    changes nothing and stops at the first step whose outcome depends on an earlier change."""
    change = _Changes(progress, dry_run)
    missing = missing_packages(host, packages)
    if missing:
        _install_packages(host, missing, change)
        if dry_run and "docker.io" in missing:  # nothing below can be known without docker
            return change.made
    if not docker_running(host.runner):
        if dry_run:
            change("start dockerd, then probe privileged containers")
            return change.made
        _start_dockerd(host, log_dir, change)
    if dry_run and host.runner(["docker", "image", "inspect", PROBE_IMAGE]).rc != 0:
        change(f"import the probe image {PROBE_IMAGE} (our static pause) and run it --privileged")
        return change.made
    image = _probe_image(host, pause, change)
    if needs_capwrap(_probe(host, image)):
        progress("`docker run --privileged` fails here (unable to apply caps): capwrap is needed")
        _install_capwrap(host, capwrap, image, change)
    if not change.made:
        progress("docker is ready for kind: nothing to change")
    return change.made


def _install_packages(host: Host, missing: list[str], change: _Changes) -> None:
    if change.dry_run:
        change(f"apt-get install {' '.join(missing)}")
        return
    if not host.is_root() or not host.which("apt-get"):
        raise HostError(f"install {' '.join(missing)} (Debian package names) and retry")
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    for argv in (["apt-get", "update", "-q"], [*env, "apt-get", "install", "-y", "-q", *missing]):
        r = host.runner(argv)
        if r.rc != 0:
            raise HostError(f"`{' '.join(argv)}` exited {r.rc}:\n{r.err.strip()[-1500:]}")
    change(f"installed {' '.join(missing)} (apt-get)")


def _start_dockerd(host: Host, log_dir: Path, change: _Changes) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "dockerd.log"
    proc = host.spawn_dockerd(log)
    deadline = host.clock() + DOCKERD_START_TIMEOUT
    while host.clock() < deadline:
        if docker_running(host.runner):
            change(f"started dockerd (pid {proc.pid}, log {log})")
            return
        if proc.poll() is not None:
            break
        host.sleep(0.5)
    tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
    raise HostError("dockerd did not come up; last log lines:\n" + "\n".join(tail))


def _probe_image(host: Host, pause: Callable[[], Path], change: _Changes) -> str:
    """A one-file image (our static pause) imported from a tar: no registry, no build context."""
    if host.runner(["docker", "image", "inspect", PROBE_IMAGE]).rc == 0:
        return PROBE_IMAGE
    with tempfile.TemporaryDirectory(prefix="envtest-probe-") as wd:
        tar = Path(wd, "probe.tar")
        with tarfile.open(tar, "w") as tf:
            tf.add(pause(), arcname="pause")
        r = host.runner(["docker", "import", "--change", 'ENTRYPOINT ["/pause"]', str(tar), PROBE_IMAGE])
    if r.rc != 0:
        raise HostError(f"docker import of the probe image failed: {r.err.strip()}")
    change(f"imported the probe image {PROBE_IMAGE}")
    return PROBE_IMAGE


def _probe(host: Host, image: str) -> Result:
    return host.runner(["docker", "run", "--rm", "--privileged", image, "-v"])


def _write_if_changed(path: Path, data: bytes, mode: int) -> bool:
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.envtest.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


def _install_capwrap(host: Host, capwrap: Callable[[], Path], image: str, change: _Changes) -> None:
    runc = find_runc(host)
    binary = host.bin_dir / CAPWRAP_BINARY
    script = host.bin_dir / RUNTIME_SCRIPT
    if change.dry_run:
        change(
            f"install {binary} and {script} (runc: {runc}), make it dockerd's default runtime in "
            f"{host.daemon_json} and reload dockerd"
        )
        return
    if _write_if_changed(binary, capwrap().read_bytes(), 0o755):
        change(f"installed {binary}")
    if _write_if_changed(script, runtime_script(binary, runc).encode(), 0o755):
        change(f"wrote {script} (capwrap with runc {runc})")
    previous = host.daemon_json.read_text() if host.daemon_json.is_file() else None
    merged = merge_daemon_json(previous, script)
    if merged is not None:
        backup = host.daemon_json.with_name(host.daemon_json.name + BACKUP_SUFFIX)
        if previous is not None and not backup.exists():
            backup.write_text(previous)
        _write_if_changed(host.daemon_json, merged.encode(), 0o644)
        kept = f"; previous content kept in {backup}" if previous is not None else ""
        change(f"set default-runtime {CAPWRAP_RUNTIME} ({script}) in {host.daemon_json}{kept}")
    host.reload_dockerd()
    change("reloaded dockerd (SIGHUP)")
    failure = _reprobe(host, image)
    if failure is None:
        return
    if merged is not None:
        _restore(host, previous)
        change(f"restored {host.daemon_json} to its previous {'content' if previous else 'absence'}")
        host.reload_dockerd()
        change("reloaded dockerd (SIGHUP) with the previous daemon.json")
    raise HostError(
        f"`docker run --privileged` still fails with capwrap, so {host.daemon_json} was put back as it "
        f"was:\n{failure.err.strip()}"
    )


def _reprobe(host: Host, image: str) -> Result | None:
    """None once the probe passes; the last failure when RELOAD_TIMEOUT passes first."""
    deadline = host.clock() + RELOAD_TIMEOUT
    while True:
        probe = _probe(host, image)
        if probe.rc == 0:
            return None
        if host.clock() >= deadline:
            return probe
        host.sleep(0.5)


def _restore(host: Host, previous: str | None) -> None:
    if previous is None:
        host.daemon_json.unlink(missing_ok=True)
    else:
        _write_if_changed(host.daemon_json, previous.encode(), 0o644)
