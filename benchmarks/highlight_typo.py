"""What highlighting and typo tolerance add to a public search (anonymous, no credential).

Loads a demo catalog (``--objects``, default 20,000), pads its SearchableText lexicon with
``--lexicon`` random words held by no object (the lexicon a large site has: fuzzy candidates
are looked for among all its words, and a word no visible object holds is never proposed), and
times over HTTP, median of ``--repeat`` runs, a page of 25:

- a one-word search, and the same with ``highlight=true`` (Title, Description, SearchableText);
- the same with ``typo=true`` (the word is held: one visibility check, no correction);
- misspelled words with ``typo=true``: one edit (``gardne``), two edits (a 12-letter word), and
  a word with no correction at all (the whole lexicon is compared and nothing is proposed).

``--without-fuzzystrmatch`` drops the extension for the run (the generated one-edit fallback)
and creates it again afterwards; only on a database of your own.

    DATABASE_URL=postgresql://... .venv/bin/python benchmarks/highlight_typo.py [--objects 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import string
import sys
import time
from pathlib import Path

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.live import start_service  # noqa: E402

CATALOG = "hltypo"


def cases() -> dict[str, dict]:
    return {
        "one word": {"SearchableText": "garden"},
        "one word, highlight=true": {"SearchableText": "garden", "highlight": "true"},
        "one word, typo=true (held)": {"SearchableText": "garden", "typo": "true"},
        "gardne, typo=true (1 edit)": {"SearchableText": "gardne", "typo": "true"},
        "smorgasbrod, typo (1 swap)": {"SearchableText": "smorgasbrod", "typo": "true"},
        "smorgasbrodd, typo (2 edits)": {"SearchableText": "smorgasbrodd", "typo": "true"},
        "qwertyuiop, typo (nothing)": {"SearchableText": "qwertyuiop", "typo": "true"},
        "gardne, typo+highlight": {"SearchableText": "gardne", "typo": "true", "highlight": "true"},
    }


async def prepare(database_url: str, objects: int, lexicon: int) -> int:
    """The demo catalog migrated, loaded and its lexicon padded; the lexicon's size."""
    from catalog_service.cli import _migrate, load_demo

    await _migrate(database_url)
    await load_demo(database_url, CATALOG, objects, quiet=True)
    return await pad_lexicon(database_url, lexicon)


async def pad_lexicon(database_url: str, words: int) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        catalog_id = await conn.fetchval("select id from catalog where name = $1", CATALOG)
        rnd = random.Random(5)
        padding = {"".join(rnd.choices(string.ascii_lowercase, k=rnd.randint(4, 12))) for _ in range(words)}
        await conn.execute("insert into catalog_lexicon (catalog_id, index_name, word, df) "
                           "select $1, 'SearchableText', w, 1 from unnest($2::text[]) w on conflict do nothing",
                           catalog_id, sorted(padding))
        return await conn.fetchval("select count(*) from catalog_lexicon where catalog_id = $1 "
                                   "and index_name = 'SearchableText'", catalog_id)
    finally:
        await conn.close()


async def fuzzystrmatch(database_url: str, present: bool) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("create extension if not exists fuzzystrmatch" if present
                           else "drop extension if exists fuzzystrmatch")
    finally:
        await conn.close()


def timed(client: httpx.Client, params: dict, repeat: int) -> tuple[float, dict]:
    times, answer = [], {}
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get("/search", params={"catalog": CATALOG, "b_size": 25, **params})
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
        answer = response.json()
    return statistics.median(times), answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--lexicon", type=int, default=200000, help="random words added to the lexicon")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--without-fuzzystrmatch", action="store_true")
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL") or parser.error("set DATABASE_URL")
    size = asyncio.run(prepare(database_url, args.objects, args.lexicon))
    if args.without_fuzzystrmatch:
        asyncio.run(fuzzystrmatch(database_url, False))
    service = start_service(database_url)
    try:
        with httpx.Client(base_url=service.url, timeout=120) as client:
            for params in cases().values():
                timed(client, params, 1)
            results = {name: timed(client, params, args.repeat) for name, params in cases().items()}
    finally:
        service.stop()
        if args.without_fuzzystrmatch:
            asyncio.run(fuzzystrmatch(database_url, True))
    mode = "generated one-edit words" if args.without_fuzzystrmatch else "fuzzystrmatch"
    print(f"{args.objects} objects, {size} SearchableText lexicon words, candidates by {mode}; "
          f"median of {args.repeat} runs over HTTP, ms")
    base = results["one word"][0]
    for name, (ms, answer) in results.items():
        extra = f"  did_you_mean={answer.get('did_you_mean')!r}" if "typo" in name else ""
        print(f"{name:<32}{ms:8.1f}  ({ms / base:4.1f}x){extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
