"""The database pod's shell scripts (database/replication.py) and the operator's exec actions
(database/actions.py), run for real in a temporary directory, under the shells the images run them with:
dash (/bin/sh of Debian's and Ubuntu's images) and busybox sh. `make script-shells` installs both; a
missing one fails the test naming that command (pytest changes nothing on the machine).

The database is a fake client on PATH (`mysql` and `mariadb`): it records every call (program,
arguments, the SQL from -e or its stdin, the option file it was given) and answers from scripted rules.
Every other program the scripts run goes through a recording shim (its argv, then the real program), so
`test_no_password_is_ever_an_argument` sees the argv of every process a script starts. A fake `sleep`
returns at once and records its argument; asked for the sidecar's recheck pause more than FAKE_RECHECKS
times, it sends TERM to the script, whose trap ends it with 0.
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

import pod_shells
import pytest

from mysql_operator.database import actions, replication
from mysql_operator.database.engines import MARIADB, MYSQL, Engine

SHELLS = {"dash": ["dash"], "busybox": ["busybox", "sh"]}
ENGINES = [MYSQL, MARIADB]
PRIMARY_HOST = "db-primary.ns.svc"
ROOT_PASSWORD = "root-Secret_1"
REPLICATION_PASSWORD = "repl-Secret_2"
RUN_LIMIT = 30
"""Seconds before a run is called hung: a safety net for a broken script, never an assertion."""
RECHECK = str(replication.RECHECK_SECONDS)
RECORDED = (
    "sed", "cp", "rm", "find", "ls", "grep", "touch", "chmod", "chown", "id", "cat", "mkdir", "wc", "mv",
)  # fmt: skip
"""Programs the scripts run (shimmed to record their argv); builtins (printf, echo, [) start no process."""

FAKE_CLIENT = """#!{python}
import json, os, sys
state_path = os.environ["FAKE_DB_STATE"]
with open(state_path) as f:
    rules = json.load(f)
args = sys.argv[1:]
defaults = args[0].split("=", 1)[1] if args and args[0].startswith("--defaults-extra-file=") else None
sql = args[args.index("-e") + 1] if "-e" in args else sys.stdin.read()
host = args[args.index("-h") + 1] if "-h" in args else None
if host is None and defaults and os.path.exists(defaults):
    for line in open(defaults):
        if line.startswith("host="):
            host = line.split("=", 1)[1].strip()
call = {{"prog": os.path.basename(sys.argv[0]), "args": args, "sql": sql, "host": host,
        "defaults": defaults, "pwd": os.environ.get("MYSQL_PWD")}}
with open(os.environ["FAKE_DB_CALLS"], "a") as f:
    f.write(json.dumps(call) + "\\n")
for rule in rules:
    if sql.startswith(rule["sql"]) and rule.get("times", 1) > 0:
        if "times" in rule:
            rule["times"] -= 1
            with open(state_path, "w") as f:
                json.dump(rules, f)
        out = rule.get("stdout", "")
        if "-N" in args and sql.rstrip().endswith("\\\\G"):
            # As the real clients: a vertical row without column names prints its values only.
            out = "".join(l.split(": ", 1)[1] if ": " in l and "***" not in l else l
                          for l in out.splitlines(True))
        sys.stdout.write(out)
        sys.stderr.write(rule.get("stderr", ""))
        sys.exit(rule.get("exit", 0))
"""

FAKE_SLEEP = f"""#!/bin/sh
echo "$1" >> "$FAKE_SLEEPS"
if [ "$1" = {RECHECK} ] && [ "$(grep -cx {RECHECK} "$FAKE_SLEEPS")" -gt "${{FAKE_RECHECKS:-0}}" ]; then
  kill -TERM "$PPID"
fi
exit 0
"""

FAKE_ENTRYPOINT = """#!/bin/sh
echo "entrypoint: $*"
"""

SHIM = """#!/bin/sh
for arg in "$0" "$@"; do printf '%s\\037' "$arg"; done >> "$ARGV_LOG"
printf '\\n' >> "$ARGV_LOG"
exec {real} "$@"
"""

CANNOT_CONNECT = "ERROR 2003 (HY000): Can't connect to server on '127.0.0.1' (111)\n"


def status_output(engine: Engine, io: str, sql: str, **extra: str) -> str:
    """`SHOW REPLICA STATUS\\G` (MySQL) or `SHOW SLAVE STATUS\\G` (MariaDB) as the client prints it."""
    prefix, source = ("Replica", "Source") if engine is MYSQL else ("Slave", "Master")
    lines = [
        "*************************** 1. row ***************************",
        f"             {prefix}_IO_State: Waiting for {source.lower()} to send event",
        f"                  {source}_Host: {PRIMARY_HOST}",
        f"           {prefix}_IO_Running: {io}",
        f"          {prefix}_SQL_Running: {sql}",
        *(f"  {k}: {v}" for k, v in extra.items()),
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Run:
    code: int
    stdout: str
    calls: list[dict[str, Any]]
    sleeps: list[str]
    argvs: list[list[str]]

    def sql(self) -> list[str]:
        return [c["sql"] for c in self.calls]


@dataclass
class Pod:
    """A pod's volumes as directories, its database as the fake client, its shell as `shell`."""

    root: Path
    shell: list[str]
    rules: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for d in ("data", "conf", "initdb", "run", "podinfo", "tls", "bin"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        for name in ("ca.crt", "tls.crt", "tls.key"):
            (self.root / "tls" / name).write_text(f"-----{name}-----\n")
        client = FAKE_CLIENT.format(python=sys.executable)
        fakes = [("mysql", client), ("mariadb", client), ("sleep", FAKE_SLEEP)]
        fakes.append((replication.ENTRYPOINT, FAKE_ENTRYPOINT))
        for name in RECORDED:
            real = shutil.which(name)
            if real:
                fakes.append((name, SHIM.format(real=real)))
        for name, body in fakes:
            path = self.root / "bin" / name
            path.write_text(body)
            path.chmod(0o755)

    def __getattr__(self, name: str) -> Path:
        if name in ("data", "conf", "initdb", "run", "podinfo", "tls"):
            return self.root / name
        raise AttributeError(name)

    def label(self, role: str | None) -> None:
        """The downward API's labels file, as the kubelet writes it."""
        lines = ['app.kubernetes.io/name="mysql"']
        if role:
            lines.append(f'{replication.ROLE_LABEL}="{role}"')
        (self.podinfo / "labels").write_text("\n".join(sorted(lines)) + "\n")

    def annotate(self, *, ran: bool) -> None:
        """The downward API's annotations file: the operator's word that the cluster has run."""
        lines = ['kubectl.kubernetes.io/default-container="mysql"']
        if ran:
            lines.append(f'{replication.RAN_ANNOTATION}="true"')
        (self.podinfo / "annotations").write_text("\n".join(sorted(lines)) + "\n")

    @property
    def fresh(self) -> bool:
        return (self.data / replication.FRESH_MARKER).exists()

    def configure(self, engine: Engine) -> str:
        return replication.configure_script(
            engine,
            str(self.data),
            conf_dir=str(self.conf),
            initdb_dir=str(self.initdb),
            run_dir=str(self.run),
            tls_source_dir=str(self.tls),
            termination_log=str(self.root / "termination-log"),
        )

    def start_script(self, engine: Engine) -> str:
        return replication.start_script(
            engine, str(self.data), conf_dir=str(self.conf), podinfo_dir=str(self.podinfo)
        )

    def probe(self, engine: Engine) -> str:
        return replication.probe_script(engine, run_dir=str(self.run), podinfo_dir=str(self.podinfo))

    def sidecar_script(self, engine: Engine) -> str:
        return replication.replication_script(
            engine,
            data_dir=str(self.data),
            conf_dir=str(self.conf),
            run_dir=str(self.run),
            podinfo_dir=str(self.podinfo),
        )

    def boot(self, engine: Engine, hostname: str, env: dict[str, str] | None = None) -> Run:
        """A new pod: `configure`, then the server container's start (both outputs, the last code)."""
        configured = self.run_script(self.configure(engine), hostname, env=env)
        assert configured.code == 0, configured.stdout
        started = self.start(engine, hostname)
        return Run(
            started.code, configured.stdout + started.stdout, started.calls, started.sleeps, configured.argvs
        )

    def start(self, engine: Engine, hostname: str) -> Run:
        """The server container (re)started: its command, as the pod spec gives it."""
        return self.run_script(self.start_script(engine), hostname, args=["sh", engine.server])

    def run_script(
        self, script: str, hostname: str, env: dict[str, str] | None = None, args: list[str] | None = None
    ) -> Run:
        calls, sleeps, argv = self.root / "calls.jsonl", self.root / "sleeps", self.root / "argv.log"
        state = self.root / "rules.json"
        for path in (calls, sleeps, argv):
            path.write_text("")
        state.write_text(json.dumps(self.rules))
        env = {
            "PATH": f"{self.root / 'bin'}:{os.environ['PATH']}",
            "HOSTNAME": hostname,
            "MYSQL_ROOT_PASSWORD": ROOT_PASSWORD,
            "REPLICATION_PASSWORD": REPLICATION_PASSWORD,
            "REPLICATION_USER": replication.REPLICATION_USER,
            "PRIMARY_HOST": PRIMARY_HOST,
            "SERVER_VERSION": "10.11",
            "CLUSTER_NAME": "db",
            "CLUSTER_UID": "uid-1",
            "UPGRADE_FROM": "",
            "FAKE_DB_STATE": str(state),
            "FAKE_DB_CALLS": str(calls),
            "FAKE_SLEEPS": str(sleeps),
            "ARGV_LOG": str(argv),
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
        argvs = [line.split("\x1f")[:-1] for line in argv.read_text().splitlines() if line]
        return Run(
            done.returncode,
            done.stdout,
            [json.loads(line) for line in calls.read_text().splitlines()],
            sleeps.read_text().split(),
            argvs,
        )

    def source_init_script(self) -> None:
        """What the image's entrypoint does with a non-executable *.sh of the initdb dir: source it
        with `set -e`, once, at the end of the datadir's first init."""
        (script,) = self.initdb.iterdir()
        subprocess.run([*self.shell, "-ec", '. "$1"', "sh", str(script)], check=True, timeout=RUN_LIMIT)


@pytest.fixture(params=list(SHELLS), ids=list(SHELLS))
def pod(request: pytest.FixtureRequest, tmp_path: Path) -> Pod:
    name, *args = SHELLS[request.param]
    return Pod(tmp_path / "pod", [pod_shells.require(name), *args])


def cnf(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(allow_no_value=True)
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


def statements(sql: str) -> list[str]:
    return [" ".join(s.split()) + ";" for s in sql.split(";") if s.strip()]


# -- configure --------------------------------------------------------------------------------------


def server_id(pod: Pod) -> int:
    return int(cnf(pod.conf / replication.SERVER_ID_CNF)["server-id"])


def test_a_new_datadirs_server_id_is_its_own_and_kept_data_keeps_the_one_it_had(pod: Pod) -> None:
    """A replica skips events of its own server-id: a datadir made anew on a pod must not take the id
    of the events its predecessor wrote. Kept data keeps its recorded id, or the ordinal's from before."""
    pod.boot(MARIADB, "db-mysql-2")
    first = server_id(pod)
    assert first % 1000 == 102 and first > 1000, first
    pod.source_init_script()
    assert identity(pod.data)["server-id"] == str(first), "recorded when its init ends"
    pod.start(MARIADB, "db-mysql-2")  # restarted on its own data
    assert server_id(pod) == first

    # Emptied in place and initialised anew by the same pod (a container restart: no configure).
    for child in pod.data.iterdir():
        child.unlink()
    ids = set()
    for _ in range(3):
        pod.start(MARIADB, "db-mysql-2")
        ids.add(server_id(pod))
    assert first not in ids and all(i % 1000 == 102 for i in ids), ids

    # Data from before server-ids were recorded: the ordinal's, as it always was, and recorded now.
    half_initialised(pod.data)
    (pod.data / replication.INITIALISED_MARKER).write_text("")
    (pod.data / "aria_log_control").write_text("")
    pod.boot(MARIADB, "db-mysql-2")
    assert server_id(pod) == 102 and identity(pod.data)["server-id"] == "102"

    # That volume restored as pod 0's (the documented recovery): pod 2's id stays pod 2's, whose own
    # kept claim may run beside it; pod 0 gets one of its own, recorded with the data.
    pod.boot(MARIADB, "db-mysql-0")
    moved = server_id(pod)
    assert moved % 1000 == 100 and moved > 1000 and identity(pod.data)["server-id"] == str(moved)
    pod.start(MARIADB, "db-mysql-0")
    assert server_id(pod) == moved


def test_no_random_number_no_server_id_and_no_start(pod: Pod) -> None:
    """An id that is not random would repeat the predecessor's: the start fails rather than use it."""
    (pod.root / "bin" / "od").write_text("#!/bin/sh\nexit 1\n")
    (pod.root / "bin" / "od").chmod(0o755)
    pod.conf.mkdir(exist_ok=True)
    run = pod.start(MARIADB, "db-mysql-1")
    assert run.code != 0 and "no random number for a server-id" in run.stdout
    assert "entrypoint" not in run.stdout


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_server_cnf_has_the_gtids_and_tls(pod: Pod, engine: Engine) -> None:
    run = pod.boot(engine, "db-mysql-2")
    assert run.code == 0, run.stdout
    tls = pod.run / "tls"
    expected = {
        **dict(line.split("=", 1) for line in engine.gtid_config),
        "ssl-ca": f"{tls}/ca.crt",
        "ssl-cert": f"{tls}/tls.crt",
        "ssl-key": f"{tls}/tls.key",
    }
    assert cnf(pod.conf / "server.cnf") == expected


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_semi_sync_lines_only_when_asked(pod: Pod, engine: Engine) -> None:
    pod.boot(engine, "db-mysql-0", env={"SEMI_SYNC": "on"})
    config = (pod.conf / "server.cnf").read_text().splitlines()
    assert all(line in config for line in engine.semi_sync_config)
    pod.boot(engine, "db-mysql-0", env={"SEMI_SYNC": "off"})
    assert not set(engine.semi_sync_config) & set((pod.conf / "server.cnf").read_text().splitlines())


def test_the_clients_option_file_holds_the_password_for_root_only(pod: Pod) -> None:
    pod.boot(MARIADB, "db-mysql-1")
    option_file = pod.run / "client.cnf"
    assert option_file.stat().st_mode & 0o777 == 0o600
    assert option_file.read_text() == f'[client]\nuser=root\npassword="{ROOT_PASSWORD}"\nhost=127.0.0.1\n'


def test_the_tls_files_are_copied_the_key_private(pod: Pod) -> None:
    pod.boot(MYSQL, "db-mysql-0")
    tls = pod.run / "tls"
    modes = {p.name: p.stat().st_mode & 0o777 for p in tls.iterdir()}
    assert modes == {"ca.crt": 0o644, "tls.crt": 0o644, "tls.key": 0o600}
    assert (tls / "ca.crt").read_text() == "-----ca.crt-----\n"
    assert tls.stat().st_mode & 0o777 == 0o755, "the server's own user must reach its files"


@pytest.mark.parametrize("password", ['quo"te', "back\\slash", "two\nlines", ""])
def test_a_root_password_an_option_file_cannot_hold_is_refused(pod: Pod, password: str) -> None:
    run = pod.run_script(pod.configure(MARIADB), "db-mysql-0", env={"MYSQL_ROOT_PASSWORD": password})
    assert run.code != 0 and "root password must" in run.stdout, run.stdout
    assert not (pod.run / "client.cnf").exists()


# -- the datadir's identity -------------------------------------------------------------------------


def identity(data: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (data / "mysql-operator-identity").read_text().splitlines())


def test_a_new_datadir_records_its_engine_version_and_cluster_when_its_init_ends(pod: Pod) -> None:
    pod.boot(MARIADB, "db-mysql-0")
    assert not pod.fresh
    pod.source_init_script()
    assert pod.fresh, "a datadir its init just made holds nothing of the cluster yet"
    assert identity(pod.data) == {
        "engine": "mariadb",
        "version": "10.11",
        "cluster": "db",
        "cluster-uid": "uid-1",
        "server-id": str(server_id(pod)),
    }


FAKE_ID = """#!/bin/sh
# The image's `id`: a mysql user 105:107 (as Debian's packages make it), or none.
[ "$#" -ge 1 ] && [ "$(eval echo \\${$#})" = mysql ] || exec /usr/bin/id "$@"
[ -n "${NO_MYSQL_USER:-}" ] && exit 1
case "$1" in -u) echo 105 ;; -g) echo 107 ;; *) echo "uid=105(mysql) gid=107(mysql)" ;; esac
"""


@pytest.mark.parametrize("has_user", [True, False])
def test_configure_names_the_images_mysql_user_in_its_termination_message(pod: Pod, has_user: bool) -> None:
    for name, body in (("id", FAKE_ID), ("chown", "#!/bin/sh\nexit 0\n")):  # no such user on this host
        fake = pod.root / "bin" / name
        fake.write_text(body)
        fake.chmod(0o755)
    env = {} if has_user else {"NO_MYSQL_USER": "1"}
    run = pod.run_script(pod.configure(MARIADB), "db-mysql-0", env=env)
    assert run.code == 0, run.stdout
    said = (pod.root / "termination-log").read_text() if (pod.root / "termination-log").exists() else ""
    assert replication.server_user(said) == ("105:107" if has_user else None), said


def test_configure_still_succeeds_when_its_termination_message_cannot_be_written(pod: Pod) -> None:
    for name, body in (("id", FAKE_ID), ("chown", "#!/bin/sh\nexit 0\n")):
        fake = pod.root / "bin" / name
        fake.write_text(body)
        fake.chmod(0o755)
    (pod.root / "termination-log").mkdir()  # a path no redirection can write
    run = pod.run_script(pod.configure(MARIADB), "db-mysql-0")
    assert run.code == 0, run.stdout
    assert (pod.run / "client.cnf").exists(), "configure ran to its end"


@pytest.mark.parametrize("marker", ["identity", "files"])
def test_data_of_another_engine_refuses_to_start_naming_both(pod: Pod, marker: str) -> None:
    half_initialised(pod.data)
    if marker == "identity":
        (pod.data / "mysql-operator-identity").write_text("engine=mariadb\nversion=10.11\n")
    else:  # a datadir from before identities: told by its files
        (pod.data / "aria_log_control").write_text("")
    run = pod.run_script(pod.configure(MYSQL), "db-mysql-0", env={"SERVER_VERSION": "8.4"})
    assert run.code == 1, run.stdout
    said = (pod.root / "termination-log").read_text()
    assert said.startswith("DatadirMismatch: ") and "holds mariadb data" in said and "runs mysql 8.4" in said
    assert not (pod.conf / "server.cnf").exists(), "nothing of the server is set up"


def test_data_of_an_older_release_starts_only_as_an_upgrade_asked_for(pod: Pod) -> None:
    half_initialised(pod.data)
    (pod.data / "mysql-operator-identity").write_text("engine=mariadb\nversion=10.6\ncluster=old\n")
    refused = pod.run_script(pod.configure(MARIADB), "db-mysql-0")  # a re-created cluster: 10.11 pinned
    assert refused.code == 1 and "written by mariadb 10.6; this pod runs mariadb 10.11" in refused.stdout
    assert "set spec.version to 10.6" in refused.stdout
    upgraded = pod.run_script(pod.configure(MARIADB), "db-mysql-0", env={"UPGRADE_FROM": "10.6.18"})
    assert upgraded.code == 0 and "upgraded by 10.11 as asked" in upgraded.stdout, upgraded.stdout
    assert identity(pod.data)["version"] == "10.11" and identity(pod.data)["cluster"] == "db"


def test_a_datadir_of_the_same_release_starts_and_a_newer_one_never(pod: Pod) -> None:
    half_initialised(pod.data)
    (pod.data / "mysql-operator-identity").write_text("engine=mariadb\nversion=10.11\n")
    same = pod.run_script(pod.configure(MARIADB), "db-mysql-0", env={"SERVER_VERSION": "10.11.6"})
    assert same.code == 0, same.stdout
    (pod.data / "mysql-operator-identity").write_text("engine=mariadb\nversion=11.4\n")
    newer = pod.run_script(pod.configure(MARIADB), "db-mysql-0", env={"UPGRADE_FROM": "11.4"})
    assert newer.code == 1 and "newer than this pod's 10.11" in newer.stdout, newer.stdout


# -- the server's start -----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize("role", ["primary", "replica", None])
def test_an_initialised_datadir_starts_read_only_whatever_the_role(
    pod: Pod, engine: Engine, role: str | None
) -> None:
    pod.label(role)
    half_initialised(pod.data)
    (pod.data / replication.INITIALISED_MARKER).write_text("")
    run = pod.boot(engine, "db-mysql-0")
    assert run.code == 0, run.stdout
    assert cnf(pod.conf / "readonly.cnf") == dict(line.split("=", 1) for line in engine.read_only_config)
    assert (pod.data / "mysql" / "user.ibd").exists()
    assert run.stdout.endswith(f"entrypoint: {engine.server}\n")


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_fresh_datadir_turns_read_only_only_when_its_init_ends(pod: Pod, engine: Engine) -> None:
    (pod.data / "lost+found").mkdir()
    run = pod.boot(engine, "db-mysql-0")
    assert run.code == 0 and "did not finish" not in run.stdout, run.stdout
    assert not (pod.conf / "readonly.cnf").exists(), "the init phase's own writes must not be refused"
    pod.source_init_script()
    assert (pod.data / replication.INITIALISED_MARKER).exists()
    assert (pod.conf / "readonly.cnf").exists()


def test_a_replica_with_a_half_initialised_datadir_is_wiped_but_lost_and_found_survives(pod: Pod) -> None:
    pod.label("replica")
    half_initialised(pod.data)
    run = pod.boot(MYSQL, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert [p.name for p in pod.data.iterdir()] == ["lost+found"]
    assert (pod.data / "lost+found" / "#1234").read_text() == "kept"
    assert "mysqld: the datadir's first init did not finish" in run.stdout
    assert not (pod.conf / "readonly.cnf").exists(), "read-only only once the init has run again"
    assert (pod.conf / replication.WIPED_FLAG).exists(), "for the sidecar: point the new datadir"


def test_a_replica_datadir_an_earlier_init_finished_is_never_wiped(pod: Pod) -> None:
    pod.label("replica")
    half_initialised(pod.data)
    (pod.data / replication.LEGACY_INITIALISED).write_text("")
    run = pod.boot(MYSQL, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert (pod.data / "mysql" / "user.ibd").exists() and "did not finish" not in run.stdout


@pytest.mark.parametrize("role", ["primary", None])
def test_a_half_initialised_datadir_not_labelled_replica_is_never_wiped(pod: Pod, role: str | None) -> None:
    pod.label(role)
    half_initialised(pod.data)
    run = pod.boot(MARIADB, "db-mysql-1")
    assert run.code == 0, run.stdout
    assert sorted(p.name for p in pod.data.iterdir()) == ["ibdata1", "lost+found", "mysql"]
    assert (pod.conf / "readonly.cnf").exists()


# -- readiness probe --------------------------------------------------------------------------------


@pytest.mark.parametrize(("read_only", "ready"), [("0", True), ("1", False)])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_the_primary_is_ready_only_once_writable(
    pod: Pod, engine: Engine, read_only: str, ready: bool
) -> None:
    pod.label("primary")
    pod.rules = [{"sql": "SELECT @@global.read_only", "stdout": f"{read_only}\n"}]
    run = pod.run_script(pod.probe(engine), "db-mysql-2")
    assert (run.code == 0) is ready, run.stdout
    (call,) = run.calls
    assert call["defaults"] == str(pod.run / "client.cnf") and call["pwd"] is None


@pytest.mark.parametrize(
    ("io", "sql", "ready"),
    [("Yes", "Yes", True), ("No", "Yes", False), ("Yes", "No", False), ("Connecting", "Yes", False)],
)
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_is_ready_only_while_both_threads_run(
    pod: Pod, engine: Engine, io: str, sql: str, ready: bool
) -> None:
    pod.label("replica")
    pod.rules = [{"sql": engine.status_statement, "stdout": status_output(engine, io, sql)}]
    run = pod.run_script(pod.probe(engine), "db-mysql-0")
    assert (run.code == 0) is ready, run.stdout
    assert run.sql() == [engine.status_statement]


def test_an_unlabelled_pod_is_judged_as_a_replica(pod: Pod) -> None:
    pod.label(None)
    pod.rules = [{"sql": MARIADB.status_statement, "stdout": ""}]
    assert pod.run_script(pod.probe(MARIADB), "db-mysql-0").code != 0


# -- replication sidecar ----------------------------------------------------------------------------


def sidecar(pod: Pod, engine: Engine, *, rechecks: int = 0, env: dict[str, str] | None = None) -> Run:
    """The sidecar for `rechecks` + 1 looks at its role."""
    run = pod.run_script(
        pod.sidecar_script(engine), "db-mysql-1", env={"FAKE_RECHECKS": str(rechecks), **(env or {})}
    )
    assert run.code == 0, run.stdout
    return run


def account_statements() -> list[str]:
    user, password = replication.REPLICATION_USER, REPLICATION_PASSWORD
    return [
        f"CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{password}' REQUIRE SSL;",
        f"ALTER USER '{user}'@'%' IDENTIFIED BY '{password}' REQUIRE SSL;",
        f"GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%';",
    ]


def point_statements(pod: Pod, engine: Engine) -> list[str]:
    user, password, ca = replication.REPLICATION_USER, REPLICATION_PASSWORD, f"{pod.run}/tls/ca.crt"
    if engine is MYSQL:
        return [
            f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='{PRIMARY_HOST}', SOURCE_PORT=3306, "
            f"SOURCE_USER='{user}', SOURCE_PASSWORD='{password}', SOURCE_AUTO_POSITION=1, "
            "SOURCE_CONNECT_RETRY=2, SOURCE_SSL=1, "
            f"SOURCE_SSL_CA='{ca}', SOURCE_SSL_VERIFY_SERVER_CERT=1;",
            "START REPLICA;",
        ]
    return [
        f"CHANGE MASTER TO MASTER_HOST='{PRIMARY_HOST}', MASTER_PORT=3306, MASTER_USER='{user}', "
        f"MASTER_PASSWORD='{password}', MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=2, MASTER_SSL=1, "
        f"MASTER_SSL_CA='{ca}', MASTER_SSL_VERIFY_SERVER_CERT=1;",
        "START SLAVE;",
    ]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_labelled_primary_and_replicating_from_nobody_it_turns_writable_and_makes_the_account(
    pod: Pod, engine: Engine
) -> None:
    pod.label("primary")
    pod.rules = [
        {"sql": "SELECT 1", "stderr": CANNOT_CONNECT, "exit": 1, "times": 2},
        {"sql": engine.status_statement, "stdout": ""},
        {"sql": "SELECT @@global.read_only", "stdout": "1\n", "times": 1},
        {"sql": "SELECT @@global.read_only", "stdout": "0\n"},
    ]
    run = sidecar(pod, engine, rechecks=1)
    assert run.sleeps == ["2", "2", RECHECK, RECHECK]
    sql = run.sql()
    assert sql.count(engine.writable_sql) == 1, "made writable once, then left so"
    (account,) = [s for s in sql if s.startswith("CREATE USER")]
    assert statements(account) == account_statements()
    assert all(c["defaults"] == str(pod.run / "client.cnf") and c["pwd"] is None for c in run.calls)
    assert "writable: this pod is labelled primary" in run.stdout
    assert not any("semi" in s for s in sql), "semi-sync only when asked"


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_with_semi_sync_the_primary_waits_for_a_replica_before_it_is_writable(
    pod: Pod, engine: Engine
) -> None:
    pod.label("primary")
    pod.rules = [
        {"sql": engine.status_statement, "stdout": ""},
        {"sql": "SELECT @@global.read_only", "stdout": "1\n"},
    ]
    sql = sidecar(pod, engine, env={"SEMI_SYNC": "on"}).sql()
    semi, writable = sql.index(f"SET GLOBAL {engine.semi_sync_primary}=ON"), sql.index(engine.writable_sql)
    assert semi < writable


def test_labelled_primary_but_still_replicating_it_stays_read_only(pod: Pod) -> None:
    pod.label("primary")
    pod.rules = [{"sql": MARIADB.status_statement, "stdout": status_output(MARIADB, "Yes", "Yes")}]
    run = sidecar(pod, MARIADB, rechecks=2)
    assert MARIADB.writable_sql not in run.sql() and not any(s.startswith("CREATE USER") for s in run.sql())
    assert run.stdout.count("still replicating: waiting for the operator's promotion") == 1


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_fresh_datadir_labelled_primary_in_a_cluster_that_ran_is_never_writable(
    pod: Pod, engine: Engine
) -> None:
    """A primary's volume emptied in place: its server initialised an empty datadir and starts under
    its old label. The cluster has run (the operator's annotation), so the sidecar keeps it read-only,
    makes no account, and says why once."""
    pod.label("primary")
    pod.annotate(ran=True)
    (pod.data / replication.FRESH_MARKER).touch()
    pod.rules = [
        {"sql": engine.status_statement, "stdout": ""},
        {"sql": "SELECT @@global.read_only", "stdout": "0\n", "times": 1},  # as if writable somehow
        {"sql": "SELECT @@global.read_only", "stdout": "1\n"},
    ]
    run = sidecar(pod, engine, rechecks=2, env={"SEMI_SYNC": "on"})
    sql = run.sql()
    assert engine.writable_sql not in sql and not any(s.startswith("CREATE USER") for s in sql)
    assert not any("semi" in s.lower() and s.endswith("=ON") for s in sql), "no semi-sync wait either"
    assert sql.count(engine.read_only_sql) == 1, "made read-only again, once"
    assert run.stdout.count("initialised anew after the cluster ran") == 1
    assert pod.fresh


def test_a_primary_whose_datadir_is_emptied_under_its_running_pod_is_never_writable_again(pod: Pod) -> None:
    """No annotation (it was labelled before the cluster ran): the sidecar saw its datadir hold the
    cluster's data, so the fresh datadir its server comes back on (same pod, same volume) is refused."""
    pod.label("primary")
    pod.annotate(ran=False)
    pod.rules = [
        {"sql": MARIADB.status_statement, "stdout": ""},
        {"sql": "SELECT @@global.read_only", "stdout": "0\n", "times": 1},
        {"sql": "SELECT @@global.read_only", "stdout": "1\n"},
    ]
    # Emptied in place and initialised again between the first look and the second.
    marker = pod.data / replication.FRESH_MARKER
    (pod.root / "bin" / "sleep").write_text(FAKE_SLEEP.replace("exit 0", f"touch {marker}\nexit 0"))
    run = pod.run_script(pod.sidecar_script(MARIADB), "db-mysql-0", env={"FAKE_RECHECKS": "2"})
    assert run.code == 0, run.stdout
    assert MARIADB.writable_sql not in run.sql(), "writable at the first look, never made so again"
    assert run.stdout.count("initialised anew after the cluster ran") == 1
    assert (pod.conf / replication.HELD_FLAG).exists()


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_the_first_primary_is_made_writable_on_its_fresh_datadir_which_then_is_the_clusters(
    pod: Pod, engine: Engine
) -> None:
    pod.label("primary")
    pod.annotate(ran=False)
    (pod.data / replication.FRESH_MARKER).touch()
    pod.rules = [
        {"sql": engine.status_statement, "stdout": ""},
        {"sql": "SELECT @@global.read_only", "stdout": "1\n", "times": 1},
        {"sql": "SELECT @@global.read_only", "stdout": "0\n"},
    ]
    run = sidecar(pod, engine)
    assert engine.writable_sql in run.sql()
    assert not pod.fresh and "the first primary's datadir holds the cluster's data" in run.stdout

    # Later told the cluster ran (it has: this pod is its primary): nothing changes for it.
    pod.annotate(ran=True)
    run = sidecar(pod, engine, rechecks=1)
    assert "initialised anew" not in run.stdout and engine.read_only_sql not in run.sql()


@pytest.mark.parametrize(("io", "fresh_after"), [("Yes", False), ("Connecting", True)])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_fresh_replica_datadir_is_the_clusters_once_it_replicates(
    pod: Pod, engine: Engine, io: str, fresh_after: bool
) -> None:
    pod.label("replica")
    pod.annotate(ran=True)
    (pod.data / replication.FRESH_MARKER).touch()
    pod.rules = [
        {"sql": engine.status_statement, "stdout": status_output(engine, io, "Yes")},
        {"sql": "SELECT @@global.read_only", "stdout": "1\n"},
    ]
    sidecar(pod, engine, rechecks=1)
    assert pod.fresh == fresh_after


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_is_made_read_only_and_pointed_at_the_primary_service_over_verified_tls(
    pod: Pod, engine: Engine
) -> None:
    pod.label("replica")
    pod.rules = [
        {"sql": "SELECT @@global.read_only", "stdout": "0\n"},
        {"sql": engine.status_statement, "stdout": ""},
    ]
    run = sidecar(pod, engine)
    sql = run.sql()
    assert engine.read_only_sql in sql
    (point,) = [s for s in sql if s.startswith("CHANGE")]
    assert statements(point) == point_statements(pod, engine)
    assert f"replicating from {PRIMARY_HOST} (TLS, server certificate verified)" in run.stdout


def test_a_pod_not_labelled_yet_is_read_only_and_pointed_nowhere(pod: Pod) -> None:
    """Pod 0 at a cluster's start: pointed at a primary Service that has no primary yet, it would be
    a replica of nobody, and never the primary its label soon says it is."""
    pod.label(None)
    pod.rules = [
        {"sql": "SELECT @@global.read_only", "stdout": "0\n"},
        {"sql": MARIADB.status_statement, "stdout": ""},
    ]
    sql = sidecar(pod, MARIADB, rechecks=2).sql()
    assert MARIADB.read_only_sql in sql and not any(s.startswith("CHANGE") for s in sql)


def test_the_primary_it_was_is_pointed_at_the_new_one_when_its_label_moves(pod: Pod) -> None:
    pod.label("primary")
    pod.rules = [
        {"sql": MARIADB.status_statement, "stdout": ""},
        {"sql": "SELECT @@global.read_only", "stdout": "0\n"},
    ]
    calls = pod.root / "calls.jsonl"
    script = pod.sidecar_script(MARIADB)
    # The label moves between the first and the second look (the fake sleep's first recheck does it).
    (pod.root / "bin" / "sleep").write_text(
        FAKE_SLEEP.replace("exit 0", f"sed -i 's/primary/replica/' {pod.podinfo}/labels\nexit 0")
    )
    run = pod.run_script(script, "db-mysql-0", env={"FAKE_RECHECKS": "1"})
    assert run.code == 0, run.stdout
    sql = [json.loads(line)["sql"] for line in calls.read_text().splitlines()]
    points = [s for s in sql if s.startswith("CHANGE")]
    assert len(points) == 1 and sql.index(MARIADB.read_only_sql) < sql.index(points[0])


@pytest.mark.parametrize("io", ["Yes", "No"])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_with_replication_configured_is_left_alone(pod: Pod, engine: Engine, io: str) -> None:
    """Running or stopped (by a human): the sidecar neither re-points nor restarts it."""
    pod.label("replica")
    pod.rules = [
        {"sql": engine.status_statement, "stdout": status_output(engine, io, io)},
        {"sql": "SELECT @@global.read_only", "stdout": "1\n"},
    ]
    run = sidecar(pod, engine, rechecks=2)
    assert not any(s.startswith(("CHANGE", "START", "STOP", "SET")) for s in run.sql())
    assert run.stdout.count("already configured") == 1


def test_a_failed_status_query_is_asked_again_not_taken_for_no_replication(pod: Pod) -> None:
    pod.label("replica")
    pod.rules = [
        {"sql": "SELECT @@global.read_only", "stdout": "1\n"},
        {"sql": MYSQL.status_statement, "stderr": CANNOT_CONNECT, "exit": 1, "times": 1},
        {"sql": MYSQL.status_statement, "stdout": status_output(MYSQL, "No", "No")},
    ]
    run = sidecar(pod, MYSQL)
    assert run.sql().count(MYSQL.status_statement) == 2 and "5" in run.sleeps
    assert not any(s.startswith("CHANGE") for s in run.sql())


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_replica_whose_datadir_its_start_wiped_is_pointed_again_once(pod: Pod, engine: Engine) -> None:
    pod.label("replica")
    configured = status_output(engine, "Yes", "Yes")
    pod.rules = [
        {"sql": "SELECT @@global.read_only", "stdout": "1\n"},
        {"sql": engine.status_statement, "stdout": configured, "times": 1},  # the first look
        {"sql": engine.status_statement, "stdout": "", "times": 1},  # a new datadir after the wipe
        {"sql": engine.status_statement, "stdout": configured},
    ]
    # The server restarts alone and its start wipes the datadir, while the sidecar pauses after its
    # first look (the fake sleep leaves the start's flag then).
    flag = pod.conf / replication.WIPED_FLAG
    (pod.root / "bin" / "sleep").write_text(
        FAKE_SLEEP.replace("exit 0", f"[ -e {flag}.done ] || {{ touch {flag} {flag}.done; }}\nexit 0")
    )
    run = sidecar(pod, engine, rechecks=2)
    points = [s for s in run.sql() if s.startswith("CHANGE")]
    assert len(points) == 1 and statements(points[0]) == point_statements(pod, engine)
    assert not (pod.conf / replication.WIPED_FLAG).exists(), "handled once"


@pytest.mark.parametrize("password", ["", "it's", "back\\slash", "semi;colon", "new\nline"])
def test_a_replication_password_that_would_need_quoting_is_refused_before_any_sql(
    pod: Pod, password: str
) -> None:
    run = pod.run_script(pod.sidecar_script(MARIADB), "db-mysql-0", env={"REPLICATION_PASSWORD": password})
    assert run.code == 1 and "replication-password must be" in run.stdout, run.stdout
    assert run.calls == [], "no SQL may run with such a password"


# -- the operator's actions -------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_fence_makes_read_only_and_checks_it(pod: Pod, engine: Engine) -> None:
    pod.rules = [{"sql": "SELECT @@global.read_only", "stdout": "1\n"}]
    run = pod.run_script(actions.fence(engine, run_dir=str(pod.run)), "db-mysql-0")
    assert run.code == 0 and run.stdout.strip().endswith("fenced"), run.stdout
    assert engine.read_only_sql in run.sql()[0]
    pod.rules = [{"sql": "SELECT @@global.read_only", "stdout": "0\n"}]
    assert pod.run_script(actions.fence(engine, run_dir=str(pod.run)), "db-mysql-0").code != 0


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_a_failover_stops_receiving_then_waits_for_what_it_received(pod: Pod, engine: Engine) -> None:
    received = "0-101-42" if engine is MARIADB else "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42"
    pod.rules = [{"sql": "SELECT " + engine.wait_applied_function, "stdout": "0\n"}]
    run = pod.run_script(
        actions.wait_applied(engine, received, stop_receiving=True, run_dir=str(pod.run)), "x-0"
    )
    assert run.code == 0, run.stdout
    assert run.sql() == [engine.stop_io_sql, f"SELECT {engine.wait_applied_function}('{received}', 30)"]
    pod.rules = [{"sql": "SELECT " + engine.wait_applied_function, "stdout": "-1\n"}]
    run = pod.run_script(
        actions.wait_applied(engine, received, stop_receiving=False, run_dir=str(pod.run)), "x-0"
    )
    assert run.code != 0 and "not applied within 30s" in run.stdout
    assert engine.stop_io_sql not in run.sql(), "a switchover keeps receiving from the fenced primary"


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_ending_the_new_primarys_replication_makes_its_datadir_the_clusters(pod: Pod, engine: Engine) -> None:
    (pod.data / replication.FRESH_MARKER).touch()
    pod.rules = [{"sql": engine.status_statement, "stdout": ""}]
    script = actions.end_replication(engine, run_dir=str(pod.run), data_dir=str(pod.data))
    run = pod.run_script(script, "x-1")
    assert run.code == 0 and run.stdout.strip() == "replication-ended", run.stdout
    assert not pod.fresh


@pytest.mark.parametrize("fresh", [True, False])
def test_datadir_fresh_answers_with_no_server(pod: Pod, fresh: bool) -> None:
    if fresh:
        (pod.data / replication.FRESH_MARKER).touch()
    run = pod.run_script(actions.datadir_fresh(data_dir=str(pod.data)), "x-0")
    assert (run.code, run.stdout.strip(), run.calls) == (0, "datadir-fresh" if fresh else "datadir-kept", [])


@pytest.mark.parametrize("fresh", [True, False])
def test_observe_says_whether_the_datadir_is_fresh(pod: Pod, fresh: bool) -> None:
    if fresh:
        (pod.data / replication.FRESH_MARKER).touch()
    pod.rules = [
        {"sql": "SELECT 'read_only'", "stdout": "read_only\t1\ngtid_current_pos\t\n"},
        {"sql": MARIADB.status_statement, "stdout": ""},
    ]
    run = pod.run_script(actions.observe(MARIADB, run_dir=str(pod.run), data_dir=str(pod.data)), "x-0")
    assert run.code == 0, run.stdout
    assert actions.parse_observed(MARIADB, run.stdout).fresh is fresh


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_repoint_reconnects_a_replica_to_the_service_and_leaves_one_without_source(
    pod: Pod, engine: Engine
) -> None:
    pod.rules = [{"sql": engine.status_statement, "stdout": status_output(engine, "Yes", "Yes")}]
    run = pod.run_script(actions.repoint(engine, PRIMARY_HOST, run_dir=str(pod.run)), "x-1")
    assert run.code == 0 and run.sql()[-1] == engine.restart_replication_sql.replace("%s", PRIMARY_HOST)
    pod.rules = [{"sql": engine.status_statement, "stdout": ""}]
    run = pod.run_script(actions.repoint(engine, PRIMARY_HOST, run_dir=str(pod.run)), "x-1")
    assert (run.code, run.stdout.strip(), len(run.calls)) == (0, "no-source", 1)


# -- no secret in any argv --------------------------------------------------------------------------


def test_no_password_is_ever_an_argument(pod: Pod) -> None:
    """Every process any script starts (the database clients, and each shimmed program) is recorded
    with its argv: neither password is in any, while both do reach the database (stdin, option file)."""
    runs: list[Run] = []
    for engine in ENGINES:
        runs.append(pod.boot(engine, "db-mysql-1", env={"SEMI_SYNC": "on"}))
        for role in ("primary", "replica"):
            pod.label(role)
            pod.rules = [
                {"sql": engine.status_statement, "stdout": ""},
                {"sql": "SELECT @@global.read_only", "stdout": "1\n" if role == "primary" else "0\n"},
            ]
            runs.append(sidecar(pod, engine, env={"SEMI_SYNC": "on"}))
            runs.append(pod.run_script(pod.probe(engine), "db-mysql-1"))
        for script in (actions.observe(engine), actions.fence(engine), actions.end_replication(engine)):
            runs.append(pod.run_script(script.replace(replication.RUN_DIR, str(pod.run)), "db-mysql-1"))
    argvs = [a for run in runs for a in run.argvs] + [
        [c["prog"], *c["args"]] for run in runs for c in run.calls
    ]
    assert len(argvs) > 40, "the recording saw the scripts' processes"
    assert {os.path.basename(a[0]) for a in argvs} >= {"mysql", "mariadb", "sed", "cp", "chmod", "wc"}
    leaked = [a for a in argvs for arg in a if ROOT_PASSWORD in arg or REPLICATION_PASSWORD in arg]
    assert leaked == []
    # Nor in what the containers log (their output, the kubelet's log of them).
    logged = [run.stdout for run in runs if ROOT_PASSWORD in run.stdout or REPLICATION_PASSWORD in run.stdout]
    assert logged == [] and any(run.stdout.strip() for run in runs), "the output was read, and holds none"
    sent = "".join(c["sql"] for run in runs for c in run.calls)
    assert REPLICATION_PASSWORD in sent, "the replication password reached the server, through stdin"
    assert ROOT_PASSWORD in (pod.run / "client.cnf").read_text()
