"""`make loadtest`: the locust scenarios against a local service on a 100k-object corpus, and the
folder listing's throughput beside the bare floor's, in one run.

1. A database: DATABASE_URL, or the embedded PostgreSQL in .pgdata/loadtest. The corpus (catalog
   ``loadtest``, ``--objects`` generated Plone-like objects) is created once and kept for the next
   run.
2. The service (``catalog-service serve``, ``--workers``) on a free port.
3. Locust, headless and bounded in time (``--seconds``): CSV, its HTML report and a plot under
   docs/benchmarks/ (``loadtest_*``). Its indexers unindex what they indexed when it stops; the run
   checks that the catalog holds the objects it held before.
4. wrk on the anonymous folder listing (``GET /search``, 20 items of a folder at 100k objects),
   then the floor script (``--floor`` or LOADTEST_FLOOR: a bare FastAPI + asyncpg endpoint of the
   same listing, which runs its own wrk) on the same database; the ratio of the two.
5. docs/benchmarks/loadtest.md with the numbers.

    .venv/bin/python loadtests/run.py --floor PATH/TO/floor.py [--seconds 60] [--users 20]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks"
sys.path.insert(0, str(ROOT))
from tests.live import free_port  # noqa: E402

CATALOG = "loadtest"
ADMIN_TOKEN = "loadtest-admin-token"


def database(args) -> str:
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from catalog_service.embedded import start

    return start(ROOT / ".pgdata" / "loadtest", database="catalog_loadtest")


def objects(base: str) -> int:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60) as client:
        return client.get(f"/catalogs/{CATALOG}").raise_for_status().json()["objects"]


def listing_url(base: str, count: int) -> str:
    from catalog_service.demo import folder_path

    query = {"path": {"query": folder_path(8, count), "depth": 1}, "sort_on": "getObjPositionInParent"}
    return f"{base}/search?" + urlencode({"catalog": CATALOG, "q": json.dumps(query, separators=(",", ":")),
                                          "b_size": 20})


def wrk(url: str, seconds: int, connections: int) -> float:
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", url],
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not found:
        raise RuntimeError(f"no Requests/sec in wrk's output:\n{out}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if non_2xx:
        raise RuntimeError(f"{non_2xx.group(1)} answers were not 2xx:\n{out}")
    return float(found.group(1))


def floor(script: Path, dsn: str) -> float:
    out = subprocess.run([sys.executable, str(script), dsn], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    found = re.search(r"floor throughput.*?:\s+([\d.]+)\s+req/s", out)
    if not found:
        raise RuntimeError(f"no throughput in the floor's output:\n{out}")
    return float(found.group(1))


def plot(history: Path, target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(history) as f:
        rows = [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"]
    if not rows:
        return
    start = int(rows[0]["Timestamp"])
    seconds = [int(r["Timestamp"]) - start for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(seconds, [float(r["Requests/s"]) for r in rows], label="requests/s")
    top.plot(seconds, [float(r["Failures/s"]) for r in rows], label="failures/s")
    top.set_ylabel("per second")
    top.legend()
    for column in ("50%", "95%"):
        values = [float(r[column]) if r[column] not in ("N/A", "") else float("nan") for r in rows]
        bottom.plot(seconds, values, label=f"p{column[:-1]} ms")
    bottom.set_ylabel("response time (ms)")
    bottom.set_xlabel("seconds")
    bottom.legend()
    fig.suptitle("locust: all requests (loadtests/locustfile.py)")
    fig.tight_layout()
    fig.savefig(target, dpi=90)


def locust_table(stats: Path) -> list[str]:
    with open(stats) as f:
        rows = list(csv.DictReader(f))
    lines = ["| request | count | failures | median ms | p95 ms | p99 ms | req/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = r["Name"] if r["Name"] == "Aggregated" else f"{r['Type']} {r['Name']}"
        lines.append(f"| {name} | {r['Request Count']} | {r['Failure Count']} | {r['50%']} | {r['95%']} | "
                     f"{r['99%']} | {float(r['Requests/s']):.1f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--floor", type=Path, default=os.environ.get("LOADTEST_FLOOR") or None,
                        help="the floor script (env LOADTEST_FLOOR); without it the floor is not measured")
    parser.add_argument("--objects", type=int, default=100_000, help="corpus size (default 100000)")
    parser.add_argument("--seconds", type=int, default=60, help="locust's run time (default 60)")
    parser.add_argument("--users", type=int, default=20, help="locust users (default 20)")
    parser.add_argument("--workers", type=int, default=1, help="service workers (default 1, as the floor's)")
    parser.add_argument("--wrk-seconds", type=int, default=10, help="wrk's run time (default 10)")
    parser.add_argument("--connections", type=int, default=20, help="wrk connections (default 20, as the floor's)")
    args = parser.parse_args()
    if args.floor is not None and not args.floor.is_file():
        parser.error(f"--floor {args.floor}: no such file")
    if shutil.which("wrk") is None:
        parser.error("wrk is not installed (make loadtest installs it: apt-get install -y wrk)")
    OUT.mkdir(parents=True, exist_ok=True)
    dsn = database(args)
    bin_dir = Path(sys.executable).parent

    print(f"corpus: {args.objects} objects in catalog {CATALOG!r} (created once, then kept)", file=sys.stderr)
    env = {**os.environ, "DATABASE_URL": dsn, "CATALOG_ADMIN_TOKEN": ADMIN_TOKEN, "CATALOG_LOG_LEVEL": "warning"}
    env.pop("CATALOG_DATABASE_URL", None)
    subprocess.run([bin_dir / "catalog-service", "demo", "--catalog", CATALOG, "--objects", str(args.objects)],
                   env=env, check=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    service = subprocess.Popen([bin_dir / "catalog-service", "serve", "--port", str(port),
                                "--workers", str(args.workers)], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the service did not start")
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        before = objects(base)
        prefix = OUT / "loadtest"
        locust_env = {**env, "CATALOG_ID": CATALOG, "CATALOG_TOKEN": ADMIN_TOKEN}
        started = time.monotonic()
        subprocess.run([bin_dir / "locust", "-f", str(ROOT / "loadtests" / "locustfile.py"), "--headless",
                        "-u", str(args.users), "-r", str(max(1, args.users // 4)), "-t", f"{args.seconds}s",
                        "--host", base, "--csv", str(prefix), "--csv-full-history", "--html",
                        str(prefix.with_suffix(".html")), "--only-summary", "--stop-timeout", "10"],
                       env=locust_env, check=False, cwd=ROOT, timeout=args.seconds + 300)
        locust_seconds = time.monotonic() - started
        after = objects(base)
        if after != before:
            raise RuntimeError(f"the locust run left {after} objects in the catalog, not {before}")
        plot(Path(f"{prefix}_stats_history.csv"), prefix.with_suffix(".png"))
        url = listing_url(base, args.objects)
        check = httpx.get(url).raise_for_status().json()
        if len(check["items"]) != 20:
            raise RuntimeError(f"the folder listing answered {len(check['items'])} items, not 20")
        wrk(url, 2, args.connections)  # warm-up
        service_rps = wrk(url, args.wrk_seconds, args.connections)
    finally:
        service.terminate()
        service.wait(30)
    floor_rps = floor(args.floor, dsn) if args.floor else None
    ratio = f"{service_rps / floor_rps:.2f}" if floor_rps else "not measured"
    print(f"folder listing: service {service_rps:.0f} req/s, floor {floor_rps or 0:.0f} req/s, ratio {ratio}",
          file=sys.stderr)

    lines = [
        "# Load test: locust scenarios and the folder listing against the floor",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} by `make loadtest` (loadtests/run.py) on this "
        f"machine: {os.cpu_count()} cores shared by the service, PostgreSQL and the load generators.",
        f"Corpus: {before:,} objects (catalog `{CATALOG}`, `catalog_service.demo`); service: "
        f"`catalog-service serve --workers {args.workers}`; database: "
        f"{'DATABASE_URL' if os.environ.get('DATABASE_URL') else 'the embedded PostgreSQL'}.",
        "",
        "## Folder listing throughput beside the floor",
        "",
        f"`wrk -t2 -c{args.connections} -d{args.wrk_seconds}s` on the anonymous folder listing "
        "(`GET /search`, path depth 1 of a folder of about 100 objects, sorted by position, 20 items), then "
        "the floor script (a bare FastAPI + asyncpg endpoint answering the same listing from a table of "
        "100k rows, one uvicorn process, its own `wrk -t2 -c20 -d5s`) on the same database, in the same run.",
        "",
        "| | requests/s |",
        "|---|---:|",
        f"| catalog service | {service_rps:,.0f} |",
        f"| floor | {f'{floor_rps:,.0f}' if floor_rps else 'not measured'} |",
        f"| ratio (target at least 0.7) | {ratio} |",
        "",
        "## Locust scenarios",
        "",
        f"`locust --headless -u {args.users} -t {args.seconds}s` with every user of loadtests/locustfile.py "
        f"({locust_seconds:.0f} s with start-up and the indexers' clean-up). The catalog held {before:,} objects "
        f"before and {after:,} after (the indexers unindex their objects when the test stops).",
        "",
        *locust_table(Path(f"{prefix}_stats.csv")),
        "",
        "Files: `loadtest_stats.csv`, `loadtest_stats_history.csv`, `loadtest_failures.csv`, "
        "`loadtest_exceptions.csv`, `loadtest.html` (locust's report), `loadtest.png`:",
        "",
        "![locust requests/s and response times](loadtest.png)",
        "",
    ]
    (OUT / "loadtest.md").write_text("\n".join(lines))
    print(f"wrote {OUT / 'loadtest.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
