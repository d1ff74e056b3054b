#!/usr/bin/env bash
# A private PostgreSQL cluster for local development and tests.
#
#   infra/local-postgres.sh start|stop|status|url
#
# The cluster lives in .local/pgdata (git-ignored; kept between runs) and listens on 127.0.0.1 only,
# port ${CLINIC_PG_PORT:-55432}, with trust authentication for the `postgres` superuser. It keeps
# PostgreSQL's durability settings (fsync on). With CLINIC_PG_EPHEMERAL=1 it is a throwaway cluster
# instead (what tests/run uses): its own folder, .local/pgdata-ephemeral, with fsync,
# synchronous_commit and full_page_writes off.
#
# Environment:
#   CLINIC_PG_PORT   port to listen on (default 55432)
#   CLINIC_PG_DATA   data folder (default <repo>/.local/pgdata, or .local/pgdata-ephemeral)
#   CLINIC_PG_EPHEMERAL  1: the fast, non-durable settings (default 0)
#   CLINIC_PG_BIN    folder holding initdb and pg_ctl (default: PATH, else the newest
#                    /usr/lib/postgresql/<version>/bin; as root with apt-get, installs `postgresql`)
#
# PostgreSQL refuses to run as root. Started by root, the cluster runs as the `postgres` account
# (created by the Debian package), else as a system account `clinic-pg` created on first use. When
# that account cannot reach the data folder (e.g. the repository is under /root), the data lives in
# /var/tmp/clinic-pg-<hash of the data path> instead and the data path becomes a symlink to it.
#
# The same logic, in Rust, is functions/clinic/src/local_pg/mod.rs (`clinic dev`); keep them in step.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${CLINIC_PG_PORT:-55432}"
EPHEMERAL="${CLINIC_PG_EPHEMERAL:-0}"
if [[ "$EPHEMERAL" == 1 ]]; then
    DATA="${CLINIC_PG_DATA:-$ROOT/.local/pgdata-ephemeral}"
else
    DATA="${CLINIC_PG_DATA:-$ROOT/.local/pgdata}"
fi
RUN_AS="" # account that runs the cluster when we are root; empty: the current user
BIN=""

die() {
    echo "local-postgres: $*" >&2
    exit 1
}

usage() {
    echo "usage: $0 start|stop|status|url" >&2
    exit 2
}

# Sets BIN to the folder holding initdb and pg_ctl; with "install", installs PostgreSQL when root
# can, else fails. Without it, leaves BIN empty when PostgreSQL is not installed.
find_bin() {
    local install="${1:-}"
    if [[ -n "${CLINIC_PG_BIN:-}" ]]; then
        [[ -x "$CLINIC_PG_BIN/initdb" && -x "$CLINIC_PG_BIN/pg_ctl" ]] ||
            die "CLINIC_PG_BIN=$CLINIC_PG_BIN does not hold initdb and pg_ctl"
        BIN="$CLINIC_PG_BIN"
        return
    fi
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        BIN="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
        [[ -x "$BIN/initdb" ]] || BIN="$(dirname "$(command -v pg_ctl)")"
        return
    fi
    local newest
    newest="$(find_debian_bin)"
    if [[ -z "$newest" && "$install" != install ]]; then
        return 0
    fi
    if [[ -z "$newest" && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        echo "local-postgres: initdb/pg_ctl not found; installing the Debian package postgresql" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
        newest="$(find_debian_bin)"
    fi
    [[ -n "$newest" ]] || die "initdb and pg_ctl not found on PATH or in /usr/lib/postgresql/<version>/bin.
Install PostgreSQL (Debian/Ubuntu: apt-get install postgresql), or set DATABASE_URL to a server you have."
    BIN="$newest"
}

find_debian_bin() {
    local dir
    dir="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
    if [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
        echo "$dir"
    fi
}

# Runs a command as the cluster's account.
as_owner() {
    if [[ -z "$RUN_AS" ]]; then
        "$@"
    elif command -v runuser >/dev/null; then
        runuser -u "$RUN_AS" -- "$@"
    else
        su -s /bin/sh "$RUN_AS" -c "$(printf '%q ' "$@")"
    fi
}

# When root, picks (or creates) the unprivileged account that runs the cluster.
choose_account() {
    [[ "$(id -u)" == 0 ]] || return 0
    if id -u postgres >/dev/null 2>&1; then
        RUN_AS=postgres
    else
        if ! id -u clinic-pg >/dev/null 2>&1; then
            useradd --system --no-create-home --shell /usr/sbin/nologin clinic-pg ||
                die "cannot create the system account clinic-pg to run PostgreSQL (it refuses to run as root)"
        fi
        RUN_AS=clinic-pg
    fi
}

# Resolves DATA to a real folder that the cluster's account owns and can reach.
prepare_data_dir() {
    if [[ -L "$DATA" ]]; then
        DATA="$(readlink -f "$DATA")"
    fi
    mkdir -p "$DATA"
    [[ -n "$RUN_AS" ]] || return 0
    chown "$RUN_AS" "$DATA"
    chmod 700 "$DATA"
    if as_owner test -w "$DATA" -a -x "$DATA"; then
        return 0
    fi
    # The account cannot traverse a parent folder (e.g. /root): keep the data where it can, and
    # leave a symlink at the usual place so the data is easy to find.
    local requested="$DATA" hash fallback
    hash="$(printf '%s' "$requested" | sha256sum | cut -c1-12)"
    fallback="/var/tmp/clinic-pg-$hash"
    mkdir -p "$fallback"
    chown "$RUN_AS" "$fallback"
    chmod 700 "$fallback"
    if rmdir "$requested" 2>/dev/null; then
        ln -s "$fallback" "$requested"
    fi
    echo "local-postgres: $RUN_AS cannot reach $requested; using $fallback" >&2
    DATA="$fallback"
}

# Resolves DATA without creating anything (for stop/status).
resolve_data_dir() {
    if [[ -L "$DATA" ]]; then
        DATA="$(readlink -f "$DATA")"
    fi
}

socket_dir() {
    # Unix socket paths are limited to ~107 bytes and pg_ctl passes options through a shell.
    if [[ ${#DATA} -lt 80 && "$DATA" =~ ^[A-Za-z0-9/._-]+$ ]]; then
        echo "$DATA"
    else
        echo /tmp
    fi
}

is_running() {
    [[ -n "$BIN" && -f "$DATA/PG_VERSION" ]] && as_owner "$BIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1
}

# The port the running server listens on (line 4 of postmaster.pid).
running_port() {
    sed -n 4p "$DATA/postmaster.pid" 2>/dev/null || true
}

cmd_start() {
    find_bin install
    choose_account
    prepare_data_dir
    if [[ ! -f "$DATA/PG_VERSION" ]]; then
        echo "local-postgres: creating a cluster in $DATA" >&2
        as_owner "$BIN/initdb" -D "$DATA" -A trust -U postgres --no-sync -E UTF8 --locale=C >/dev/null
    fi
    if is_running; then
        local port
        port="$(running_port)"
        if [[ -n "$port" && "$port" != "$PORT" ]]; then
            die "already running on port $port, not $PORT; stop it first (CLINIC_PG_PORT=$port $0 stop)"
        fi
        echo "local-postgres: already running on 127.0.0.1:$PORT ($DATA)" >&2
        return 0
    fi
    local options
    options="-c listen_addresses=127.0.0.1 -p $PORT -c max_connections=200"
    options+=" -c unix_socket_directories=$(socket_dir)"
    if [[ "$EPHEMERAL" == 1 ]]; then
        options+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    fi
    if ! as_owner "$BIN/pg_ctl" start -D "$DATA" -l "$DATA/server.log" -w -t 60 -o "$options" >/dev/null; then
        echo "local-postgres: the server did not start; the end of $DATA/server.log:" >&2
        tail -n 20 "$DATA/server.log" >&2 || true
        exit 1
    fi
    echo "local-postgres: running on 127.0.0.1:$PORT ($DATA)" >&2
}

cmd_stop() {
    find_bin
    choose_account
    resolve_data_dir
    if is_running; then
        as_owner "$BIN/pg_ctl" stop -D "$DATA" -m fast -w >/dev/null
        echo "local-postgres: stopped" >&2
    else
        echo "local-postgres: not running" >&2
    fi
}

cmd_status() {
    find_bin
    choose_account
    resolve_data_dir
    if is_running; then
        local port
        port="$(running_port)"
        echo "running on 127.0.0.1:${port:-$PORT} ($DATA)"
    else
        echo "not running ($DATA)"
        return 3
    fi
}

cmd_url() {
    echo "postgres://postgres@127.0.0.1:$PORT/postgres"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    url) cmd_url ;;
    *) usage ;;
esac
