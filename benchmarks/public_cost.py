"""What one public search (anonymous, no credential) can cost, with the cost bounds off and on.

Starts the service twice on one demo catalog (``--objects``, default 2,000): once with the bounds
lifted (CATALOG_PUBLIC_* as high as they go, no time limit), once with the settings' defaults.
Each time it times a typical search (one word) and the costly ones an anonymous caller could send:
``"a "`` x 499, 300 glob terms, the widest glob, the longest allowed query. A search refused by a
bound (422) costs its refusal. The report gives each one's median time and its multiple of the
typical search's; with the bounds on, no multiple may pass ``--max-multiple`` (the exit status
says whether one did).

    DATABASE_URL=postgresql://... .venv/bin/python benchmarks/public_cost.py [--objects 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import string
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.live import start_service  # noqa: E402

CATALOG = "publiccost"
LIFTED = {"CATALOG_PUBLIC_MAX_TEXT_TERMS": "100000", "CATALOG_PUBLIC_MAX_GLOBS": "100000",
          "CATALOG_PUBLIC_MAX_GLOB_WORDS": "100000000", "CATALOG_PUBLIC_SEARCH_TIMEOUT": "0",
          "CATALOG_STATEMENT_TIMEOUT": "300"}


def searches() -> dict[str, dict]:
    letters = string.ascii_lowercase
    # 300 glob terms of one letter and a star (900 characters, within CATALOG_MAX_TEXT_LENGTH).
    globs = " ".join(letters[i % 26] + "*" for i in range(300))
    return {
        "typical: one word": {"SearchableText": "garden"},
        "three words": {"SearchableText": "garden river music"},
        "one glob": {"SearchableText": "gard*"},
        "folder listing": {"path": {"query": "/plone/section-0/folder-3", "depth": 1},
                           "sort_on": "getObjPositionInParent"},
        '"a " x 499': {"SearchableText": "a " * 499},
        "300 glob terms": {"SearchableText": globs},
        "32 words (the most allowed)": {"SearchableText": " ".join(["plone", "zope", "garden", "river"] * 8)},
        "one one-letter glob": {"SearchableText": "p*"},
        "two one-letter globs": {"SearchableText": "p* c*"},
        "4 one-letter globs": {"SearchableText": "p* c* s* m*"},
    }


def timed(client: httpx.Client, query: dict, repeat: int) -> tuple[float, int]:
    times, status = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.post("/search", params={"catalog": CATALOG}, json={"query": query, "b_size": 20})
        times.append((time.perf_counter() - started) * 1000)
        status = response.status_code
        assert status in (200, 422), response.text
    return statistics.median(times), status


def measure(database_url: str, env: dict, repeat: int) -> dict[str, tuple[float, int]]:
    service = start_service(database_url, extra_env=env)
    try:
        with httpx.Client(base_url=service.url, timeout=120) as client:
            for query in searches().values():  # warm caches and the statement cache
                timed(client, query, 1)
            return {name: timed(client, query, repeat) for name, query in searches().items()}
    finally:
        service.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=2000, help="demo objects (default 2000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each search (default 5; median)")
    parser.add_argument("--max-multiple", type=float, default=10.0,
                        help="the most a public search may cost, in typical searches (default 10)")
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL")
    if not database_url:
        parser.error("set DATABASE_URL")
    import asyncio

    from catalog_service.cli import _migrate, load_demo

    asyncio.run(_migrate(database_url))
    asyncio.run(load_demo(database_url, CATALOG, args.objects, quiet=True))
    results = {"bounds off": measure(database_url, LIFTED, args.repeat),
               "bounds on (defaults)": measure(database_url, {}, args.repeat)}
    worst = 0.0
    print(f"{args.objects} objects; median of {args.repeat} runs over HTTP, ms (status; multiple of the typical)")
    print(f"{'search':<30}" + "".join(f"{label:>34}" for label in results))
    for name in searches():
        cells = []
        for label, found in results.items():
            ms, status = found[name]
            multiple = ms / found["typical: one word"][0]
            if label != "bounds off":
                worst = max(worst, multiple)
            cells.append(f"{ms:10.1f} ({status}; {multiple:6.1f}x)")
        print(f"{name:<30}" + "".join(f"{c:>34}" for c in cells))
    print(f"most costly public search with the bounds on: {worst:.1f}x the typical one (limit {args.max_multiple}x)")
    return 0 if worst <= args.max_multiple else 1


if __name__ == "__main__":
    raise SystemExit(main())
