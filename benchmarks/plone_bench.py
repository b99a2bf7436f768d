"""Plone with ZCatalog, with plone.pgcatalog and with the catalog connector, per storage.

    .venv/bin/python benchmarks/plone_bench.py [--docs 500,5000] [--rounds 20] [--cache-sizes 400,30000]
        [--only connector-jsonb,zcatalog-rs,...] [--pgcatalog-python PY312] [--no-pages] [--floor-ms MS]

Each configuration runs in its own process (benchmarks/_plone_worker.py), once per ZODB cache size
(``name@cache-size``), on a Plone 6 site with plone.app.contenttypes, seeded from
plone.app.testing's fixture into the storage under test:

- create: documents (rich text, 0-3 subjects) through plone.api, one transaction each, into 10
  folders; ms per document for the first 500, then for the ones up to 5,000;
- modify: title and description of 500 documents, ObjectModifiedEvent (what the edit form
  does), one transaction each, after the first document count; ms per document;
- queries, at every document count: the six shapes of plone.pgcatalog's published Plone
  benchmark, as Anonymous, reading ``len()`` and the first 20 brains; median ms with the query
  caches on, and with them cleared and the ZODB cache trimmed before each run; for the connector
  also the time waited for the service;
- pages (unless --no-pages): site root with navigation, a folder listing, a search results page,
  anonymous and an editor, published through ZPublisher's WSGI entry point after three warm-up
  renders; median ms, and for the connector the service requests and query cache hits per render.

The nocatalog-* configurations create and modify the same content with ZCatalog's
catalog_object and uncatalog_object doing nothing: the lower bound that no catalog can beat.
extractonly-fs and extractonly-rs compute the index values and metadata ZCatalog would store (the
same wrapper and indexers) and store nothing: the bound for any catalog that indexes Plone's values.
pgcatalog-pgjsonb is plone.pgcatalog on zodb-pgjsonb, run by the Python of --pgcatalog-python (it
needs Python 3.12; make that environment outside the repository, docs/benchmarks/plone.md).

RelStorage is history-free, on the same PostgreSQL server as the catalog service and JsonbStorage
(each in its own database). Without DATABASE_URL the tests' embedded PostgreSQL is used. Writes
docs/benchmarks/plone.md, plone.png and the raw figures in plone.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = {
    # Plone whose catalog indexes nothing: the lower bound of creating and modifying content.
    "nocatalog-fs": ("none", "FileStorage"),
    "nocatalog-rs": ("none", "RelStorage"),
    # Plone whose catalog only computes the values ZCatalog would index and store.
    "extractonly-fs": ("extract", "FileStorage"),
    "extractonly-rs": ("extract", "RelStorage"),
    "zcatalog-fs": ("ZCatalog", "FileStorage"),
    "zcatalog-rs": ("ZCatalog", "RelStorage"),
    "connector-fs": ("connector", "FileStorage"),
    "connector-rs": ("connector", "RelStorage"),
    "connector-jsonb": ("connector", "JsonbStorage"),
    # plone.pgcatalog on zodb-pgjsonb, run by the Python of --pgcatalog-python (it needs 3.12).
    "pgcatalog-pgjsonb": ("pgcatalog", "PGJsonbStorage"),
}
QUERIES = ["portal_type", "type+state+Subject sorted", "SearchableText", "path + position",
           "published, Anonymous", "date sorted"]


def run_worker(name: str, cache_size: int, target: str, args, service, workdir: Path) -> dict:
    catalog, storage = CONFIGS[name]
    run_name = f"{name}@{cache_size}"
    output = workdir / f"{run_name}.json"
    config = {
        "storage": storage, "catalog": catalog, "target": target, "docs": args.docs, "cache_size": cache_size,
        "rounds": args.rounds, "output": str(output), "blob_dir": str(workdir / f"{run_name}-blobs"),
        "pages": args.pages,
    }
    env = dict(os.environ)
    if service is not None:
        env.update({
            "CATALOG_SERVICE_URL": service.url, "CATALOG_SERVICE_TOKEN": service.admin_token,
            "CATALOG_SERVICE_CATALOG_ID": f"bench-{name}-{cache_size}-{os.getpid()}",
        })
    python = args.pgcatalog_python if catalog == "pgcatalog" else sys.executable
    log = Path(args.logs or workdir) / f"{run_name}.log"
    began = time.monotonic()
    with log.open("w") as stream:
        code = subprocess.call([python, str(ROOT / "benchmarks" / "_plone_worker.py"), json.dumps(config)],
                               env=env, stdout=stream, stderr=subprocess.STDOUT)
    if code != 0 or not output.exists():
        tail = log.read_text(errors="replace").splitlines()[-15:]
        return {"error": f"worker exited with {code}: " + " | ".join(line.strip() for line in tail)}
    result = json.loads(output.read_text())
    result["wall_s"] = time.monotonic() - began
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", default="500,5000", help="document counts to create up to")
    parser.add_argument("--rounds", type=int, default=20, help="timed repetitions of each query and page")
    parser.add_argument("--cache-sizes", default="400,30000", help="ZODB cache sizes (objects) to run each at")
    parser.add_argument("--only", default=",".join(n for n in CONFIGS if n != "pgcatalog-pgjsonb"),
                        help="configurations to run")
    parser.add_argument("--pgcatalog-python", default=os.environ.get("PLONE_BENCH_PGCATALOG_PYTHON"),
                        help="a Python 3.12 with plone.pgcatalog and zodb-pgjsonb installed (pgcatalog-pgjsonb)")
    parser.add_argument("--no-pages", dest="pages", action="store_false", help="skip the page renders")
    parser.add_argument("--floor-ms", type=float, help="the bare floor's p50, measured beside this run")
    parser.add_argument("--logs", help="folder to keep the workers' output in (profiles)")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "plone.md"))
    args = parser.parse_args()
    args.docs = [int(n) for n in args.docs.split(",")]
    args.cache_sizes = [int(n) for n in args.cache_sizes.split(",")]
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}; known: {list(CONFIGS)}")
    if "pgcatalog-pgjsonb" in names and not args.pgcatalog_python:
        parser.error("pgcatalog-pgjsonb needs --pgcatalog-python (or PLONE_BENCH_PGCATALOG_PYTHON)")

    from tests.live import start_service
    from tests.pg import create_database, drop_database

    created = []

    def database(prefix):
        dsn, admin = create_database(prefix)
        created.append((admin, dsn))
        return dsn

    service = None
    results = {}
    with tempfile.TemporaryDirectory(prefix="plone-bench-") as tmp:
        workdir = Path(tmp)
        try:
            if any(CONFIGS[n][0] == "connector" for n in names):
                service = start_service(database("bench_service"))
            for cache_size in args.cache_sizes:
                for name in names:
                    storage = CONFIGS[name][1]
                    run_name = f"{name}@{cache_size}"
                    if storage == "FileStorage":
                        target = str(workdir / f"{run_name}.fs")
                    else:
                        target = database(f"bench_{name.replace('-', '_')}_{cache_size}")
                    print(f"== {run_name}", flush=True)
                    connected = service if "connector" in name else None
                    results[run_name] = run_worker(name, cache_size, target, args, connected, workdir)
                    if "error" in results[run_name]:
                        print(f"   {results[run_name]['error']}", flush=True)
                    else:
                        print(f"   done in {results[run_name]['wall_s']:.0f} s", flush=True)
                    # Kept as the run goes: a long run cut short still leaves what it measured.
                    Path(args.output).with_suffix(".json").write_text(json.dumps(results, indent=1))
        finally:
            if service is not None:
                service.stop()
            for admin, dsn in created:
                drop_database(admin, dsn)
    report = render_report(results, args)
    print(report)
    path = Path(args.output)
    path.write_text(report)
    plot(path.with_suffix(".png"), results, args)


def _server_version() -> str:
    import psycopg

    from tests.pg import server_url

    with psycopg.connect(server_url()) as conn:
        return conn.execute("show server_version").fetchone()[0].split()[0]


def _fmt(value, digits=1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _with_catalog(ms: float, catalog: dict) -> str:
    return f"{ms:,.1f} ({catalog['ms']:,.1f}; {catalog['calls']:.1f})"


PRODUCT, ZCATALOG, PGCATALOG = "connector-jsonb", "zcatalog-rs", "pgcatalog-pgjsonb"


def render_report(results: dict, args) -> str:
    ok = {n: r for n, r in results.items() if "error" not in r}
    command = (f"benchmarks/plone_bench.py --docs {','.join(map(str, args.docs))} --rounds {args.rounds} "
               f"--cache-sizes {','.join(map(str, args.cache_sizes))} --only {args.only}"
               + ("" if args.pages else " --no-pages"))
    lines = [
        "# Plone benchmark: ZCatalog, plone.pgcatalog and the catalog connector, per storage",
        "",
        f"`{command}`, PostgreSQL {_server_version()}, Python {platform.python_version()} "
        f"(plone.pgcatalog: its own Python), {os.cpu_count()} CPUs, catalog service as one local uvicorn "
        "process. Each configuration runs once per ZODB cache size (`name@cache-size`). The machine is shared "
        "with other test runs: compare ratios within one run.",
        "",
        "## Creating and modifying content (ms per document, lower is better)",
        "",
    ]
    sizes = args.docs
    header = ["configuration"]
    previous = 0
    for size in sizes:
        header.append(f"create {previous + 1:,}–{size:,}")
        previous = size
    header.append(f"modify {min(500, sizes[0])}")
    lines += ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for name, result in results.items():
        if "error" in result:
            lines.append(f"| {name} | not run: {result['error'][:300]} |")
            continue
        cells = [_with_catalog(result["create"][str(size)], result["create_catalog"][str(size)]) for size in sizes]
        cells.append(_with_catalog(result["modify"], result["modify_catalog"]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "In parentheses: ms of it in the catalog's own work (ZCatalog and plone.pgcatalog: "
              "`catalog_object` and `uncatalog_object`, and their calls per document; connector: waiting on the "
              "service, and requests per document). nocatalog-*: ZCatalog's `catalog_object` and "
              "`uncatalog_object` replaced by functions that do nothing: no catalog can make Plone faster than "
              "that row. extractonly-*: they only compute the values ZCatalog would store."]
    queried = {n: r for n, r in ok.items() if r.get("queries_cached")}
    for size in sizes:
        for mode, title in (("queries_cached", "query caches on"),
                            ("queries_cleared", "query caches cleared and the ZODB cache trimmed before each run")):
            lines += ["", f"## Queries at {size:,} documents, {title} (median ms, as Anonymous, `len()` and the "
                      "first 20 brains read)", ""]
            lines += ["| configuration | " + " | ".join(QUERIES) + " |", "|---" + "|---:" * len(QUERIES) + "|"]
            for name, result in queried.items():
                answers = result[mode].get(str(size), {})
                lines.append(f"| {name} | " + " | ".join(_fmt(answers.get(q, {}).get("ms"), 2) for q in QUERIES)
                             + " |")
        waited = {n: r["queries_cleared"][str(size)] for n, r in queried.items()
                  if "wait_ms" in next(iter(r["queries_cleared"].get(str(size), {"": {}}).values()), {})}
        if waited:
            lines += ["", f"Where the connector's uncached time goes at {size:,} documents: ms in all / ms of it in "
                      "its requests to the service (from the call to the decoded answer: httpx, HTTP and the "
                      "service's work) / requests per query.", ""]
            lines += ["| configuration | " + " | ".join(QUERIES) + " |", "|---" + "|---:" * len(QUERIES) + "|"]
            for name, answers in waited.items():
                lines.append(f"| {name} | " + " | ".join(
                    f"{answers[q]['ms']:.2f} / {answers[q]['wait_ms']:.2f} / {answers[q]['requests']:.1f}"
                    for q in QUERIES) + " |")
        found = {n: [r["queries_cleared"].get(str(size), {}).get(q, {}).get("found") for q in QUERIES]
                 for n, r in queried.items()}
        lines += ["", "Found (`len()`): " + "; ".join(f"{n}: {', '.join(map(str, f))}" for n, f in found.items())]
    paged = {n: r for n, r in ok.items() if r.get("pages")}
    if paged:
        lines += ["", "## Page renders (median ms; connector: service requests / query cache hits per render)", ""]
        pages = list(next(iter(paged.values()))["pages"])
        lines += ["| configuration | " + " | ".join(pages) + " |", "|---" + "|---:" * len(pages) + "|"]
        for name, result in paged.items():
            cells = []
            for page in pages:
                entry = result["pages"][page]
                cell = _fmt(entry["ms"])
                if "requests_per_render" in entry:
                    cell += f" ({entry['requests_per_render']:.1f} / {entry['cache_hits_per_render']:.1f})"
                cells.append(cell)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "![ms per operation](plone.png)", "", "## Targets (issue 25)", ""]
    lines += targets(ok, args)
    return "\n".join(lines) + "\n"


def targets(ok: dict, args) -> list[str]:
    """The issue's targets, checked against this run's numbers (the product: the connector on
    JsonbStorage; beside it ZCatalog on RelStorage and plone.pgcatalog on zodb-pgjsonb)."""
    out = []
    for cache_size in args.cache_sizes:
        product, zcat, pg = (ok.get(f"{n}@{cache_size}") for n in (PRODUCT, ZCATALOG, PGCATALOG))
        if not (product and zcat):
            continue
        p, z = product["modify"], zcat["modify"]
        out.append(f"- cache-size {cache_size:,}, modify ≤ 0.8 of ZCatalog-on-RelStorage's: {p:.1f} vs {z:.1f} "
                   f"ms/doc, ratio {p / z:.2f}: **{'met' if p <= 0.8 * z else 'NOT met'}**"
                   + (f" (plone.pgcatalog {pg['modify']:.1f}, ratio {pg['modify'] / z:.2f})" if pg else ""))
        previous = 0
        for size in args.docs:
            p, z = product["create"][str(size)], zcat["create"][str(size)]
            met = p <= 0.8 * z and (pg is None or p < pg["create"][str(size)])
            line = (f"- cache-size {cache_size:,}, create {previous + 1:,}–{size:,} ≤ 0.8 of ZCatalog-on-RelStorage's"
                    f" and ahead of plone.pgcatalog's: {p:.1f} vs {z:.1f} ms/doc, ratio {p / z:.2f}")
            if pg:
                line += f"; plone.pgcatalog {pg['create'][str(size)]:.1f} (ratio {pg['create'][str(size)] / z:.2f})"
            out.append(line + f": **{'met' if met else 'NOT met'}**" + ("" if pg else " (plone.pgcatalog not run)"))
            previous = size
            cleared = product["queries_cleared"].get(str(size))
            if not cleared:
                continue
            if pg and pg["queries_cleared"].get(str(size)):
                slower = [q for q in QUERIES if cleared[q]["ms"] >= pg["queries_cleared"][str(size)][q]["ms"]]
                out.append(f"- cache-size {cache_size:,}, {size:,} documents, every uncached query faster than "
                           "plone.pgcatalog's: " + ("**met**" if not slower else f"**NOT met** for {', '.join(slower)}"))
            if args.floor_ms:
                over = [q for q in QUERIES if cleared[q]["ms"] > 2 * args.floor_ms]
                out.append(f"- cache-size {cache_size:,}, {size:,} documents, every uncached query ≤ 2x the floor "
                           f"({args.floor_ms:.2f} ms): " + ("**met**" if not over else
                                                             f"**NOT met** for {', '.join(over)}"))
            if size >= 5000 and zcat["queries_cleared"].get(str(size)):
                slower = [q for q in QUERIES if cleared[q]["ms"] > zcat["queries_cleared"][str(size)][q]["ms"]]
                out.append(f"- cache-size {cache_size:,}, {size:,} documents, no slower than ZCatalog with its ZODB "
                           "cache trimmed: " + ("**met**" if not slower else f"**NOT met** for {', '.join(slower)}"))
    return out


def plot(path: Path, results: dict, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [n for n, r in results.items() if "error" not in r and r.get("queries_cleared")]
    if not ok:
        return
    size = str(args.docs[-1])
    groups = [("create (last batch)", lambda r: r["create"][size]), ("modify", lambda r: r["modify"])]
    groups += [(f"{q}, caches cleared", lambda r, q=q: r["queries_cleared"][size][q]["ms"]) for q in QUERIES]
    fig, ax = plt.subplots(figsize=(14, 5))
    width = 0.8 / len(ok)
    for i, name in enumerate(ok):
        values = [fn(results[name]) for _, fn in groups]
        ax.bar([g + i * width for g in range(len(groups))], values, width, label=name)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([label for label, _ in groups], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms (lower is better)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(f"Plone at {int(size):,} documents: ZCatalog, plone.pgcatalog and the catalog connector")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
