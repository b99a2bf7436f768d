"""Facet counts over HTTP beside the same query without facets, and against the floor, in one run.

    python benchmarks/facets_bench.py --sizes 100000,1000000 --floor PATH/TO/floor.py

For each corpus size (catalog_service.demo's Plone-like content, loaded as catalog_bench.py loads
it: indexes deferred, batches from concurrent clients, indexes built), sequential p50/p95 of a
full-text query as the connector sends it for Anonymous (principals in X-Catalog-Principals, so
the server adds security and the effective-date filter), 20 per page:

- without facets, and with three facets (portal_type, review_state, Subject);
- the same with a type chosen (``portal_type: News Item``): that facet then counts the query
  without its own condition (disjunctive), a second scan.

Twice: on a service with its caches (count cache, facet cache: a repeated query between commits
is answered from them, docs/decisions/0006 and 0019), and on one with both turned off
(``CATALOG_COUNT_CACHE_SIZE=0``, ``CATALOG_FACET_CACHE_SIZE=0``), where every request counts.
The floor (a bare FastAPI + asyncpg folder listing, ``--floor``) runs against the same PostgreSQL
right before each size's queries; figures are also given as ratios to its p50. Target: p95 with
facets at most 3x the p95 without. Writes docs/benchmarks/facets.md and facets.png after every
size.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from catalog_bench import (  # noqa: E402
    ADMIN_TOKEN,
    DEFER_INDEXES_FROM,
    HttpRequest,
    Service,
    checkpoint,
    create_catalog,
    deferred_load,
    http_bulk_index,
    machine,
    time_http,
)

from tests.pg import create_database, drop_database  # noqa: E402

OUT = ROOT / "docs" / "benchmarks"
FACETS = ["portal_type", "review_state", "Subject"]
QUERIES = {
    "text": {"SearchableText": "garden"},
    "text, a type chosen": {"SearchableText": "garden", "portal_type": "News Item"},
}
NO_CACHES = {"CATALOG_COUNT_CACHE_SIZE": "0", "CATALOG_FACET_CACHE_SIZE": "0"}


@dataclass
class Row:
    size: int
    caches: bool
    label: str
    total: int
    plain: list[float]
    faceted: list[float]
    facets: dict


@dataclass
class Run:
    args: argparse.Namespace
    machine: dict
    floors: dict[int, dict] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)


def pct(times: list[float], q: float) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[q - 1] if len(times) > 1 else times[0]


def request(name: str, query: dict, facets: list[str] | None) -> HttpRequest:
    body = {"query": query, "b_size": 20}
    if facets:
        body["facets"] = facets
    return HttpRequest("POST", f"/catalogs/{name}/query",
                       {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json",
                        "X-Catalog-Principals": '["Anonymous"]'}, orjson.dumps(body))


def run_floor(script: Path | None, dsn: str) -> dict:
    if script is None:
        return {}
    out = subprocess.run([sys.executable, str(script), dsn], capture_output=True, text=True, timeout=900)
    found = {}
    match = re.search(r"p50 ([\d.]+) ms, p95 ([\d.]+) ms", out.stdout)
    if match:
        found["p50"], found["p95"] = float(match.group(1)), float(match.group(2))
    else:
        print(f"floor script gave no figures:\n{out.stdout}\n{out.stderr[-2000:]}")
    with contextlib.suppress(psycopg.Error), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("vacuum analyze floor_cat")
    return found


def start_service(dsn: str, workers: int, env: dict[str, str]) -> Service:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return Service(dsn, workers)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def measure_size(run: Run, services: dict[bool, Service], dsn: str, size: int) -> None:
    args = run.args
    name = f"facets{size}"
    loader = services[True]
    print(f"\n== {size:,} objects", flush=True)
    if args.reuse:
        with loader.client() as admin:
            if admin.get(f"/catalogs/{name}").status_code != 200:
                raise SystemExit(f"--reuse: the database has no catalog {name!r} (made by --keep)")
    else:
        with loader.client() as admin:
            create_catalog(admin, name)
        checkpoint(dsn)
        started = time.perf_counter()
        if size >= DEFER_INDEXES_FROM:
            deferred_load(loader, name, size, args.batch, args.clients)
        else:
            http_bulk_index(loader, name, size, args.batch, args.clients)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("vacuum analyze")
        print(f"loaded in {time.perf_counter() - started:.0f} s", flush=True)
    run.floors[size] = run_floor(args.floor, dsn)
    print(f"floor: {run.floors[size]}", flush=True)
    for caches, service in services.items():
        with service.client() as client:
            for label, query in QUERIES.items():
                plain, _ = time_http(client, request(name, query, None), args.queries, args.budget)
                faceted, answer = time_http(client, request(name, query, FACETS), args.queries, args.budget)
                body = client.request("POST", f"/catalogs/{name}/query",
                                      headers=request(name, query, FACETS).headers,
                                      content=request(name, query, FACETS).body).json()
                row = Row(size, caches, label, answer["total"], plain, faceted, body["facets"])
                run.rows.append(row)
                print(f"{'cached' if caches else 'uncached'} {label}: {row.total:,} results, p95 "
                      f"{pct(plain, 95):.2f} ms plain, {pct(faceted, 95):.2f} ms with facets "
                      f"({pct(faceted, 95) / pct(plain, 95):.2f}x)", flush=True)
    if not (args.keep or args.reuse):
        with loader.client() as admin:
            admin.delete(f"/catalogs/{name}")


def report(run: Run) -> str:
    m = run.machine
    lines = [
        "# Facet counts: benchmark",
        "",
        f"Produced by `python benchmarks/facets_bench.py --sizes {run.args.sizes} --floor <floor.py>"
        f"{' --reuse <dsn>' if run.args.reuse else ''}` on "
        f"{datetime.now(UTC):%Y-%m-%d}: {m['nproc']} cores ({m['cpu']}), Python {m['python']}, PostgreSQL "
        f"{m['postgresql']} (shared_buffers {m['shared_buffers']}), {run.args.workers} service workers. Corpus: "
        "catalog_service.demo; query as the connector sends it for Anonymous, 20 per page; facets "
        f"{', '.join(FACETS)}. Sequential requests over HTTP, times in ms.",
        "",
        "'cached': the service as deployed (count cache and facet cache: a query repeated between "
        "commits, as here, is answered from them). 'uncached': both caches off, every request counts "
        "(what the first request after a commit, or a query not seen before, costs).",
        "",
    ]
    verdicts = []
    for row in run.rows:
        ratio = pct(row.faceted, 95) / pct(row.plain, 95)
        verdicts.append(f"- {row.size:,}, {'cached' if row.caches else 'uncached'}, {row.label}: p95 with facets "
                        f"{ratio:.2f}x the p95 without (target <= 3x) {'PASS' if ratio <= 3 else 'FAIL'}")
    lines += verdicts + [
        "",
        "| objects | caches | query | results | runs | p50 plain | p95 plain | p50 facets | p95 facets | "
        "p95 facets / plain | p50 plain / floor | p50 facets / floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in run.rows:
        floor = run.floors.get(row.size, {}).get("p50")

        def to_floor(times, floor=floor):
            return f"{pct(times, 50) / floor:.1f}" if floor else "-"

        lines.append(
            f"| {row.size:,} | {'yes' if row.caches else 'no'} | {row.label} | {row.total:,} | {len(row.faceted)} | "
            f"{pct(row.plain, 50):.2f} | {pct(row.plain, 95):.2f} | {pct(row.faceted, 50):.2f} | "
            f"{pct(row.faceted, 95):.2f} | {pct(row.faceted, 95) / pct(row.plain, 95):.2f} | "
            f"{to_floor(row.plain)} | {to_floor(row.faceted)} |")
    lines += ["", "Floor (bare FastAPI + asyncpg folder listing, same PostgreSQL, right before each size's queries):"]
    for size, floor in run.floors.items():
        lines.append(f"- {size:,} objects: " + (f"p50 {floor['p50']:.2f} ms, p95 {floor['p95']:.2f} ms"
                                               if floor else "not run"))
    lines += ["", "Counts of the largest size (text query, Anonymous), for reference:", ""]
    last = [row for row in run.rows if row.label == "text"][-1:] if run.rows else []
    for row in last:
        for index, counted in row.facets.items():
            shown = ", ".join(f"{v['value']}: {v['count']:,}" for v in counted["values"][:6])
            lines.append(f"- {index} ({counted['distinct']} values): {shown}")
    return "\n".join(lines) + "\n"


def plot(run: Run) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(10, 4.5))
    labels = [f"{r.size // 1000:,}k {'cached' if r.caches else 'uncached'}\n{r.label}" for r in run.rows]
    xs = range(len(run.rows))
    ax.bar([x - 0.2 for x in xs], [pct(r.plain, 95) for r in run.rows], 0.4, label="p95 without facets")
    ax.bar([x + 0.2 for x in xs], [pct(r.faceted, 95) for r in run.rows], 0.4, label="p95 with 3 facets")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.set_title("Facet counts over HTTP: p95 with and without facets")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "facets.png", dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated corpus sizes")
    parser.add_argument("--floor", type=Path, default=None, help="the floor script (floor.py); none: no floor")
    parser.add_argument("--queries", type=int, default=200, help="sequential runs per query (at most)")
    parser.add_argument("--budget", type=float, default=15.0, help="seconds per query (at least 10 runs)")
    parser.add_argument("--batch", type=int, default=2000, help="entries per indexing batch")
    parser.add_argument("--clients", type=int, default=4, help="concurrent indexing clients")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers of each service")
    parser.add_argument("--no-save", action="store_true", help="print only; leave docs/benchmarks alone")
    parser.add_argument("--keep", action="store_true", help="keep the database and its catalogs (for --reuse)")
    parser.add_argument("--reuse", metavar="DSN", help="measure the catalogs facets<size> a --keep run left in DSN")
    args = parser.parse_args()
    if args.reuse:
        dsn, admin = args.reuse, None
    else:
        dsn, admin = create_database("facetbench")
    run = Run(args=args, machine=machine(dsn))
    services: dict[bool, Service] = {}
    try:
        services[True] = start_service(dsn, args.workers, {})
        services[False] = start_service(dsn, args.workers, NO_CACHES)
        for size in (int(s) for s in args.sizes.split(",")):
            measure_size(run, services, dsn, size)
            if not args.no_save:
                (OUT / "facets.md").write_text(report(run))
                plot(run)
    finally:
        for service in services.values():
            service.stop()
        if admin is not None and not args.keep:
            drop_database(admin, dsn)
        elif admin is not None:
            print(f"kept: --reuse {dsn}")
    print(report(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
