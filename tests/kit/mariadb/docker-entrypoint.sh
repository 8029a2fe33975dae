#!/bin/sh
# The official mariadb image's contract, the part the reference operator relies on: on an empty
# datadir, initialise it with root's password from MARIADB_ROOT_PASSWORD (or MYSQL_ROOT_PASSWORD),
# run /docker-entrypoint-initdb.d/*.sh (sourced) and *.sql once, with networking off; then run the
# server as PID 1 (a SIGTERM is a clean shutdown).
set -eu
if [ "${1:-}" != mariadbd ]; then exec "$@"; fi
shift
DATADIR=/var/lib/mysql
SOCKET=/run/mysqld/init.sock
mkdir -p /run/mysqld
chown mysql:mysql /run/mysqld "$DATADIR"

if [ ! -d "$DATADIR/mysql" ]; then
  password="${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}"
  if [ -z "$password" ]; then
    echo "entrypoint: set MARIADB_ROOT_PASSWORD or MYSQL_ROOT_PASSWORD to initialise $DATADIR" >&2
    exit 1
  fi
  echo "entrypoint: initialising $DATADIR"
  mariadb-install-db --user=mysql --datadir="$DATADIR" --skip-test-db \
    --auth-root-authentication-method=normal >/dev/null
  mariadbd --user=mysql --datadir="$DATADIR" --skip-networking --socket="$SOCKET" "$@" &
  init_pid=$!
  tries=0
  until mariadb-admin --socket="$SOCKET" -u root ping >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 120 ] || ! kill -0 "$init_pid" 2>/dev/null; then
      echo "entrypoint: the init server did not start" >&2
      exit 1
    fi
    sleep 0.5
  done
  # Not binlogged: every node sets up its own root; replicas must not receive it as a transaction.
  mariadb --socket="$SOCKET" -u root <<SQL
SET @@SESSION.SQL_LOG_BIN=0;
DROP USER IF EXISTS ''@'localhost', ''@'$(hostname)', 'root'@'$(hostname)', 'root'@'127.0.0.1', 'root'@'::1';
ALTER USER 'root'@'localhost' IDENTIFIED BY '$password';
CREATE USER 'root'@'%' IDENTIFIED BY '$password';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
SQL
  docker_process_sql() { MYSQL_PWD="$password" mariadb --socket="$SOCKET" -u root "$@"; }
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh) echo "entrypoint: sourcing $f"; . "$f" ;;
      *.sql) echo "entrypoint: running $f"; docker_process_sql < "$f" ;;
      *.sql.gz) echo "entrypoint: running $f"; gunzip -c "$f" | docker_process_sql ;;
      */\*) ;;
      *) echo "entrypoint: ignoring $f" ;;
    esac
  done
  MYSQL_PWD="$password" mariadb-admin --socket="$SOCKET" -u root shutdown
  wait "$init_pid"
  echo "entrypoint: init done"
fi
exec mariadbd --user=mysql --datadir="$DATADIR" "$@"
