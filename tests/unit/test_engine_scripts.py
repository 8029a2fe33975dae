"""The database pod's shell scripts (replication.py), run for real by a POSIX shell in a temporary
directory: the `configure` init container, the server container's start, the readiness probe and
the `replication` sidecar.

The images run these with their own `sh` (bash on MySQL's, dash on MariaDB's Ubuntu), so each runs
under dash and under bash in POSIX mode. The database is a fake client on PATH (`mysql` and
`mariadb`): it records every call (program, arguments, MYSQL_PWD) and answers from scripted rules. A
fake `sleep` returns at once and records its argument; asked for the primary's idle hour, or for a
replica's recheck pause more than FAKE_RECHECKS times, it sends TERM to the script, whose trap ends it
with 0 — so a sidecar run ends exactly when the script idles (after FAKE_RECHECKS rechecks).
A fake `docker-entrypoint.sh` (the image's entrypoint, which the server's start hands over to) prints
what it was given.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mysql_operator.database import replication
from mysql_operator.database.engines import MARIADB, MYSQL, Engine

SHELLS = [["dash"], ["bash", "--posix"]]
SHELL_IDS = ["dash", "bash"]
ENGINES = [MYSQL, MARIADB]
PRIMARY_HOST = "db-mysql-0.db-headless.ns.svc"
ROOT_PASSWORD = "root-secret"
REPLICATION_PASSWORD = "repl-secret"
RUN_LIMIT = 30
"""Seconds before a run is called hung: a safety net for a broken script, never an assertion."""

FAKE_CLIENT = """#!{python}
import json, os, sys
state_path = os.environ["FAKE_DB_STATE"]
with open(state_path) as f:
    rules = json.load(f)
args = sys.argv[1:]
sql = args[args.index("-e") + 1] if "-e" in args else sys.stdin.read()
host = args[args.index("-h") + 1] if "-h" in args else "localhost"
call = {{"prog": os.path.basename(sys.argv[0]), "args": args, "sql": sql, "host": host,
        "pwd": os.environ.get("MYSQL_PWD")}}
with open(os.environ["FAKE_DB_CALLS"], "a") as f:
    f.write(json.dumps(call) + "\\n")
for rule in rules:
    if sql.startswith(rule["sql"]) and rule.get("host", host) == host and rule.get("times", 1) > 0:
        if "times" in rule:
            rule["times"] -= 1
            with open(state_path, "w") as f:
                json.dump(rules, f)
        sys.stdout.write(rule.get("stdout", ""))
        sys.stderr.write(rule.get("stderr", ""))
        sys.exit(rule.get("exit", 0))
"""

_RECHECK = replication.RECHECK_SECONDS
FAKE_SLEEP = f"""#!/bin/sh
echo "$1" >> "$FAKE_SLEEPS"
case "$1" in
  3600) kill -TERM "$PPID" ;;
  {_RECHECK}) [ "$(grep -cx {_RECHECK} "$FAKE_SLEEPS")" -gt "${{FAKE_RECHECKS:-0}}" ] && kill -TERM "$PPID" ;;
esac
exit 0
"""

FAKE_ENTRYPOINT = """#!/bin/sh
echo "entrypoint: $*"
"""

ACCESS_DENIED = "ERROR 1045 (28000): Access denied for user 'root'@'localhost' (using password: YES)\n"
CANNOT_CONNECT = "ERROR 2003 (HY000): Can't connect to server on '127.0.0.1' (111)\n"


def status_output(engine: Engine, io: str, sql: str) -> str:
    """`SHOW REPLICA STATUS\\G` (MySQL) or `SHOW SLAVE STATUS\\G` (MariaDB) as the client prints it."""
    if engine is MYSQL:
        return (
            "*************************** 1. row ***************************\n"
            "             Replica_IO_State: Waiting for source to send event\n"
            f"                  Source_Host: {PRIMARY_HOST}\n"
            f"           Replica_IO_Running: {io}\n"
            f"          Replica_SQL_Running: {sql}\n"
            "    Replica_SQL_Running_State: Replica has read all relay log; waiting for more updates\n"
        )
    return (
        "*************************** 1. row ***************************\n"
        "                Slave_IO_State: Waiting for master to send event\n"
        f"                   Master_Host: {PRIMARY_HOST}\n"
        f"              Slave_IO_Running: {io}\n"
        f"             Slave_SQL_Running: {sql}\n"
        "       Slave_SQL_Running_State: Slave has read all relay log; waiting for more updates\n"
    )


@dataclass
class Run:
    code: int
    stdout: str
    calls: list[dict[str, Any]]
    sleeps: list[str]

    def sql(self, prog: str | None = None) -> list[str]:
        return [c["sql"] for c in self.calls if prog is None or c["prog"] == prog]


@dataclass
class Pod:
    """A pod's volumes as directories, its database as the fake client, its shell as `shell`."""

    root: Path
    shell: list[str]
    rules: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for d in ("data", "conf", "initdb", "bin"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        client = FAKE_CLIENT.format(python=sys.executable)
        fakes = (
            ("mysql", client),
            ("mariadb", client),
            ("sleep", FAKE_SLEEP),
            (replication.ENTRYPOINT, FAKE_ENTRYPOINT),
        )
        for name, body in fakes:
            path = self.root / "bin" / name
            path.write_text(body)
            path.chmod(0o755)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def initdb(self) -> Path:
        return self.root / "initdb"

    def configure_script(self, engine: Engine) -> str:
        return replication.configure_script(
            engine, str(self.data), conf_dir=str(self.conf), initdb_dir=str(self.initdb)
        )

    def start_script(self, engine: Engine) -> str:
        return replication.start_script(engine, str(self.data), conf_dir=str(self.conf))

    def boot(self, engine: Engine, hostname: str) -> Run:
        """A new pod: `configure`, then the server container's start (both outputs, the last code)."""
        configured = self.run(self.configure_script(engine), hostname)
        assert configured.code == 0, configured.stdout
        return self.start(engine, hostname, configured.stdout)

    def start(self, engine: Engine, hostname: str, before: str = "") -> Run:
        """The server container (re)started: its command, as the pod spec gives it."""
        started = self.run(self.start_script(engine), hostname, args=["sh", engine.server])
        return Run(started.code, before + started.stdout, started.calls, started.sleeps)

    def run(
        self, script: str, hostname: str, env: dict[str, str] | None = None, args: list[str] | None = None
    ) -> Run:
        calls, sleeps, state = self.root / "calls.jsonl", self.root / "sleeps", self.root / "rules.json"
        for path in (calls, sleeps):
            path.write_text("")
        state.write_text(json.dumps(self.rules))
        env = {
            "PATH": f"{self.root / 'bin'}:{os.environ['PATH']}",
            "HOSTNAME": hostname,
            "MYSQL_ROOT_PASSWORD": ROOT_PASSWORD,
            "REPLICATION_PASSWORD": REPLICATION_PASSWORD,
            "REPLICATION_USER": replication.REPLICATION_USER,
            "PRIMARY_HOST": PRIMARY_HOST,
            "FAKE_DB_STATE": str(state),
            "FAKE_DB_CALLS": str(calls),
            "FAKE_SLEEPS": str(sleeps),
            **(env or {}),
        }
        done = subprocess.run(
            [*self.shell, "-c", script, *(args or [])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=RUN_LIMIT,
            check=False,
        )
        return Run(
            done.returncode,
            done.stdout,
            [json.loads(line) for line in calls.read_text().splitlines()],
            sleeps.read_text().split(),
        )

    def source_init_script(self) -> None:
        """What the image's entrypoint does with a non-executable *.sh of the initdb dir: source it
        with `set -e`, once, at the end of the datadir's first init."""
        (script,) = self.initdb.iterdir()
        subprocess.run([*self.shell, "-ec", '. "$1"', "sh", str(script)], check=True, timeout=RUN_LIMIT)


@pytest.fixture(params=SHELLS, ids=SHELL_IDS)
def pod(request: pytest.FixtureRequest, tmp_path: Path) -> Pod:
    if shutil.which(request.param[0]) is None:
        pytest.skip(f"{request.param[0]} is not installed")
    return Pod(tmp_path / "pod", request.param)


def cnf(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser()
    parser.read_string(path.read_text())
    assert parser.sections() == ["mysqld"], path.read_text()
    return dict(parser["mysqld"])


def half_initialised(data: Path) -> None:
    """A datadir whose first init was killed: files, no marker."""
    (data / "mysql").mkdir()
    (data / "mysql" / "user.ibd").write_text("x")
    (data / "ibdata1").write_text("x")
    (data / "lost+found").mkdir()
    (data / "lost+found" / "#1234").write_text("kept")


# -- configure --------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_server_id_is_100_plus_the_ordinal_with_the_engines_gtid_config(pod: Pod, engine: Engine) -> None:
    run = pod.boot(engine, "db-mysql-2")
    assert run.code == 0, run.stdout
    expected = {"server-id": "102", **dict(line.split("=", 1) for line in engine.gtid_config)}
    assert cnf(pod.conf / "server.cnf") == expected


def test_a_replica_with_a_half_initialised_datadir_is_wiped_but_lost_and_found_survives(pod: Pod) -> None:
    half_initialised(pod.data)
    run = pod.boot(MYSQL, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert [p.name for p in pod.data.iterdir()] == ["lost+found"]
    assert (pod.data / "lost+found" / "#1234").read_text() == "kept"
    assert "mysqld: the datadir's first init did not finish" in run.stdout
    assert not (pod.conf / "replica.cnf").exists(), "read-only only once the init has run again"
    assert run.stdout.endswith("entrypoint: mysqld\n"), "then the image's entrypoint starts the server"
    assert (pod.conf / replication.WIPED_FLAG).exists(), "for the sidecar: point the new datadir"


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_server_restarted_after_a_cut_init_wipes_it_without_a_new_pod(pod: Pod, engine: Engine) -> None:
    # The kubelet restarts a crashed server container alone: init containers do not run again.
    run = pod.boot(engine, "db-mysql-1")
    assert run.code == 0 and "did not finish" not in run.stdout, run.stdout
    half_initialised(pod.data)  # the init phase, then the crash before its last script
    run = pod.start(engine, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert f"{engine.server}: the datadir's first init did not finish" in run.stdout
    assert [p.name for p in pod.data.iterdir()] == ["lost+found"]
    assert run.stdout.endswith(f"entrypoint: {engine.server}\n")


def test_a_replica_made_read_only_is_not_left_so_for_a_repeated_init(pod: Pod) -> None:
    (pod.conf / "replica.cnf").write_text("[mysqld]\nsuper-read-only=ON\n")  # from a finished init
    half_initialised(pod.data)  # ... whose marker is gone
    pod.boot(MYSQL, "db-mysql-1")
    assert not (pod.conf / "replica.cnf").exists(), "the init phase's own writes would be refused"


def test_the_primarys_datadir_is_never_wiped(pod: Pod) -> None:
    half_initialised(pod.data)
    run = pod.boot(MYSQL, "db-mysql-0")
    assert run.code == 0, run.stdout
    assert sorted(p.name for p in pod.data.iterdir()) == ["ibdata1", "lost+found", "mysql"]
    assert (pod.data / "mysql" / "user.ibd").exists()
    assert not list(pod.conf.glob("replica.cnf*")), "the primary is never read-only"


@pytest.mark.parametrize("marker", [replication.INITIALISED_MARKER, replication.LEGACY_INITIALISED])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_an_initialised_replica_is_read_only_at_once_and_kept(pod: Pod, engine: Engine, marker: str) -> None:
    half_initialised(pod.data)
    (pod.data / marker).write_text("")
    run = pod.boot(engine, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert cnf(pod.conf / "replica.cnf") == dict(line.split("=", 1) for line in engine.replica_config)
    assert (pod.data / "mysql" / "user.ibd").exists() and (pod.data / "ibdata1").exists()


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_fresh_replica_turns_read_only_when_the_last_init_script_runs(pod: Pod, engine: Engine) -> None:
    (pod.data / "lost+found").mkdir()
    run = pod.boot(engine, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert "first init did not finish" not in run.stdout, "an empty volume is not a broken init"
    assert not (pod.conf / replication.WIPED_FLAG).exists()
    assert not (pod.conf / "replica.cnf").exists(), "the init phase's own writes must not be refused"
    assert [p.name for p in pod.initdb.iterdir()] == ["zz-initialised.sh"]

    pod.source_init_script()  # the init phase ends
    assert (pod.data / replication.INITIALISED_MARKER).exists()
    assert cnf(pod.conf / "replica.cnf") == dict(line.split("=", 1) for line in engine.replica_config)

    (pod.data / "ibdata1").write_text("x")  # the server's data, then the pod is recreated
    for generated in pod.conf.iterdir():  # conf is an emptyDir: gone with the pod
        generated.unlink()
    run = pod.boot(engine, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert (pod.data / "ibdata1").exists(), "an initialised replica keeps its data"
    assert (pod.conf / "replica.cnf").exists()


def test_a_fresh_primary_is_marked_initialised_and_stays_writable(pod: Pod) -> None:
    run = pod.boot(MYSQL, "db-mysql-0")
    assert run.code == 0, run.stdout
    pod.source_init_script()
    assert (pod.data / replication.INITIALISED_MARKER).exists()
    assert not list(pod.conf.glob("replica.cnf*"))


# -- readiness probe --------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_probe_passes_when_the_primary_answers_an_authenticated_query(pod: Pod, engine: Engine) -> None:
    pod.rules = [{"sql": "SELECT 1", "stdout": "1\n"}]
    run = pod.run(replication.probe_script(engine), "db-mysql-0")
    assert run.code == 0, run.stdout
    (call,) = run.calls
    assert call["prog"] == engine.client
    assert (call["host"], call["pwd"]) == ("127.0.0.1", ROOT_PASSWORD)
    assert call["args"][call["args"].index("-u") + 1] == "root"


@pytest.mark.parametrize("hostname", ["db-mysql-0", "db-mysql-1"])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_probe_fails_when_the_client_does(pod: Pod, engine: Engine, hostname: str) -> None:
    pod.rules = [{"sql": "", "stderr": ACCESS_DENIED, "exit": 1}]
    run = pod.run(replication.probe_script(engine), hostname)
    assert run.code != 0, run.stdout
    assert run.calls, "the probe asked the server"


@pytest.mark.parametrize(
    ("io", "sql", "ready"),
    [("Yes", "Yes", True), ("No", "Yes", False), ("Yes", "No", False), ("Connecting", "Yes", False)],
)
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_is_ready_only_while_both_threads_run(
    pod: Pod, engine: Engine, io: str, sql: str, ready: bool
) -> None:
    pod.rules = [{"sql": engine.status_statement, "stdout": status_output(engine, io, sql)}]
    run = pod.run(replication.probe_script(engine), "db-mysql-1")
    assert (run.code == 0) is ready, run.stdout
    assert run.sql(engine.client) == [engine.status_statement]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_without_replication_is_not_ready(pod: Pod, engine: Engine) -> None:
    pod.rules = [{"sql": engine.status_statement, "stdout": ""}]
    run = pod.run(replication.probe_script(engine), "db-mysql-1")
    assert run.code != 0, run.stdout


def test_the_other_engines_spelling_is_accepted_too(pod: Pod) -> None:
    """MariaDB 10.5+ answers SHOW REPLICA STATUS too, still with Slave_* names."""
    pod.rules = [{"sql": MYSQL.status_statement, "stdout": status_output(MARIADB, "Yes", "Yes")}]
    assert pod.run(replication.probe_script(MYSQL), "db-mysql-1").code == 0


# -- replication sidecar ----------------------------------------------------------------------------


RECHECK = str(replication.RECHECK_SECONDS)


def sidecar(pod: Pod, engine: Engine, hostname: str, rechecks: int = 0) -> Run:
    """The sidecar until it idles: a primary's first idle hour, a replica's pause after `rechecks`
    later looks at its replication."""
    env = {"FAKE_RECHECKS": str(rechecks)}
    run = pod.run(replication.replication_script(engine, conf_dir=str(pod.conf)), hostname, env=env)
    assert run.code == 0, run.stdout
    idle = "3600" if hostname.endswith("-0") else RECHECK
    assert run.sleeps[-1] == idle, "the sidecar idles once its work is done"
    return run


def account_statements() -> list[str]:
    user, password = replication.REPLICATION_USER, REPLICATION_PASSWORD
    return [
        f"CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{password}';",
        f"ALTER USER '{user}'@'%' IDENTIFIED BY '{password}';",
        f"GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%';",
    ]


def statements(sql: str) -> list[str]:
    return [" ".join(s.split()) + ";" for s in sql.split(";") if s.strip()]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_sidecar_waits_for_the_server_then_ensures_the_replication_account(pod: Pod, engine: Engine) -> None:
    pod.rules = [{"sql": "SELECT 1", "stderr": CANNOT_CONNECT, "exit": 1, "times": 3}]
    run = sidecar(pod, engine, "db-mysql-0")
    assert run.sleeps == ["2", "2", "2", "3600"]
    *waits, account = run.calls
    assert [c["sql"] for c in waits] == ["SELECT 1"] * 4
    assert statements(account["sql"]) == account_statements()
    assert all(c["prog"] == engine.client for c in run.calls)
    assert {(c["host"], c["pwd"]) for c in run.calls} == {("127.0.0.1", ROOT_PASSWORD)}
    assert "account repl ready" in run.stdout


def test_sidecar_retries_the_account_until_it_is_made(pod: Pod) -> None:
    pod.rules = [{"sql": "CREATE USER", "stderr": "ERROR 1290 (HY000): read-only\n", "exit": 1, "times": 1}]
    run = sidecar(pod, MYSQL, "db-mysql-0")
    assert run.sleeps == ["5", "3600"]
    assert [statements(s)[0].split()[0] for s in run.sql()] == ["SELECT", "CREATE", "CREATE"]


def point_statements(engine: Engine, tls: int) -> list[str]:
    user, password = replication.REPLICATION_USER, REPLICATION_PASSWORD
    if engine is MYSQL:
        return [
            f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='{PRIMARY_HOST}', SOURCE_PORT=3306, "
            f"SOURCE_USER='{user}', SOURCE_PASSWORD='{password}', SOURCE_AUTO_POSITION=1, "
            f"SOURCE_SSL={tls}, GET_SOURCE_PUBLIC_KEY=1;",
            "START REPLICA;",
        ]
    return [
        f"CHANGE MASTER TO MASTER_HOST='{PRIMARY_HOST}', MASTER_PORT=3306, MASTER_USER='{user}', "
        f"MASTER_PASSWORD='{password}', MASTER_USE_GTID=slave_pos, MASTER_SSL={tls};",
        "START SLAVE;",
    ]


def ssl_rule(answer: str, **extra: Any) -> dict[str, Any]:
    return {"sql": "SELECT @@have_ssl", "host": PRIMARY_HOST, "stdout": f"{answer}\n", **extra}


def test_a_mysql_replica_without_replication_is_pointed_at_the_primary_over_tls(pod: Pod) -> None:
    pod.rules = [{"sql": MYSQL.status_statement, "stdout": ""}]
    run = sidecar(pod, MYSQL, "db-mysql-1")
    assert run.sql() == ["SELECT 1", MYSQL.status_statement, run.calls[-1]["sql"]]
    assert statements(run.calls[-1]["sql"]) == point_statements(MYSQL, tls=1)
    assert {(c["host"], c["pwd"]) for c in run.calls} == {("127.0.0.1", ROOT_PASSWORD)}
    assert f"replicating from {PRIMARY_HOST} (tls=1)" in run.stdout


@pytest.mark.parametrize(("have_ssl", "tls"), [("YES", 1), ("DISABLED", 0), ("NO", 0)])
def test_a_mariadb_replica_uses_tls_only_when_the_primary_has_it(pod: Pod, have_ssl: str, tls: int) -> None:
    pod.rules = [{"sql": MARIADB.status_statement, "stdout": ""}, ssl_rule(have_ssl)]
    run = sidecar(pod, MARIADB, "db-mysql-1")
    asked = [c for c in run.calls if c["host"] == PRIMARY_HOST]
    assert [(c["sql"], c["pwd"]) for c in asked] == [("SELECT @@have_ssl", REPLICATION_PASSWORD)]
    assert asked[0]["args"][asked[0]["args"].index("-u") + 1] == replication.REPLICATION_USER
    assert statements(run.calls[-1]["sql"]) == point_statements(MARIADB, tls)
    assert all(c["prog"] == "mariadb" for c in run.calls)


def test_a_mariadb_replica_waits_for_the_primarys_answer_before_choosing_tls(pod: Pod) -> None:
    """Until the primary's sidecar has made the account, the replica cannot log in to ask: that is
    no answer, not a primary without TLS."""
    denied = {
        "sql": "SELECT @@have_ssl",
        "host": PRIMARY_HOST,
        "stderr": ACCESS_DENIED,
        "exit": 1,
        "times": 2,
    }
    pod.rules = [{"sql": MARIADB.status_statement, "stdout": ""}, denied, ssl_rule("YES")]
    run = sidecar(pod, MARIADB, "db-mysql-1")
    assert run.sleeps == ["5", "5", RECHECK]
    (point,) = [s for s in run.sql() if s.startswith("CHANGE")]
    assert statements(point) == point_statements(MARIADB, tls=1)


@pytest.mark.parametrize("io", ["Yes", "No"])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_with_replication_configured_is_left_alone(pod: Pod, engine: Engine, io: str) -> None:
    """Running or stopped (by a human): the sidecar neither re-points nor restarts it."""
    pod.rules = [{"sql": engine.status_statement, "stdout": status_output(engine, io, io)}]
    run = sidecar(pod, engine, "db-mysql-1")
    assert run.sql() == ["SELECT 1", engine.status_statement]
    assert "already configured" in run.stdout


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_failed_status_query_is_asked_again_not_taken_for_no_replication(pod: Pod, engine: Engine) -> None:
    stopped = status_output(engine, "No", "No")
    pod.rules = [
        {"sql": engine.status_statement, "stderr": CANNOT_CONNECT, "exit": 1, "times": 1},
        {"sql": engine.status_statement, "stdout": stopped},
    ]
    run = sidecar(pod, engine, "db-mysql-1")
    assert run.sql() == ["SELECT 1", engine.status_statement, engine.status_statement]
    assert run.sleeps == ["5", RECHECK]


@pytest.mark.parametrize("password", ["", "it's", "back\\slash", "semi;colon", "new\nline"])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replication_password_that_would_need_quoting_is_refused_before_any_sql(
    pod: Pod, engine: Engine, password: str
) -> None:
    run = pod.run(
        replication.replication_script(engine), "db-mysql-0", env={"REPLICATION_PASSWORD": password}
    )
    assert run.code == 1 and "replication-password must be" in run.stdout, run.stdout
    assert run.calls == [], "no SQL may run with such a password"


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_whose_datadir_its_start_wiped_is_pointed_again(pod: Pod, engine: Engine) -> None:
    """The server restarted alone on a datadir its start wiped (same pod: the sidecar runs on). The
    start's flag makes the sidecar point the new datadir, once."""
    configured = status_output(engine, "Yes", "Yes")
    pod.rules = [
        {"sql": engine.status_statement, "stdout": configured, "times": 1},  # the sidecar's first look
        {"sql": engine.status_statement, "stderr": CANNOT_CONNECT, "exit": 1, "times": 1},  # re-init
        {"sql": engine.status_statement, "stdout": "", "times": 1},  # up again, on a new datadir
        {"sql": engine.status_statement, "stdout": configured},
        ssl_rule("YES"),
    ]
    half_initialised(pod.data)
    (pod.conf / "replica.cnf.pending").write_text("[mysqld]\n")
    assert pod.start(engine, "db-mysql-1").code == 0  # the wipe, before the sidecar's second look
    assert (pod.conf / replication.WIPED_FLAG).exists()
    run = sidecar(pod, engine, "db-mysql-1", rechecks=2)
    assert "already configured" in run.stdout
    (point,) = [s for s in run.sql() if s.startswith("CHANGE")]
    assert statements(point) == point_statements(engine, tls=1)
    assert run.stdout.count(f"replicating from {PRIMARY_HOST}") == 1
    assert not (pod.conf / replication.WIPED_FLAG).exists(), "handled once"
    assert run.sleeps == [RECHECK, "5", RECHECK, RECHECK]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_source_someone_removed_or_stopped_is_left_so(pod: Pod, engine: Engine) -> None:
    """RESET REPLICA ALL (a rebuild, a promotion) leaves no source; STOP leaves a stopped one. Without
    a wipe by the server's start, the sidecar re-adds and restarts nothing, look after look."""
    pod.rules = [
        {"sql": engine.status_statement, "stdout": status_output(engine, "No", "No"), "times": 1},
        {"sql": engine.status_statement, "stdout": ""},
    ]
    run = sidecar(pod, engine, "db-mysql-1", rechecks=3)
    assert run.sql() == ["SELECT 1", engine.status_statement]
    assert run.sleeps == [RECHECK] * 4
