"""``catalog-service``: the operator's command line.

    catalog-service serve [--host H] [--port P] [--workers N] [--demo]
    catalog-service migrate
    catalog-service demo [--catalog demo] [--objects 2000]
    catalog-service stats [CATALOG]
    catalog-service indexes {missing,defer,build} CATALOG
    catalog-service catalog create CATALOG [--title T]
    catalog-service catalog rotate-token CATALOG [--grace SECONDS]
    catalog-service keys create CATALOG --name N [--filter JSON] [--principals JSON] [--ttl S | --expires ISO]
    catalog-service keys list CATALOG
    catalog-service keys revoke CATALOG KEY_ID
    catalog-service embedded {status,stop}

An error an operator can fix (no database at DATABASE_URL, a port in use) is one line on stderr
and a non-zero exit status, not a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from . import key_commands
from .settings import Settings, get_settings


class Failure(Exception):
    """An error the operator can fix: printed as one line, exit status ``status``."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def _shown(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "(unparsable URL)"
    if parts.password:
        netloc = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username}:***@{netloc}")
    return urlunsplit(parts)


def _check_database_url() -> None:
    """DATABASE_URL and CATALOG_DATABASE_URL (docker-compose.yml's name) are the same setting."""
    plain, prefixed = os.environ.get("DATABASE_URL"), os.environ.get("CATALOG_DATABASE_URL")
    if plain and prefixed and plain != prefixed:
        raise Failure("DATABASE_URL and CATALOG_DATABASE_URL are both set and differ; set one of them", 2)


# Embedded servers this process started (their data folders): stopped when it exits (_finish).
_STARTED: list[Path] = []


def _dsn() -> str:
    from .db import resolve_dsn

    _check_database_url()
    settings = get_settings()
    if settings.database_url:
        return settings.database_url
    from . import embedded

    pgdata = settings.embedded_pgdata.resolve()
    was_running = embedded.running(pgdata) is not None
    try:
        dsn = resolve_dsn(settings)
    except Exception as exc:
        raise Failure(f"cannot start the embedded PostgreSQL in {pgdata}: {exc} (see {pgdata / 'log'})") from exc
    if not was_running:
        _STARTED.append(pgdata)
    return dsn


def _stop_started() -> None:
    from . import embedded

    while _STARTED:
        pgdata = _STARTED.pop()
        if embedded.stop(pgdata):
            print(f"embedded PostgreSQL in {pgdata} stopped", file=sys.stderr)


def _database_error(dsn: str, exc: BaseException) -> Failure:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Failure(f"cannot use the database at {_shown(dsn)}: {reason}", 2)


def _run(dsn: str, coroutine):
    """Run a command's coroutine; a database that cannot be reached or refuses is a Failure."""
    import asyncpg

    try:
        return asyncio.run(coroutine)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError,
            asyncpg.ClientConfigurationError, ValueError) as exc:
        raise _database_error(dsn, exc) from exc


async def _connect(dsn: str):
    import asyncpg

    from .store.database import _init_connection

    conn = await asyncpg.connect(dsn, timeout=10)
    await _init_connection(conn)
    return conn


async def _migrate(dsn: str) -> list[str]:
    from .store.catalogs import CatalogRegistry
    from .store.migrations import migrate

    conn = await _connect(dsn)
    try:
        applied = await migrate(conn)
        # Indexes this version declares and older catalogs lack (or hold invalid) are built here
        # (concurrently: the service may keep running), not at the service's start; a second
        # migrate at the same time waits for this one (store.catalogs.upgrade_lock).
        await CatalogRegistry().upgrade_partitions(
            conn, build_indexes=True, progress=lambda line: print(line, file=sys.stderr, flush=True))
        return applied
    finally:
        await conn.close()


async def load_demo(dsn: str, name: str, count: int, chunk: int = 2000, quiet: bool = False) -> str | None:
    """Create the demo catalog (unless it exists) and index ``count`` objects into it.
    Returns the catalog's connector token when it was created."""
    from catalog_schemas.api import Batch

    from .demo import objects, plone_catalog
    from .errors import NotFound
    from .store import batches
    from .store.catalogs import ANALYZE_TEXT, CatalogRegistry, defer_indexes

    registry = CatalogRegistry()
    conn = await _connect(dsn)
    try:
        try:
            await registry.get(conn, name)
            if not quiet:
                print(f"catalog {name!r} exists; not loading the demo again")
            return None
        except NotFound:
            pass
        catalog, token = await registry.create(conn, plone_catalog(name))
        started = time.perf_counter()
        # A large demo loads as a rebuild does: indexes built at the end (docs/decisions/0010).
        deferred = count >= DEFER_INDEXES_FROM
        if deferred:
            await defer_indexes(conn, catalog)
        pending: list[dict] = []
        done = 0

        async def flush():
            nonlocal done
            batch = Batch.model_validate({"batch_id": f"demo-{done}", "entries": pending})
            changes = batches.convert(batch, catalog, 1_000_000)
            async with conn.transaction():
                await batches.apply_one_shot(conn, catalog, batch, changes)
            done += len(pending)
            pending.clear()
            if not quiet:
                rate = done / (time.perf_counter() - started)
                print(f"\rindexed {done}/{count} objects ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)

        for entry in objects(count):
            pending.append(entry)
            if len(pending) >= chunk:
                await flush()
        if pending:
            await flush()
        if not quiet:
            print(file=sys.stderr)
        if deferred:
            await _build(dsn, catalog, None if quiet else lambda line: print(line, file=sys.stderr, flush=True))
        else:
            await conn.execute(f"analyze {catalog.table}")
            await conn.execute(ANALYZE_TEXT)
        return token
    finally:
        await conn.close()


async def _stats(dsn: str, name: str | None) -> None:
    conn = await _connect(dsn)
    try:
        rows = await conn.fetch(
            "select c.name, c.title, c.counter, jsonb_array_length(c.indexes) as indexes, "
            "jsonb_array_length(c.metadata) as metadata, "
            "pg_total_relation_size(format('catalog_object_%s', c.id)) as bytes "
            "from catalog c where $1::text is null or c.name = $1 order by c.name", name)
        if not rows:
            print("no catalogs" if name is None else f"no catalog {name!r}")
            return
        print(f"{'catalog':<20} {'objects':>10} {'counter':>8} {'indexes':>7} {'metadata':>8} {'size':>10}")
        for r in rows:
            cid = await conn.fetchval("select id from catalog where name = $1", r["name"])
            objects = await conn.fetchval(f"select count(*) from catalog_object_{int(cid)}")
            print(f"{r['name']:<20} {objects:>10} {r['counter']:>8} {r['indexes']:>7} {r['metadata']:>8} "
                  f"{r['bytes'] / 1048576:>8.1f}MB")
    finally:
        await conn.close()


# Demo catalogs from this many objects on are loaded with their indexes deferred.
DEFER_INDEXES_FROM = 20000


async def _build(dsn: str, catalog, progress) -> list[str]:
    """Build the catalog's missing indexes on a pool of the configured number of builders."""
    import asyncpg

    from .store.catalogs import build_indexes
    from .store.database import _init_connection

    settings = get_settings()
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=settings.index_builders + 1, init=_init_connection)
    try:
        return await build_indexes(pool, catalog, builders=settings.index_builders,
                                   memory=settings.index_build_memory, progress=progress)
    finally:
        await pool.close()


async def _indexes(dsn: str, action: str, name: str) -> int:
    """List, defer or build a catalog's secondary indexes (docs/decisions/0010)."""
    from .errors import NotFound
    from .store.catalogs import CatalogRegistry, defer_indexes, missing_indexes, plain_name

    conn = await _connect(dsn)
    try:
        try:
            catalog, _ = await CatalogRegistry().get(conn, name)
        except NotFound:
            print(f"no catalog {name!r}", file=sys.stderr)
            return 1
        if action == "missing":
            for _, index, _ in await missing_indexes(conn, catalog):
                print(plain_name(index))
            return 0
        if action == "defer":
            dropped = await defer_indexes(conn, catalog)
            print(f"{len(dropped)} indexes of {name!r} deferred; build them with `catalog-service indexes build {name}`")
            return 0
    finally:
        await conn.close()
    started = time.perf_counter()
    built = await _build(dsn, catalog, lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{len(built)} indexes of {name!r} built in {time.perf_counter() - started:.1f} s")
    return 0


async def _create_catalog(dsn: str, name: str, title: str) -> str:
    """Create an empty catalog (the connector declares its indexes when it is installed with the
    token) and return its connector token."""
    from catalog_schemas.api import CatalogCreate

    from .errors import CatalogError
    from .store.catalogs import CatalogRegistry

    conn = await _connect(dsn)
    try:
        try:
            _, token = await CatalogRegistry().create(conn, CatalogCreate(id=name, title=title))
        except CatalogError as exc:
            raise Failure(f"cannot create catalog {name!r}: {exc.detail}") from exc
        return token
    finally:
        await conn.close()


async def _rotate_token(dsn: str, name: str, grace: float):
    from .errors import NotFound
    from .store.catalogs import CatalogRegistry

    registry = CatalogRegistry()
    conn = await _connect(dsn)
    try:
        try:
            catalog, _ = await registry.get(conn, name)
        except NotFound as exc:
            raise Failure(f"no catalog {name!r}") from exc
        _, token, until = await registry.rotate_token(conn, catalog, grace)
        return token, until
    finally:
        await conn.close()


def _setting_comments() -> dict[str, str]:
    """The comment above each field of ``Settings`` (settings.py documents them there), by name:
    one source for the help and the code."""
    import inspect
    import re

    found, comment = {}, []
    for line in inspect.getsource(Settings).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("# "))
            continue
        match = re.match(r"([a-z_]+)\s*:", stripped)
        if match:
            found[match.group(1)] = " ".join(comment)
        if not stripped.startswith("..."):
            comment = [] if match or not stripped else comment
    return found


def _settings_help() -> str:
    """Every setting, as the environment variable that sets it, its default and its comment."""
    import textwrap

    comments = _setting_comments()
    lines = ["environment (each setting of the service; .env in the working folder is read too):"]
    for name, field in Settings.model_fields.items():
        env = "DATABASE_URL or CATALOG_DATABASE_URL" if name == "database_url" else f"CATALOG_{name.upper()}"
        default = field.default_factory() if field.default_factory is not None else field.default
        if name == "database_url":
            default = "(empty: the embedded PostgreSQL)"
        elif name == "admin_token":
            default = "(empty: serve makes one per run and prints it)"
        lines.append(f"  {env}  (default {default})")
        if comments.get(name):
            lines.extend(textwrap.wrap(comments[name], 96, initial_indent="      ", subsequent_indent="      "))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    defaults = Settings.model_fields
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="catalog-service", formatter_class=formatter,
        description="The catalog service of Plone sites: an HTTP API over PostgreSQL.",
        epilog="Every command uses the database of DATABASE_URL (or CATALOG_DATABASE_URL); without one, an "
               "embedded PostgreSQL in CATALOG_EMBEDDED_PGDATA (default .pgdata/service).\n"
               "`catalog-service COMMAND --help` describes a command; `catalog-service serve --help` lists "
               "every setting.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="run the HTTP service", formatter_class=formatter, epilog=_settings_help(),
        description="Run the HTTP service (uvicorn). Applies migrations first unless CATALOG_MIGRATE_ON_START "
                    "is false. Stops the embedded PostgreSQL, if it uses one, when it exits (Ctrl-C, SIGTERM).")
    serve.add_argument("--host", default=None,
                       help=f"address to listen on (env CATALOG_HOST, default {defaults['host'].default}; "
                            "0.0.0.0 in a container)")
    serve.add_argument("--port", type=int, default=None,
                       help=f"port to listen on (env CATALOG_PORT, default {defaults['port'].default})")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    serve.add_argument("--demo", action="store_true",
                       help="create and fill the demo catalog (2,000 objects) first if it is missing, "
                            "and show the demo search page at / (CATALOG_DEMO_PAGE)")
    sub.add_parser("migrate", help="apply database migrations", formatter_class=formatter,
                   description="Apply the missing migrations and build the indexes older catalogs lack "
                               "(the service may keep running).")
    demo = sub.add_parser("demo", help="create and fill a demo catalog", formatter_class=formatter,
                          description="Create a catalog of generated Plone-like content, unless it exists.")
    demo.add_argument("--catalog", default="demo", help="catalog id (default demo)")
    demo.add_argument("--objects", type=int, default=2000, help="objects to generate (default 2000)")
    stats = sub.add_parser("stats", help="show catalogs and their sizes", formatter_class=formatter,
                           description="Objects, counter, indexes, metadata columns and size per catalog.")
    stats.add_argument("catalog", nargs="?", help="one catalog (default: all)")
    indexes = sub.add_parser("indexes", help="list, defer (before a bulk load) or build a catalog's SQL indexes",
                             formatter_class=formatter,
                             description="missing: list the SQL indexes a catalog lacks; defer: drop them "
                                         "before a bulk load; build: build them (CATALOG_INDEX_BUILDERS at a time, "
                                         "each with CATALOG_INDEX_BUILD_MEMORY).")
    indexes.add_argument("action", choices=["missing", "defer", "build"], help="what to do")
    indexes.add_argument("catalog", help="catalog id")
    catalog = sub.add_parser(
        "catalog", help="create a catalog and get its connector token, or rotate the token",
        formatter_class=formatter,
        description="Catalog tokens for the Plone connector (CATALOG_SERVICE_TOKEN; docs/deploy.md). A token "
                    "is printed once, on stdout; the service keeps only its hash.")
    catalog_sub = catalog.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = catalog_sub.add_parser("create", help="create an empty catalog and print its token",
                                    description="Create an empty catalog; the connector declares its indexes "
                                                "and metadata when the add-on is installed with the token.")
    create.add_argument("catalog", help="catalog id (the connector's CATALOG_SERVICE_CATALOG_ID, default the "
                                        "Plone site's id)")
    create.add_argument("--title", default="", help="title (default empty)")
    rotate = catalog_sub.add_parser("rotate-token", help="issue a new token; the old one stays valid a while",
                                    description="Issue the catalog a new connector token and print it. The old "
                                                "token, and the signed tokens minted with it, stay valid for the "
                                                "grace period.")
    rotate.add_argument("catalog", help="catalog id")
    rotate.add_argument("--grace", type=float, default=3600.0,
                        help="seconds the old token stays valid (default 3600; 0: it ends now)")
    key_commands.add_parser(sub, formatter)
    emb = sub.add_parser("embedded", help="status of the embedded PostgreSQL, or stop it (make stop)",
                         formatter_class=formatter,
                         description="The embedded PostgreSQL used without DATABASE_URL, in "
                                     "CATALOG_EMBEDDED_PGDATA (default .pgdata/service).")
    emb.add_argument("action", choices=["status", "stop"], help="what to do")
    emb.add_argument("pgdata", nargs="*", type=Path,
                     help="data folders (default CATALOG_EMBEDDED_PGDATA)")
    return parser


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is printed as if the service ran."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's backlog; connections wait there until the workers accept
    except OSError as exc:
        sock.close()
        raise Failure(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def _serve(args, settings: Settings) -> int:
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    dsn = _dsn()
    if not settings.database_url:
        # serve owns the embedded server of `make run`: it stops it when it exits, also one it found
        # running (left by a command that was killed).
        pgdata = settings.embedded_pgdata.resolve()
        if pgdata not in _STARTED:
            _STARTED.append(pgdata)
    host = args.host or settings.host
    port = args.port or settings.port
    sock = _bind(host, port)
    try:
        # Workers must reach the same database, embedded or not.
        os.environ["DATABASE_URL"] = dsn
        os.environ.pop("CATALOG_DATABASE_URL", None)
        if args.demo:  # the demo page at / comes with the demo catalog, unless the setting says no
            os.environ.setdefault("CATALOG_DEMO_PAGE", "true")
        if settings.migrate_on_start or args.demo:
            _run(dsn, _migrate(dsn))
        demo_token = _run(dsn, load_demo(dsn, "demo", 2000)) if args.demo else None
        config = uvicorn.Config("catalog_service.app:app_factory", factory=True, host=host, port=port,
                                workers=args.workers, log_level=settings.log_level, access_log=False)
        if not settings.admin_token:
            token = secrets.token_urlsafe(24)
            os.environ["CATALOG_ADMIN_TOKEN"] = token
            print(f"CATALOG_ADMIN_TOKEN was not set; this run's admin token: {token}", file=sys.stderr)
        if demo_token:
            print(f"demo catalog created; its connector token: {demo_token}", file=sys.stderr)
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        print(f"catalog service on http://{host}:{port}  (try: curl 'http://{shown}:{port}/search?catalog=demo"
              f"&SearchableText=plone&b_size=3')", file=sys.stderr)
        get_settings.cache_clear()
        if args.workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    return 0


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    import signal

    args = _parser().parse_args(argv)
    # SIGTERM before uvicorn takes over the signals (migrations, the demo) ends as Ctrl-C does: the
    # embedded server is stopped on the way out. Uvicorn raises a signal it caught again at its end.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return _command(args)
    except Failure as exc:
        print(f"catalog-service: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    finally:
        _stop_started()


def _command(args) -> int:
    try:
        settings = get_settings()
    except Exception as exc:  # pydantic's ValidationError: a setting that does not parse
        first = str(exc).strip().splitlines()
        raise Failure(f"invalid settings: {' '.join(first[:3])}", 2) from exc
    if args.command == "embedded":
        from . import embedded

        folders = args.pgdata or [settings.embedded_pgdata]
        for pgdata in folders:
            if args.action == "stop":
                print(f"{pgdata}: {'stopped' if embedded.stop(pgdata) else 'not running'}")
            else:
                pid = embedded.running(pgdata)
                print(f"{pgdata}: {'running, pid ' + str(pid) if pid else 'not running'}")
        return 0
    if args.command == "serve":
        return _serve(args, settings)
    dsn = _dsn()
    if args.command == "migrate":
        applied = _run(dsn, _migrate(dsn))
        print("applied: " + ", ".join(applied) if applied else "database is up to date")
        return 0
    if args.command == "demo":
        _run(dsn, _migrate(dsn))
        token = _run(dsn, load_demo(dsn, args.catalog, args.objects))
        if token:
            print(f"catalog {args.catalog!r} created; its connector token: {token}")
        return 0
    if args.command == "stats":
        _run(dsn, _stats(dsn, args.catalog))
        return 0
    if args.command == "indexes":
        return _run(dsn, _indexes(dsn, args.action, args.catalog))
    if args.command == "keys":
        _run(dsn, _migrate(dsn))
        try:
            return _run(dsn, key_commands.run(args, _connect, dsn))
        except key_commands.KeyFailure as exc:
            raise Failure(str(exc)) from exc
    if args.command == "catalog":
        _run(dsn, _migrate(dsn))
        if args.action == "create":
            token = _run(dsn, _create_catalog(dsn, args.catalog, args.title))
            print(f"catalog {args.catalog!r} created; set CATALOG_SERVICE_TOKEN for its Plone site to:",
                  file=sys.stderr)
            print(token)
            return 0
        if args.grace < 0:
            raise Failure("--grace must be 0 or more seconds", 2)
        token, until = _run(dsn, _rotate_token(dsn, args.catalog, args.grace))
        ends = f"stays valid until {until.isoformat(timespec='seconds')}" if until else "is no longer valid"
        print(f"catalog {args.catalog!r}: new connector token below; the old one {ends}", file=sys.stderr)
        print(token)
        return 0
    raise AssertionError(args.command)


if __name__ == "__main__":
    raise SystemExit(main())
