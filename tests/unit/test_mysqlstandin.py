"""The MySQL stand-in of the operator's test kit (tests/kit: the image offline kind clusters run instead
of mysql), run on this host the way a pod runs it: the operator's own `configure` script writes conf.d
and the last initdb script, the stand-in's mysqld runs that script on first start, the operator's
`replication` sidecar script sets up the account and the replica through the stand-in's `mysql`, and
the operator's readiness probe judges the result. What the kind E2E test can only see in pod logs is
checked here statement by statement (built with `go` from tests/kit/mysqlstandin, as the kit's image
build does)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envtest import eventually
from mysql_operator.database import replication
from mysql_operator.database.engines import MYSQL

KIT = Path(__file__).resolve().parents[1] / "kit"
_spec = importlib.util.spec_from_file_location("standins", KIT / "standins.py")
assert _spec and _spec.loader
standins = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(KIT))  # the kit's scripts import their siblings, as when run from their folder
try:
    _spec.loader.exec_module(standins)
finally:
    sys.path.remove(str(KIT))


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = standins.binary(progress=lambda _: None)
    links = tmp_path_factory.mktemp("standin-bin")
    for name in ("mysqld", "mysqladmin", "mysql"):  # the image's symlinks: argv[0] picks the tool
        (links / name).symlink_to(binary)
    # The sidecar's pause after its first look at its role ends it (TERM to the script, whose trap
    # exits 0): one look is one pass of its work.
    sleep = links / "sleep"
    real, idle = shutil.which("sleep"), str(replication.RECHECK_SECONDS)
    sleep.write_text(f'#!/bin/sh\ncase "$1" in {idle}) kill -TERM "$PPID" ;; *) exec {real} "$1" ;; esac\n')
    sleep.chmod(0o755)
    entrypoint = links / replication.ENTRYPOINT  # as the stand-in image has it
    entrypoint.write_text('#!/bin/sh\nexec "$@"\n')
    entrypoint.chmod(0o755)
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
            "SERVER_VERSION": "8.0",
            "CLUSTER_NAME": "sample",
            "CLUSTER_UID": "uid-1",
            "UPGRADE_FROM": "",
            **extra,
        }

    def dirs(self) -> dict[str, str]:
        return {d: str(self.root / d) for d in ("data", "conf", "initdb", "run", "podinfo", "tls")}

    def label(self, role: str) -> None:
        """The downward API's labels file, as the kubelet writes it from the operator's label."""
        (self.root / "podinfo").mkdir(parents=True, exist_ok=True)
        (self.root / "podinfo" / "labels").write_text(f'{replication.ROLE_LABEL}="{role}"\n')

    def configure(self) -> None:
        """The operator's init container, with its paths mapped into this pod's directories."""
        d = self.dirs()
        for path in d.values():
            Path(path).mkdir(parents=True, exist_ok=True)
        for name in ("ca.crt", "tls.crt", "tls.key"):
            (self.root / "tls" / name).write_text(name)
        script = replication.configure_script(
            MYSQL,
            d["data"],
            conf_dir=d["conf"],
            initdb_dir=d["initdb"],
            run_dir=d["run"],
            tls_source_dir=d["tls"],
            termination_log=str(self.root / "termination-log"),
        )
        subprocess.run(["sh", "-c", script], env=self.env(), check=True, timeout=120)

    def sidecar(self, primary_port: int) -> str:
        """The operator's replication sidecar for one look at its role; its output. The primary is at
        127.0.0.1:`primary_port` on this host (pods all listen on 3306, processes cannot)."""
        d = self.dirs()
        script = replication.replication_script(
            MYSQL, data_dir=d["data"], conf_dir=d["conf"], run_dir=d["run"], podinfo_dir=d["podinfo"]
        ).replace("SOURCE_PORT=3306", f"SOURCE_PORT={primary_port}")
        env = self.env(
            PRIMARY_HOST="127.0.0.1", REPLICATION_USER=replication.REPLICATION_USER, REPLICATION_PASSWORD="r"
        )
        done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def probe(self) -> None:
        """The operator's readiness probe passes."""
        assert self.probed() == 0, self.log

    def probed(self) -> int:
        d = self.dirs()
        script = replication.probe_script(MYSQL, run_dir=d["run"], podinfo_dir=d["podinfo"])
        probe = subprocess.run(["sh", "-c", script], env=self.env(), capture_output=True, timeout=60)
        return probe.returncode

    def start(self) -> None:
        """The server container's command, handing over to the image's entrypoint as in the image."""
        d = self.dirs()
        Path(d["conf"]).mkdir(parents=True, exist_ok=True)  # an emptyDir: there in every pod
        start = replication.start_script(MYSQL, d["data"], conf_dir=d["conf"], podinfo_dir=d["podinfo"])
        command = ["sh", "-c", start, "sh", MYSQL.server]
        log = open(self.root / "mysqld.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(command, env=self.env(), stdout=log, stderr=log)
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
            timeout=60,
        )
        return out.stdout

    def alive(self) -> None:
        ping = [str(self.bin_dir / "mysqladmin"), "ping", "-h", "127.0.0.1", "-P", str(self.port)]
        assert subprocess.run(ping, capture_output=True, timeout=60).returncode == 0, self.log


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


def test_replica_is_configured_by_the_operators_scripts_and_reaches_its_primary(
    pods: list[Pod], tmp_path: Path, bin_dir: Path
) -> None:
    primary, replica = (new_pod(pods, tmp_path, bin_dir, i) for i in (0, 1))
    primary.label("primary")
    primary.configure()
    assert [p.name for p in (primary.root / "initdb").iterdir()] == ["zz-initialised.sh"]
    primary.start()
    eventually(primary.alive, timeout=10)
    assert (primary.root / "data" / replication.INITIALISED_MARKER).exists(), primary.log
    first_id = int(primary.mysql("SELECT @@server_id"))
    assert first_id % 1000 == 100 and first_id > 1000, "a new datadir's own, ordinal 0's"
    assert primary.mysql("SELECT @@read_only").strip() == "1", "every server starts read-only"
    assert primary.probed() != 0, "labelled primary but read-only: not ready"
    assert replica_status(primary) == {}
    said = primary.sidecar(primary.port)
    assert "writable: this pod is labelled primary" in said and "account repl ready" in said
    assert primary.mysql("SELECT @@read_only").strip() == "0"
    primary.probe()

    replica.label("replica")
    replica.configure()
    replica.start()
    eventually(replica.alive, timeout=10)
    replica_id = int(replica.mysql("SELECT @@server_id"))
    assert replica_id % 1000 == 101 and replica_id > 1000
    assert replica.mysql("SELECT @@super_read_only").strip() == "1", "readonly.cnf, from the init's end on"
    assert replica_status(replica) == {}, "replication is the sidecar's to set up"
    assert "replicating from 127.0.0.1" in replica.sidecar(primary.port)

    def io_running() -> None:
        status = replica_status(replica)
        assert status.get("Replica_IO_Running") == "Yes", status

    eventually(io_running, timeout=10)
    assert replica_status(replica)["Source_Host"] == "127.0.0.1"
    assert "zz-initialised.sh" in replica.log and "connected, IO thread running" in replica.log
    replica.probe()

    # The pod recreated (conf is an emptyDir), its datadir kept: read-only at once, the init scripts
    # do not run again, replication resumes as it was, and the sidecar leaves it alone.
    assert replica.stop() == 0
    assert "clean shutdown" in (replica.root / "data" / "shutdown.state").read_text()
    shutil.rmtree(replica.root / "conf")
    shutil.rmtree(replica.root / "initdb")
    replica.configure()
    replica.start()
    eventually(replica.alive, timeout=10)
    eventually(io_running, timeout=10)
    assert replica.log.count("running ") == 1, replica.log
    assert replica.mysql("SELECT @@read_only").strip() == "1"
    assert int(replica.mysql("SELECT @@server_id")) == replica_id, "the datadir's id, recorded at its init"
    assert "already configured" in replica.sidecar(primary.port)
    replica.probe()

    # The primary gone: the replica says so and keeps trying, as a real IO thread does, and is unready.
    assert primary.stop() == 0

    def connecting() -> None:
        assert replica_status(replica)["Replica_IO_Running"] == "Connecting"

    eventually(connecting, timeout=10)
    assert "cannot reach the source" in replica.log
    assert replica.probed() != 0


def test_the_server_answers_over_tcp_only_after_its_init_phase(
    pods: list[Pod], tmp_path: Path, bin_dir: Path
) -> None:
    """As the real image (networking off while it initialises): a probe or sidecar cannot act early."""
    pod = new_pod(pods, tmp_path, bin_dir, 1)
    (pod.root / "initdb").mkdir(parents=True)
    # The init script asks over TCP, as a probe would, then over the socket, as the entrypoint does.
    (pod.root / "initdb" / "early.sh").write_text(
        'if mysql -h 127.0.0.1 -e "SELECT 1"; then echo "tcp answered"; fi\n'
        "docker_process_sql <<SQL\nSET PERSIST early = ON;\nSQL\n"
    )
    pod.start()
    eventually(pod.alive, timeout=10)
    assert "tcp answered" not in pod.log and "initializing" in pod.log, pod.log
    assert pod.mysql("SELECT @@early").strip() == "1", "a switch reads as 1, as on the real server"


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
