#!/bin/sh
# Entry point of the Plone image. `start` (the default command) creates the Plone site on first
# start if PLONE_SITE_ID is set, then serves Zope with runwsgi. Any other command runs as given.
set -eu

: "${PLONE_INSTANCE:=/app}"
: "${PLONE_STORAGE:=jsonb}"
: "${PLONE_LISTEN:=0.0.0.0:8080}"
: "${CATALOG_SERVICE_URL:=http://catalog:8080}"
: "${CATALOG_SERVICE_TOKEN:=}"
: "${PLONE_SITE_ID:=}"
export PLONE_INSTANCE PLONE_STORAGE CATALOG_SERVICE_URL CATALOG_SERVICE_TOKEN PLONE_SITE_ID

if [ -z "${ZODB_DSN:-}" ]; then
    echo "ZODB_DSN is not set (the PostgreSQL DSN of the ZODB storage)" >&2
    exit 64
fi
case "$PLONE_STORAGE" in
    jsonb|relstorage) ;;
    *) echo "PLONE_STORAGE must be jsonb or relstorage, not '$PLONE_STORAGE'" >&2; exit 64 ;;
esac

mkdir -p "$PLONE_INSTANCE/var/cache" "$PLONE_INSTANCE/var/blobcache"

if [ "${1:-start}" = "start" ]; then
    if [ -n "$PLONE_SITE_ID" ]; then
        zconsole run "$PLONE_INSTANCE/etc/zope.conf" "$PLONE_INSTANCE/scripts/create_site.py"
    fi
    exec runwsgi "$PLONE_INSTANCE/etc/zope.ini" "http_address=$PLONE_LISTEN"
fi
exec "$@"
