"""One configuration of the Plone benchmark, run in its own process (benchmarks/plone_bench.py).

Zope keeps its set-up (ZCML, the database of the publisher) in process globals, so each
configuration (catalog x storage) gets a fresh interpreter. The Plone site comes from
plone.app.testing's fixture, copied record by record into the storage under test (so every
configuration starts from the same site), and is then used like a real instance: content is
created through plone.api, one transaction per document, and pages are published through
ZPublisher's WSGI entry point exactly as a request would be.
"""

from __future__ import annotations

import base64
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import transaction  # noqa: E402
import ZODB  # noqa: E402
from plone.app.testing import PLONE_FIXTURE, PloneSandboxLayer, applyProfile  # noqa: E402
from plone.testing import zodb, zope  # noqa: E402

# Objects in each connection's ZODB cache (the configuration's cache-size; Plone's default is 30,000).
WARM_CACHE = 30_000
FOLDERS = 10
EDITOR = ("bench-editor", "bench-editor-pw-1")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango")
SEARCH_WORD = "quebec"  # in one document of 20
# Subjects: 0-3 of these per document, "Python" on about one in seven.
SUBJECTS = ("Python", "Zope", "Plone", "PostgreSQL", "Docker", "Testing", "Security", "REST", "React", "CSS",
            "API", "Migration", "Performance", "GraphQL", "JavaScript")


def open_storage(kind: str, target: str, blob_dir: str):
    if kind == "FileStorage":
        from ZODB.FileStorage import FileStorage

        return FileStorage(target, blob_dir=blob_dir)
    if kind == "RelStorage":
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        from relstorage.options import Options
        from relstorage.storage import RelStorage

        options = Options(keep_history=False, blob_dir=blob_dir, shared_blob_dir=False)
        # RelStorage's driver (psycopg2) wants key=value connection strings, not URLs.
        dsn = make_conninfo(**{k: v for k, v in conninfo_to_dict(target).items() if v})
        return RelStorage(PostgreSQLAdapter(dsn=dsn, options=options), options=options)
    if kind == "JsonbStorage":
        from plone_connector.storage import JsonbStorage

        return JsonbStorage(target, blob_dir=blob_dir)
    if kind == "PGJsonbStorage":  # zodb-pgjsonb, under plone.pgcatalog (its own Python)
        from zodb_pgjsonb.storage import PGJsonbStorage

        return PGJsonbStorage(dsn=target, blob_temp_dir=blob_dir)
    raise ValueError(kind)


class BenchLayer(PloneSandboxLayer):
    """Plone with plone.app.contenttypes (and the connector when asked), on the storage under test."""

    defaultBases = (PLONE_FIXTURE,)
    connector = False  # the connector installed in the site
    load_connector = False  # its ZCML only (an installable product, the site still on ZCatalog)
    pgcatalog = False  # plone.pgcatalog installed instead (on zodb-pgjsonb)

    def setUpZope(self, app, configurationContext):
        import plone.app.contenttypes

        self.loadZCML(package=plone.app.contenttypes)
        if self.connector or self.load_connector:
            import plone_connector

            self.loadZCML(package=plone_connector)
        if self.pgcatalog:
            import plone.pgcatalog
            from plone.pgcatalog.testing import install_move_handlers_in_stack

            self.loadZCML(package=plone.pgcatalog)
            # As its own test layer does: the move handlers where OFS registered the originals.
            install_move_handlers_in_stack()

    def setUpPloneSite(self, portal):
        applyProfile(portal, "plone.app.contenttypes:default")
        workflow = portal.portal_workflow
        workflow.setDefaultChain("simple_publication_workflow")
        # Documents are published on creation (anonymous pages list them); folders go through
        # the publication workflow.
        workflow.setChainForPortalTypes(("Document",), "one_state_workflow")
        portal.acl_users.source_users.addUser(EDITOR[0], EDITOR[0], EDITOR[1])
        portal.acl_users.portal_role_manager.doAssignRoleToPrincipal(EDITOR[0], "Editor")
        portal.acl_users.portal_role_manager.doAssignRoleToPrincipal(EDITOR[0], "Member")
        if self.connector:
            applyProfile(portal, "plone_connector:default")
        if self.pgcatalog:
            applyProfile(portal, "plone.pgcatalog:default")


def register_pgcatalog(db) -> None:
    """What plone.pgcatalog does when Zope opens its database (an IDatabaseOpenedWithRoot
    subscriber, which plone.app.testing never fires); its move handlers are in place already."""
    from plone.pgcatalog.startup import register_catalog_processor
    from zope.processlifetime import DatabaseOpenedWithRoot

    with mock.patch("plone.pgcatalog.move.install_move_handlers", lambda: None):
        register_catalog_processor(DatabaseOpenedWithRoot(db))


def set_up(kind: str, target: str, connector: bool, blob_dir: str, pgcatalog: bool = False):
    from tests.connector.sites import set_up as set_up_layers
    from tests.e2e.jsonb_layer import seed

    def stacked(base_db, name=None):
        if base_db is None or name != "BenchLayer":
            return original(base_db, name)
        storage = open_storage(kind, target, blob_dir)
        seed(storage, base_db.storage)
        db = ZODB.DB(storage, cache_size=WARM_CACHE)
        if pgcatalog:
            register_pgcatalog(db)
        return db

    original = zodb.stackDemoStorage
    layer = BenchLayer(name="BenchLayer")
    layer.connector = connector
    layer.pgcatalog = pgcatalog
    with mock.patch.object(zodb, "stackDemoStorage", stacked):
        set_up_layers(layer)
    return layer


# -- acting like a Plone instance -----------------------------------------------------------


class Site:
    """A connection to the site, kept open like a Zope worker thread's (its ZODB cache persists)."""

    def __init__(self):
        from plone.app.testing import SITE_OWNER_NAME
        from plone.app.testing import login as plone_login
        from zope.component.hooks import setSite

        self._context = zope.zopeApp()
        self.app = self._context.__enter__()
        self.site = self.app["plone"]
        setSite(self.site)
        plone_login(self.app, SITE_OWNER_NAME)

    def close(self):
        from plone.app.testing import logout
        from zope.component.hooks import setSite

        transaction.abort()
        logout()
        setSite(None)
        self._context.__exit__(None, None, None)


def document_text(n: int) -> str:
    words = [WORDS[(n * 7 + i * 3) % len(WORDS)] for i in range(12)]
    if n % 20 == 0:
        words.append(SEARCH_WORD)
    else:
        words = [w for w in words if w != SEARCH_WORD]
    return " ".join(words)


def document_subjects(n: int) -> tuple[str, ...]:
    return tuple(SUBJECTS[(n * 3 + i * 5) % len(SUBJECTS)] for i in range(n % 4))


class CatalogTime:
    """Time the request waited for the catalog's own work while writing: ZCatalog's
    ``catalog_object`` and ``uncatalog_object``; for the connector, its requests to the service and
    its waits for the requests it hands to its background thread (that thread's own time is not
    the request's). Calls: ZCatalog's calls, or the connector's requests, per document."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._depth = threading.local()

    def install(self, connector: bool, no_op: bool = False, extract_only: bool = False,
                pgcatalog: bool = False) -> None:
        if no_op or extract_only:
            # The floors: Plone with a catalog whose indexing costs nothing (ZCatalog's
            # catalog_object and uncatalog_object do nothing), or nothing but computing the
            # values it would index and store, as ZCatalog does (through the same wrapper and
            # plone.indexer adapters; the connector's extraction, which mirrors ZCatalog's).
            from Products.ZCatalog.ZCatalog import ZCatalog

            from plone_connector.catalog.tool import ServiceCatalogTool

            def extract(self, obj, uid=None, idxs=None, update_metadata=1, pghandler=None):
                ServiceCatalogTool._extract(self, obj, idxs, update_metadata)

            ZCatalog.catalog_object = extract if extract_only else (lambda self, *args, **kw: None)
            ZCatalog.uncatalog_object = lambda self, *args, **kw: None
        if connector:
            from plone_connector.catalog import batch, client
            from plone_connector.catalog.client import CatalogClient

            self._wrap(CatalogClient, "_send", count=True)
            for name in ("tpc_begin", "tpc_vote", "tpc_finish", "_discard"):
                self._wrap(batch.BatchDataManager, name, count=False)
            self._wrap(client, "settle", count=False)
        elif pgcatalog:
            from plone.pgcatalog.catalog import PlonePGCatalogTool

            # Its extraction into the annotation the storage writes at vote (that write is the
            # storage's time, as the indexes' BTrees are ZODB's for ZCatalog).
            self._wrap(PlonePGCatalogTool, "_set_pg_annotation", count=True)
            self._wrap(PlonePGCatalogTool, "unindexObject", count=True)
        else:
            from Products.ZCatalog.ZCatalog import ZCatalog

            self._wrap(ZCatalog, "catalog_object", count=True)
            self._wrap(ZCatalog, "uncatalog_object", count=True)

    def _wrap(self, owner, name, count: bool):
        real = getattr(owner, name)
        timer = self

        def timed(*args, **kw):
            if count:
                timer.calls += 1
            depth = getattr(timer._depth, "n", 0)
            if depth or threading.current_thread().name.startswith("catalog-batches"):
                return real(*args, **kw)  # inside a timed call, or off the request's thread
            timer._depth.n = 1
            began = time.perf_counter()
            try:
                return real(*args, **kw)
            finally:
                timer._depth.n = 0
                timer.seconds += time.perf_counter() - began

        setattr(owner, name, timed)

    def take(self) -> tuple[float, int]:
        taken = (self.seconds, self.calls)
        self.seconds, self.calls = 0.0, 0
        return taken


catalog_time = CatalogTime()


def create_documents(start: int, stop: int) -> float:
    """Create documents start..stop-1 (one transaction each); ms per document."""
    from plone import api
    from plone.app.textfield.value import RichTextValue

    s = Site()
    try:
        began = time.perf_counter()
        for n in range(start, stop):
            folder = s.site[f"folder-{n % FOLDERS}"]
            text = document_text(n)
            api.content.create(
                container=folder, type="Document", id=f"doc-{n}", title=f"Document {n} {text[:20]}",
                description=f"About {text[:40]}", subject=document_subjects(n),
                text=RichTextValue(f"<p>{text}</p>", "text/html", "text/x-html-safe"),
            )
            transaction.commit()
        return (time.perf_counter() - began) * 1000 / (stop - start)
    finally:
        s.close()


def create_folders() -> None:
    from plone import api

    s = Site()
    try:
        for k in range(FOLDERS):
            folder = api.content.create(container=s.site, type="Folder", id=f"folder-{k}", title=f"Section {k}")
            api.content.transition(folder, "publish")
        transaction.commit()
    finally:
        s.close()


def modify_documents(count: int) -> float:
    """Edit title and description of ``count`` documents as the edit form does; ms per document."""
    from zope.event import notify
    from zope.lifecycleevent import ObjectModifiedEvent

    s = Site()
    try:
        began = time.perf_counter()
        for n in range(count):
            doc = s.site[f"folder-{n % FOLDERS}"][f"doc-{n}"]
            doc.title = f"Edited {n} {doc.title}"[:120]
            doc.description = f"Edited: {doc.description}"[:200]
            notify(ObjectModifiedEvent(doc))
            transaction.commit()
        return (time.perf_counter() - began) * 1000 / count
    finally:
        s.close()


def catalog_queries(site) -> dict[str, dict]:
    """The six query shapes of plone.pgcatalog's published Plone benchmark, on this site's content
    (documents in ten folders, so its "path depth 1" of the site root is depth 2 here: it finds
    every document too)."""
    site_path = "/".join(site.getPhysicalPath())
    return {
        "portal_type": {"portal_type": "Document"},
        "type+state+Subject sorted": {"portal_type": "Document", "review_state": "published", "Subject": "Python",
                                      "sort_on": "modified", "sort_order": "descending", "b_size": 20},
        "SearchableText": {"SearchableText": "about document"},
        "path + position": {"path": {"query": site_path, "depth": 2}, "sort_on": "getObjPositionInParent"},
        "published, Anonymous": {"portal_type": "Document", "review_state": "published",
                                 "allowedRolesAndUsers": ["Anonymous"]},
        "date sorted": {"sort_on": "created", "sort_order": "descending", "b_size": 50},
    }


def clear_query_caches(catalog_kind: str) -> None:
    """Empty the catalog's per-process query cache (a commit elsewhere in the site does as much)."""
    if catalog_kind == "connector":
        from plone_connector.catalog.cache import query_cache

        query_cache.clear()
    elif catalog_kind == "pgcatalog":
        from plone.pgcatalog.cache import get_query_cache

        get_query_cache().clear()


def time_queries(catalog_kind: str, cleared: bool, rounds: int) -> dict[str, dict]:
    """Median ms of each query as Anonymous, with ``len()`` and the first 20 brains' Title, URL and
    review_state read as a listing does. ``cleared``: the query caches emptied and the ZODB cache
    trimmed to its size (cacheGC) before each run, as after commits elsewhere in a busy site."""
    from plone.app.testing import logout

    s = Site()
    logout()  # as Anonymous: the security filter is part of every real query
    try:
        catalog = s.site.portal_catalog
        queries = catalog_queries(s.site)
        result = {}
        profile_label = os.environ.get("PLONE_BENCH_PROFILE")  # cProfile one query's timed runs
        for label, query in queries.items():
            samples, waits, sent = [], [], []
            profiler = None
            if label == profile_label and cleared == (os.environ.get("PLONE_BENCH_PROFILE_CLEARED") == "1"):
                import cProfile

                profiler = cProfile.Profile()
            found = 0
            for i in range(rounds + 3):
                transaction.abort()  # a new request: a fresh snapshot
                if cleared:
                    s.app._p_jar.cacheGC()
                    clear_query_caches(catalog_kind)
                if profiler is not None and i >= 3:
                    profiler.enable()
                catalog_time.take()
                began = time.perf_counter()
                brains = catalog.searchResults(**query)
                rows = [(b.Title, b.getURL(), b.review_state) for b in brains[:20]]
                found = len(brains)
                elapsed = (time.perf_counter() - began) * 1000
                waited, requests = catalog_time.take()
                if profiler is not None:
                    profiler.disable()
                assert rows, f"{label}: no results"
                if i >= 3:
                    samples.append(elapsed)
                    waits.append(waited * 1000)
                    sent.append(requests)
            result[label] = {"ms": statistics.median(samples), "found": found}
            if catalog_kind == "connector":
                # The connector's requests (CatalogTime wraps CatalogClient._send): the time from
                # its call to the decoded answer, httpx and the service's work included.
                result[label].update(wait_ms=statistics.median(waits), requests=statistics.mean(sent))
            if profiler is not None:
                import pstats

                print(f"-- profile of {label!r} (catalog={catalog_kind}, cleared={cleared})")
                pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(45)
        return result
    finally:
        s.close()


def render(path: str, query: str = "", user: tuple[str, str] | None = None) -> int:
    """Publish one GET request through ZPublisher; returns the body size."""
    from ZPublisher.WSGIPublisher import publish_module

    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "SERVER_NAME": "nohost",
        "SERVER_PORT": "80", "HTTP_HOST": "nohost", "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr,
    }
    if user:
        environ["HTTP_AUTHORIZATION"] = "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    status = []
    body = b"".join(publish_module(environ, lambda s, headers, exc_info=None: status.append(s)))
    if not status or not status[0].startswith("200"):
        raise RuntimeError(f"GET {path}?{query} answered {status}: {body[:300]!r}")
    return len(body)


PAGES = {
    "site root": ("/plone", ""),
    "folder listing": ("/plone/folder-3", ""),
    "search results": ("/plone/@@search", f"SearchableText={SEARCH_WORD}"),
}


def time_pages(connector: bool, rounds: int) -> dict[str, dict]:
    result = {}
    for label, (path, query) in PAGES.items():
        for who, user in (("anonymous", None), ("editor", EDITOR)):
            for _ in range(3):
                render(path, query, user)
            before = _service_counts(connector)
            samples = []
            for _ in range(rounds):
                began = time.perf_counter()
                render(path, query, user)
                samples.append((time.perf_counter() - began) * 1000)
            after = _service_counts(connector)
            entry = {"ms": statistics.median(samples)}
            if connector:
                entry["requests_per_render"] = (after[0] - before[0]) / rounds
                entry["cache_hits_per_render"] = (after[1] - before[1]) / rounds
            result[f"{label}, {who}"] = entry
    return result


def _service_counts(connector: bool) -> tuple[int, int]:
    if not connector:
        return (0, 0)
    from plone_connector.catalog import stats

    return stats.totals.service_requests, stats.totals.cache_hits


def run(config: dict) -> dict:
    global WARM_CACHE
    WARM_CACHE = config.get("cache_size", WARM_CACHE)
    kind, connector = config["storage"], config["catalog"] == "connector"
    no_catalog = config["catalog"] in ("none", "extract")
    blob_dir = config.get("blob_dir") or tempfile.mkdtemp(prefix="plone-bench-blobs-")
    began = time.perf_counter()
    set_up(kind, config["target"], connector, blob_dir, pgcatalog=config["catalog"] == "pgcatalog")
    out = {"setup_s": time.perf_counter() - began}
    sizes = config["docs"]
    create_folders()
    catalog_time.install(connector, no_op=config["catalog"] == "none", extract_only=config["catalog"] == "extract",
                         pgcatalog=config["catalog"] == "pgcatalog")
    out["create"], out["create_catalog"] = {}, {}
    out["queries_cached"], out["queries_cleared"] = {}, {}
    rounds = config["rounds"]
    done = 0
    for size in sizes:
        catalog_time.take()
        if os.environ.get("PLONE_BENCH_PROFILE") == "create":  # cProfile the creation too
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            out["create"][size] = profiler.runcall(create_documents, done, size)
            print(f"-- profile of creating documents {done + 1}-{size} (catalog={config['catalog']})")
            stats = pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative")
            stats.print_stats(60)
            stats.print_callers("catalog_object|_extract")
        else:
            out["create"][size] = create_documents(done, size)
        seconds, calls = catalog_time.take()
        out["create_catalog"][size] = {"ms": seconds * 1000 / (size - done), "calls": calls / (size - done)}
        if not done:
            # Modified once, at the first size: the documents' count hardly matters to an edit.
            if os.environ.get("PLONE_BENCH_PROFILE") == "modify":
                import cProfile
                import pstats

                profiler = cProfile.Profile()
                out["modify"] = profiler.runcall(modify_documents, min(500, size))
                print(f"-- profile of modifying documents (catalog={config['catalog']})")
                stats = pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative")
                stats.print_stats(80)
                stats.sort_stats("tottime").print_stats(40)
            else:
                out["modify"] = modify_documents(min(500, size))
            seconds, calls = catalog_time.take()
            out["modify_catalog"] = {"ms": seconds * 1000 / min(500, size), "calls": calls / min(500, size)}
        done = size
        if not no_catalog:
            out["queries_cached"][size] = time_queries(config["catalog"], cleared=False, rounds=rounds)
            out["queries_cleared"][size] = time_queries(config["catalog"], cleared=True, rounds=rounds)
    if no_catalog:
        return out  # nothing is indexed: no pages to measure
    if config.get("pages", True):
        out["pages"] = time_pages(connector, rounds)
    if connector:
        from plone_connector.catalog.views import service_stats

        out["service_stats"] = service_stats()
    return out


def main() -> None:
    config = json.loads(sys.argv[1])
    os.environ.setdefault("CATALOG_SERVICE_CATALOG_ID", config.get("catalog_id", "bench"))
    result = run(config)
    Path(config["output"]).write_text(json.dumps(result, indent=2))
    # Zope's and the storages' threads can keep the interpreter alive; the result is written.
    os._exit(0)


if __name__ == "__main__":
    main()
