"""The docker host kind needs: a docker CLI, a running dockerd, and privileged containers that start.

Order (each step only when the one before is not enough):

1. ``docker`` missing, or no daemon answers and ``dockerd`` is missing (a machine may ship the CLI
   alone): ``apt-get install docker.io`` (as root on Debian/Ubuntu; otherwise an error saying what
   to install);
2. ``docker info`` fails: start ``dockerd`` detached, log in ``<cache>/dockerd.log``, wait for it;
3. ``docker run --rm --privileged <probe> /pause -v`` fails with "unable to apply caps" (a sandbox
   whose bounding set lacks a capability docker grants to --privileged, e.g. CAP_SYS_RESOURCE):
   register capwrap as dockerd's default runtime in /etc/docker/daemon.json — merged into the
   user's file, never overwriting a default-runtime someone else set — and reload dockerd (SIGHUP
   reloads runtimes and default-runtime without restarting containers). Any other failure is
   reported as is: capwrap fixes exactly one thing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from envtest.errors import EnvtestError

Progress = Callable[[str], None]

DAEMON_JSON = Path("/etc/docker/daemon.json")
CAPWRAP_INSTALL = Path("/usr/local/bin/capwrap")
CAPWRAP_RUNTIME = "capwrap"
CAPS_ERROR = "unable to apply caps"
DOCKERD_START_TIMEOUT = 60.0


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


def merge_daemon_json(existing: str | None, capwrap: Path) -> str | None:
    """daemon.json with capwrap registered and made the default runtime; None when already so.

    Keeps every other setting. Refuses (HostError) when another default runtime is configured:
    replacing it silently would change how all of the user's containers run."""
    conf = json.loads(existing) if existing and existing.strip() else {}
    if not isinstance(conf, dict):
        raise HostError(f"{DAEMON_JSON} is not a JSON object")
    runtimes = conf.setdefault("runtimes", {})
    current = conf.get("default-runtime")
    if current not in (None, "runc", CAPWRAP_RUNTIME):
        raise HostError(
            f"{DAEMON_JSON} sets default-runtime {current!r}; kind needs capwrap there on this machine. "
            f"Add runtimes.{CAPWRAP_RUNTIME} = {{path: {capwrap}}} and make it the default by hand."
        )
    wanted = {"path": str(capwrap)}
    if current == CAPWRAP_RUNTIME and runtimes.get(CAPWRAP_RUNTIME) == wanted:
        return None
    runtimes[CAPWRAP_RUNTIME] = wanted
    conf["default-runtime"] = CAPWRAP_RUNTIME
    return json.dumps(conf, indent=2) + "\n"


# -- actions -----------------------------------------------------------------------------------------


def missing_packages(runner: Runner = run) -> list[str]:
    """Debian packages to install: a CLI alone is enough only when a daemon already answers it."""
    missing = []
    if not shutil.which("docker") or (not shutil.which("dockerd") and not docker_running(runner)):
        missing.append("docker.io")
    if not shutil.which("debootstrap"):
        missing.append("debootstrap")
    return missing


def ensure_packages(progress: Progress, runner: Runner = run) -> None:
    missing = missing_packages(runner)
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise HostError(f"install {' '.join(missing)} (Debian package names) and retry")
    progress(f"apt-get install {' '.join(missing)}")
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    for argv in (["apt-get", "update", "-q"], [*env, "apt-get", "install", "-y", "-q", *missing]):
        r = runner(argv)
        if r.rc != 0:
            raise HostError(f"`{' '.join(argv)}` exited {r.rc}:\n{r.err.strip()[-1500:]}")


def docker_running(runner: Runner = run) -> bool:
    return runner(["docker", "info", "--format", "{{.ServerVersion}}"]).rc == 0


def start_dockerd(log_dir: Path, progress: Progress, runner: Runner = run) -> int | None:
    """Start dockerd when none answers; its pid (None when one was already running)."""
    if docker_running(runner):
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "dockerd.log"
    progress(f"starting dockerd (log: {log})")
    with open(log, "ab") as out:
        # Own session: it must outlive this process (kind's nodes live as long as dockerd does).
        proc = subprocess.Popen(
            ["dockerd"], stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + DOCKERD_START_TIMEOUT
    while time.monotonic() < deadline:
        if docker_running(runner):
            return proc.pid
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = log.read_text(errors="replace").splitlines()[-15:]
    raise HostError("dockerd did not come up; last log lines:\n" + "\n".join(tail))


def probe_image(pause: Path, tag: str, runner: Runner = run) -> str:
    """A one-file image (our static pause) imported from a tar: no registry, no build context."""
    if runner(["docker", "image", "inspect", tag]).rc == 0:
        return tag
    with tempfile.TemporaryDirectory(prefix="envtest-probe-") as wd:
        tar = Path(wd, "probe.tar")
        with tarfile.open(tar, "w") as tf:
            tf.add(pause, arcname="pause")
        r = runner(["docker", "import", "--change", 'ENTRYPOINT ["/pause"]', str(tar), tag])
    if r.rc != 0:
        raise HostError(f"docker import of the probe image failed: {r.err.strip()}")
    return tag


def probe_privileged(image: str, runner: Runner = run) -> Result:
    return runner(["docker", "run", "--rm", "--privileged", image, "-v"])


def dockerd_pid() -> int | None:
    for pidfile in (Path("/run/docker.pid"), Path("/var/run/docker.pid")):
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            return pid
    return None


def install_capwrap(capwrap: Path, progress: Progress, runner: Runner = run) -> None:
    """Install capwrap, merge it into daemon.json and make dockerd reload its runtimes."""
    if not CAPWRAP_INSTALL.is_file() or CAPWRAP_INSTALL.read_bytes() != capwrap.read_bytes():
        tmp = CAPWRAP_INSTALL.with_name(".capwrap.tmp")
        shutil.copyfile(capwrap, tmp)
        tmp.chmod(0o755)
        os.replace(tmp, CAPWRAP_INSTALL)
    existing = DAEMON_JSON.read_text() if DAEMON_JSON.is_file() else None
    merged = merge_daemon_json(existing, CAPWRAP_INSTALL)
    if merged is not None:
        if existing is not None:
            backup = DAEMON_JSON.with_name("daemon.json.before-envtest")
            if not backup.exists():
                backup.write_text(existing)
            progress(f"registering capwrap in {DAEMON_JSON} (previous file kept as {backup.name})")
        DAEMON_JSON.parent.mkdir(parents=True, exist_ok=True)
        DAEMON_JSON.write_text(merged)
    pid = dockerd_pid()
    if pid is None:
        raise HostError("dockerd runs but its pid file is missing: restart dockerd to load capwrap")
    os.kill(pid, signal.SIGHUP)
    time.sleep(1.0)  # the reload is asynchronous; the re-probe below tells whether it took


def ensure(capwrap: Callable[[], Path], pause: Callable[[], Path], log_dir: Path, progress: Progress) -> None:
    """Everything above, in order; capwrap and pause are built only when needed."""
    ensure_packages(progress)
    start_dockerd(log_dir, progress)
    image = probe_image(pause(), "envtest.local/probe:pause")
    if not needs_capwrap(probe_privileged(image)):
        return
    progress(
        "`docker run --privileged` fails here (unable to apply caps): installing capwrap as dockerd's runtime"
    )
    install_capwrap(capwrap(), progress)
    again = probe_privileged(image)
    if again.rc != 0:
        raise HostError(f"`docker run --privileged` still fails with capwrap:\n{again.err.strip()}")
