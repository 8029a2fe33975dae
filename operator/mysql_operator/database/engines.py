"""The database servers the operator drives, and what differs between them.

MySQL and MariaDB share the protocol, the datadir layout and the official images' entrypoint contract
(``MYSQL_ROOT_PASSWORD``, ``/docker-entrypoint-initdb.d``), and differ where replication is set up:

=====================  =====================================  ========================================
                       mysql (8.0.23+, 8.4, 9.x)              mariadb (10.6+, 11.x)
=====================  =====================================  ========================================
GTIDs                  ``gtid-mode=ON`` + consistency         always on; ``gtid-strict-mode=ON``
point a replica        ``CHANGE REPLICATION SOURCE TO ...``   ``CHANGE MASTER TO ... MASTER_USE_GTID``
                       ``SOURCE_AUTO_POSITION=1``             ``=slave_pos``
read-only replica      ``read_only`` + ``super_read_only``    ``read_only`` (accounts with READ_ONLY
                       (refuses root too)                     ADMIN, root among them, still write)
programs               ``mysqld``, ``mysql``, ``mysqladmin``,  ``mariadbd``, ``mariadb``,
                       ``mysqldump``                          ``mariadb-admin``, ``mariadb-dump``
=====================  =====================================  ========================================

The versions are the oldest that have the syntax used: ``CHANGE REPLICATION SOURCE`` and
``START REPLICA`` came with MySQL 8.0.22/8.0.23 (``SOURCE_SSL`` naming with 8.0.23); the ``mariadb-*``
client names with MariaDB 10.5, and 10.6 is the oldest series still maintained.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

EngineName = Literal["mysql", "mariadb"]


@dataclass(frozen=True)
class Engine:
    name: EngineName
    default_version: str
    """The image tag used when spec.version is unset."""
    version_pattern: str
    """Image tags of versions the operator can drive (a CEL-compatible RE2 regex)."""
    supported: str
    """The same, in words, for error messages."""
    server: str
    """The server program, which the official images' entrypoint is given to start (their CMD)."""
    client: str
    dump: str
    gtid_config: tuple[str, ...]
    """my.cnf lines beyond server-id that give every server GTIDs and a binlog replicas can follow."""
    replica_config: tuple[str, ...]
    """my.cnf lines of every replica, on every start: it is read-only before replication is set up."""
    status_statement: str
    """Prints the replica threads' state; empty output means no replication is configured."""

    def supports(self, version: str) -> bool:
        return re.fullmatch(self.version_pattern, version) is not None

    def point_replica_sql(self) -> str:
        """Point a replica at the primary and start it; $PRIMARY_HOST, $REPLICATION_USER,
        $REPLICATION_PASSWORD and $tls (0/1) expand in the shell that runs it (the password is never
        written to a volume)."""
        if self.name == "mysql":
            return (
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST='$PRIMARY_HOST', SOURCE_PORT=3306, "
                "SOURCE_USER='$REPLICATION_USER', SOURCE_PASSWORD='$REPLICATION_PASSWORD', "
                "SOURCE_AUTO_POSITION=1, SOURCE_SSL=$tls, GET_SOURCE_PUBLIC_KEY=1; START REPLICA;"
            )
        return (
            "CHANGE MASTER TO MASTER_HOST='$PRIMARY_HOST', MASTER_PORT=3306, "
            "MASTER_USER='$REPLICATION_USER', MASTER_PASSWORD='$REPLICATION_PASSWORD', "
            "MASTER_USE_GTID=slave_pos, MASTER_SSL=$tls; START SLAVE;"
        )


# Tags: 8, 8.0 (newest 8.0.x), 8.0.23 and later, 8.1-8.4, 9.x, with an optional suffix (-oracle).
_MYSQL = (
    r"^(8|8\.0|8\.0\.(2[3-9]|[3-9][0-9]|[1-9][0-9][0-9]+)|8\.[1-9][0-9]*(\.[0-9]+)?"
    r"|(9|[1-9][0-9]+)(\.[0-9]+){0,2})(-[a-z0-9]+)?$"
)
# Tags: 10 (newest 10.x), 10.6 and later, 11 and later, with an optional suffix (-jammy, -ubi).
_MARIADB = r"^(10|10\.([6-9]|[1-9][0-9])(\.[0-9]+)?|(1[1-9]|[2-9][0-9])(\.[0-9]+){0,2})(-[a-z0-9]+)?$"

MYSQL = Engine(
    name="mysql",
    default_version="8.4",
    version_pattern=_MYSQL,
    supported="8.0.23 or newer (8.0, 8.4, 9.x)",
    server="mysqld",
    client="mysql",
    dump="mysqldump",
    gtid_config=("gtid-mode=ON", "enforce-gtid-consistency=ON"),
    replica_config=("read-only=ON", "super-read-only=ON"),
    status_statement="SHOW REPLICA STATUS\\G",
)
MARIADB = Engine(
    name="mariadb",
    default_version="10.11",
    version_pattern=_MARIADB,
    supported="10.6 or newer (10.6, 10.11, 11.x)",
    server="mariadbd",
    client="mariadb",
    dump="mariadb-dump",
    gtid_config=("log-bin=mysql-bin", "log-slave-updates=ON", "gtid-strict-mode=ON", "binlog-format=ROW"),
    replica_config=("read-only=ON",),
    status_statement="SHOW SLAVE STATUS\\G",
)
ENGINES: dict[str, Engine] = {e.name: e for e in (MYSQL, MARIADB)}


def engine(name: str) -> Engine:
    return ENGINES[name]
