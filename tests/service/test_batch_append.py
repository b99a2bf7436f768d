"""Appending to a staged batch (docs/decisions/0005): a batch staged, then appended to, holds the
rows and the text profile one staging of its final entries would hold, and commits to the same
catalog content and text statistics. Two catalogs of one schema, the same content before, one
built each way, compared row by row."""

from __future__ import annotations

import asyncio
import random

import orjson
import pytest

from catalog_schemas.api import Batch, BatchAppend
from catalog_service.errors import Conflict, LimitExceeded, NotFound
from catalog_service.store import batches
from tests.service import test_text_cells
from tests.service.test_store import connect
from tests.service.test_text_cells import _catalog, _counts, _text, run

# A migrated database for this module.
db = test_text_cells.db

INDEXES = {"SearchableText": "ZCTextIndex", "Title": "ZCTextIndex", "portal_type": "FieldIndex",
           "Subject": "KeywordIndex"}


def _index(uid: str, rnd: random.Random, version: int = 5, idxs: list[str] | None = None,
           text: bool = True) -> dict:
    values = {"portal_type": rnd.choice(["Document", "News Item"]),
              "Subject": rnd.sample(["a", "b", "c", "d"], rnd.randrange(0, 3)),
              "Title": _text(rnd)}
    if text:  # else the object's text is not text now: ZCTextIndex keeps what it had
        values["SearchableText"] = _text(rnd)
    entry = {"op": "index", "uid": uid, "path": f"/plone/f{rnd.randrange(3)}/{uid}", "values": values,
             "version": version}
    if idxs is not None:
        entry["idxs"] = idxs
        entry["values"] = {k: v for k, v in values.items() if k in idxs}
    return entry


def _unindex(uid: str, version: int = 5) -> dict:
    return {"op": "unindex", "uid": uid, "version": version}


def _stage(conn, catalog, batch_id, entries, clear=False):
    batch = Batch.model_validate({"batch_id": batch_id, "entries": entries, "clear": clear})

    async def go():
        async with conn.transaction():
            return await batches.stage(conn, catalog, batch, batches.convert(batch, catalog, 1000))

    return go()


def _append(conn, catalog, batch_id, entries, max_entries=1000):
    body = BatchAppend.model_validate({"entries": entries})

    async def go():
        async with conn.transaction():
            return await batches.append(conn, catalog, batch_id, batches.convert(body, catalog, 1000), max_entries)

    return go()


async def _commit(conn, catalog, batch_id):
    async with conn.transaction():
        return await batches.commit(conn, catalog, batch_id)


STAGED_COLUMNS = ("op, path, parent, depth, allowed, idx::text, text::text, meta::text, idxs, delta_idx::text, "
                  "delta_text::text, delta_meta::text, version")


async def _staged(conn, catalog, batch_id):
    """The batch's staged rows by uid (without rid and seq), its entry count and its profile."""
    rows = {r["uid"]: tuple(r)[1:] for r in await conn.fetch(
        f"select uid, {STAGED_COLUMNS} from catalog_staged where catalog_id = $1 and batch_id = $2",
        catalog.id, batch_id)}
    batch = await conn.fetchrow("select entries, profile::text from catalog_batch where catalog_id = $1 "
                                "and batch_id = $2", catalog.id, batch_id)
    profile = batch["profile"] and batches._profile_from_json(batch["profile"])
    return rows, batch["entries"], profile


async def _content(conn, catalog):
    """The catalog's rows by uid (without rid), its text statistics, checked against a recount."""
    rows = {r["uid"]: tuple(r)[1:] for r in await conn.fetch(
        f"select uid, path, parent, depth, allowed, idx::text, text::text, meta::text, version from {catalog.table}")}
    kept, recount = await _counts(conn, catalog)
    assert kept == recount
    stats = {r["index_name"]: (r["docs"], r["words"]) for r in await conn.fetch(
        "select * from catalog_text_stats where catalog_id = $1 and docs <> 0", catalog.id)}
    lexicon = {(r["index_name"], r["word"]): r["df"] for r in await conn.fetch(
        "select * from catalog_lexicon where catalog_id = $1 and df <> 0", catalog.id)}
    return rows, stats, lexicon, kept


def _steps(rnd: random.Random, existing: int, clear: bool) -> list[list[dict]]:
    """A staging, then appends: new objects, objects of the catalog changed in full and in part,
    text kept (no text value), unindexes, and objects of the batch changed again, removed again
    and brought back."""
    first = [_index(f"u{n}", rnd) for n in range(0, existing, 2)]
    first += [_index(f"n{n}", rnd) for n in range(10)]
    first += [_unindex(f"u{n}") for n in range(1, existing, 4)]
    second = [_index(f"n{n}", rnd, text=n % 2 == 0) for n in range(0, 10, 3)]  # replaced in the batch
    second += [_unindex("n1"), _index("u1", rnd)]  # a new unindex; an unindex brought back
    second += [_index(f"u{n}", rnd, idxs=["Title", "Subject"]) for n in range(3, existing, 4)]
    second += [_index(f"n{n}", rnd) for n in range(10, 14)]
    third = [_index("n1", rnd), _index(f"u{existing - 1}", rnd, text=False)]
    if existing:
        third += [_unindex("n10"), _index("u3", rnd, idxs=["SearchableText"]), _index("n11", rnd, idxs=["portal_type"])]
    # else: new objects only, every one indexed in full, so the commit takes the text statistics
    # from the batch's profile rather than recounting its rows (store/batches.py, commit).
    if clear:
        third.append(_index("n12", rnd, text=False))
    return [first, second, third]


@pytest.mark.parametrize("existing,clear", [(0, False), (20, False), (20, True)],
                         ids=["new objects only", "changes of a catalog", "clear batch"])
def test_appended_batch_equals_one_staging_of_its_final_entries(db, existing, clear):
    rnd = random.Random(existing + clear)
    steps = _steps(rnd, existing, clear)
    final: dict[str, dict] = {}
    for step in steps:
        final.update((e["uid"], e) for e in step)
    base = [_index(f"u{n}", random.Random(n), version=1) for n in range(existing)]
    suffix = f"{existing}-{int(clear)}"

    async def work(conn):
        appended = await _catalog(conn, f"appended-{suffix}", **INDEXES)
        whole = await _catalog(conn, f"whole-{suffix}", **INDEXES)
        for catalog in (appended, whole):
            if base:
                await _stage(conn, catalog, "base", base)
                await _commit(conn, catalog, "base")
        await _stage(conn, appended, "tx", steps[0], clear=clear)
        rids = dict(await conn.fetch("select uid, rid from catalog_staged where catalog_id = $1", appended.id))
        for step in [*steps[1:], steps[-1]]:  # the last append retried: it leaves the same rows
            await _append(conn, appended, "tx", step)
        await _stage(conn, whole, "tx", list(final.values()), clear=clear)

        got, want = await _staged(conn, appended, "tx"), await _staged(conn, whole, "tx")
        assert got[0] == want[0]
        assert got[1] == want[1] == len(final)
        assert got[2] == want[2] and got[2][0]
        # A new object replaced in the batch keeps the rid the overlay queries gave it.
        after = dict(await conn.fetch("select uid, rid from catalog_staged where catalog_id = $1", appended.id))
        assert all(after[uid] == rids[uid] for uid in ("n0", "n3", "n6", "n9"))

        results = [await _commit(conn, catalog, "tx") for catalog in (appended, whole)]
        assert (results[0].applied, results[0].skipped_stale) == (results[1].applied, results[1].skipped_stale)
        assert await _content(conn, appended) == await _content(conn, whole)

    run(db, work)


def test_a_batch_that_is_not_staged_cannot_grow(db):
    async def work(conn):
        catalog = await _catalog(conn, "refusals", **INDEXES)
        rnd = random.Random(1)
        with pytest.raises(NotFound):
            await _append(conn, catalog, "never-staged", [_index("a", rnd)])
        # Nothing was created for the unknown id: it can still be staged.
        assert await _stage(conn, catalog, "never-staged", []) == "staged"
        await _stage(conn, catalog, "done", [_index("a", rnd)])
        await _commit(conn, catalog, "done")
        with pytest.raises(Conflict, match="committed"):
            await _append(conn, catalog, "done", [_index("b", rnd)])
        await _stage(conn, catalog, "dropped", [_index("c", rnd)])
        async with conn.transaction():
            await batches.abort(conn, catalog, "dropped")
        with pytest.raises(Conflict, match="aborted"):
            await _append(conn, catalog, "dropped", [_index("d", rnd)])
        # The union counts against the batch limit; a refused append changes nothing.
        await _stage(conn, catalog, "big", [_index(f"x{n}", rnd) for n in range(4)])
        before = await _staged(conn, catalog, "big")
        with pytest.raises(LimitExceeded):
            await _append(conn, catalog, "big", [_index("x0", rnd), _index("y", rnd), _index("z", rnd)],
                          max_entries=5)
        assert await _staged(conn, catalog, "big") == before
        await _append(conn, catalog, "big", [_index("x0", rnd), _index("y", rnd)], max_entries=5)
        assert (await _staged(conn, catalog, "big"))[1] == 5
        rows = await conn.fetch("select uid, idx::text from catalog_staged where catalog_id = $1 and batch_id = 'big' "
                                "and uid = 'x0'", catalog.id)
        assert len(rows) == 1 and orjson.loads(rows[0]["idx"])

    run(db, work)


def _two(dsn, scenario):
    async def go():
        first, second = await connect(dsn), await connect(dsn)
        try:
            await scenario(first, second)
        finally:
            await first.close()
            await second.close()

    asyncio.run(go())


async def _waits(task, seconds=0.5):
    await asyncio.sleep(seconds)
    assert not task.done(), "expected the second connection to wait for the first"


def test_an_append_and_a_commit_of_one_batch_are_ordered(db):
    """Both lock the batch's row first (0005): an append under way holds the commit off, which then
    commits the union; an append that waited for a commit finds the batch committed and is refused."""
    rnd = random.Random(5)

    async def scenario(first, second):
        catalog = await _catalog(first, "append-races", **INDEXES)
        await _stage(first, catalog, "b1", [_index("a", rnd)])
        transaction = first.transaction()
        await transaction.start()
        body = BatchAppend.model_validate({"entries": [_index("b", rnd), _unindex("a")]})
        await batches.append(first, catalog, "b1", batches.convert(body, catalog, 10), 10)
        committing = asyncio.create_task(_commit(second, catalog, "b1"))
        await _waits(committing)
        await transaction.commit()
        result = await committing
        assert (result.applied, result.skipped_stale) == (1, 0)
        assert [r["uid"] for r in await first.fetch(f"select uid from {catalog.table}")] == ["b"]

        await _stage(first, catalog, "b2", [_index("c", rnd)])
        transaction = first.transaction()
        await transaction.start()
        await batches.commit(first, catalog, "b2")
        appending = asyncio.create_task(_append(second, catalog, "b2", [_index("d", rnd)]))
        await _waits(appending)
        await transaction.commit()
        with pytest.raises(Conflict, match="committed"):
            await appending
        assert sorted(r["uid"] for r in await first.fetch(f"select uid from {catalog.table}")) == ["b", "c"]

    _two(db, scenario)


def test_a_large_clear_batch_commits_with_its_indexes_built_again(db):
    """A rebuild streams its entries in appends, each within the per-request limit, and commits
    them as one clear batch (docs/decisions/0018). From Bulk.entries on, the commit drops the
    catalog's secondary indexes and builds them again: the catalog ends with every index, valid,
    and the same content and text statistics as the same batch committed with its indexes in
    place."""
    rnd = random.Random(17)
    entries = [_index(f"u{n}", rnd) for n in range(60)]
    base = [_index(f"u{n}", random.Random(n), version=1) for n in range(0, 80, 2)]

    async def work(conn):
        from catalog_service.store.catalogs import missing_indexes, secondary_indexes

        bulk = await _catalog(conn, "bulk-commit", **INDEXES)
        plain = await _catalog(conn, "plain-commit", **INDEXES)
        for catalog in (bulk, plain):
            await _stage(conn, catalog, "base", base)
            await _commit(conn, catalog, "base")
            await _stage(conn, catalog, "rebuild", entries[:20], clear=True)
            for start in (20, 40):
                await _append(conn, catalog, "rebuild", entries[start:start + 20], max_entries=60)
        async with conn.transaction():
            result = await batches.commit(conn, bulk, "rebuild", bulk=batches.Bulk(entries=50, memory="8MB"))
        plain_result = await _commit(conn, plain, "rebuild")
        assert (result.applied, result.skipped_stale) == (plain_result.applied, plain_result.skipped_stale) == (60, 0)
        assert await missing_indexes(conn, bulk) == []
        assert len(secondary_indexes(bulk)) > 2
        assert await _content(conn, bulk) == await _content(conn, plain)

    run(db, work)


def test_a_bulk_commit_that_fails_keeps_the_indexes(db, monkeypatch):
    """The indexes are dropped inside the commit's transaction: a commit that fails leaves them."""
    rnd = random.Random(18)
    dropped = []

    async def failing_build(conn, catalog, statements, bulk):
        from catalog_service.store.catalogs import missing_indexes

        dropped.extend(await missing_indexes(conn, catalog))
        raise RuntimeError("the build fails")

    monkeypatch.setattr(batches, "_bulk_build", failing_build)

    async def work(conn):
        from catalog_service.store.catalogs import missing_indexes

        catalog = await _catalog(conn, "bulk-fails", **INDEXES)
        await _stage(conn, catalog, "rebuild", [_index(f"u{n}", rnd) for n in range(10)], clear=True)
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await batches.commit(conn, catalog, "rebuild", bulk=batches.Bulk(entries=5))
        assert len(dropped) > 2  # they were dropped inside the commit
        assert await missing_indexes(conn, catalog) == []
        assert await conn.fetchval("select state from catalog_batch where catalog_id = $1 and batch_id = $2",
                                   catalog.id, "rebuild") == "staged"
        assert await conn.fetchval(f"select count(*) from {catalog.table}") == 0

    run(db, work)


@pytest.mark.parametrize("existing", [0, 300], ids=["into an empty catalog", "over a catalog"])
def test_a_rebuild_of_partial_entries_reads_the_catalog_once_per_object(db, existing):
    """Plone's clearFindAndRebuild reindexes every object with every index named (idxs), so a
    rebuild's clear batch is partial entries of objects the cleared catalog lacks. Their commit
    into a partition whose statistics are those of an empty catalog (the install into an existing
    site) had the planner scan the partition once per object, each scan reading what the
    statement had inserted so far: quadratic (a 150,000-object install did not finish its commit
    in 8 minutes). The partition's pages the commit reads (this transaction's block fetches, not a
    timing) stay within a few per object."""
    rnd = random.Random(5)
    objects = 1500
    names = list(INDEXES)
    entries = [_index(f"u{n}", rnd, idxs=names) for n in range(objects)]

    async def work(conn):
        catalog = await _catalog(conn, f"partial-rebuild-{existing}", **INDEXES)
        if existing:
            await _stage(conn, catalog, "base", [_index(f"u{n}", rnd, version=1) for n in range(existing)])
            await _commit(conn, catalog, "base")
        await conn.execute(f"analyze {catalog.table}")
        await _stage(conn, catalog, "rebuild", entries[:500], clear=True)
        for start in range(500, objects, 500):
            await _append(conn, catalog, "rebuild", entries[start:start + 500], max_entries=objects)
        async with conn.transaction():
            result = await batches.commit(conn, catalog, "rebuild")
            fetched = await conn.fetchval("select pg_stat_get_xact_blocks_fetched($1::regclass)", catalog.table)
        assert (result.applied, result.skipped_stale) == (objects, 0)
        assert await conn.fetchval(f"select count(*) from {catalog.table}") == objects
        assert fetched < 20 * objects, f"{fetched} pages read for {objects} objects"

    run(db, work)
