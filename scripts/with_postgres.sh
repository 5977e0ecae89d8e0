#!/usr/bin/env bash
# Usage: scripts/with_postgres.sh COMMAND [ARGS...]
#
# Runs COMMAND with a throwaway PostgreSQL server (with pgvector) on 127.0.0.1 and these
# variables set (docs/scaling-out.md):
#   AI_DATABASE_URL                       Evennia's database (tests/support/settings.py, game_template)
#   AI_MEMORY_PGVECTOR_CONNECTION_STRING  Mem0's vector store (a second database, pgvector)
#   AI_REQUIRE_POSTGRES=1                 tests that need PostgreSQL fail instead of skipping
# The server lives in a temporary directory and is stopped, and the directory removed, when
# the command ends, whatever happens (trap).
#
# Where the server comes from:
#   - PG_BIN=/path/to/bin (initdb, pg_ctl, postgres, psql) if set;
#   - else Debian's packages, when this release has pgvector for its default PostgreSQL
#     (postgresql + postgresql-<major>-pgvector, installed with apt-get when run as root);
#   - else the PostgreSQL 16 + pgvector build inside the `pgserver` wheel from PyPI (Debian 12
#     "bookworm" ships no pgvector package), unpacked into the temporary directory.
# initdb and the server refuse to run as root: as root they run as the `postgres` user
# (created if missing).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

PY=${PY:-.venv/bin/python}
PGSERVER_WHEEL=${PGSERVER_WHEEL:-pgserver==0.1.4}
log() { echo "with_postgres: $*" >&2; }

WORK=$(mktemp -d /tmp/ai-contrib-pg.XXXXXX)
chmod 755 "$WORK"
BIN=""
AS=()
cleanup() {
  local rc=$?
  if [ -n "$BIN" ] && [ -f "$WORK/data/postmaster.pid" ]; then
    "${AS[@]}" "$BIN/pg_ctl" -D "$WORK/data" -m fast -w -t 60 stop >/dev/null 2>&1 \
      || "${AS[@]}" "$BIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
    log "server stopped"
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

debian_bin() {
  # prints Debian's bin dir once postgresql and its pgvector are installed; fails otherwise
  command -v apt-cache >/dev/null 2>&1 || return 1
  local major candidate
  major=$(apt-cache depends postgresql 2>/dev/null | grep -o 'postgresql-[0-9][0-9]*' | head -1 \
          | cut -d- -f2 || true)
  if [ -z "$major" ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2 || true
    major=$(apt-cache depends postgresql 2>/dev/null | grep -o 'postgresql-[0-9][0-9]*' \
            | head -1 | cut -d- -f2 || true)
  fi
  [ -n "$major" ] || return 1
  candidate=$(apt-cache policy "postgresql-$major-pgvector" 2>/dev/null \
              | awk '/Candidate:/ {print $2}')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    log "Debian offers postgresql-$major but no postgresql-$major-pgvector (apt-cache policy)"
    return 1
  fi
  if [ ! -x "/usr/lib/postgresql/$major/bin/initdb" ] \
     || [ ! -f "/usr/share/postgresql/$major/extension/vector.control" ]; then
    [ "$(id -u)" = 0 ] || return 1
    log "installing postgresql-$major and postgresql-$major-pgvector from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      "postgresql-$major" "postgresql-$major-pgvector" >&2
  fi
  echo "/usr/lib/postgresql/$major/bin"
}

if [ -n "${PG_BIN:-}" ]; then
  BIN=$PG_BIN
elif BIN=$(debian_bin); then
  log "PostgreSQL and pgvector from Debian ($BIN)"
else
  log "PostgreSQL 16 and pgvector from the $PGSERVER_WHEEL wheel (PyPI)"
  "$PY" -m pip install -q --no-deps --target "$WORK/pgserver" "$PGSERVER_WHEEL" >&2
  BIN="$WORK/pgserver/pgserver/pginstall/bin"
fi
for tool in initdb pg_ctl psql; do
  [ -x "$BIN/$tool" ] || { log "no $tool in $BIN"; exit 1; }
done

if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
  AS=(runuser -u postgres --)
fi
mkdir -p "$WORK/data" "$WORK/run"
[ "$(id -u)" = 0 ] && chown postgres "$WORK/data" "$WORK/run"
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"${AS[@]}" "$BIN/initdb" -D "$WORK/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
# a throwaway server: durability is not wanted, speed is; the test suite opens many pools
"${AS[@]}" "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/run/server.log" -w -t 60 \
  -o "-h 127.0.0.1 -p $PORT -k $WORK/run -c max_connections=400 -c fsync=off \
      -c synchronous_commit=off -c full_page_writes=off" start >/dev/null \
  || { cat "$WORK/run/server.log" >&2 || true; exit 1; }

psql_do() { "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
psql_do -d postgres -c "CREATE DATABASE ai_contrib" -c "CREATE DATABASE ai_memory"
psql_do -d ai_memory -c "CREATE EXTENSION vector"
log "$(psql_do -d ai_memory -c "SELECT 'PostgreSQL ' || current_setting('server_version') \
  || ', pgvector ' || extversion FROM pg_extension WHERE extname = 'vector'") on 127.0.0.1:$PORT"

export AI_DATABASE_URL="postgresql://postgres@127.0.0.1:$PORT/ai_contrib"
export AI_MEMORY_PGVECTOR_CONNECTION_STRING="postgresql://postgres@127.0.0.1:$PORT/ai_memory"
export AI_REQUIRE_POSTGRES=1
"$@"
