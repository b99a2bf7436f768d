#!/bin/sh
# Entry point of a streaming read replica, for the official postgres image.
# On first start (empty data directory) it clones the primary with pg_basebackup -R, which writes
# standby.signal and primary_conninfo; then it hands over to the image's own entrypoint, which
# finds an initialised data directory and starts postgres (a hot standby) as user postgres.
set -eu

: "${PGDATA:=/var/lib/postgresql/data}"
: "${PRIMARY_HOST:=postgres}"
: "${PRIMARY_PORT:=5432}"
: "${REPLICATION_USER:=replicator}"
: "${REPLICATION_PASSWORD:?REPLICATION_PASSWORD must be set}"
: "${REPLICATION_SLOT:=replica1}"
: "${POSTGRES_ENTRYPOINT:=docker-entrypoint.sh}"

# As root (the image's default) run the PostgreSQL tools as postgres; as anyone else, as oneself.
as_postgres() {
    if [ "$(id -u)" = "0" ]; then
        gosu postgres "$@"
    else
        "$@"
    fi
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    mkdir -p "$PGDATA"
    if [ "$(id -u)" = "0" ]; then
        chown postgres:postgres "$PGDATA"
    fi
    chmod 0700 "$PGDATA"
    until as_postgres pg_isready --quiet -h "$PRIMARY_HOST" -p "$PRIMARY_PORT"; do
        echo "replica: waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT"
        sleep 1
    done
    echo "replica: cloning the primary into $PGDATA"
    as_postgres env PGPASSWORD="$REPLICATION_PASSWORD" pg_basebackup \
        --host="$PRIMARY_HOST" --port="$PRIMARY_PORT" --username="$REPLICATION_USER" \
        --pgdata="$PGDATA" --wal-method=stream --slot="$REPLICATION_SLOT" \
        --write-recovery-conf --checkpoint=fast --no-password --progress
fi

exec "$POSTGRES_ENTRYPOINT" "$@"
