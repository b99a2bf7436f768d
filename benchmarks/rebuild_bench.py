"""clearFindAndRebuild of a large site: ZCatalog's own vs the connector's, same site size, same run.

    .venv/bin/python benchmarks/rebuild_bench.py [--objects 150000] [--cache 30000] [--only zcatalog,connector]

Each configuration runs in its own process, on a Plone 6 site (plone.app.contenttypes) on
FileStorage. The site gets ``--objects`` lightweight Documents (a title, a subject, no text), in
folders of 1,000, added without events (``_setObject(..., suppress_events=True)``, a commit every
2,000) so that generating them costs no catalog work. Then, in a fresh connection whose ZODB cache
holds ``--cache`` objects, the catalog is rebuilt (``clearFindAndRebuild``) and committed in one
transaction, timed. Peak memory is the process's peak RSS (VmHWM) during the rebuild and its
commit (reset before it through /proc/self/clear_refs). The connector's service runs on the same
machine and PostgreSQL (its CPU is not in the process's figures). Writes docs/benchmarks/rebuild.md.
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

CONFIGS = {"zcatalog": False, "connector": True}
PER_FOLDER = 1000
COMMIT_EVERY = 2000


def _memory(field: str) -> int:
    """A VmHWM/VmRSS line of /proc/self/status, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


def worker(config: dict) -> dict:
    import transaction
    from plone import api
    from plone.app.contenttypes.content import Document

    from benchmarks import _plone_worker

    _plone_worker.WARM_CACHE = config["cache"]  # the ZODB cache of the rebuild's connection
    _plone_worker.set_up("FileStorage", config["target"], config["connector"], config["blob_dir"])
    objects = config["objects"]
    began = time.monotonic()
    site = _plone_worker.Site()
    portal = site.site
    folder = None
    for n in range(objects):
        if n % PER_FOLDER == 0:
            folder = api.content.create(container=portal, type="Folder", id=f"bulk-{n // PER_FOLDER}",
                                        title=f"Bulk {n // PER_FOLDER}")
        doc = Document(f"doc-{n}")
        doc.title = f"Document {n}"
        doc.subject = (f"s{n % 7}",)
        doc.portal_type = "Document"
        folder._setObject(doc.id, doc, suppress_events=True)
        if n % COMMIT_EVERY == COMMIT_EVERY - 1:
            transaction.commit()
            portal._p_jar.cacheGC()
    transaction.commit()
    generated = time.monotonic() - began
    site.close()

    site = _plone_worker.Site()
    site.site._p_jar.cacheMinimize()
    catalog = site.site.portal_catalog
    rss_before = _memory("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    cpu = time.process_time()
    began = time.monotonic()
    catalog.clearFindAndRebuild()
    transaction.commit()
    seconds = time.monotonic() - began
    cpu = time.process_time() - cpu
    peak = _memory("VmHWM")
    cataloged = len(catalog)
    site.close()
    return {"objects": objects, "cataloged": cataloged, "generate_s": generated, "rebuild_s": seconds,
            "rebuild_cpu_s": cpu, "objects_per_s": cataloged / seconds, "rss_before_mib": rss_before,
            "peak_rss_mib": peak, "cache": config["cache"]}


def run_worker(name: str, args, service, workdir: Path) -> dict:
    output = workdir / f"{name}.json"
    config = {"connector": CONFIGS[name], "objects": args.objects, "cache": args.cache,
              "target": str(workdir / f"{name}.fs"), "blob_dir": str(workdir / f"{name}-blobs"),
              "output": str(output)}
    env = dict(os.environ)
    if service is not None:
        env.update({"CATALOG_SERVICE_URL": service.url, "CATALOG_SERVICE_TOKEN": service.admin_token,
                    "CATALOG_SERVICE_CATALOG_ID": f"rebuild-{os.getpid()}"})
    log = workdir / f"{name}.log"
    with log.open("w") as stream:
        code = subprocess.call([sys.executable, __file__, "--worker", json.dumps(config)], env=env,
                               stdout=stream, stderr=subprocess.STDOUT)
    if code != 0 or not output.exists():
        tail = log.read_text(errors="replace").splitlines()[-15:]
        return {"error": f"worker exited with {code}: " + " | ".join(line.strip() for line in tail)}
    result = json.loads(output.read_text())
    result["progress"] = [line for line in log.read_text(errors="replace").splitlines()
                          if "clearFindAndRebuild of catalog" in line][-3:]
    return result


def render(results: dict, args) -> str:
    lines = [
        "# Rebuild of a large site: ZCatalog vs the connector",
        "",
        f"`{' '.join(['.venv/bin/python', 'benchmarks/rebuild_bench.py', *sys.argv[1:]])}`"
        f" on {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores"
        f" (shared with other work); {args.objects:,} lightweight Documents in folders of {PER_FOLDER:,},"
        f" FileStorage, ZODB cache of {args.cache:,} objects.",
        "",
        "`clearFindAndRebuild()` and the commit of its transaction, timed together; peak RSS of the Plone",
        "process during them (the service's own memory and CPU are not in these figures).",
        "",
        "| catalog | objects cataloged | rebuild s | objects/s | Plone CPU s | RSS before MiB | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error'][:200]} | | | | | |")
            continue
        lines.append(f"| {name} | {r['cataloged']:,} | {r['rebuild_s']:.1f} | {r['objects_per_s']:.0f} | "
                     f"{r['rebuild_cpu_s']:.1f} | {r['rss_before_mib']:,} | {r['peak_rss_mib']:,} |")
    progress = results.get("connector", {}).get("progress")
    if progress:
        lines += ["", "The connector's progress lines (last three):", "", "```", *progress, "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        config = json.loads(sys.argv[2])
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        Path(config["output"]).write_text(json.dumps(worker(config), indent=2))
        os._exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=150_000)
    parser.add_argument("--cache", type=int, default=30_000, help="ZODB cache size (objects) of the rebuild")
    parser.add_argument("--only", default=",".join(CONFIGS))
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "rebuild.md"))
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]

    from tests.live import start_service
    from tests.pg import create_database, drop_database

    results = {}
    service = None
    created = []
    with tempfile.TemporaryDirectory(prefix="rebuild-bench-") as tmp:
        try:
            if "connector" in names:
                dsn, admin = create_database("bench_rebuild")
                created.append((admin, dsn))
                service = start_service(dsn)
            for name in names:
                print(f"== {name}", flush=True)
                results[name] = run_worker(name, args, service if CONFIGS[name] else None, Path(tmp))
                print(f"   {results[name]}", flush=True)
        finally:
            if service is not None:
                service.stop()
            for admin, dsn in created:
                drop_database(admin, dsn)
    report = render(results, args)
    print(report)
    Path(args.output).write_text(report)


if __name__ == "__main__":
    main()
