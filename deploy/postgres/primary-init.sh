#!/bin/sh
# Runs once, when the official postgres image initialises an empty data directory
# (/docker-entrypoint-initdb.d). Prepares the primary for streaming replication:
# a replication role, a physical slot per replica, and a pg_hba.conf line for them.
set -eu

: "${REPLICATION_USER:=replicator}"
: "${REPLICATION_PASSWORD:?REPLICATION_PASSWORD must be set}"
: "${REPLICATION_SLOTS:=replica1}"

# psql variables (:"name", :'value') quote the role name and password; nothing is spliced into SQL.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v role="$REPLICATION_USER" -v password="$REPLICATION_PASSWORD" <<'SQL'
CREATE ROLE :"role" WITH REPLICATION LOGIN PASSWORD :'password';
SQL

# A slot keeps the WAL a replica still needs (bounded by max_slot_wal_keep_size on the primary).
for slot in $(echo "$REPLICATION_SLOTS" | tr ',' ' '); do
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -v slot="$slot" <<'SQL'
SELECT pg_create_physical_replication_slot(:'slot');
SQL
done

# "all" does not match replication connections: they need a line of their own.
echo "host replication $REPLICATION_USER all scram-sha-256" >> "$PGDATA/pg_hba.conf"
