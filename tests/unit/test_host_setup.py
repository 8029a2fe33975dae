"""`envtest kind host-setup` against a fake docker host: where runc is found, what is written and
reloaded, that a second run changes nothing, and that a failed re-probe puts daemon.json back.

The fake models the one thing that matters here: on such a host `docker run --privileged` fails
with "unable to apply caps" unless the daemon.json dockerd last (re)loaded makes capwrap the default
runtime — and, for the restore tests, fails even then.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from envtest.binaries.nodeimage import host
from envtest.binaries.nodeimage.host import Host, HostError, Result

CAPS = (
    "docker: Error response from daemon: failed to create task: unable to apply caps: operation not permitted"
)


class FakeDockerHost:
    def __init__(
        self,
        root: Path,
        *,
        running: bool = True,
        caps_missing: bool = True,
        capwrap_fixes: bool = True,
        images: Sequence[str] = (host.PROBE_IMAGE,),
        on_path: Sequence[str] = ("docker", "dockerd", "runc"),
        executables: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.running, self.caps_missing, self.capwrap_fixes = running, caps_missing, capwrap_fixes
        self.images = set(images)
        self.on_path, self.executables = set(on_path), set(executables)
        self.loaded_default_runtime: str | None = None  # what dockerd read at its last (re)load
        self.reloads = 0
        self.calls: list[list[str]] = []
        self.now = 0.0
        self.built: list[str] = []
        self.daemon_json = root / "etc" / "docker" / "daemon.json"
        self.bin_dir = root / "usr" / "local" / "bin"

    # -- what Host needs ----------------------------------------------------------------------------

    def run(self, argv: Sequence[str]) -> Result:
        argv = list(argv)
        self.calls.append(argv)
        if argv[:2] == ["docker", "info"]:
            return (
                Result(0, "28.0.0", "")
                if self.running
                else Result(1, "", "Cannot connect to the Docker daemon")
            )
        if argv[:3] == ["docker", "image", "inspect"]:
            return Result(0 if argv[-1] in self.images else 1, "", "")
        if argv[:2] == ["docker", "import"]:
            self.images.add(argv[-1])
            return Result(0, "sha256:probe", "")
        if argv[:2] == ["docker", "run"]:
            if not self.caps_missing or (self.loaded_default_runtime == "capwrap" and self.capwrap_fixes):
                return Result(0, "pause", "")
            return Result(125, "", CAPS)
        raise AssertionError(f"unexpected command {argv}")

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name in self.on_path else None

    def reload(self) -> None:
        self.reloads += 1
        conf = json.loads(self.daemon_json.read_text()) if self.daemon_json.exists() else {}
        self.loaded_default_runtime = conf.get("default-runtime")

    def spawn(self, log: Path) -> object:
        self.running = True

        class Proc:
            pid = 4242

            def poll(self) -> None:
                return None

        return Proc()

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def host(self) -> Host:
        return Host(
            runner=self.run,
            which=self.which,
            executable=lambda p: p in self.executables,
            is_root=lambda: True,
            daemon_json=self.daemon_json,
            bin_dir=self.bin_dir,
            reload_dockerd=self.reload,
            spawn_dockerd=self.spawn,  # type: ignore[arg-type]
            clock=lambda: self.now,
            sleep=self.sleep,
        )

    def setup(self, *, dry_run: bool = False) -> list[str]:
        return host.setup(
            self.host(),
            capwrap=lambda: self._binary("capwrap"),
            pause=lambda: self._binary("pause"),
            log_dir=self.root / "logs",
            progress=lambda _m: None,
            dry_run=dry_run,
        )

    def _binary(self, name: str) -> Path:
        self.built.append(name)
        path = self.root / "cache" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x7fELF " + name.encode())
        return path


@pytest.fixture
def docker(tmp_path: Path) -> FakeDockerHost:
    return FakeDockerHost(tmp_path)


# -- runc ---------------------------------------------------------------------------------------------


def test_runc_on_path_wins(docker: FakeDockerHost) -> None:
    assert host.find_runc(docker.host()) == "/usr/bin/runc"


@pytest.mark.parametrize("installed", ["/usr/bin/runc", "/usr/sbin/runc"], ids=["docker-ce", "debian"])
def test_runc_off_path_is_found_where_distributions_install_it(tmp_path: Path, installed: str) -> None:
    docker = FakeDockerHost(tmp_path, on_path=("docker", "dockerd"), executables=(installed,))
    assert host.find_runc(docker.host()) == installed


def test_no_runc_anywhere_names_what_to_install(tmp_path: Path) -> None:
    docker = FakeDockerHost(tmp_path, on_path=("docker", "dockerd"))
    with pytest.raises(
        HostError, match=r"no runc on PATH or in /usr/bin/runc, /usr/sbin/runc.*containerd\.io"
    ):
        host.find_runc(docker.host())


# -- capwrap ------------------------------------------------------------------------------------------


def test_caps_failure_registers_capwrap_with_this_hosts_runc_keeping_the_users_settings(
    tmp_path: Path,
) -> None:
    docker = FakeDockerHost(tmp_path, on_path=("docker", "dockerd"), executables=("/usr/bin/runc",))
    docker.daemon_json.parent.mkdir(parents=True)
    docker.daemon_json.write_text('{"data-root": "/srv/docker"}')

    changes = docker.setup()

    script = docker.bin_dir / host.RUNTIME_SCRIPT
    assert json.loads(docker.daemon_json.read_text()) == {
        "data-root": "/srv/docker",
        "runtimes": {"capwrap": {"path": str(script)}},
        "default-runtime": "capwrap",
    }
    assert f"CAPWRAP_RUNC=/usr/bin/runc exec {docker.bin_dir / 'capwrap'} " in script.read_text()
    assert (docker.bin_dir / "capwrap").read_bytes() == b"\x7fELF capwrap"
    backup = docker.daemon_json.with_name("daemon.json.before-envtest")
    assert backup.read_text() == '{"data-root": "/srv/docker"}'
    assert docker.reloads == 1 and docker.loaded_default_runtime == "capwrap"
    assert any("default-runtime capwrap" in c for c in changes) and "reloaded dockerd (SIGHUP)" in changes


def test_a_second_run_changes_nothing(docker: FakeDockerHost) -> None:
    first = docker.setup()
    assert first
    written = docker.daemon_json.read_text()
    reloads, built = docker.reloads, list(docker.built)

    assert docker.setup() == []
    assert docker.daemon_json.read_text() == written
    assert docker.reloads == reloads and docker.built == built  # nothing rebuilt, nothing reloaded


def test_a_host_whose_privileged_containers_work_is_left_alone(tmp_path: Path) -> None:
    docker = FakeDockerHost(tmp_path, caps_missing=False)
    assert docker.setup() == []
    assert not docker.daemon_json.exists() and docker.reloads == 0 and docker.built == []


def test_a_failed_reprobe_puts_the_previous_daemon_json_back(tmp_path: Path) -> None:
    docker = FakeDockerHost(tmp_path, capwrap_fixes=False)
    docker.daemon_json.parent.mkdir(parents=True)
    original = '{"log-driver": "journald"}\n'
    docker.daemon_json.write_text(original)

    with pytest.raises(HostError, match=r"still fails with capwrap.*put back as it was"):
        docker.setup()

    assert docker.daemon_json.read_text() == original
    assert docker.reloads == 2 and docker.loaded_default_runtime is None  # dockerd runs the old config again
    assert docker.now >= host.RELOAD_TIMEOUT  # it waited for the reload before giving up


def test_a_failed_reprobe_removes_the_daemon_json_it_created(tmp_path: Path) -> None:
    docker = FakeDockerHost(tmp_path, capwrap_fixes=False)
    with pytest.raises(HostError):
        docker.setup()
    assert not docker.daemon_json.exists()
    assert docker.reloads == 2


def test_another_default_runtime_is_never_replaced(docker: FakeDockerHost) -> None:
    docker.daemon_json.parent.mkdir(parents=True)
    docker.daemon_json.write_text('{"default-runtime": "nvidia"}')
    with pytest.raises(HostError, match="default-runtime 'nvidia'"):
        docker.setup()
    assert docker.daemon_json.read_text() == '{"default-runtime": "nvidia"}' and docker.reloads == 0


# -- dockerd, packages, dry run -------------------------------------------------------------------------


def test_dockerd_not_answering_is_started_and_reported(tmp_path: Path) -> None:
    docker = FakeDockerHost(tmp_path, running=False, caps_missing=False)
    changes = docker.setup()
    assert docker.running
    assert changes == [f"started dockerd (pid 4242, log {tmp_path / 'logs' / 'dockerd.log'})"]


def test_missing_docker_without_root_names_the_package(tmp_path: Path) -> None:
    docker = FakeDockerHost(tmp_path, on_path=())
    system = docker.host()
    system.is_root = lambda: False
    with pytest.raises(HostError, match=r"install docker\.io"):
        host.setup(system, capwrap=Path, pause=Path, log_dir=tmp_path, progress=lambda _m: None)
    assert docker.calls == []  # no apt-get tried without root


def test_dry_run_reports_the_capwrap_change_and_makes_none(docker: FakeDockerHost) -> None:
    changes = docker.setup(dry_run=True)
    assert len(changes) == 1 and "default runtime" in changes[0] and "runc: /usr/bin/runc" in changes[0]
    assert not docker.daemon_json.exists() and docker.reloads == 0 and docker.built == []
    assert not docker.bin_dir.exists()


def test_dry_run_with_dockerd_down_stops_before_starting_it(tmp_path: Path) -> None:
    docker = FakeDockerHost(tmp_path, running=False)
    assert docker.setup(dry_run=True) == ["start dockerd, then probe privileged containers"]
    assert not docker.running
