"""The catalog service against in-process Products.ZCatalog, and against the floor, in one run.

    python benchmarks/catalog_bench.py --sizes 10000,100000[,1000000] [--queries 300] [--workers 2]

For each corpus size (Plone-like index entries from catalog_service.demo, Plone's own index
declarations; the same entries go to both sides):

1. Bulk indexing objects/s. The service over HTTP, as a rebuild loads it: from 20,000 objects on
   (cli.DEFER_INDEXES_FROM) the catalog's secondary indexes deferred
   (POST /catalogs/{id}/indexes/defer), one-shot POST /catalogs/{id}/batches of
   ``--batch`` entries from ``--clients`` concurrent clients, then the indexes built
   (POST /catalogs/{id}/indexes/build); the clock covers all three. Then re-indexing up to
   ``--reindex`` of the same objects again with every index in place (the path of everyday
   batches). Bodies are serialised before the clock starts, each load starts right after a
   CHECKPOINT. ZCatalog in-process: ``catalog_object`` of the same entries, converted to Python
   values (DateTime, ...) before the clock starts.
2. p50/p95 of typical Plone queries, sequentially: through HTTP as the connector sends them
   (POST /catalogs/{id}/query, principals in X-Catalog-Principals, so the server adds security and
   the effective-date filter) and, for the folder listing, as an anonymous GET /search too; and
   in-process on ZCatalog with the same security terms and effectiveRange. Then requests/s of each
   HTTP query with concurrent connections (wrk; an asyncio load generator when wrk is missing).
3. The floor (../shared/bench/floor.py beside the repository: a bare FastAPI + asyncpg folder
   listing) against the same PostgreSQL in the same run; the service is reported as a ratio to it.

Checks the targets (bulk indexing >= 5,000 objects/s; folder listing p50 < 2 ms over HTTP at 100k;
p50 at 1M within 2x of 10k) and writes docs/benchmarks/catalog.md and catalog.png after every
corpus size, so a long run that stops early still leaves its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from catalog_service.cli import DEFER_INDEXES_FROM  # noqa: E402
from catalog_service.demo import (  # noqa: E402
    PLONE_INDEXES,
    PLONE_METADATA,
    folder_path,
    layout,
    objects,
    plone_catalog,
)
from tests.live import free_port  # noqa: E402
from tests.pg import create_database, drop_database  # noqa: E402

# The floor script is shared between projects and lives beside the repository, not in it.
FLOOR = Path(__file__).resolve().parents[2] / "shared" / "bench" / "floor.py"
OUT = ROOT / "docs" / "benchmarks"
ADMIN_TOKEN = "bench-admin-token"
PRINCIPALS = ["Anonymous"]
DATE_INDEXES = {d.name for d in PLONE_INDEXES if d.type == "DateIndex"}


# -- the queries -----------------------------------------------------------------------------------

@dataclass
class PloneQuery:
    label: str
    query: dict  # the ZCatalog query without security, effectiveRange and batching
    b_size: int
    anonymous: bool = False  # GET /search without credentials instead of the connector's POST


def plone_queries(size: int) -> list[PloneQuery]:
    # The demo corpus puts ~100 items in each folder (demo.layout); folder 8 exists from 900 objects on.
    folder = folder_path(min(8, layout(size)[1] - 1), size)
    listing = {"path": {"query": folder, "depth": 1}, "portal_type": ["Document", "News Item", "Event"],
               "sort_on": "getObjPositionInParent"}
    return [
        PloneQuery("folder listing", listing, 20),
        PloneQuery("folder listing, anonymous GET /search", listing, 20, anonymous=True),
        # What Plone's navigation portlet asks from inside a document of that folder.
        PloneQuery("navigation tree", {"path": {"query": folder + "/document-x", "navtree": 1},
                                       "sort_on": "getObjPositionInParent"}, 200),
        PloneQuery("collection by type and date, newest", {
            "portal_type": ["News Item", "Event"],
            "modified": {"query": "2023-01-01T00:00:00+00:00", "range": "min"},
            "sort_on": "modified", "sort_order": "reverse"}, 20),
        PloneQuery("full-text search", {"SearchableText": "garden"}, 20),
        # Every content item (not the folders): more than 5,000 visible ones from 10,000 objects on.
        PloneQuery("5,000-result listing", {"portal_type": ["Document", "Event", "File", "Image", "News Item"],
                                            "sort_on": "sortable_title"}, 5000),
    ]


# -- the service -----------------------------------------------------------------------------------

class Service:
    """The real service (``catalog-service serve``) in a subprocess, with ``workers`` processes."""

    def __init__(self, dsn: str, workers: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "DATABASE_URL": dsn, "CATALOG_ADMIN_TOKEN": ADMIN_TOKEN,
               "CATALOG_LOG_LEVEL": "warning",
               # A full-text query over a million objects must finish to be measured.
               "CATALOG_STATEMENT_TIMEOUT": "300"}
        # The log goes to a file: a pipe nobody reads fills up (the service logs every slow request)
        # and then blocks the worker mid-transaction, with the catalog's counter row locked.
        self.log = tempfile.NamedTemporaryFile(prefix="catalog-bench-service-", suffix=".log", delete=False)  # noqa: SIM115 - lives as long as the service
        self.process = subprocess.Popen(
            [sys.executable, "-m", "catalog_service.cli", "serve", "--port", str(self.port),
             "--workers", str(workers)], env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("service exited: " + self.log_tail())
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("service did not become ready in 60 s")

    def log_tail(self, chars: int = 3000) -> str:
        return Path(self.log.name).read_text(errors="replace")[-chars:]

    def client(self, anonymous: bool = False) -> httpx.Client:
        headers = {} if anonymous else {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=600)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class HttpRequest:
    """One query as the bytes that go over the wire, for httpx, wrk and the load generator alike."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes | None = None


def http_request(name: str, q: PloneQuery) -> HttpRequest:
    if q.anonymous:
        params = httpx.QueryParams({"catalog": name, "q": orjson.dumps(q.query).decode(), "b_size": q.b_size})
        return HttpRequest("GET", f"/search?{params}", {})
    return HttpRequest("POST", f"/catalogs/{name}/query",
                       {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json",
                        "X-Catalog-Principals": orjson.dumps(PRINCIPALS).decode()},
                       orjson.dumps({"query": q.query, "b_size": q.b_size}))


def send(client: httpx.Client, req: HttpRequest) -> httpx.Response:
    return client.request(req.method, req.path, headers=req.headers, content=req.body)


def batch_bodies(size: int, batch: int, seed: int = 1, prefix: str = "bulk", count: int | None = None) -> list[bytes]:
    """The request bodies indexing the corpus of ``size`` objects, or its first ``count`` objects
    (the corpus's layout depends on its size: the first objects of a smaller corpus are other
    objects)."""
    entries = itertools.islice(objects(size, seed=seed), size if count is None else count)
    bodies = []
    while True:
        chunk = [entry for _, entry in zip(range(batch), entries, strict=False)]
        if not chunk:
            break
        bodies.append(orjson.dumps({"batch_id": f"{prefix}-{len(bodies)}", "entries": chunk}))
    return bodies


def http_bulk_index(service: Service, name: str, size: int, batch: int, clients: int, seed: int = 1,
                    prefix: str = "bulk", count: int | None = None, bodies: list[bytes] | None = None) -> float:
    """Index ``bodies`` (default: :func:`batch_bodies` of the other arguments, made before the
    clock starts); returns the seconds it took."""
    if bodies is None:
        bodies = batch_bodies(size, batch, seed, prefix, count)
    headers = {"Content-Type": "application/json"}

    def post(body: bytes) -> None:
        with service.client() as client:
            r = client.post(f"/catalogs/{name}/batches", content=body, headers=headers)
            if r.status_code != 200:
                raise RuntimeError(f"batch refused: {r.status_code} {r.text[:500]}\n{service.log_tail()}")

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(post, bodies))
    return time.perf_counter() - started


def deferred_load(service: Service, name: str, size: int, batch: int, clients: int) -> tuple[float, float]:
    """A rebuild's load: indexes deferred, the batches, the indexes built. Returns (objects/s over all
    three, seconds of the build). The bodies are made before the clock starts, as for any load."""
    bodies = batch_bodies(size, batch)
    with service.client() as admin:
        started = time.perf_counter()
        r = admin.post(f"/catalogs/{name}/indexes/defer")
        if r.status_code != 200:
            raise RuntimeError(f"defer indexes: {r.status_code} {r.text}")
        http_bulk_index(service, name, size, batch, clients, bodies=bodies)
        built = time.perf_counter()
        r = admin.post(f"/catalogs/{name}/indexes/build")
        if r.status_code != 200:
            raise RuntimeError(f"build indexes: {r.status_code} {r.text}")
        ended = time.perf_counter()
    return size / (ended - started), ended - built


def create_catalog(admin: httpx.Client, name: str) -> None:
    r = admin.post("/catalogs", json=plone_catalog(name).model_dump(mode="json"))
    if r.status_code != 201:
        raise RuntimeError(f"create catalog: {r.status_code} {r.text}")


def warm_up(service: Service, batch: int, clients: int) -> None:
    """Index one round of batches (another corpus) into a scratch catalog and drop it: the
    service's first requests pay for connections, imports and empty caches, which a service that
    has been running does not."""
    with service.client() as admin:
        create_catalog(admin, "warmup")
        http_bulk_index(service, "warmup", batch * clients, batch, clients, seed=2)
        # and a build, whose first run pays for loading code and catalog pages too
        admin.post("/catalogs/warmup/indexes/defer")
        admin.post("/catalogs/warmup/indexes/build")
        admin.delete("/catalogs/warmup")


def time_http(client: httpx.Client, req: HttpRequest, repeat: int, budget: float) -> tuple[list[float], dict]:
    # Warm-up: at least 10 runs and a second (a few runs alone left the first query measured after
    # the floor slower than the same query measured later), at most 3 s.
    started, runs = time.perf_counter(), 0
    while runs < 10 or time.perf_counter() - started < 1.0:
        response = send(client, req)
        runs += 1
        if response.status_code != 200:
            raise RuntimeError(f"{req.method} {req.path}: {response.status_code} {response.text[:500]}")
        if time.perf_counter() - started > 3:
            break
    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < repeat and (len(times) < 10 or time.perf_counter() < deadline):
        started = time.perf_counter()
        response = send(client, req)
        times.append((time.perf_counter() - started) * 1000)
    answer = response.json()
    return times, {"items": len(answer["items"]), "total": answer["items_total"],
                   "paths": [item["path"] for item in answer["items"]]}


def throughput(url: str, req: HttpRequest, seconds: int, connections: int) -> tuple[float | None, str]:
    """Requests/s with ``connections`` concurrent connections: wrk if installed, else asyncio + httpx."""
    if shutil.which("wrk"):
        return wrk(url, req, seconds, connections), f"wrk -t2 -c{connections} -d{seconds}s"
    return asyncio.run(load_generator(url, req, seconds, connections)), f"httpx asyncio, {connections} tasks"


def wrk(url: str, req: HttpRequest, seconds: int, connections: int) -> float | None:
    lines = [f'wrk.method = "{req.method}"']
    if req.body is not None:
        lines.append(f"wrk.body = [==[{req.body.decode()}]==]")
    for key, value in req.headers.items():
        lines.append(f'wrk.headers["{key}"] = [==[{value}]==]')
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write("\n".join(lines) + "\n")
    try:
        out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", script.name, url + req.path],
                             capture_output=True, text=True, timeout=seconds + 120).stdout
    finally:
        os.unlink(script.name)
    if "Non-2xx" in out:
        print(f"wrk saw error answers, no req/s reported for {req.path}:\n{out}")
        return None
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(match.group(1)) if match else None


async def load_generator(url: str, req: HttpRequest, seconds: int, connections: int) -> float:
    done = 0

    async def worker(client: httpx.AsyncClient, deadline: float) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            r = await client.request(req.method, req.path, headers=req.headers, content=req.body)
            r.raise_for_status()
            done += 1

    limits = httpx.Limits(max_connections=connections)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600) as client:
        started = time.perf_counter()
        await asyncio.gather(*(worker(client, started + seconds) for _ in range(connections)))
        return done / (time.perf_counter() - started)


# -- ZCatalog in-process ---------------------------------------------------------------------------

def zcatalog_objects(entries):
    """The entries as the Python values Plone's indexers hand to ZCatalog."""
    from DateTime import DateTime

    from tests.service.oracle import CatalogObject, recurrence_attrs

    for entry in entries:
        attrs = {}
        for name, value in entry["values"].items():
            if name in ("path", "effectiveRange") or value is None:
                continue  # the path is the object's own; effectiveRange reads effective/expires
            if name in DATE_INDEXES:
                attrs[name] = DateTime(value)
            elif name == "start":
                attrs["start"] = DateTime(value["start"])
                if value.get("recurrence"):
                    attrs[recurrence_attrs("start")[0]] = value["recurrence"]
            else:
                attrs[name] = value
        attrs.update({k: v for k, v in entry["metadata"].items() if k not in attrs and not isinstance(v, dict)})
        yield CatalogObject(uid=entry["uid"], path=entry["path"], attrs=attrs)


def zcatalog_bulk_index(size: int, chunk: int = 2000):
    from tests.service.oracle import ZCatalogOracle

    oracle = ZCatalogOracle(PLONE_INDEXES, PLONE_METADATA)
    oracle.catalog.threshold = None  # no ZODB under it: no subtransactions to cut
    entries = objects(size)
    spent = 0.0
    while True:
        batch = list(zcatalog_objects(entry for _, entry in zip(range(chunk), entries, strict=False)))
        if not batch:
            break
        started = time.perf_counter()
        for obj in batch:
            oracle.index(obj)
        spent += time.perf_counter() - started
    return oracle, size / spent


def zcatalog_query(q: PloneQuery, now) -> dict:
    return {**q.query, "allowedRolesAndUsers": PRINCIPALS, "effectiveRange": now, "b_start": 0, "b_size": q.b_size}


def time_zcatalog(oracle, q: PloneQuery, repeat: int, budget: float) -> tuple[list[float], dict]:
    from DateTime import DateTime

    catalog = oracle.catalog

    def run():
        # What a listing reads from each brain of the page: its path and a few metadata columns.
        results = catalog.searchResults(zcatalog_query(q, DateTime()))
        page = [(b.getPath(), b.Title, b.portal_type, b.modified) for b in results[:q.b_size]]
        return results, page

    for _ in range(5):
        run()
    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < repeat and (len(times) < 10 or time.perf_counter() < deadline):
        started = time.perf_counter()
        results, page = run()
        times.append((time.perf_counter() - started) * 1000)
    return times, {"items": len(page), "total": results.actual_result_count, "paths": [p[0] for p in page]}


SAME, TIES, DIFFERENT = "same", "same up to ties", "DIFFERENT"


def page_agreement(oracle, q: PloneQuery, mine: list[str], theirs: list[str]) -> str:
    """How the service's page compares with ZCatalog's: the same, the same but for the order of
    objects with equal sort keys (or relevance scores), which ZCatalog leaves to its random record
    ids (the differential tests allow it too), or different."""
    if mine == theirs:
        return SAME
    from DateTime import DateTime

    internal = oracle.catalog._catalog
    sort_on = q.query.get("sort_on")
    if sort_on:
        index = internal.getIndex(sort_on)

        def key(path):
            rid = internal.uids.get(path)
            return None if rid is None else index.getEntryForObject(rid)
    else:
        query = {k: v for k, v in zcatalog_query(q, DateTime()).items() if k not in ("b_start", "b_size")}
        scores = {b.getPath(): b.data_record_score_ for b in oracle.catalog.searchResults(query)}
        key = scores.get
    return TIES if [key(p) for p in mine] == [key(p) for p in theirs] else DIFFERENT


# -- the floor and the machine ---------------------------------------------------------------------

def run_floor(dsn: str) -> dict:
    if not FLOOR.exists():
        print(f"floor script {FLOOR.name} not found beside the repository (shared/bench/): no floor figures")
        return {}
    out = subprocess.run([sys.executable, str(FLOOR), dsn], capture_output=True, text=True, timeout=900)
    found = {}
    match = re.search(r"p50 ([\d.]+) ms, p95 ([\d.]+) ms", out.stdout)
    if match:
        found["p50"], found["p95"] = float(match.group(1)), float(match.group(2))
    match = re.search(r"throughput \(wrk -c20\): ([\d.]+)", out.stdout)
    if match:
        found["rps"] = float(match.group(1))
    if not found:
        print(f"floor script gave no figures:\n{out.stdout}\n{out.stderr[-2000:]}")
    # The floor's table was just filled: vacuumed and analysed now, so that autovacuum does not do it
    # while the service's first query is being timed.
    with contextlib.suppress(psycopg.Error), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("vacuum analyze floor_cat")
    return found


def machine(dsn: str) -> dict:
    cpu = "?"
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    with psycopg.connect(dsn) as conn:
        version = conn.execute("show server_version").fetchone()[0]
        buffers = conn.execute("show shared_buffers").fetchone()[0]
        wal = conn.execute("show max_wal_size").fetchone()[0]
        timeout = conn.execute("show checkpoint_timeout").fetchone()[0]
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "postgresql": version.split()[0], "shared_buffers": buffers, "max_wal_size": wal,
            "checkpoint_timeout": timeout,
            "database": "DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded"}


# -- one run ---------------------------------------------------------------------------------------

@dataclass
class Row:
    size: int
    label: str
    service: list[float]
    service_answer: dict
    zcatalog: list[float] | None = None
    zcatalog_answer: dict | None = None
    rps: float | None = None
    agreement: str | None = None  # the page against ZCatalog's (page_agreement)


@dataclass
class Bulk:
    size: int
    rate: float  # objects/s of the load with indexes deferred, the build included
    build: float | None  # seconds of the build (None: the indexes stayed in place)
    reindexed: int  # objects indexed again with every index in place ...
    reindex_rate: float  # ... and their objects/s
    zcatalog: float | None


@dataclass
class Run:
    args: argparse.Namespace
    machine: dict
    floor: dict
    load_tool: str = ""
    # The floor again right before each size's queries: the machine's load drifts during a long run.
    floors: dict[int, dict] = field(default_factory=dict)
    bulk: list[Bulk] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def checkpoint(dsn: str) -> None:
    """Every bulk load starts right after a checkpoint, so whether one falls inside it depends on
    its own WAL (and max_wal_size), not on what earlier loads and the clock left behind."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("checkpoint")
    except psycopg.errors.InsufficientPrivilege:
        print("(no CHECKPOINT before the load: the role may not run it)", flush=True)


def measure_size(run: Run, service: Service, dsn: str, size: int) -> None:
    args = run.args
    name = f"bench{size}"
    with service.client() as admin:
        create_catalog(admin, name)
    print(f"\n== {size:,} objects", flush=True)
    checkpoint(dsn)
    if size >= DEFER_INDEXES_FROM:
        service_rate, build = deferred_load(service, name, size, args.batch, args.clients)
        print(f"service bulk indexing over HTTP: {service_rate:,.0f} objects/s (indexes deferred, the build's "
              f"{build:.1f} s included)", flush=True)
    else:
        service_rate, build = size / http_bulk_index(service, name, size, args.batch, args.clients), None
        print(f"service bulk indexing over HTTP: {service_rate:,.0f} objects/s (indexes in place)", flush=True)
    reindexed = min(size, args.reindex)
    checkpoint(dsn)
    reindex_rate = reindexed / http_bulk_index(service, name, size, args.batch, args.clients, prefix="again",
                                               count=reindexed)
    print(f"service re-indexing {reindexed:,} of them with every index in place: {reindex_rate:,.0f} objects/s",
          flush=True)
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("vacuum analyze")
    checkpoint(dsn)  # the load's dirty pages written now, not by the checkpointer during the queries
    print(f"(vacuum analyze and a checkpoint after the load: {time.perf_counter() - started:.1f} s, not counted)",
          flush=True)
    oracle, zc_rate = None, None
    if size <= args.zcatalog_max:
        oracle, zc_rate = zcatalog_bulk_index(size)
        print(f"ZCatalog bulk indexing in-process: {zc_rate:,.0f} objects/s", flush=True)
    run.bulk.append(Bulk(size, service_rate, build, reindexed, reindex_rate, zc_rate))

    run.floors[size] = run_floor(dsn) or run.floor
    print(f"floor before the queries at {size:,}: {run.floors[size]}", flush=True)
    with service.client() as connector, service.client(anonymous=True) as anonymous:
        for q in plone_queries(size):
            req = http_request(name, q)
            times, answer = time_http(anonymous if q.anonymous else connector, req, args.queries, args.budget)
            row = Row(size, q.label, times, answer)
            if oracle is not None:
                row.zcatalog, row.zcatalog_answer = time_zcatalog(oracle, q, args.queries, args.budget)
                row.agreement = page_agreement(oracle, q, answer["paths"], row.zcatalog_answer["paths"])
            row.rps, run.load_tool = throughput(service.url, req, args.seconds, args.connections)
            run.rows.append(row)
            zc = row.zcatalog_answer
            print(f"  {q.label:<40} {answer['total']:>7} found  service p50 {pct(times, .5):8.2f} ms "
                  f"p95 {pct(times, .95):8.2f}"
                  + (f"  ZCatalog p50 {pct(row.zcatalog, .5):8.2f} p95 {pct(row.zcatalog, .95):8.2f} "
                     f"({zc['total']} found{'' if zc['total'] == answer['total'] else ', DIFFERENT COUNT'}"
                     f", page {row.agreement})"
                     if zc else "")
                  + (f"  {row.rps:,.0f} req/s" if row.rps else ""), flush=True)
    del oracle
    with service.client() as admin:
        admin.delete(f"/catalogs/{name}")  # free the space before the next, larger corpus


def pct(times: list[float] | None, q: float) -> float:
    if not times:
        return float("nan")
    if q == .5:
        return statistics.median(times)
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


# -- the report ------------------------------------------------------------------------------------

def targets(run: Run) -> list[str]:
    lines = []
    for b in run.bulk:
        lines.append(f"bulk indexing over HTTP at {b.size:,}: {b.rate:,.0f} objects/s (target >= 5,000) "
                     f"{'PASS' if b.rate >= 5000 else 'FAIL'}")
    listing = {r.size: pct(r.service, .5) for r in run.rows if r.label == "folder listing"}
    if 100000 in listing:
        lines.append(f"folder listing p50 over HTTP at 100,000: {listing[100000]:.2f} ms (target < 2 ms) "
                     f"{'PASS' if listing[100000] < 2 else 'FAIL'}")
    else:
        lines.append("folder listing p50 over HTTP at 100,000: not measured in this run")
    sizes = sorted({r.size for r in run.rows})
    if 10000 in sizes and 1000000 in sizes:
        for label in dict.fromkeys(r.label for r in run.rows):
            small = next(pct(r.service, .5) for r in run.rows if r.size == 10000 and r.label == label)
            big = next(pct(r.service, .5) for r in run.rows if r.size == 1000000 and r.label == label)
            lines.append(f"{label}: p50 at 1,000,000 is {big / small:.2f}x the p50 at 10,000 (target <= 2x) "
                         f"{'PASS' if big <= 2 * small else 'FAIL'}")
    else:
        lines.append("p50 at 1,000,000 within 2x of 10,000: not measured in this run (needs --sizes with both)")
    return lines


def report(run: Run) -> str:
    args, m, floor = run.args, run.machine, run.floor
    command = f"python benchmarks/catalog_bench.py --sizes {args.sizes}"
    for option, default in (("queries", 300), ("budget", 20.0), ("batch", 2000), ("clients", 4), ("workers", 2),
                            ("zcatalog_max", 10**7)):
        if getattr(args, option) != default:
            command += f" --{option.replace('_', '-')} {getattr(args, option):g}"
    lines = [
        "# Catalog service benchmark",
        "",
        f"`{command}` ({datetime.now(UTC):%Y-%m-%d}; {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, "
        f"PostgreSQL {m['postgresql']} ({m['database']}, shared_buffers {m['shared_buffers']}, "
        f"max_wal_size {m['max_wal_size']}, checkpoint_timeout {m['checkpoint_timeout']}); the service with "
        f"{args.workers} uvicorn worker(s), the load generators on the same machine. The machine was shared "
        "with other work, so the ratios, measured in the same run, say more than the absolute times.)",
        "",
        "## Targets",
        "",
        *(f"- {line}" for line in targets(run)),
        "",
        "## Bulk indexing",
        "",
        "Objects/s. The service, as a rebuild loads a catalog (docs/decisions/0010): from "
        f"{DEFER_INDEXES_FROM:,} objects on (where `catalog-service demo` starts doing the same) its "
        "secondary indexes deferred (POST /catalogs/{id}/indexes/defer), one-shot HTTP batches "
        f"(POST /catalogs/{{id}}/batches) of {args.batch:,} entries from {args.clients} concurrent clients, "
        "then the indexes built (POST /catalogs/{id}/indexes/build, its time in its own column; \"kept\": "
        "a smaller load keeps its indexes, whose upkeep costs less than the build's fixed cost); the clock "
        "covers all three, "
        "request bodies are serialised before it starts. \"Re-indexed\": then the first objects of the same "
        "corpus sent again in the same way with every index in place, the path of everyday batches (each "
        "row rewritten, every index updated). Then VACUUM ANALYZE and a CHECKPOINT (not counted). Before the first size, "
        "the service indexed one round of batches of another corpus into a scratch catalog (dropped), so "
        "that no size pays for its start. ZCatalog: `catalog_object` in-process, no ZODB, values converted "
        "before the clock starts.",
        "",
        "| objects | service (HTTP) | of which index build (s) | re-indexed, indexes in place | "
        "ZCatalog (in-process) | service / ZCatalog |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for b in run.bulk:
        build = "kept" if b.build is None else f"{b.build:.1f}"
        lines.append(f"| {b.size:,} | {b.rate:,.0f} | {build} | {b.reindexed:,} at {b.reindex_rate:,.0f}/s | "
                     f"{f'{b.zcatalog:,.0f}' if b.zcatalog else '-'} | "
                     f"{f'{b.rate / b.zcatalog:.2f}' if b.zcatalog else '-'} |")
    lines += [
        "",
        "## Queries",
        "",
        f"Milliseconds, sequential, one client (up to {args.queries} runs or {args.budget:.0f} s per query "
        f"and side, after warm-up). The service through HTTP as the connector asks (POST /catalogs/{{id}}/query "
        f"with X-Catalog-Principals {orjson.dumps(PRINCIPALS).decode()}; the server adds security and "
        "the effective-date filter), and the folder listing also as an anonymous GET /search. ZCatalog "
        "in-process with the same allowedRolesAndUsers and effectiveRange, reading path, Title, portal_type "
        "and modified of each brain of the page. req/s: the service with concurrent connections "
        f"({run.load_tool}). Page as ZCatalog's: the same objects in the same order, or the same up to "
        "the order of objects with equal sort keys or scores (ZCatalog breaks such ties by its random "
        "record ids), or different.",
        "",
        "| objects | query | found | page | service p50 | service p95 | ZCatalog p50 | ZCatalog p95 | "
        "service / ZCatalog (p50) | service / floor (p50) | req/s | page as ZCatalog's |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in run.rows:
        s50, s95 = pct(r.service, .5), pct(r.service, .95)
        found = f"{r.service_answer['total']:,}"
        if r.zcatalog_answer and r.zcatalog_answer["total"] != r.service_answer["total"]:
            found += f" (ZCatalog {r.zcatalog_answer['total']:,})"
        zc = (f"{pct(r.zcatalog, .5):.2f} | {pct(r.zcatalog, .95):.2f} | {s50 / pct(r.zcatalog, .5):.2f}"
              if r.zcatalog else "- | - | -")
        size_floor = run.floors.get(r.size, floor)
        fl = f"{s50 / size_floor['p50']:.2f}" if size_floor.get("p50") else "-"
        lines.append(f"| {r.size:,} | {r.label} | {found} | {r.service_answer['items']:,} | {s50:.2f} | "
                     f"{s95:.2f} | {zc} | {fl} | {f'{r.rps:,.0f}' if r.rps else '-'} | {r.agreement or '-'} |")
    lines += ["", "## Floor", ""]
    if floor:
        lines.append(f"A bare FastAPI + asyncpg folder listing (100k rows, 20 per page) on the same PostgreSQL "
                     f"in the same run: p50 {floor.get('p50')} ms, p95 {floor.get('p95')} ms"
                     + (f", {floor['rps']:,.0f} req/s with wrk -c20" if "rps" in floor else "") + ".")
        lines.append("It is measured again right before each corpus size's queries, and the "
                     "service / floor ratios above use that size's floor:")
        lines.append("")
        for r in run.rows:
            if r.label != "folder listing":
                continue
            f = run.floors.get(r.size, floor)
            line = f"- {r.size:,} objects: floor p50 {f.get('p50')} ms, service p50 {pct(r.service, .5):.2f} ms"
            if r.rps and "rps" in f:
                line += (f"; floor {f['rps']:,.0f} req/s, service {r.rps:,.0f} req/s "
                         f"({r.rps / f['rps']:.2f} of the floor's)")
            lines.append(line + ".")
    else:
        lines.append("Not measured: the floor script (shared/bench/floor.py beside the repository) was missing.")
    lines += ["", "![p50 latency by corpus size](catalog.png)", ""]
    return "\n".join(lines)


def plot(run: Run) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r.size for r in run.rows})
    labels = list(dict.fromkeys(r.label for r in run.rows))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1]})
    for i, label in enumerate(labels):
        color = f"C{i}"
        rows = [next(r for r in run.rows if r.size == s and r.label == label) for s in sizes]
        ax.plot(sizes, [pct(r.service, .5) for r in rows], "o-", color=color, label=f"{label} (service)")
        if all(r.zcatalog for r in rows) and "anonymous" not in label:
            ax.plot(sizes, [pct(r.zcatalog, .5) for r in rows], "x--", color=color, alpha=.6)
    if run.floor.get("p50"):
        ax.axhline(run.floor["p50"], color="grey", linestyle=":", label="floor (bare FastAPI + asyncpg)")
    ax.set(xscale="log", yscale="log", xlabel="objects", ylabel="p50 ms (log)",
           title="Query p50: service over HTTP (solid), ZCatalog in-process (dashed)")
    ax.legend(fontsize=7)
    bulk_sizes = [f"{b.size:,}" for b in run.bulk]
    xs = range(len(run.bulk))
    bx.bar([x - .27 for x in xs], [b.rate for b in run.bulk], .27, label="service (HTTP, rebuild)")
    bx.bar(list(xs), [b.reindex_rate for b in run.bulk], .27, label="service (HTTP, re-index)")
    bx.bar([x + .27 for x in xs], [b.zcatalog or 0 for b in run.bulk], .27, label="ZCatalog")
    bx.axhline(5000, color="red", linestyle=":", label="target")
    bx.set_xticks(list(xs), bulk_sizes)
    bx.set(ylabel="objects/s", title="Bulk indexing")
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "catalog.png", dpi=100)
    plt.close(fig)


def save(run: Run) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "catalog.md").write_text(report(run))
    plot(run)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes")
    parser.add_argument("--queries", type=int, default=300, help="sequential runs per query and side (at most)")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per query and side (at least 10 runs)")
    parser.add_argument("--batch", type=int, default=2000, help="entries per indexing batch")
    parser.add_argument("--clients", type=int, default=4, help="concurrent indexing clients")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers of the service")
    parser.add_argument("--connections", type=int, default=16, help="connections for the req/s figures")
    parser.add_argument("--seconds", type=int, default=5, help="seconds of each req/s measurement")
    parser.add_argument("--reindex", type=int, default=20000,
                        help="objects indexed again, with every index in place, after each load")
    parser.add_argument("--zcatalog-max", type=int, default=10**7, help="skip ZCatalog above this size")
    parser.add_argument("--no-save", action="store_true", help="print only; leave docs/benchmarks alone")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    dsn, admin_dsn = create_database("bench")
    run = Run(args, machine(dsn), {})
    print(f"machine: {run.machine}", flush=True)
    service = None
    try:
        run.floor = run_floor(dsn)
        print(f"floor: {run.floor}", flush=True)
        service = Service(dsn, args.workers)
        warm_up(service, args.batch, args.clients)
        for size in sizes:
            measure_size(run, service, dsn, size)
            if not args.no_save:
                save(run)
    finally:
        if service:
            service.stop()
            print(f"(the service's log: {service.log.name})")
        drop_database(admin_dsn, dsn)
    print()
    print(report(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
