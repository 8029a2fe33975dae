"""What the operator runs in a database pod (through exec, in the `replication` container) during a
failover or a switchover, and how it reads the answers.

Each action is one `sh -c` script: the root login comes from the pod's option file, so no script (the
argv the kubelet logs) holds a password. Every action is idempotent: a failover interrupted anywhere
(the operator restarted, a call timed out) is driven to its end by running the same steps again.

| action          | on                  | does                                                              |
|-----------------|---------------------|-------------------------------------------------------------------|
| `observe`       | any                 | prints read_only, the GTIDs, the replica status, a fresh datadir |
| `datadir_fresh` | an unready primary  | whether its datadir is fresh (emptied in place), no server needed |
| `fence`         | the old primary     | read-only (MySQL: super_read_only), semi-sync waits off           |
| `wait_applied`  | the new primary     | waits until what it received (or the old primary wrote) is applied |
| `end_replication`| the new primary    | STOP + RESET replication: nothing flows into it any more         |
| `repoint`       | the other replicas  | reconnect to the primary Service (the new primary behind it)      |

Making the new primary writable is not here: its sidecar does that once the operator has labelled it
primary and it replicates from nobody (`replication.py`), so a server is never writable unless the label
that routes clients to it says it is the primary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .engines import Engine
from .gtid import Position, parse
from .replication import DATA_DIR, FRESH_MARKER, RUN_DIR, client_cnf

CONTAINER = "replication"
"""Where actions run: the sidecar has the client, the option file and no server to disturb."""
WAIT_APPLIED_SECONDS = 30
"""How long a promotion waits for the relay log to be applied before it gives up (and is retried)."""
_FIELD = re.compile(r"^\s*([A-Za-z_]+): ?(.*)$")


def _sql(engine: Engine, run_dir: str) -> str:
    return f'sql() {{ {engine.client} --defaults-extra-file={client_cnf(run_dir)} "$@"; }}'


def observe(engine: Engine, *, run_dir: str = RUN_DIR, data_dir: str = DATA_DIR) -> str:
    variables = " UNION ALL ".join(
        f"SELECT '{name}', @@global.{name}" for name in ("read_only", *engine.gtid_variables)
    )
    return f"""set -eu
{_sql(engine, run_dir)}
echo '== variables'
sql -N -B -e "{variables}"
echo '== replica'
sql -e '{engine.status_statement}'
echo '== datadir'
[ ! -e {data_dir}/{FRESH_MARKER} ] || echo fresh
echo '== end'
"""


def fence(engine: Engine, *, run_dir: str = RUN_DIR) -> str:
    """Read-only; waits at most lock_wait_timeout for transactions in flight to end (they may commit)."""
    return f"""set -eu
{_sql(engine, run_dir)}
sql -e "SET SESSION lock_wait_timeout = 10; {engine.read_only_sql}"
sql -e 'SET GLOBAL {engine.semi_sync_primary} = OFF' 2>/dev/null || :
[ "$(sql -N -e 'SELECT @@global.read_only')" = 1 ]
echo fenced
"""


def wait_applied(
    engine: Engine,
    gtids: str,
    *,
    stop_receiving: bool,
    seconds: int = WAIT_APPLIED_SECONDS,
    run_dir: str = RUN_DIR,
) -> str:
    """Wait until `gtids` are applied here. A failover first stops receiving (the source is gone; what
    its relay log holds, `Observed.relay`, is what to wait for); a switchover keeps receiving from the
    fenced primary until it has everything that one wrote."""
    check = _gtid_text(gtids)
    stop = f"sql -e '{engine.stop_io_sql}'" if stop_receiving else ":"
    return f"""set -eu
{_sql(engine, run_dir)}
{stop}
[ -n '{check}' ] || {{ echo applied; exit 0; }}
waited="$(sql -N -e "SELECT {engine.wait_applied_function}('{check}', {seconds})")"
if [ "$waited" != 0 ]; then
  echo "what was received ({check}) was not applied within {seconds}s" >&2
  exit 1
fi
echo applied
"""


def datadir_fresh(*, data_dir: str = DATA_DIR) -> str:
    """Prints `datadir-fresh` or `datadir-kept`: whether the datadir holds nothing of the cluster. No SQL:
    it answers while the server is down or still initialising."""
    return f"if [ -e {data_dir}/{FRESH_MARKER} ]; then echo datadir-fresh; else echo datadir-kept; fi\n"


def end_replication(engine: Engine, *, run_dir: str = RUN_DIR, data_dir: str = DATA_DIR) -> str:
    """Ends the new primary's replication. Its datadir was chosen for what it holds: it is the cluster's
    from now on, even if its sidecar never saw it connected (its fresh marker goes)."""
    return f"""set -eu
{_sql(engine, run_dir)}
rm -f {data_dir}/{FRESH_MARKER}
sql -e '{engine.reset_replication_sql}'
[ -z "$(sql -e '{engine.status_statement}')" ]
echo replication-ended
"""


def claim_datadir(*, data_dir: str = DATA_DIR) -> str:
    """Removes the fresh marker of the new primary's datadir, chosen for what it holds: it is the
    cluster's from now on (its sidecar may never have seen it connected)."""
    return f"rm -f {data_dir}/{FRESH_MARKER}\necho datadir-claimed\n"


def repoint(engine: Engine, host: str, *, run_dir: str = RUN_DIR) -> str:
    """Reconnect to `host` (the primary Service): a connection to the old primary, which may still be up
    and fenced, would otherwise stay open and bring nothing. A replica with no source is left alone."""
    if not re.fullmatch(r"[a-z0-9.-]+", host):
        raise ValueError(f"not a host name: {host!r}")
    statement = engine.restart_replication_sql.replace("%s", host)
    return f"""set -eu
{_sql(engine, run_dir)}
if [ -z "$(sql -e '{engine.status_statement}')" ]; then echo no-source; exit 0; fi
sql -e "{statement}"
echo repointed
"""


def _gtid_text(text: str) -> str:
    if not re.fullmatch(r"[0-9A-Za-z:,\-]*", text):
        raise ValueError(f"not a GTID set: {text!r}")
    return text


@dataclass(frozen=True)
class Observed:
    """One server, as `observe` printed it."""

    read_only: bool
    executed: Position
    """GTIDs applied (MySQL gtid_executed; MariaDB gtid_current_pos, which includes its own writes)."""
    received: Position
    """GTIDs received, applied or not, together with those applied: what promoting it would keep."""
    relay: str
    """The replica status's received GTIDs as printed (what `wait_applied` waits for); empty: none."""
    replicating: bool
    """A source is configured (running or not)."""
    io_running: str
    sql_running: str
    io_error: str
    io_errno: str
    """Last_IO_Errno: why the IO thread is not connected ("0": it is, or it never failed)."""
    source: str
    fresh: bool = False
    """Its datadir holds nothing of the cluster yet (initialised, neither replicated into nor served)."""


def parse_observed(engine: Engine, out: str) -> Observed:
    """`observe`'s output; ValueError when it is not that."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    if "end" not in sections:
        raise ValueError(f"incomplete observation: {out[-300:]!r}")
    variables = dict(line.split("\t", 1) for line in sections.get("variables", []) if "\t" in line)
    fields: dict[str, str] = {}
    last = None
    for line in sections.get("replica", []):
        m = _FIELD.match(line)
        if m:
            last = m.group(1)
            fields[last] = m.group(2).strip()
        elif last and line.strip() and not line.startswith("*"):
            fields[last] += line.strip()  # a long GTID set continues on the next line
    executed = parse(engine.name, variables.get(engine.gtid_variables[0]))
    received = executed.union(parse(engine.name, fields.get(engine.received_field)))
    return Observed(
        read_only=variables.get("read_only") == "1",
        executed=executed,
        received=received,
        relay="".join(fields.get(engine.received_field, "").split()),
        replicating=bool(fields),
        io_running=fields.get("Slave_IO_Running") or fields.get("Replica_IO_Running") or "",
        sql_running=fields.get("Slave_SQL_Running") or fields.get("Replica_SQL_Running") or "",
        io_error=fields.get("Last_IO_Error", ""),
        io_errno=fields.get("Last_IO_Errno", "0"),
        source=fields.get("Master_Host") or fields.get("Source_Host") or "",
        fresh="fresh" in sections.get("datadir", []),
    )
