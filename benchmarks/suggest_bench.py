"""Search-as-you-type suggestions over HTTP, as Anonymous, for typed prefixes of 1 to 6 letters.

    python benchmarks/suggest_bench.py [--sizes 100000[,1000000]] [--repeat 200]

For each corpus size (catalog_service.demo's Plone-like content, loaded as catalog_bench.py loads
it: indexes deferred, batches from concurrent clients, indexes built), sequential p50/p95 of
``GET /{catalog}/@suggest?q=...`` without a credential for every prefix of a few typed words: a
common word of the demo's vocabulary (held by about a third of the objects, 60% of them
published), a rarer accented one, and a number (every object's id holds one: many lexicon words
of one document each, 40% of them private). Target (issue 26): p95 <= 10 ms at 1M objects.
Writes docs/benchmarks/suggest.md after every size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import catalog_bench as bench  # noqa: E402

from tests.pg import create_database, drop_database  # noqa: E402

OUT = ROOT / "docs" / "benchmarks"
TYPED = ["museum", "crème", "123456"]
TARGET_P95_MS = 10.0


def pct(times: list[float], q: int) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[q - 1] if len(times) > 1 else times[0]


def time_suggest(client: httpx.Client, path: str, q: str, repeat: int) -> tuple[list[float], dict]:
    for _ in range(10):  # warm-up: connections, the catalog's cached schema, statement cache
        response = client.get(path, params={"q": q})
        if response.status_code != 200:
            raise RuntimeError(f"{path}?q={q}: {response.status_code} {response.text[:500]}")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(path, params={"q": q})
        times.append((time.perf_counter() - started) * 1000)
    return times, response.json()


def load(service: bench.Service, name: str, size: int, batch: int, clients: int, dsn: str) -> None:
    with service.client() as admin:
        bench.create_catalog(admin, name)
    bench.checkpoint(dsn)
    started = time.perf_counter()
    if size >= bench.DEFER_INDEXES_FROM:
        bench.deferred_load(service, name, size, batch, clients)
    else:
        bench.http_bulk_index(service, name, size, batch, clients)
    print(f"{size} objects loaded in {time.perf_counter() - started:.0f} s", flush=True)


def report(args, info: dict, rows: list[tuple]) -> str:
    lines = ["# Suggestions (search-as-you-type) over HTTP", "",
             f"Made by `python benchmarks/suggest_bench.py --sizes {args.sizes} --repeat {args.repeat}` on "
             f"{datetime.now(UTC):%Y-%m-%d}: {info['nproc']} cores ({info['cpu']}), PostgreSQL "
             f"{info['postgresql']} (shared_buffers {info['shared_buffers']}), Python {info['python']}, "
             f"service with {args.workers} worker(s). Anonymous `GET /{{catalog}}/@suggest?q=...` (limit 10), "
             f"sequential, {args.repeat} requests per prefix after 10 of warm-up; catalog_service.demo "
             f"content, the client on the same machine; load average {info['load']} when the measurements "
             f"began. Target: p95 <= {TARGET_P95_MS:g} ms at 1M objects.", "",
             "| objects | q | p50 ms | p95 ms | words | titles |", "|---:|---|---:|---:|---:|---:|"]
    for size, q, times, answer in rows:
        lines.append(f"| {size:,} | `{q}` | {pct(times, 50):.2f} | {pct(times, 95):.2f} | "
                     f"{len(answer['words'])} | {len(answer['titles'])} |")
    for size in dict.fromkeys(r[0] for r in rows):
        worst = max(pct(r[2], 95) for r in rows if r[0] == size)
        lines.append("")
        lines.append(f"At {size:,} objects the slowest prefix's p95 is {worst:.2f} ms"
                     f" ({'within' if worst <= TARGET_P95_MS else 'over'} the {TARGET_P95_MS:g} ms target).")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the database (its DSN is printed) to look into plans")
    args = parser.parse_args()
    dsn, admin_dsn = create_database()
    service = bench.Service(dsn, args.workers)
    rows: list[tuple] = []
    try:
        info = bench.machine(dsn)
        for size in (int(s) for s in args.sizes.split(",")):
            name = f"suggest{size}"
            load(service, name, size, args.batch, args.clients, dsn)
            info["load"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
            with httpx.Client(base_url=service.url, timeout=60) as client:
                for word in TYPED:
                    for n in range(1, min(6, len(word)) + 1):
                        times, answer = time_suggest(client, f"/{name}/@suggest", word[:n], args.repeat)
                        rows.append((size, word[:n], times, answer))
                        print(f"{size:>8} {word[:n]!r:>10} p50 {pct(times, 50):6.2f} ms  p95 {pct(times, 95):6.2f} ms  "
                              f"words {len(answer['words'])} titles {len(answer['titles'])}", flush=True)
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / "suggest.md").write_text(report(args, info, rows))
    finally:
        service.stop()
        if args.keep:
            print(f"database kept: {dsn}")
        else:
            drop_database(admin_dsn, dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
