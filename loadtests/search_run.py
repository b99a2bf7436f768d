"""`make loadtest-search`: the service's headless search traffic against plone.restapi's ``@search``
on a stock Plone site holding the same content, in one run.

1. The corpus: ``--objects`` generated Plone-like objects (``catalog_service.demo``) in the catalog
   ``loadsearch-N-<corpus version>`` (DATABASE_URL, or the embedded PostgreSQL in .pgdata/loadtest;
   made once, then kept), and the same objects as Plone content in a stock Plone site on ZCatalog
   (``plone_site.py``: made once, kept under .plonedata/).
2. The service (one worker) and Zope (waitress, four threads) on free ports. Whether the service
   offers highlighting and suggestions is read from its OpenAPI document (``--highlight`` and
   ``--suggest``: ``auto``, the default, uses them when listed; ``on`` requires them; ``off``).
3. A sample of the shared queries (``--sample``) sent to the service's ``/search`` and ``@search``
   and to Plone's ``@search``: each must count the same ``items_total`` on all three, or the run
   stops (the comparison must be of the same work). It also warms both up.
4. Locust, headless, ``--users`` users without think time (``--think``) for ``--seconds`` each: the
   headless mix on the service, then the mix's ``@search`` part on the service's ``@search``, then
   the same on Plone's (search_mix.py, search_locustfile.py); ``--rounds`` times.
   With ``--floor PATH`` (the bare floor script, floor.py), a fourth run each round: the same users
   on the floor's own endpoint (one folder listing, FastAPI + asyncpg, nothing else), what the
   machine allows any server under that load.
5. ``--out``/loadtest_search.md (p50/p95/p99, requests/s and failures per request kind, the
   ratios), loadtest_search.png and loadtest_search.json. Percentiles are exact, from every
   response (the locustfile records them), and requests/s counts from each run's first request
   to its last answer; ``--rounds`` interleaves the three runs, each round in another order.

    .venv/bin/python loadtests/search_run.py [--objects 100000] [--seconds 60] [--users 50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(HERE)]
import plone_site  # noqa: E402
from run import ADMIN_TOKEN, database  # noqa: E402
from search_mix import SHARED, WEIGHTS, Mix, same_request, shared_sample  # noqa: E402

from tests.live import free_port, start_service  # noqa: E402

TARGET_P95_MS = 20.0
TARGET_RATIO = 5.0
ACCEPT = {"Accept": "application/json"}
NOT_THERE = "not measured: the route is not there"


@dataclass(frozen=True)
class Target:
    """One locust run: a mix against a server."""

    key: str  # the files' and the JSON's name
    label: str
    host: str
    mix: Mix


# -- the service's optional routes -------------------------------------------------------------


def optional_features(openapi: dict, catalog: str, highlight: str, suggest: str,
                      highlight_value: str = "true") -> dict[str, str]:
    """The highlight parameter (``name=value``) and suggest path the headless mix uses, each
    empty when not used; ``auto`` uses what the OpenAPI document lists, ``on`` requires it."""
    search = openapi.get("paths", {}).get("/search", {}).get("get", {})
    listed_highlight = any(p.get("name") == "highlight" for p in search.get("parameters", []))
    suggest_paths = [p for p in openapi.get("paths", {}) if p.endswith("/@suggest")]
    found = {
        "highlight": f"highlight={highlight_value}" if listed_highlight else "",
        "suggest": suggest_paths[0].replace("{catalog}", catalog) if suggest_paths else "",
    }
    chosen = {}
    for name, mode in (("highlight", highlight), ("suggest", suggest)):
        if mode == "on" and not found[name]:
            raise SystemExit(f"--{name} on: the service's OpenAPI document lists no {name} route or parameter")
        chosen[name] = found[name] if mode != "off" else ""
    return chosen


def feature_notes(features: dict[str, str], modes: dict[str, str]) -> dict[str, str]:
    """What the report says of each optional part of the mix."""
    notes = {}
    for name, value in features.items():
        if value:
            notes[name] = f"measured (`{value}`)"
        elif modes[name] == "off":
            notes[name] = f"not measured: switched off (--{name} off)"
        else:
            notes[name] = NOT_THERE
    return notes


# -- the corpus on both sides ------------------------------------------------------------------


def catalog_objects(client: httpx.Client, catalog: str) -> int | None:
    answer = client.get(f"/catalogs/{catalog}")
    return None if answer.status_code == 404 else answer.raise_for_status().json()["objects"]


def ensure_catalog(dsn: str, base: str, catalog: str, objects: int) -> None:
    """The catalog with exactly the corpus's objects: kept, or (re)made."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=600) as admin:
        held = catalog_objects(admin, catalog)
        if held is not None and held != objects:
            print(f"service: catalog {catalog!r} holds {held:,} objects, not {objects:,}: made again", file=sys.stderr)
            admin.delete(f"/catalogs/{catalog}").raise_for_status()
        if held != objects:
            env = {**os.environ, "DATABASE_URL": dsn, "CATALOG_LOG_LEVEL": "warning"}
            subprocess.run([str(Path(sys.executable).parent / "catalog-service"), "demo", "--catalog", catalog,
                            "--objects", str(objects)], env=env, check=True)
        if catalog_objects(admin, catalog) != objects:
            raise RuntimeError(f"catalog {catalog!r} does not hold the {objects:,} objects of the corpus")


def check_same_counts(targets: list[Target], sample: int) -> list[dict]:
    """Each shared query of the sample counts the same items_total on every target; the rows."""
    rows, differ = [], []
    clients = {t.key: httpx.Client(base_url=t.host, headers=ACCEPT, timeout=120) for t in targets}
    try:
        for kind, seed in shared_sample(sample):
            calls = same_request(kind, seed, *(t.mix for t in targets))
            totals = {}
            for target, call in zip(targets, calls, strict=True):
                answer = clients[target.key].get(call.url)
                if answer.status_code != 200:
                    raise RuntimeError(f"{target.label}: {call.url} answered {answer.status_code}: {answer.text[:300]}")
                totals[target.key] = answer.json()["items_total"]
            rows.append({"kind": kind, "url": calls[-1].url, **totals})
            if len(set(totals.values())) != 1:
                differ.append(f"{kind}: {calls[-1].url}: {totals}")
    finally:
        for client in clients.values():
            client.close()
    if differ:
        raise RuntimeError("the two sides count different results, so they would not do the same work:\n"
                           + "\n".join(differ))
    return rows


# -- the floor -------------------------------------------------------------------------------


@contextlib.contextmanager
def floor_server(script: Path, dsn: str):
    """The floor script's table and endpoint (its ``SETUP`` run by its ``setup``, its ``APP`` under
    uvicorn with one worker, as the service runs) on a free port; yields the base address. The
    table is dropped afterwards."""
    spec = importlib.util.spec_from_file_location("floor_script", script)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--floor {script}: not a Python file")
    floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor)
    if not all(hasattr(floor, name) for name in ("setup", "APP")):
        raise SystemExit(f"--floor {script}: the floor script has no setup() and APP")
    asyncio.run(floor.setup(dsn))
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "floor_app.py").write_text(floor.APP)
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port),
                                    "--log-level", "warning"], cwd=folder, env={**os.environ, "FLOOR_DSN": dsn})
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{base}/q?folder=8", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the floor's endpoint did not answer")
                time.sleep(0.2)
            yield base
        finally:
            process.terminate()
            process.wait(30)
            asyncio.run(_drop_floor(dsn))


async def _drop_floor(dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("drop table if exists floor_cat")
    finally:
        await conn.close()


# -- locust ------------------------------------------------------------------------------------


def run_round(target: Target, users: int, seconds: int, out: Path, think: str = "") -> list[list]:
    """One headless locust run; every response as ``[kind, end time, ms, failed]``."""
    prefix = out / f"loadtest_search_{target.key}"
    samples = Path(f"{prefix}.samples")
    env = {**os.environ, "LOADSEARCH_MIX": target.mix.mix, "LOADSEARCH_CATALOG": target.mix.catalog,
           "LOADSEARCH_OBJECTS": str(target.mix.objects), "LOADSEARCH_SEARCH_PATH": target.mix.search_path,
           "LOADSEARCH_HIGHLIGHT": target.mix.highlight, "LOADSEARCH_SUGGEST": target.mix.suggest,
           "LOADSEARCH_THINK": think, "LOADSEARCH_SAMPLES": str(samples)}
    print(f"locust: {target.label}, {users} users, {seconds} s", file=sys.stderr, flush=True)
    samples.unlink(missing_ok=True)
    log = Path(f"{prefix}.log")
    with log.open("w") as out_log:  # locust's summary tables, and its errors
        subprocess.run([str(Path(sys.executable).parent / "locust"), "-f", str(HERE / "search_locustfile.py"),
                        "--headless", "-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--host", target.host,
                        "--csv", str(prefix), "--only-summary", "--stop-timeout", "5", "--loglevel", "WARNING"],
                       env=env, check=False, cwd=ROOT, timeout=seconds + 300, stdout=out_log, stderr=out_log)
    answered = [json.loads(line) for line in samples.read_text().splitlines()] if samples.exists() else []
    samples.unlink(missing_ok=True)
    if not answered:
        raise RuntimeError(f"{target.label}: locust answered no requests in {seconds} s:\n"
                           f"{log.read_text(errors='replace')[-3000:]}")
    failures_csv = Path(f"{prefix}_failures.csv")
    failures = list(csv.DictReader(failures_csv.open())) if failures_csv.exists() else []
    for suffix in ("_stats.csv", "_stats_history.csv", "_failures.csv", "_exceptions.csv"):
        Path(f"{prefix}{suffix}").unlink(missing_ok=True)
    if failures:  # kept beside the report: what failed, and how often
        log.write_text("\n".join(f"{f['Name']}: {f['Occurrences']} x {f['Error']}" for f in failures) + "\n")
    else:
        log.unlink()
    return answered


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted milliseconds."""
    return round(ordered[max(0, math.ceil(fraction * len(ordered)) - 1)], 1)


def summarize(rounds: list[list[list]]) -> dict[str, dict]:
    """Per request kind and for all (``Aggregated``): requests, failures, p50/p95/p99 ms over
    every response of every round, and requests/s over the rounds' time (each round's first
    request sent to its last answer)."""
    seconds = sum(max(s[1] for s in r) - min(s[1] - s[2] / 1000 for s in r) for r in rounds)
    every = [s for r in rounds for s in r]
    figures = {}
    for kind in [*dict.fromkeys(s[0] for s in every), "Aggregated"]:
        mine = [s for s in every if kind in ("Aggregated", s[0])]
        ordered = sorted(s[2] for s in mine)
        figures[kind] = {"requests": len(mine), "failures": sum(1 for s in mine if s[3]),
                         "p50": percentile(ordered, 0.50), "p95": percentile(ordered, 0.95),
                         "p99": percentile(ordered, 0.99), "rps": len(mine) / seconds}
    return figures


# -- the report --------------------------------------------------------------------------------


def ratios(results: dict[str, dict]) -> dict[str, float | None]:
    plone = results["plone"]["Aggregated"]["rps"]
    return {"headless_vs_plone": results["headless"]["Aggregated"]["rps"] / plone if plone else None,
            "service_restapi_vs_plone": results["service_restapi"]["Aggregated"]["rps"] / plone if plone else None}


def verdicts(results: dict[str, dict], ratio: dict) -> list[str]:
    p95 = results["headless"]["Aggregated"]["p95"]
    lines = [f"- p95 of the headless mix on the service: {_fmt(p95)} ms, target under {TARGET_P95_MS:g} ms: "
             f"**{'met' if p95 is not None and p95 < TARGET_P95_MS else 'not met'}**."]
    if "floor" in results:
        floor = results["floor"]["Aggregated"]
        lines.append(f"- the same users on the bare floor (one folder listing, nothing else): p95 {_fmt(floor['p95'])} ms, "
                     f"{floor['rps']:,.0f} requests/s: what any server gets from this machine under this load.")
    for key, what in (("headless_vs_plone", "the headless mix on the service"),
                      ("service_restapi_vs_plone", "the service's own `@search` (the same requests as Plone's)")):
        value = ratio[key]
        shown = f"{value:.1f}x" if value is not None else "not measured"
        lines.append(f"- requests/s of {what} / plone.restapi `@search`: {shown}, target at least "
                     f"{TARGET_RATIO:g}x: **{'met' if value is not None and value >= TARGET_RATIO else 'not met'}**.")
    return lines


def table(targets: list[Target], results: dict[str, dict]) -> list[str]:
    lines = ["| server, mix | request | requests | failures | p50 ms | p95 ms | p99 ms | req/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for target in targets:
        rows = results[target.key]
        for name in [k for k in WEIGHTS if k in rows] + ["Aggregated"]:
            r = rows[name]
            shown = "**all**" if name == "Aggregated" else name
            lines.append(f"| {target.label} | {shown} | {r['requests']:,} | {r['failures']:,} | {_fmt(r['p50'])} | "
                         f"{_fmt(r['p95'])} | {_fmt(r['p99'])} | {r['rps']:,.1f} |")
    return lines


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def plot(targets: list[Target], results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [t.label for t in targets]
    left.bar(range(len(targets)), [results[t.key]["Aggregated"]["rps"] for t in targets],
             color=["tab:blue", "tab:cyan", "tab:orange", "tab:grey"][:len(targets)])
    left.set_xticks(range(len(targets)), labels, fontsize=7)
    left.set_ylabel("requests/s (all kinds)")
    width = 0.25
    for n, pct in enumerate(("p50", "p95", "p99")):
        right.bar([i + (n - 1) * width for i in range(len(targets))],
                  [results[t.key]["Aggregated"][pct] or 0 for t in targets], width, label=pct)
    right.axhline(TARGET_P95_MS, color="grey", linestyle="--", linewidth=1, label=f"{TARGET_P95_MS:g} ms")
    right.set_yscale("log")
    right.set_xticks(range(len(targets)), labels, fontsize=7)
    right.set_ylabel("response time ms (log)")
    right.legend(fontsize=8)
    fig.suptitle("make loadtest-search: the same users, the same seconds, each server in turn", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def report(args, targets, results, ratio, notes, checked, command: str) -> str:
    headless = results["headless"]["Aggregated"]
    compared = [t for t in targets if t.key != "floor"]  # the floor runs other work: not compared
    lines = [
        "# Load test: headless search on the service against plone.restapi's `@search`",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} by `{command}` on {platform.machine()}, "
        f"{os.cpu_count()} cores shared by the service, PostgreSQL, Zope and the load generator (one locust "
        f"process). Corpus: {args.objects:,} objects (`catalog_service.demo`), in the catalog "
        f"`{targets[0].mix.catalog}` and, as Plone content with the same ids, paths, titles, texts, types, "
        "subjects, workflow states and dates, in a stock Plone site on ZCatalog (plone.app.contenttypes, "
        "plone.restapi; FileStorage, ZODB cache 30,000 objects; waitress, four threads). Service: one worker. "
        f"Load average (1 min) when the runs began: {args.load_before:.1f}; the run's niceness: {os.nice(0)}.",
        "",
        load_words(args) + " Request kinds "
        "(loadtests/search_mix.py): *site search* (a word, pages/news/events, 20 items; on the service with "
        f"facet counts of `{'`, `'.join(['portal_type', 'review_state', 'Subject'])}` and highlighting when "
        "offered), *live search* (a typed prefix with `*`, as Plone's livesearch), *news listing* (newest "
        "first), *folder listing* (a folder's items in order), *suggest* (one request per key stroke). The "
        "`@search` runs send the same queries without facets, highlights and suggestions.",
        "",
        f"- highlighting: {notes['highlight']}",
        f"- suggestions: {notes['suggest']}",
        "",
        "## Targets",
        "",
        *verdicts(results, ratio),
        "",
        "## Per request kind",
        "",
        *table(targets, results),
        "",
        f"Headless mix: {headless['rps']:,.0f} requests/s, p50 {_fmt(headless['p50'])} ms, "
        f"p95 {_fmt(headless['p95'])} ms, p99 {_fmt(headless['p99'])} ms.",
        "",
        "## The same work",
        "",
        f"Before the load, {len(checked)} shared queries (the kinds {', '.join(SHARED)}, drawn as the "
        "users draw them) were sent to the service's `/search` and `@search` and to Plone's `@search`: "
        "each counted the same `items_total` on all three "
        f"(from {min(min(r[t.key] for t in compared) for r in checked):,} to "
        f"{max(max(r[t.key] for t in compared) for r in checked):,} items).",
        "",
        "![requests/s and response times](loadtest_search.png)",
        "",
        "`loadtest_search.json` holds these figures and the sample's counts.",
        "",
    ]
    return "\n".join(lines)


def think_time(text: str) -> str:
    """``MIN,MAX`` seconds (0 <= MIN <= MAX), or empty for none."""
    if not text:
        return ""
    try:
        low, high = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give MIN,MAX seconds, e.g. 0.5,2") from None
    if not 0 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= MIN <= MAX")
    return f"{low:g},{high:g}"


def load_words(args) -> str:
    """How the users loaded the servers, for the report."""
    runs = "four runs (the floor's too)" if args.floor else "three runs"
    rounds = (f"{args.rounds} rounds of the {runs}, interleaved (each round in another order)"
              if args.rounds > 1 else f"the {runs} one after the other")
    run = f"Each run: `locust --headless -u {args.users} -t {args.seconds}s`, {rounds}"
    if args.think:
        low, high = args.think.split(",")
        return f"{run}; Anonymous users thinking {low} to {high} s between their actions."
    return (f"{run}; Anonymous users without think time: each sends its next request when the last is "
            "answered, so requests/s is the server's throughput and the latency includes the wait in its "
            f"queue (in this closed loop the mean latency is about users / requests/s: a p95 under "
            f"{TARGET_P95_MS:g} ms at {args.users} users needs more than "
            f"{args.users / TARGET_P95_MS * 1000:,.0f} requests/s). Percentiles are exact, over every response; "
            "requests/s counts from a run's first request to its last answer.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=100_000, help="corpus size (default 100000)")
    parser.add_argument("--seconds", type=int, default=60, help="each locust run's time (default 60)")
    parser.add_argument("--users", type=int, default=50, help="concurrent locust users (default 50)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of the three runs, interleaved (default 1): on a machine doing other "
                             "work, its load changes alike for each server")
    parser.add_argument("--sample", type=int, default=40, help="shared queries checked on both sides (default 40)")
    for name in ("highlight", "suggest"):
        parser.add_argument(f"--{name}", choices=("auto", "on", "off"), default="auto",
                            help=f"the headless mix's {name} requests: auto (default) when the service's "
                                 "OpenAPI lists them, on (required), off")
    parser.add_argument("--think", default="", type=think_time,
                        help="MIN,MAX seconds of think time between a user's actions (default none: each user "
                             "sends its next request when the last is answered)")
    parser.add_argument("--floor", type=Path, default=None, metavar="PATH",
                        help="the bare floor script (floor.py): run the same users on its endpoint too")
    parser.add_argument("--highlight-value", default="true", help="the highlight parameter's value (default true)")
    parser.add_argument("--plone-cache", type=Path, default=plone_site.CACHE,
                        help="where Plone sites are kept between runs (default .plonedata)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks", help="the report's folder")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # The floor script by its file name, an output folder outside the project as <dir>: no machine's path.
    outside = not args.out.resolve().is_relative_to(ROOT)
    shown = [f"<{Path(a).name}>" if args.floor and a == str(args.floor) else
             "<dir>" if outside and a == str(args.out) else a for a in sys.argv[1:]]
    command = "make loadtest-search" if os.environ.get("LOADSEARCH_FROM_MAKE") else \
        " ".join(["loadtests/search_run.py", *shown])
    catalog = f"loadsearch-{args.objects}-{plone_site.corpus_version()}"  # a changed corpus is loaded anew

    folder = plone_site.ensure_site(args.objects, args.plone_cache)
    dsn = database(args)
    service = start_service(dsn, admin_token=ADMIN_TOKEN)
    try:
        ensure_catalog(dsn, service.url, catalog, args.objects)
        openapi = httpx.get(service.url + "/openapi.json", timeout=30).raise_for_status().json()
        modes = {"highlight": args.highlight, "suggest": args.suggest}
        features = optional_features(openapi, catalog, args.highlight, args.suggest, args.highlight_value)
        notes = feature_notes(features, modes)
        with plone_site.serve(folder, free_port(), log_path=args.out / "loadtest_search_zope.log") as zope:
            plone_host = zope.url.rpartition(f"/{plone_site.SITE_ID}")[0]
            targets = [
                Target("headless", "service, headless mix", service.url,
                       Mix("headless", catalog, args.objects, **features)),
                Target("service_restapi", "service, @search", service.url,
                       Mix("restapi", catalog, args.objects, search_path=f"/{catalog}/@search")),
                Target("plone", "Plone, plone.restapi @search", plone_host,
                       Mix("restapi", catalog, args.objects, search_path=f"/{plone_site.SITE_ID}/@search")),
            ]
            checked = check_same_counts(targets, args.sample)
            print(f"check: {len(checked)} shared queries count the same items on the three", file=sys.stderr)
            with contextlib.ExitStack() as floor:
                if args.floor:
                    targets.append(Target("floor", "floor: bare FastAPI + asyncpg listing",
                                          floor.enter_context(floor_server(args.floor, dsn)),
                                          Mix("floor", catalog, args.objects)))
                args.load_before = os.getloadavg()[0]  # other work on the machine, for the report
                answered: dict[str, list] = {t.key: [] for t in targets}
                for n in range(args.rounds):  # the order turns each round: no server always runs first
                    turn = n % len(targets)
                    for target in targets[turn:] + targets[:turn]:
                        answered[target.key].append(run_round(target, args.users, args.seconds, args.out,
                                                              args.think))
            results = {key: summarize(rounds) for key, rounds in answered.items()}
        (args.out / "loadtest_search_zope.log").unlink(missing_ok=True)
    finally:
        service.stop()
    ratio = ratios(results)
    plot(targets, results, args.out / "loadtest_search.png")
    (args.out / "loadtest_search.md").write_text(report(args, targets, results, ratio, notes, checked, command))
    (args.out / "loadtest_search.json").write_text(json.dumps(
        {"objects": args.objects, "users": args.users, "seconds": args.seconds, "rounds": args.rounds,
         "think": args.think, "features": notes,
         "results": results, "ratios": ratio, "checked": checked}, indent=1))
    print("\n".join(verdicts(results, ratio)), file=sys.stderr)
    print(f"wrote {args.out / 'loadtest_search.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
