"""Plone with ZCatalog vs Plone with the catalog connector, on FileStorage, RelStorage and JsonbStorage.

    .venv/bin/python benchmarks/plone_bench.py [--docs 500,5000] [--rounds 20] [--only connector-fs,...]

Each configuration runs in its own process (benchmarks/_plone_worker.py) on a Plone 6 site with
plone.app.contenttypes, seeded from plone.app.testing's fixture into the storage under test:

- create: documents (with rich text) through plone.api, one transaction each, into 10 folders;
  ms per document for the first 500, then for the ones up to 5,000;
- modify: title and description of 500 documents, ObjectModifiedEvent (what the edit form
  does), one transaction each; ms per document;
- queries: folder listing, navigation, collection by type sorted by modified, SearchableText,
  as Anonymous, reading the first 20 brains; median ms, warm (large ZODB cache; the connector's
  query cache on, and off), and cold (ZODB cache of 100 objects, garbage-collected before each
  query; the connector's query cache cleared too);
- pages: site root with navigation, a folder listing, a search results page, anonymous and an
  editor, published through ZPublisher's WSGI entry point after three warm-up renders; median ms,
  and for the connector the service requests and query cache hits per render.

The nocatalog-fs and nocatalog-rs configurations create and modify the same content with ZCatalog's
catalog_object and uncatalog_object doing nothing: the lower bound that no catalog can beat.
extractonly-fs and extractonly-rs compute the index values and metadata ZCatalog would store (the
same wrapper and indexers) and store nothing: the bound for any catalog that indexes Plone's values.

RelStorage is history-free, on the same PostgreSQL server as the catalog service and JsonbStorage
(each in its own database). Without DATABASE_URL the tests' embedded PostgreSQL is used. Writes
docs/benchmarks/plone.md and docs/benchmarks/plone.png.
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
}
QUERIES = ["folder listing", "navigation", "collection by type", "SearchableText"]


def run_worker(name: str, target: str, args, service, workdir: Path) -> dict:
    catalog, storage = CONFIGS[name]
    output = workdir / f"{name}.json"
    config = {
        "storage": storage, "catalog": catalog, "target": target, "docs": args.docs,
        "rounds": args.rounds, "output": str(output), "blob_dir": str(workdir / f"{name}-blobs"),
    }
    env = dict(os.environ)
    if service is not None:
        env.update({
            "CATALOG_SERVICE_URL": service.url, "CATALOG_SERVICE_TOKEN": service.admin_token,
            "CATALOG_SERVICE_CATALOG_ID": f"bench-{name}-{os.getpid()}",
        })
    log = workdir / f"{name}.log"
    began = time.monotonic()
    with log.open("w") as stream:
        code = subprocess.call([sys.executable, str(ROOT / "benchmarks" / "_plone_worker.py"), json.dumps(config)],
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
    parser.add_argument("--only", default=",".join(CONFIGS), help="configurations to run")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "plone.md"))
    args = parser.parse_args()
    args.docs = [int(n) for n in args.docs.split(",")]
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}; known: {list(CONFIGS)}")

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
            for name in names:
                storage = CONFIGS[name][1]
                if storage == "FileStorage":
                    target = str(workdir / f"{name}.fs")
                else:
                    target = database(f"bench_{name.replace('-', '_')}")
                print(f"== {name}", flush=True)
                results[name] = run_worker(name, target, args, service if "connector" in name else None, workdir)
                if "error" in results[name]:
                    print(f"   {results[name]['error']}", flush=True)
                else:
                    print(f"   done in {results[name]['wall_s']:.0f} s", flush=True)
        finally:
            if service is not None:
                service.stop()
            for admin, dsn in created:
                drop_database(admin, dsn)
    report = render_report(results, args, names)
    print(report)
    path = Path(args.output)
    path.write_text(report)
    plot(path.with_suffix(".png"), results, names)


def _server_version() -> str:
    import psycopg

    from tests.pg import server_url

    with psycopg.connect(server_url()) as conn:
        return conn.execute("show server_version").fetchone()[0].split()[0]


def _fmt(value, digits=1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _with_catalog(ms: float, catalog: dict) -> str:
    return f"{ms:,.1f} ({catalog['ms']:,.1f}; {catalog['calls']:.1f})"


def render_report(results: dict, args, names: list[str]) -> str:
    ok = {n: r for n, r in results.items() if "error" not in r and "queries_warm" in r}
    command = f"benchmarks/plone_bench.py --docs {','.join(map(str, args.docs))} --rounds {args.rounds}"
    lines = [
        "# Plone benchmark: ZCatalog vs the catalog connector, per storage",
        "",
        f"`{command}` (`make bench-plone`), PostgreSQL {_server_version()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, catalog service as one local uvicorn process. "
        "The machine is shared with other test runs: differences under about 20% are noise.",
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
    header.append(f"modify {min(500, sizes[-1])}")
    lines += ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for name in names:
        result = results.get(name, {})
        if "error" in result:
            lines.append(f"| {name} | not run: {result['error'][:300]} |")
            continue
        cells = [_with_catalog(result["create"][str(size)], result["create_catalog"][str(size)]) for size in sizes]
        cells.append(_with_catalog(result["modify"], result["modify_catalog"]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "In parentheses: ms of it in the catalog's own work (ZCatalog: `catalog_object` and "
              "`uncatalog_object`, and their calls per document; connector: waiting on the service, and requests per document). "
              "nocatalog-*: ZCatalog's `catalog_object` and `uncatalog_object` replaced by functions that do "
              "nothing, so no catalog can make Plone faster than that row (it has no queries or pages). "
              "extractonly-*: they only compute the values ZCatalog would store, so no catalog that indexes "
              "Plone's values can be faster than that row."]
    lines += ["", f"## Catalog queries at {sizes[-1]:,} documents (median ms, as Anonymous, first 20 brains read)", ""]
    cols = []
    for q in QUERIES:
        cols += [f"{q} warm", f"{q} warm, no query cache", f"{q} cold"]
    lines += ["| configuration | " + " | ".join(cols) + " |", "|---" + "|---:" * len(cols) + "|"]
    for name, result in ok.items():
        cells = []
        for q in QUERIES:
            cells.append(_fmt(result["queries_warm"][q], 2))
            cells.append(_fmt(result.get("queries_warm_uncached", {}).get(q), 2))
            cells.append(_fmt(result["queries_cold"][q], 2))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Page renders, warm (median ms; connector: service requests / query cache hits per render)", ""]
    pages = list(next(iter(ok.values()))["pages"]) if ok else []
    lines += ["| configuration | " + " | ".join(pages) + " |", "|---" + "|---:" * len(pages) + "|"]
    for name, result in ok.items():
        cells = []
        for page in pages:
            entry = result["pages"][page]
            cell = _fmt(entry["ms"])
            if "requests_per_render" in entry:
                cell += f" ({entry['requests_per_render']:.1f} / {entry['cache_hits_per_render']:.1f})"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "![ms per operation](plone.png)", "", "## Targets", ""]
    lines += targets(ok, sizes, {n: r for n, r in results.items()
                                 if n.startswith(("nocatalog", "extractonly")) and "error" not in r})
    return "\n".join(lines) + "\n"


def targets(ok: dict, sizes, floors: dict | None = None) -> list[str]:
    """The issue's targets, checked against this run's numbers."""
    out = []
    floors = floors or {}
    for storage, suffix in (("FileStorage", "fs"), ("RelStorage", "rs")):
        conn, zcat = ok.get(f"connector-{suffix}"), ok.get(f"zcatalog-{suffix}")
        if not (conn and zcat):
            continue
        floor = floors.get(f"nocatalog-{suffix}")
        extract = floors.get(f"extractonly-{suffix}")
        previous = 0
        for size in sizes:
            c, z = conn["create"][str(size)], zcat["create"][str(size)]
            verdict = "met" if c <= z / 2 else "NOT met"
            line = (f"- creation at most half of ZCatalog's on {storage} (documents {previous + 1:,}–{size:,}): "
                    f"{c:.1f} vs {z:.1f} ms/doc, ratio {c / z:.2f}: **{verdict}**")
            if floor:
                f = floor["create"][str(size)]
                line += f". Without any catalog work Plone takes {f:.1f} ms/doc ({f / z:.2f} of ZCatalog's)"
            if extract:
                e = extract["create"][str(size)]
                line += (f"; computing the values to index and storing nothing, {e:.1f} ms/doc ({e / z:.2f}): "
                         + ("below half, so the target is reachable" if e <= z / 2 else
                            "more than half, so no catalog that indexes Plone's values can meet it"))
            out.append(line)
            previous = size
        slower = [q for q in QUERIES if conn["queries_cold"][q] >= zcat["queries_cold"][q]]
        out.append(f"- queries faster than ZCatalog with a cold ZODB cache on {storage}: "
                   + ("**met** for all four" if not slower else f"**NOT met** for {', '.join(slower)}"))
        worse = [p for p in conn["pages"] if conn["pages"][p]["ms"] > zcat["pages"][p]["ms"]]
        out.append(f"- page renders no slower than ZCatalog when warm on {storage}: "
                   + ("**met** for all six" if not worse else f"**NOT met** for {', '.join(worse)}"))
    return out


def plot(path: Path, results: dict, names: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [n for n in names if "error" not in results.get(n, {"error": 1}) and "queries_cold" in results[n]]
    if not ok:
        return
    groups = [("create (last batch)", lambda r: r["create"][list(r["create"])[-1]]),
              ("modify", lambda r: r["modify"])]
    groups += [(f"{q} cold", lambda r, q=q: r["queries_cold"][q]) for q in QUERIES]
    pages = list(results[ok[0]]["pages"])
    groups += [(p, lambda r, p=p: r["pages"][p]["ms"]) for p in pages]
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
    ax.set_title("Plone with ZCatalog vs the catalog connector")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
