"""The MySQL stand-in of the operator's test kit (tests/kit: the image offline kind clusters run instead
of mysql), run on this host the way a pod runs it: the operator's own `configure` script writes conf.d
and the replica's initdb script, then the stand-in's mysqld runs that script through its `mysql` on
first start. What the kind E2E test can only see in pod logs is checked here statement by statement
(built with `go` from tests/kit/mysqlstandin, as the kit's image build does)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envtest import eventually
from mysql_operator import replication

_spec = importlib.util.spec_from_file_location(
    "standins", Path(__file__).resolve().parents[1] / "kit" / "standins.py"
)
assert _spec and _spec.loader
standins = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standins)


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = standins.binary(progress=lambda _: None)
    links = tmp_path_factory.mktemp("standin-bin")
    for name in ("mysqld", "mysqladmin", "mysql"):  # the image's symlinks: argv[0] picks the tool
        (links / name).symlink_to(binary)
    return links


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Pod:
    """One stand-in "pod": its volumes are directories, its log a file."""

    root: Path
    hostname: str
    port: int
    bin_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> str:
        path = self.root / "mysqld.log"
        return path.read_text() if path.exists() else ""

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": f"{self.bin_dir}:{os.environ['PATH']}",
            "HOSTNAME": self.hostname,
            "MYSQL_DATADIR": str(self.root / "data"),
            "MYSQL_CONF_DIR": str(self.root / "conf"),
            "MYSQL_INITDB_DIR": str(self.root / "initdb"),
            "MYSQL_TCP_PORT": str(self.port),
            "MYSQL_ROOT_PASSWORD": "secret",
            **extra,
        }

    def configure(self, source_port: int) -> None:
        """The operator's init container, with its paths mapped into this pod's directories (and
        the source port of the primary on this host: pods all listen on 3306, processes cannot)."""
        for d in ("conf", "initdb"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        script = (
            replication.CONFIGURE_SCRIPT.replace(replication.CONF_DIR, str(self.root / "conf"))
            .replace(replication.INITDB_DIR, str(self.root / "initdb"))
            .replace("SOURCE_PORT=3306", f"SOURCE_PORT={source_port}")
        )
        subprocess.run(["sh", "-c", script], env=self.env(), check=True)

    def start(self, primary_host: str = "") -> None:
        log = open(self.root / "mysqld.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [str(self.bin_dir / "mysqld")], env=self.env(PRIMARY_HOST=primary_host), stdout=log, stderr=log
        )
        log.close()

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=10)

    def mysql(self, sql: str) -> str:
        out = subprocess.run(
            [str(self.bin_dir / "mysql"), "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "-e", sql],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout

    def alive(self) -> None:
        ping = [str(self.bin_dir / "mysqladmin"), "ping", "-h", "127.0.0.1", "-P", str(self.port)]
        assert subprocess.run(ping, capture_output=True).returncode == 0, self.log


@pytest.fixture
def pods(tmp_path: Path, bin_dir: Path) -> Iterator[list[Pod]]:
    made: list[Pod] = []
    yield made
    for pod in made:
        if pod.proc is not None and pod.proc.poll() is None:
            pod.proc.kill()
            pod.proc.wait()


def new_pod(pods: list[Pod], tmp_path: Path, bin_dir: Path, ordinal: int) -> Pod:
    pod = Pod(tmp_path / f"pod-{ordinal}", f"sample-mysql-{ordinal}", free_port(), bin_dir)
    pods.append(pod)
    return pod


def replica_status(pod: Pod) -> dict[str, str]:
    lines = pod.mysql("SHOW REPLICA STATUS").splitlines()
    return dict(line.split(": ", 1) for line in lines)


def test_replica_is_configured_by_the_operators_init_step_and_reaches_its_primary(
    pods: list[Pod], tmp_path: Path, bin_dir: Path
) -> None:
    primary, replica = (new_pod(pods, tmp_path, bin_dir, i) for i in (0, 1))
    primary.configure(source_port=primary.port)
    assert not list((primary.root / "initdb").iterdir()), "pod 0 is the primary: no replica script"
    primary.start()
    eventually(primary.alive, timeout=10)
    assert primary.mysql("SELECT @@server_id").strip() == "100"
    assert primary.mysql("SELECT @@read_only").strip() == "OFF"
    assert replica_status(primary) == {}

    replica.configure(source_port=primary.port)
    replica.start(primary_host="127.0.0.1")
    eventually(replica.alive, timeout=10)
    assert replica.mysql("SELECT @@server_id").strip() == "101"
    assert replica.mysql("SELECT @@super_read_only").strip() == "ON"

    def io_running() -> None:
        status = replica_status(replica)
        assert status.get("Replica_IO_Running") == "Yes", status

    eventually(io_running, timeout=10)
    assert replica_status(replica)["Source_Host"] == "127.0.0.1"
    assert "replica.sh" in replica.log and "connected, IO thread running" in replica.log

    # A restart keeps the datadir: the init script does not run again, and what it persisted holds.
    assert replica.stop() == 0
    assert "clean shutdown" in (replica.root / "data" / "shutdown.state").read_text()
    replica.start(primary_host="127.0.0.1")
    eventually(replica.alive, timeout=10)
    eventually(io_running, timeout=10)
    assert replica.log.count("running ") == 1, replica.log
    assert replica.mysql("SELECT @@read_only").strip() == "ON"

    # The primary gone: the replica says so and keeps trying, as a real IO thread does.
    assert primary.stop() == 0

    def connecting() -> None:
        assert replica_status(replica)["Replica_IO_Running"] == "Connecting"

    eventually(connecting, timeout=10)
    assert "cannot reach the source" in replica.log


def test_a_failing_init_script_stops_mysqld_as_the_entrypoint_does(
    pods: list[Pod], tmp_path: Path, bin_dir: Path
) -> None:
    pod = new_pod(pods, tmp_path, bin_dir, 1)
    (pod.root / "initdb").mkdir(parents=True)
    (pod.root / "initdb" / "broken.sh").write_text("docker_process_sql <<SQL\nSTART REPLICA;\nSQL\n")
    pod.start()
    assert pod.proc is not None
    assert pod.proc.wait(timeout=10) == 1
    assert "START REPLICA before CHANGE REPLICATION SOURCE TO" in pod.log
    assert "init script failed" in pod.log
