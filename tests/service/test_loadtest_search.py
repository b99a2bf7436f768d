"""`make loadtest-search`'s harness (loadtests/search_run.py, search_mix.py, search_locustfile.py).

On the real service with a small corpus: every request of the mixes is answered, the check that
both sides count the same items passes for the same content and stops the run for other content,
the optional parts are taken from the service's OpenAPI document, and a few seconds of locust send
each request kind without failures. The whole run beside a stock Plone site is the slow test at
the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtests"))

import search_run  # noqa: E402
from search_mix import SHARED, WEIGHTS, Mix  # noqa: E402

from catalog_service.cli import load_demo  # noqa: E402

OBJECTS = 600


def demo_catalog(live_service, objects: int) -> str:
    name = f"ls-{uuid.uuid4().hex[:8]}"
    asyncio.run(load_demo(live_service.database_url, name, objects, quiet=True))
    return name


@pytest.fixture(scope="module")
def corpus(live_service):
    name = demo_catalog(live_service, OBJECTS)
    yield name
    with live_service.client() as admin:
        admin.delete(f"/catalogs/{name}")


def features_of(live_service, catalog: str) -> dict[str, str]:
    openapi = httpx.get(live_service.url + "/openapi.json").raise_for_status().json()
    return search_run.optional_features(openapi, catalog, "auto", "auto")


def test_every_request_of_both_mixes_is_answered(live_service, corpus):
    headless = Mix("headless", corpus, OBJECTS, **features_of(live_service, corpus))
    restapi = Mix("restapi", corpus, OBJECTS, search_path=f"/{corpus}/@search")
    rnd = random.Random(3)
    seen: dict[str, int] = {}
    with httpx.Client(base_url=live_service.url, headers=search_run.ACCEPT) as client:
        for mix in (headless, restapi):
            for kind in mix.kinds:
                for _ in range(4):
                    for call in mix.calls(kind, rnd):
                        answer = client.get(call.url)
                        assert answer.status_code == 200, (call, answer.text[:500])
                        body = answer.json()
                        if mix is headless and kind == "site search":
                            assert set(body["facets"]) == {"portal_type", "review_state", "Subject"}
                        if kind in SHARED:
                            seen[kind] = seen.get(kind, 0) + body["items_total"]
    # The queries find content (the words searched, the folders listed are the corpus's).
    assert set(seen) == set(SHARED)
    assert all(seen.values()), seen


def targets(live_service, headless_catalog: str, restapi_catalog: str) -> list[search_run.Target]:
    return [search_run.Target("headless", "service /search", live_service.url, Mix("headless", headless_catalog, OBJECTS)),
            search_run.Target("service_restapi", "service @search", live_service.url,
                              Mix("restapi", restapi_catalog, OBJECTS, search_path=f"/{restapi_catalog}/@search"))]


def test_the_check_passes_for_the_same_content_and_stops_for_other(live_service, corpus):
    rows = search_run.check_same_counts(targets(live_service, corpus, corpus), 12)
    assert [row["kind"] for row in rows] == [SHARED[n % len(SHARED)] for n in range(12)]
    assert all(row["headless"] == row["service_restapi"] for row in rows)
    # A catalog of half the corpus (the same folders' first half) counts fewer items: refused.
    other = demo_catalog(live_service, OBJECTS // 2)
    try:
        with pytest.raises(RuntimeError, match="count different results"):
            search_run.check_same_counts(targets(live_service, corpus, other), 12)
    finally:
        with live_service.client() as admin:
            admin.delete(f"/catalogs/{other}")


def test_optional_parts_follow_the_openapi_document(live_service, corpus):
    bare = {"paths": {"/search": {"get": {"parameters": [{"name": "q"}]}}}}
    offered = {"paths": {"/search": {"get": {"parameters": [{"name": "q"}, {"name": "highlight"}]}},
                         "/{catalog}/@suggest": {"get": {}}}}
    modes = {"highlight": "auto", "suggest": "auto"}
    assert search_run.optional_features(bare, "c", "auto", "auto") == {"highlight": "", "suggest": ""}
    assert search_run.feature_notes({"highlight": "", "suggest": ""}, modes) == {
        "highlight": search_run.NOT_THERE, "suggest": search_run.NOT_THERE}
    used = search_run.optional_features(offered, "c", "auto", "auto")
    assert used == {"highlight": "highlight=true", "suggest": "/c/@suggest"}
    assert search_run.optional_features(offered, "c", "off", "auto") == {"highlight": "", "suggest": "/c/@suggest"}
    assert "switched off" in search_run.feature_notes({"highlight": "", "suggest": ""},
                                                       {"highlight": "off", "suggest": "auto"})["highlight"]
    with pytest.raises(SystemExit, match="suggest"):
        search_run.optional_features(bare, "c", "auto", "on")
    # With suggestions, the headless mix types them; the restapi mix never does.
    assert "suggest" in Mix("headless", "c", OBJECTS, suggest="/c/@suggest").kinds
    assert "suggest" not in Mix("restapi", "c", OBJECTS, search_path="/c/@search", suggest="/c/@suggest").kinds
    calls = Mix("headless", "c", OBJECTS, suggest="/c/@suggest").calls("suggest", random.Random(1))
    typed = [parse_qs(urlsplit(c.url).query)["q"][0] for c in calls]  # one request per key stroke
    assert [len(q) for q in typed] == list(range(2, len(typed) + 2)) and all(typed[-1].startswith(q) for q in typed)
    # The service's own document: what it lists is what the mix uses.
    openapi = httpx.get(live_service.url + "/openapi.json").json()
    found = search_run.optional_features(openapi, corpus, "auto", "auto")
    listed = [p["name"] for p in openapi["paths"]["/search"]["get"]["parameters"]]
    assert bool(found["highlight"]) == ("highlight" in listed)
    assert bool(found["suggest"]) == any(p.endswith("/@suggest") for p in openapi["paths"])


def test_rounds_are_summed_with_exact_percentiles():
    # Two rounds of 2 s each: "a" answered in 1..100 ms (two failed), "b" in 1000 ms.
    first = [["a", 1000 + n / 50, float(n), n in (7, 9)] for n in range(1, 101)]
    second = [["b", 5001.0 + k, 1000.0, False] for k in range(2)]  # sent at 5000 and 5001
    figures = search_run.summarize([first, second])
    a, b, every = figures["a"], figures["b"], figures["Aggregated"]
    assert (a["requests"], a["failures"], a["p50"], a["p95"], a["p99"]) == (100, 2, 50, 95, 99)
    assert (b["requests"], b["p50"], b["p99"]) == (2, 1000, 1000)
    seconds = (1002 - (1000 + 1 / 50 - 0.001)) + 2
    assert a["rps"] == pytest.approx(100 / seconds) and every["rps"] == pytest.approx(102 / seconds)
    assert every["p99"] == 1000 and every["p50"] == 51


def test_locust_sends_every_kind_without_failures(live_service, corpus, tmp_path):
    target = search_run.Target("headless", "service", live_service.url,
                               Mix("headless", corpus, OBJECTS, **features_of(live_service, corpus)))
    rounds = [search_run.run_round(target, users=4, seconds=4, out=tmp_path) for _ in range(2)]
    results = search_run.summarize(rounds)
    kinds = set(results) - {"Aggregated"}
    assert kinds == set(target.mix.kinds), results
    assert all(r["requests"] > 0 and r["failures"] == 0 for r in results.values()), (
        results, [p.read_text() for p in tmp_path.glob("*.log")])
    assert results["Aggregated"]["requests"] == sum(results[k]["requests"] for k in kinds) == sum(map(len, rounds))
    # Requests/s over the two rounds' time: each round's first request to its last answer, at most
    # a little over its 4 s, and at least 1 s (locust starting its users late on a busy machine:
    # 1.9 s a round was seen in a full test run).
    assert 2 * 1 <= results["Aggregated"]["requests"] / results["Aggregated"]["rps"] <= 2 * (4 + 6)
    assert not list(tmp_path.iterdir())  # no CSV or log left behind when nothing failed
    assert set(WEIGHTS) >= kinds


# A floor script of the shape search_run.py --floor loads (the bare floor's ``setup`` and ``APP``),
# over a table of its own: the harness runs the script's app and drops its table afterwards.
FLOOR_SCRIPT = '''
import asyncpg

SETUP = """create table floor_cat(rid serial primary key, parent text not null, title text);
insert into floor_cat(parent, title) select '/plone/f' || (i % 1000), 'Title ' || i
from generate_series(1, 3000) i;"""

APP = """
import os, asyncpg
from fastapi import FastAPI
app = FastAPI()
@app.get("/q")
async def q(folder: int = 8):
    conn = await asyncpg.connect(os.environ["FLOOR_DSN"])
    try:
        rows = await conn.fetch("select rid, title from floor_cat where parent = $1 order by rid limit 20",
                                f"/plone/f{folder}")
    finally:
        await conn.close()
    return {"items_total": len(rows), "items": [dict(r) for r in rows]}
"""


async def setup(dsn):
    conn = await asyncpg.connect(dsn)
    await conn.execute(SETUP)
    await conn.close()
'''


def test_the_same_users_on_the_floor(database_url, tmp_path):
    script = tmp_path / "floor.py"
    script.write_text(FLOOR_SCRIPT)
    floor = Mix("floor", "unused", OBJECTS)
    assert floor.kinds == ["floor listing"]
    rnd = random.Random(5)
    urls = [call.url for _ in range(200) for call in floor.draw(rnd)]
    folders = {int(parse_qs(urlsplit(u).query)["folder"][0]) for u in urls}
    assert folders <= set(range(1000)) and len(folders) > 1
    with search_run.floor_server(script, database_url) as base:
        assert httpx.get(f"{base}/q?folder=3").json()["items_total"] == 3
        target = search_run.Target("floor", "floor", base, floor)
        results = search_run.summarize([search_run.run_round(target, users=4, seconds=3, out=tmp_path)])
    assert set(results) == {"floor listing", "Aggregated"}
    assert results["Aggregated"]["requests"] > 0 and results["Aggregated"]["failures"] == 0
    verdict = search_run.verdicts({"headless": results, "floor": results}, {"headless_vs_plone": None,
                                                                            "service_restapi_vs_plone": None})
    assert any("bare floor" in line for line in verdict)
    with psycopg_connect(database_url) as conn:  # the floor's table is gone with its server
        assert conn.execute("select to_regclass('floor_cat')").fetchone()[0] is None
    with pytest.raises(SystemExit, match="no setup"):
        (tmp_path / "other.py").write_text("x = 1\n")
        with search_run.floor_server(tmp_path / "other.py", database_url):
            pass


def psycopg_connect(dsn: str):
    import psycopg

    return psycopg.connect(dsn)


@pytest.mark.slow
@pytest.mark.plone
def test_the_run_against_a_stock_plone_site(database_url, tmp_path):
    """search_run.py end to end: a Plone site of the corpus made and kept, the check, three
    locust runs, the report."""
    out, cache = tmp_path / "out", tmp_path / "plone"
    command = [sys.executable, str(ROOT / "loadtests" / "search_run.py"), "--objects", "300", "--seconds", "5",
               "--users", "4", "--sample", "12", "--plone-cache", str(cache), "--out", str(out)]
    env = {**os.environ, "DATABASE_URL": database_url}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    figures = json.loads((out / "loadtest_search.json").read_text())
    assert set(figures["results"]) == {"headless", "service_restapi", "plone"}
    for key, rows in figures["results"].items():
        assert rows["Aggregated"]["requests"] > 0 and rows["Aggregated"]["failures"] == 0, (key, rows)
    assert set(figures["results"]["plone"]) - {"Aggregated"} == set(SHARED)
    assert len(figures["checked"]) == 12
    assert all(len({r["headless"], r["service_restapi"], r["plone"]}) == 1 for r in figures["checked"])
    report = (out / "loadtest_search.md").read_text()
    assert "| Plone, plone.restapi @search | **all** |" in report
    assert (out / "loadtest_search.png").stat().st_size > 0
    # The site is kept: a second call finds it at once.
    import plone_site

    began = time.monotonic()
    folder = plone_site.ensure_site(300, cache)
    assert time.monotonic() - began < 5
    assert (folder / plone_site.COMPLETE).exists()
