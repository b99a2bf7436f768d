"""Rebuilds of a large site: ZCatalog's own, the connector's install into it, the connector's own.

    .venv/bin/python benchmarks/rebuild_bench.py [--objects 150000] [--cache 30000]

One process, one Plone 6 site (plone.app.contenttypes) on FileStorage, with the connector's ZCML
loaded but not installed. The site gets ``--objects`` lightweight Documents (a title, a subject,
no text), in folders of 1,000, added without events (``_setObject(..., suppress_events=True)``,
a commit every 2,000) so that generating them costs no catalog work. Then, each in a fresh
connection whose ZODB cache holds ``--cache`` objects, in one transaction each, timed with its
commit:

1. ``zcatalog``: ZCatalog's ``clearFindAndRebuild()``;
2. ``install``: the connector's profile applied to that site (it swaps the tool and sends the
   whole site to the service, in chunks);
3. ``connector``: the connector's ``clearFindAndRebuild()`` on the same site.

Peak memory is the process's peak RSS (VmHWM) during a phase (reset before it through
/proc/self/clear_refs); RSS is also sampled twice a second for the plot. The service runs on the
same machine and PostgreSQL: its CPU and memory are not in the Plone process's figures, its peak
RSS is given apart. Writes docs/benchmarks/rebuild.md and rebuild_memory.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHASES = ("zcatalog", "install", "connector")
PER_FOLDER = 1000
COMMIT_EVERY = 2000


def _memory(field: str, pid: str = "self") -> int:
    """A VmHWM/VmRSS line of /proc/<pid>/status, in MiB."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


class Sampler(threading.Thread):
    """RSS of this process (and of the service's, if given) twice a second, labelled by phase."""

    def __init__(self, service_pid: str | None):
        super().__init__(daemon=True)
        self.service_pid = service_pid
        self.phase = "generate"
        self.samples: list[tuple[str, float, int, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.samples.append((self.phase, round(time.time(), 2), _memory("VmRSS"),
                                 _memory("VmRSS", self.service_pid) if self.service_pid else 0))


def _generate(objects: int) -> float:
    import transaction
    from plone import api
    from plone.app.contenttypes.content import Document

    from benchmarks import _plone_worker

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
            if n % 20_000 == 19_999:
                print(f"generated {n + 1:,} objects in {time.monotonic() - began:.0f} s", flush=True)
    transaction.commit()
    site.close()
    return time.monotonic() - began


def _phase(name: str, sampler: Sampler) -> dict:
    import transaction
    from Acquisition import aq_base
    from plone.base.utils import get_installer

    from benchmarks import _plone_worker

    site = _plone_worker.Site()
    site.site._p_jar.cacheMinimize()
    rss_before = _memory("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    sampler.phase = name
    cpu = time.process_time()
    began = time.monotonic()
    if name == "install":
        get_installer(site.site, site.site.REQUEST).install_product("plone_connector")
    else:
        site.site.portal_catalog.clearFindAndRebuild()
    transaction.commit()
    seconds = time.monotonic() - began
    cpu = time.process_time() - cpu
    sampler.phase = "between"
    peak = _memory("VmHWM")
    catalog = site.site.portal_catalog
    cataloged = len(catalog)
    kind = type(aq_base(catalog)).__name__
    site.close()
    return {"catalog": kind, "cataloged": cataloged, "rebuild_s": seconds, "rebuild_cpu_s": cpu,
            "objects_per_s": cataloged / seconds, "rss_before_mib": rss_before, "peak_rss_mib": peak}


def worker(config: dict) -> dict:
    from benchmarks import _plone_worker

    _plone_worker.WARM_CACHE = config["cache"]  # the ZODB cache of every connection
    _plone_worker.BenchLayer.load_connector = True  # ZCML only: the site starts on ZCatalog
    _plone_worker.set_up("FileStorage", config["target"], False, config["blob_dir"])
    sampler = Sampler(config.get("service_pid"))
    sampler.start()
    out = {"objects": config["objects"], "cache": config["cache"], "generate_s": _generate(config["objects"])}
    for name in config["phases"]:
        print(f"-- {name}", flush=True)
        if config.get("profile"):
            import cProfile

            profiler = cProfile.Profile()
            out[name] = profiler.runcall(_phase, name, sampler)
            profiler.dump_stats(str(Path(config["output"]).with_name(f"{name}.prof")))
            continue
        out[name] = _phase(name, sampler)
        print(f"   {out[name]}", flush=True)
        # What is done so far, should a later phase not end (docs/benchmarks/rebuild_partial.json).
        partial = {**out, "samples": sampler.samples}
        Path(config["partial"]).write_text(json.dumps(partial))
    sampler.stopped.set()
    out["samples"] = sampler.samples
    return out


class Probe(threading.Thread):
    """Another program's query of the catalog, one after the other (a quarter second apart) for
    the whole run: how long other readers wait while a rebuild commits."""

    def __init__(self, url: str, token: str, catalog_id: str):
        super().__init__(daemon=True)
        import httpx

        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=3600)
        self.path = f"/catalogs/{catalog_id}/query"
        self.samples: list[tuple[float, float, int]] = []  # (wall clock, ms, status)
        self.stopped = threading.Event()

    def run(self) -> None:
        body = {"query": {"portal_type": "Document", "sort_on": "getId"}, "b_size": 20}
        while not self.stopped.wait(0.25):
            began = time.monotonic()
            try:
                status = self.client.post(self.path, json=body).status_code
            except Exception:  # noqa: BLE001 - a failure is a sample too
                status = 0
            self.samples.append((time.time(), (time.monotonic() - began) * 1000, status))


def run_worker(args, service, workdir: Path) -> dict:
    output = workdir / "site.json"
    config = {"objects": args.objects, "cache": args.cache, "target": str(workdir / "site.fs"),
              "blob_dir": str(workdir / "site-blobs"), "output": str(output),
              "service_pid": str(service.process.pid), "profile": bool(args.profile),
              "partial": str(Path(args.output).with_name("rebuild_partial.json")), "phases": args.phases}
    catalog_id = f"rebuild-{os.getpid()}"
    env = {**os.environ, "CATALOG_SERVICE_URL": service.url, "CATALOG_SERVICE_TOKEN": service.admin_token,
           "CATALOG_SERVICE_CATALOG_ID": catalog_id}
    probe = Probe(service.url, service.admin_token, catalog_id)
    probe.start()
    log = workdir / "site.log"
    with log.open("w") as stream:
        process = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(config)], env=env,
                                   stdout=stream, stderr=subprocess.STDOUT)
        while process.poll() is None:  # the worker's own lines (generation, phases) as they come
            time.sleep(5)
            for line in log.read_text(errors="replace").splitlines()[-200:]:
                if line.startswith(("generated ", "-- ")) and line not in run_worker.seen:
                    run_worker.seen.add(line)
                    print(line, flush=True)
    if process.returncode != 0 or not output.exists():
        kept = Path(args.output).with_name("rebuild_failed.log")
        kept.write_text(log.read_text(errors="replace"))
        print(f"the worker's log: {kept}", flush=True)
        lines = log.read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"worker exited with {process.returncode}: " + " | ".join(x.strip() for x in lines))
    probe.stopped.set()
    result = json.loads(output.read_text())
    result["probe"] = probe.samples
    result["progress"] = [line for line in log.read_text(errors="replace").splitlines()
                          if "clearFindAndRebuild of catalog" in line][-3:]
    return result


run_worker.seen = set()


LABELS = {"zcatalog": "ZCatalog clearFindAndRebuild", "install": "connector installed into the site",
          "connector": "connector clearFindAndRebuild"}


def plot(result: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(PHASES), figsize=(4.2 * len(PHASES), 3.6), sharey=True)
    for ax, name in zip(axes, PHASES, strict=True):
        samples = [s for s in result["samples"] if s[0] == name]
        if not samples or name not in result:
            ax.set_title(f"{LABELS[name]}\nnot measured", fontsize=9)
            continue
        t0 = samples[0][1]  # wall clock
        ax.plot([s[1] - t0 for s in samples], [s[2] for s in samples], label="Plone process")
        if any(s[3] for s in samples):
            ax.plot([s[1] - t0 for s in samples], [s[3] for s in samples], label="service", linestyle="--")
        ax.set_title(f"{LABELS[name]}\n{result[name]['objects_per_s']:.0f} objects/s", fontsize=9)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("RSS MiB")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{result['objects']:,} objects, ZODB cache {result['cache']:,}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def render(result: dict, args, plotted: bool) -> str:
    lines = [
        "# Rebuild of a large site: ZCatalog vs the connector",
        "",
        f"`{' '.join(['.venv/bin/python', 'benchmarks/rebuild_bench.py', *sys.argv[1:]])}`"
        f" on {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores"
        f" (shared with other work); one site of {args.objects:,} lightweight Documents in folders of"
        f" {PER_FOLDER:,} (generated in {result['generate_s']:.0f} s), FileStorage, ZODB cache of"
        f" {args.cache:,} objects. The three phases run one after the other on that same site, each in"
        " one transaction, timed with its commit.",
        "",
        "Peak RSS is the Plone process's during the phase; the service (same machine, same PostgreSQL)",
        "is apart: its CPU is not in the Plone CPU column.",
        "",
        "| phase | catalog after | objects cataloged | s | objects/s | Plone CPU s | RSS before MiB "
        "| peak RSS MiB | service peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    waits = []
    for name in PHASES:
        if name not in result:
            lines.append(f"| {LABELS[name]} | not measured: the run was stopped before this phase ended | | | | | | | |")
            continue
        r = result[name]
        samples = [s for s in result["samples"] if s[0] == name]
        service_peak = max((s[3] for s in samples), default=0)
        lines.append(f"| {LABELS[name]} | {r['catalog']} | {r['cataloged']:,} | {r['rebuild_s']:.1f} | "
                     f"{r['objects_per_s']:.0f} | {r['rebuild_cpu_s']:.1f} | {r['rss_before_mib']:,} | "
                     f"{r['peak_rss_mib']:,} | {service_peak:,} |")
        if samples:
            # The probe's queries that ended in the phase (or just after: one the commit held).
            window = [q for q in result.get("probe", []) if samples[0][1] <= q[0] <= samples[-1][1] + 5]
            answered = sorted(q[1] for q in window if q[2] == 200)
            failed = sum(1 for q in window if q[2] not in (200, 404))
            if answered:
                waits.append(f"| {LABELS[name]} | {len(answered):,} | {answered[len(answered) // 2]:.0f} | "
                             f"{answered[int(len(answered) * 0.99)]:.0f} | {answered[-1]:,.0f} | {failed} |")
    if waits:
        lines += ["", "Another reader's query of the catalog (20 Documents sorted by id, admin credentials), one every",
                  "quarter second for the whole run: how long it waited in each phase (the catalog did not exist",
                  "before the install: those 404s are left out).", "",
                  "| phase | queries answered | p50 ms | p99 ms | longest ms | failed |", "|---|---:|---:|---:|---:|---:|",
                  *waits]
    if plotted:
        lines += ["", "![RSS during each phase](rebuild_memory.png)"]
    if result.get("progress"):
        lines += ["", "The connector's last progress lines:", "", "```", *result["progress"], "```"]
    return "\n".join(lines) + "\n"


def _phases(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PHASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown phase(s) {unknown}: choose from {', '.join(PHASES)}")
    return names


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        config = json.loads(sys.argv[2])
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        Path(config["output"]).write_text(json.dumps(worker(config)))
        os._exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=150_000)
    parser.add_argument("--cache", type=int, default=30_000, help="ZODB cache size (objects) of every connection")
    parser.add_argument("--phases", type=_phases, default=list(PHASES),
                        help="the phases to run, comma-separated, in this order (default: all of %(default)s)")
    parser.add_argument("--profile", metavar="DIR", help="cProfile each phase into DIR/<phase>.prof")
    parser.add_argument("--from-partial", metavar="JSON",
                        help="only write the report of a stopped run from its rebuild_partial.json")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "rebuild.md"))
    args = parser.parse_args()

    if args.from_partial:
        result = json.loads(Path(args.from_partial).read_text())
        output = Path(args.output)
        report = render(result, args, plot(result, output.with_name("rebuild_memory.png")))
        print(report)
        output.write_text(report)
        return

    from tests.live import start_service
    from tests.pg import create_database, drop_database

    with tempfile.TemporaryDirectory(prefix="rebuild-bench-") as tmp:
        dsn, admin = create_database("bench_rebuild")
        service = start_service(dsn)
        try:
            result = run_worker(args, service, Path(tmp))
            if args.profile:
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                for prof in Path(tmp).glob("*.prof"):
                    prof.rename(Path(args.profile) / prof.name)
        finally:
            service.stop()
            drop_database(admin, dsn)
    output = Path(args.output)
    output.with_name("rebuild_partial.json").unlink(missing_ok=True)  # the run ended: the report has it all
    output.parent.mkdir(parents=True, exist_ok=True)
    plotted = plot(result, output.with_name("rebuild_memory.png"))
    (output.with_name("rebuild_samples.json")).write_text(json.dumps(
        {k: v for k, v in result.items() if k != "progress"}))
    report = render(result, args, plotted)
    print(report)
    output.write_text(report)


if __name__ == "__main__":
    main()
