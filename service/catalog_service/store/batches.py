"""Index batches: one ZODB transaction's catalog changes, staged, then committed or aborted.

A batch is converted once (``convert``), collapsed to one change per object, and written to
``catalog_staged``; appends add changes to it, each replacing the batch's change of its object
(``append``). Queries that name the batch overlay those rows on the catalog. Committing
applies them set-wise in one database transaction that also bumps the catalog's counter, so the
new counter and the new rows become visible together. Commits of different objects run side by
side; commits of the same object one after the other (docs/decisions/0009). Batch ids make every
step idempotent; per-object versions make an older change lose against a newer one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import orjson

from catalog_schemas.api import Batch, BatchAppend, BatchResult, IndexEntry, UnindexEntry

from ..errors import BadRequest, Conflict, LimitExceeded, NotFound
from ..indexes import MISSING, BadValue
from ..indexes.base import check_key_size
from ..indexes.path import ExtendedPathIndex, components, normalise, parent_of
from ..indexes.text import CELLS_SUFFIX
from ..text.cells import cell_labels
from .catalogs import ANALYZE_TEXT, TEXT_TABLES, Catalog, lock_writes, secondary_indexes

log = logging.getLogger("catalog_service")


@dataclass
class Change:
    op: str
    uid: str
    version: int
    path: str | None = None
    idx: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # Partial reindex: names of the indexes updated (None: the whole object).
    idxs: list[str] | None = None
    meta_partial: bool = False


def _convert_index(entry: IndexEntry, catalog: Catalog) -> Change:
    indexes = catalog.schema.indexes
    values = entry.values
    if not values.keys() <= indexes.keys():
        unknown = values.keys() - indexes.keys()
        raise BadValue(f"object {entry.uid!r}: no such index {sorted(unknown)!r}")
    if not entry.metadata.keys() <= catalog.metadata_names:
        unknown_meta = entry.metadata.keys() - catalog.metadata_names
        raise BadValue(f"object {entry.uid!r}: no such metadata column {sorted(unknown_meta)!r}")
    slots = catalog.entry_slots
    if entry.idxs is not None:
        bad = set(entry.idxs) - indexes.keys()
        if bad:
            raise BadValue(f"object {entry.uid!r}: idxs names unknown indexes {sorted(bad)!r}")
        names = list(dict.fromkeys(entry.idxs))
        chosen = [(name, slots[name]) for name in names if name in slots]
    else:
        names = None
        chosen = slots.items()
    path = normalise(entry.path)
    if not path.startswith("/") or "\x00" in path:
        raise BadValue(f"object {entry.uid!r}: invalid path")
    check_key_size(path, "the path of object %r", entry.uid)
    idx: dict[str, Any] = {}
    try:
        for name, (stored, absent) in chosen:
            value = values.get(name, MISSING)
            if value is not MISSING:
                value = stored(value)
                if value is not MISSING:
                    idx[name] = value
            elif absent is not MISSING:
                idx[name] = list(absent)
    except BadValue as exc:
        raise BadValue(f"object {entry.uid!r}: {exc.detail}") from exc
    return Change(op="index", uid=entry.uid, version=entry.version, path=path, idx=idx,
                  meta=dict(entry.metadata), idxs=names, meta_partial=entry.idxs is not None)


def convert(batch: Batch | BatchAppend, catalog: Catalog, max_entries: int) -> list[Change]:
    """Validate and convert a batch, collapsed to the last change per object."""
    if len(batch.entries) > max_entries:
        raise LimitExceeded(f"{len(batch.entries)} entries in one batch, at most {max_entries}")
    final: dict[str, Change] = {}
    for entry in batch.entries:
        if "\x00" in entry.uid:
            raise BadValue(f"object {entry.uid!r}: uids cannot contain NUL characters")
        if isinstance(entry, UnindexEntry):
            final[entry.uid] = Change(op="unindex", uid=entry.uid, version=entry.version)
            continue
        change = _convert_index(entry, catalog)
        before = final.get(entry.uid)
        if change.idxs is not None and before is not None and before.op == "index":
            # A partial reindex on top of an earlier change of the same transaction.
            merged_idx = {k: v for k, v in before.idx.items() if k not in change.idxs}
            merged_idx.update(change.idx)
            idxs = None if before.idxs is None else sorted(set(before.idxs) | set(change.idxs))
            change = Change(op="index", uid=entry.uid, version=change.version, path=change.path,
                            idx=merged_idx, meta={**before.meta, **change.meta}, idxs=idxs,
                            meta_partial=before.meta_partial)
        final[entry.uid] = change
    return list(final.values())


def _without(idx: dict[str, Any], names) -> dict[str, Any]:
    return {k: v for k, v in idx.items() if k not in names}


def _text_doc(idx: dict[str, Any], names, cell_names, profile: StagedProfile | None = None) -> dict[str, Any]:
    """A row's ``text`` document: the word sequences of its text indexes, and the score cells of
    those that have them (docs/decisions/0007). Counted into ``profile`` when given."""
    doc = {k: v for k, v in idx.items() if k in names}
    for name, words in list(doc.items()):
        if not isinstance(words, list):
            continue
        labels = cell_labels(words) if name in cell_names else None
        if labels is not None:
            doc[name + CELLS_SUFFIX] = labels
        if profile is not None:
            profile.add(name, words, labels)
    return doc


def _allowed(idx: dict[str, Any]) -> list[str] | None:
    """The row's principals as catalog_allowed() derives them in SQL, or None where only SQL
    says it exactly (an element that is not a string: SQL takes its JSON text). A commit stores
    ``coalesce(allowed, catalog_allowed(idx))``, so the function runs only for those rows."""
    value = idx.get("allowedRolesAndUsers")
    if not isinstance(value, list):
        return []
    if all(isinstance(v, str) for v in value):
        return value
    return None


def _dumps(value: Any) -> bytes:
    """``value`` as JSON for a jsonb column: UTF-8 bytes, which the connections' jsonb codec
    (store/database.py) sends as they are."""
    try:
        text = orjson.dumps(value)
    except TypeError as exc:
        raise BadValue(f"value cannot be stored as JSON: {exc}") from exc
    # jsonb has no \u0000. The search is one pass in C; the walk only confirms a hit (the
    # text may hold an escaped backslash followed by "u0000").
    if b"\\u0000" in text and _has_nul(value):
        raise BadValue("values cannot contain NUL characters (PostgreSQL cannot store them)")
    return text


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


async def _batch_state(conn: asyncpg.Connection, catalog: Catalog, batch_id: str) -> str | None:
    return await conn.fetchval(
        "select state from catalog_batch where catalog_id = $1 and batch_id = $2 for update",
        catalog.id, batch_id)


async def _lock_or_create(conn: asyncpg.Connection, catalog: Catalog, batch_id: str, state: str,
                          clear: bool = False, entries: int = 0, version: int | None = None) -> str | None:
    """Lock the batch's row and return its state, or create it in ``state`` and return None.

    A row another transaction is inserting cannot be locked: the insert's ON CONFLICT waits for
    that transaction, and when it committed the row is locked on the next round. So two requests
    for one new batch id are ordered, whatever they are (stage, abort)."""
    while True:
        # The insert first: batch ids are new nearly always (a Plone transaction's), and then it is
        # the only statement.
        created = await conn.fetchval(
            "insert into catalog_batch (catalog_id, batch_id, state, clear, entries, version, finished) "
            "values ($1, $2, $3, $4, $5, $6, case when $3 = 'staged' then null else now() end) "
            "on conflict do nothing returning 1", catalog.id, batch_id, state, clear, entries, version)
        if created:
            return None
        found = await _batch_state(conn, catalog, batch_id)
        if found is not None:
            return found


STAGED = "catalog_staged"
# One-shot batches (staged and committed in one request) go through a temporary table: nobody else
# needs to see their rows, so they skip the WAL and the shared table.
ONE_SHOT = "pg_temp.catalog_batch_rows"


async def one_shot_rows(conn: asyncpg.Connection, catalog: Catalog, batch_id: str) -> str:
    """Where the rows of a one-shot batch go: the temporary table, unless the id is staged already."""
    if await _batch_state(conn, catalog, batch_id) == "staged":
        return STAGED
    # Uncompressed up to a page, as the partitions: a compressed datum would be copied as it is.
    await conn.execute(f"create temp table if not exists catalog_batch_rows (like {STAGED}) "
                       f"with (toast_tuple_target = 8160) on commit delete rows")
    return ONE_SHOT


# Rows built on the event loop: a few take well under a millisecond.
INLINE_ROWS = 20


def _staged_records(catalog: Catalog, batch_id: str, clear: bool, changes: list[Change], existing: dict,
                    profile: StagedProfile, first_seq: int = 0) -> list[tuple]:
    """The rows of catalog_staged for ``changes`` (rid None for new objects), numbered from
    ``first_seq``, the text profile counted into ``profile``. ``existing``: the catalog's rows of
    the batch's objects, by uid; ``clear``: the batch is a clear (they do not count then)."""
    text_names = catalog.text_indexes
    cell_names = [name for name in text_names if catalog.schema.indexes[name].has_cells]
    records = []
    for seq, change in enumerate(changes, first_seq):
        if change.op == "unindex":
            records.append((catalog.id, batch_id, seq, "unindex", change.uid, None, None, None, None,
                            None, None, None, None, None, None, None, None, change.version))
            continue
        old = existing.get(change.uid)
        if old is not None and change.idxs is None and not clear:
            # ZCTextIndex keeps an object's words when its new value is not text (None).
            kept = [n for n in text_names if n not in change.idx]
            if kept:
                old_idx = orjson.loads(old["idx"])
                change.idx.update({n: old_idx[n] for n in kept if n in old_idx})
        # A partial reindex replaces the indexes it names, except a text index without a text
        # value: ZCTextIndex keeps the object's words then (as the full reindex above does).
        replaced = None if change.idxs is None else [
            n for n in change.idxs if n not in text_names or n in change.idx]
        if change.idxs is None or old is None or clear:
            idx, meta = change.idx, change.meta
        else:
            idx = {k: v for k, v in orjson.loads(old["idx"]).items() if k not in replaced}
            idx.update(change.idx)
            meta = {**orjson.loads(old["meta"]), **change.meta}
        partial = change.idxs is not None
        records.append((
            catalog.id, batch_id, seq, "index", change.uid,
            old["rid"] if old is not None else None,
            change.path, parent_of(change.path), len(components(change.path)),
            _allowed(idx), _dumps(_without(idx, text_names)), _dumps(_text_doc(idx, text_names, cell_names, profile)),
            _dumps(meta),
            replaced,
            _dumps(_without(change.idx, text_names)) if partial else None,
            _dumps(_text_doc(change.idx, text_names, cell_names)) if partial else None,
            _dumps(change.meta) if partial else None,
            change.version,
        ))
    return records


async def apply_one_shot(conn: asyncpg.Connection, catalog: Catalog, batch: Batch,
                         changes: list[Change]) -> BatchResult:
    """Stage and commit a batch at once; must run inside a transaction. Its rows go through the
    temporary table (or replace those of the same id if it was staged before) and its text
    profile stays in memory: nobody else needs either."""
    await lock_writes(conn, catalog, exclusive=batch.clear)
    rows = await one_shot_rows(conn, catalog, batch.batch_id)
    profile = StagedProfile()
    await stage(conn, catalog, batch, changes, rows, profile, locked=True)
    return await commit(conn, catalog, batch.batch_id, rows, profile, locked=True)


async def stage(conn: asyncpg.Connection, catalog: Catalog, batch: Batch, changes: list[Change],
                rows: str = STAGED, profile: StagedProfile | None = None, *, locked: bool = False) -> str:
    """Write the batch's rows to ``rows`` (catalog_staged, replacing an earlier staging of the same
    id). Returns the batch state found: 'committed' means nothing was done.

    The text profile of the rows is counted into ``profile`` if given (a commit in the same
    transaction takes it from there), else kept with the batch for a later commit. ``locked``: the
    transaction holds the catalog's write lock already."""
    if not locked:
        await lock_writes(conn, catalog, exclusive=batch.clear)
    state = await _lock_or_create(conn, catalog, batch.batch_id, "staged", batch.clear, len(changes), batch.version)
    if state == "committed":
        return state
    if state == "aborted":
        raise Conflict(f"batch {batch.batch_id!r} was aborted; use a new batch id")
    if state == "staged":
        # Staged again (a retry, or a transaction that changed more): the new rows replace the old,
        # wherever they are. A one-shot batch that found no staging of its id (its rows go to the
        # temporary table) can find one here, made by another connection in between.
        for table in dict.fromkeys((rows, STAGED)):
            await conn.execute(f"delete from {table} where catalog_id = $1 and batch_id = $2",
                               catalog.id, batch.batch_id)
        await conn.execute(
            "update catalog_batch set entries = $3, clear = $4, version = $5, created = now() "
            "where catalog_id = $1 and batch_id = $2",
            catalog.id, batch.batch_id, len(changes), batch.clear, batch.version)

    keep_profile = profile is None
    profile = StagedProfile() if profile is None else profile
    await _write_rows(conn, catalog, batch.batch_id, batch.clear, changes, rows, profile)
    if catalog.text_indexes and keep_profile:
        await conn.execute("update catalog_batch set profile = $3 where catalog_id = $1 and batch_id = $2",
                           catalog.id, batch.batch_id, _dumps(profile.as_json()))
    return "staged"


async def _lock_batch(conn: asyncpg.Connection, catalog: Catalog, batch_id: str, *,
                      locked: bool = False) -> asyncpg.Record | None:
    """The row of batch ``batch_id`` (None if there is none), locked for update after the catalog's
    write lock: an exclusive one for a staged clear batch. ``locked``: the transaction holds the
    catalog's write lock already."""
    exclusive = None
    if not locked:
        # The catalog's lock comes before the batch's row (0009): read whether it is a clear first.
        exclusive = bool(await conn.fetchval(
            "select clear from catalog_batch where catalog_id = $1 and batch_id = $2", catalog.id, batch_id))
        await lock_writes(conn, catalog, exclusive)
    batch = await conn.fetchrow(
        "select state, clear, entries, profile, version from catalog_batch where catalog_id = $1 and batch_id = $2 "
        "for update", catalog.id, batch_id)
    if batch is not None and batch["state"] == "staged" and batch["clear"] and exclusive is False:
        await lock_writes(conn, catalog, exclusive=True)  # staged again as a clear since it was read
    return batch


async def append(conn: asyncpg.Connection, catalog: Catalog, batch_id: str, changes: list[Change],
                 max_entries: int) -> int:
    """Add ``changes`` to the staged batch ``batch_id``; must run inside a transaction. A change
    replaces the batch's staged change of its object (the connector sends an object's whole change
    of the transaction again), so staging a batch and appending to it leaves the rows a single
    staging of the union would. Returns the number of objects the batch now holds.

    Only a staged batch grows: an unknown id is a 404 (nothing is created, so a later staging of the
    id still works), a committed or aborted one a 409."""
    batch = await _lock_batch(conn, catalog, batch_id)
    if batch is None:
        raise NotFound(f"no staged batch {batch_id!r}: stage it before appending to it")
    if batch["state"] != "staged":
        raise Conflict(f"batch {batch_id!r} is {batch['state']}: only a staged batch can be appended to")
    replaced = await conn.fetch(
        "delete from catalog_staged where catalog_id = $1 and batch_id = $2 and uid = any($3::text[]) "
        "returning uid, op, rid, text::text as text", catalog.id, batch_id, [c.uid for c in changes])
    entries = batch["entries"] - len(replaced) + len(changes)
    if entries > max_entries:
        raise LimitExceeded(f"{entries} entries in one batch, at most {max_entries}")
    first_seq = await conn.fetchval(
        "select coalesce(max(seq) + 1, 0) from catalog_staged where catalog_id = $1 and batch_id = $2",
        catalog.id, batch_id)
    added = StagedProfile()
    # An object new to the catalog keeps the rid its earlier staged change gave it.
    rids = {r["uid"]: r["rid"] for r in replaced if r["rid"] is not None}
    await _write_rows(conn, catalog, batch_id, batch["clear"], changes, STAGED, added, first_seq, rids)
    profile = _profile_from_json(batch["profile"]) if catalog.text_indexes else None
    if profile is not None:
        # The batch's profile counts its rows: add the new ones', take the replaced ones' away.
        removed = _profile_of_rows(catalog, [r["text"] for r in replaced if r["op"] == "index"])
        profile = _profile_sum(profile, added.counts(), removed)
    # No profile kept (none staged, or staged before the schema had text indexes): a commit
    # counts the rows themselves.
    await conn.execute(
        "update catalog_batch set entries = $3, profile = $4, created = now() "
        "where catalog_id = $1 and batch_id = $2",
        catalog.id, batch_id, entries, None if profile is None else _dumps(_profile_json(profile)))
    return entries


async def _write_rows(conn: asyncpg.Connection, catalog: Catalog, batch_id: str, clear: bool,
                      changes: list[Change], rows: str, profile: StagedProfile, first_seq: int = 0,
                      rids: dict[str, int] | None = None) -> None:
    """Convert ``changes`` to staged rows and copy them to ``rows``, their text profile counted
    into ``profile``. New objects take their rid from ``rids`` (by uid) if there, else a new one."""
    uids = [c.uid for c in changes]
    existing = {
        r["uid"]: r
        for r in await conn.fetch(f"select uid, rid, (idx || text)::text as idx, meta::text as meta from {catalog.table} "
                                  f"where catalog_id = $1 and uid = any($2::text[])", catalog.id, uids)
    }
    args = (catalog, batch_id, clear, changes, existing, profile, first_seq)
    if len(changes) > INLINE_ROWS:
        # Thousands of rows of JSON: in a thread, like the conversion (api/batches.py), so that the
        # worker's queries are not held meanwhile.
        records = await asyncio.to_thread(_staged_records, *args)
    else:
        records = _staged_records(*args)
    if rids:
        records = [r[:5] + (rids.get(r[4]),) + r[6:] if r[3] == "index" and r[5] is None else r for r in records]
    missing_rids = [i for i, r in enumerate(records) if r[3] == "index" and r[5] is None]
    if missing_rids:
        # New objects get their rid now, so overlay queries and the commit agree on it.
        new_rids = await conn.fetch("select nextval('catalog_rid_seq') as rid from generate_series(1, $1)",
                                    len(missing_rids))
        for i, row in zip(missing_rids, new_rids, strict=True):
            records[i] = records[i][:5] + (row["rid"],) + records[i][6:]
    if records:
        schema_name, _, table_name = rows.rpartition(".")
        await conn.copy_records_to_table(
            table_name,
            schema_name=schema_name or None,
            records=records,
            columns=["catalog_id", "batch_id", "seq", "op", "uid", "rid", "path", "parent", "depth", "allowed",
                     "idx", "text", "meta", "idxs", "delta_idx", "delta_text", "delta_meta", "version"],
        )


async def _clear(conn: asyncpg.Connection, catalog: Catalog, version: int | None) -> None:
    """A clear batch's wipe, before its entries are applied: the objects and tombstones older than
    the batch's ``version`` (all of them without one), and the text statistics they counted.

    Versioned, the clear is right whenever it commits: what it removes is what its transaction's
    snapshot could have seen, and its entries (of that version) replace the rest as any batch's
    do. Committed late by a resolver, it keeps the newer changes other transactions committed in
    between (and their tombstones), instead of wiping them and bringing the older state back."""
    cat, table = catalog.id, catalog.table
    if version is None:
        await conn.execute(f"delete from {table}")
        await conn.execute("delete from catalog_tombstone where catalog_id = $1", cat)
    else:
        await conn.execute(f"delete from {table} where version < $1", version)
        await conn.execute("delete from catalog_tombstone where catalog_id = $1 and version < $2", cat, version)
    for table_name in TEXT_TABLES:
        await conn.execute(f"delete from {table_name} where catalog_id = $1", cat)
    if version is not None and catalog.text_indexes:
        await _count_text(conn, catalog)


async def _count_text(conn: asyncpg.Connection, catalog: Catalog) -> None:
    """Count the text statistics (documents and words, lexicon, cells) of the catalog's rows afresh,
    into emptied tables: after a versioned clear, for the rows it kept (newer than the clear,
    usually none), as ``_text_profile`` counts a batch's objects."""
    cat, table, names = catalog.id, catalog.table, catalog.text_indexes
    texts = (f"from {table} t, jsonb_each(t.text) e where t.catalog_id = $1 and e.key = any($2::text[]) "
             f"and jsonb_typeof(e.value) = 'array'")
    await conn.execute(
        f"insert into catalog_text_stats (catalog_id, index_name, docs, words) "
        f"select $1, e.key, count(*), sum(jsonb_array_length(e.value)) {texts} group by e.key", cat, names)
    words = (f"from {table} t, jsonb_each(t.text) e, lateral (select x, count(*)::integer "
             f"from jsonb_array_elements_text(e.value) x group by x) d(w, f) "
             f"where t.catalog_id = $1 and e.key = any($2::text[]) and jsonb_typeof(e.value) = 'array'")
    await conn.execute(
        f"insert into catalog_lexicon (catalog_id, index_name, word, df) "
        f"select $1, e.key, d.w, count(*) {words} group by e.key, d.w", cat, names)
    cell_names = [name for name in names if catalog.schema.indexes[name].has_cells]
    if cell_names:
        await conn.execute(
            f"insert into catalog_text_cell (catalog_id, index_name, word, fb, lb, n) "
            f"select $1, e.key, d.w, catalog_text_bucket(d.f), catalog_text_bucket(jsonb_array_length(e.value)), "
            f"count(*) {words} group by 2, 3, 4, 5", cat, cell_names)


@dataclass(frozen=True)
class Bulk:
    """How a large batch commits (Settings.bulk_commit_entries, docs/decisions/0018): from
    ``entries`` entries on (0: never), its statements may run ``statement_timeout`` seconds (0: no
    limit), and a clear batch drops the catalog's secondary indexes and builds them again at the
    end, with ``memory`` as maintenance_work_mem."""

    entries: int = 0
    statement_timeout: float = 3600.0
    memory: str = "512MB"

    def applies(self, entries: int) -> bool:
        return 0 < self.entries <= entries


async def commit(conn: asyncpg.Connection, catalog: Catalog, batch_id: str, rows: str = STAGED,
                 profile: StagedProfile | None = None, *, locked: bool = False, bulk: Bulk | None = None) -> BatchResult:
    """Apply a staged batch (its rows in ``rows``); must run inside a transaction. ``profile``:
    the rows' text profile when they were staged in this transaction (else the batch's own).
    ``locked``: the transaction holds the catalog's write lock already (as its staging took it).
    ``bulk``: how a large batch commits (Bulk)."""
    batch = await _lock_batch(conn, catalog, batch_id, locked=locked)
    state = None if batch is None else batch["state"]
    if state is None:
        raise NotFound(f"no staged batch {batch_id!r}")
    if state == "aborted":
        raise Conflict(f"batch {batch_id!r} was aborted")
    if state == "committed":
        row = await conn.fetchrow(
            "select b.applied, b.skipped, c.counter from catalog_batch b join catalog c on c.id = b.catalog_id "
            "where b.catalog_id = $1 and b.batch_id = $2", catalog.id, batch_id)
        return BatchResult(batch_id=batch_id, state="committed", applied=row["applied"],
                           skipped_stale=row["skipped"], counter=row["counter"])

    table = catalog.table
    cat, bid = catalog.id, batch_id
    staged = f"from {rows} s where s.catalog_id = $1 and s.batch_id = $2"
    rebuilt = await _bulk_begin(conn, catalog, batch, bulk)
    # Commits of one catalog run side by side (docs/decisions/0009): each claims its objects, and
    # the counter row, whose lock orders them, is taken last. A clear runs alone.
    if not batch["clear"]:
        # Claimed in uid order, so two commits wanting some of the same objects cannot each hold
        # one the other waits for.
        await conn.execute(f"insert into catalog_inflight (catalog_id, uid) select distinct $1::integer, s.uid "
                           f"{staged} order by s.uid", cat, bid)
    else:
        await _clear(conn, catalog, batch["version"])

    # What the batch holds, so that only the statements for it run (a Plone edit: full rows only).
    kinds = await conn.fetchrow(
        f"select count(*) filter (where s.op = 'unindex') as unindexes, "
        f"count(*) filter (where s.op = 'index' and s.idxs is null) as full, "
        f"count(*) filter (where s.op = 'index' and s.idxs is not null) as partial {staged}", cat, bid)
    text_indexes = catalog.text_indexes
    if text_indexes:
        before = await _text_profile(conn, catalog, bid, text_indexes, rows)
    removed = unindexes = 0
    if kinds["unindexes"]:
        removed = await _count(conn,
            f"delete from {table} t using {rows} s where s.catalog_id = $1 and s.batch_id = $2 "
            f"and s.op = 'unindex' and t.catalog_id = $1 and t.uid = s.uid and t.version <= s.version "
            f"returning t.uid", cat, bid)
        # One row per unindexed object (a batch holds one change per object): the status counts them.
        tombstones = await conn.execute(
            f"insert into catalog_tombstone (catalog_id, uid, version) select $1, s.uid, s.version {staged} "
            f"and s.op = 'unindex' on conflict (catalog_id, uid) do update set "
            f"version = greatest(catalog_tombstone.version, excluded.version), removed = now()", cat, bid)
        unindexes = int(tombstones.rsplit(" ", 1)[1])
    fresh = ("s.op = 'index' and not exists (select 1 from catalog_tombstone tb where tb.catalog_id = $1 "
             "and tb.uid = s.uid and tb.version > s.version)")
    full = partial = new_partial = 0
    if kinds["full"]:
        full = await _count(conn,
            f"insert into {table} as t (catalog_id, rid, uid, path, parent, depth, allowed, idx, text, meta, version) "
            f"select $1, s.rid, s.uid, s.path, s.parent, s.depth, coalesce(s.allowed, catalog_allowed(s.idx)), "
            f"s.idx, s.text, s.meta, s.version "
            f"{staged} and s.idxs is null and {fresh} "
            f"on conflict (catalog_id, uid) do update set path = excluded.path, parent = excluded.parent, "
            f"depth = excluded.depth, allowed = excluded.allowed, idx = excluded.idx, text = excluded.text, "
            f"meta = excluded.meta, "
            f"version = excluded.version where t.version <= excluded.version returning t.uid", cat, bid)
    if kinds["partial"]:
        partial = await _count(conn,
            f"update {table} t set path = s.path, parent = s.parent, depth = s.depth, "
            f"idx = (t.idx - s.idxs) || s.delta_idx, allowed = catalog_allowed((t.idx - s.idxs) || s.delta_idx), "
            f"text = (t.text - s.idxs) || s.delta_text, "
            f"meta = t.meta || s.delta_meta, version = s.version "
            f"from {rows} s where s.catalog_id = $1 and s.batch_id = $2 and s.idxs is not null "
            f"and {fresh} and t.catalog_id = $1 and t.uid = s.uid and t.version <= s.version returning t.uid",
            cat, bid)
        new_partial = await _count(conn,
            f"insert into {table} (catalog_id, rid, uid, path, parent, depth, allowed, idx, text, meta, version) "
            f"select $1, s.rid, s.uid, s.path, s.parent, s.depth, catalog_allowed(s.delta_idx), s.delta_idx, "
            f"s.delta_text, s.delta_meta, s.version {staged} and s.idxs is not null and {fresh} "
            # Objects not in the catalog: the conflict is the test, by the key's index. (A NOT EXISTS
            # of the partition here was planned as a scan of it per row when its statistics were of
            # an empty catalog, as in a rebuild's commit, and each scan read the pages this statement
            # had written so far: 33 s for 20,000 objects, quadratic.)
            f"on conflict do nothing returning uid", cat, bid)
    entries = batch["entries"]
    if text_indexes:
        applied_all = removed + full + partial + new_partial == entries
        after = None
        if not before[0] and applied_all and not partial and not new_partial:
            # New objects only, all applied in full: the rows are exactly as staged. (A partial
            # reindex writes its delta onto the row as it is now, not as it was at staging.)
            after = profile.counts() if profile is not None else _profile_from_json(batch["profile"])
        if after is None:
            after = await _text_profile(conn, catalog, bid, text_indexes, rows)
        await _apply_text_delta(conn, cat, before, after)
    applied = removed + full + partial + new_partial
    # An unindex of an object that is not there is not stale, just empty.
    skipped = max(0, entries - applied - (unindexes - removed))
    # Gone when this transaction commits (or aborts): the claims (the objects are free for the
    # next commit; by key, an index scan whatever the table's statistics say: a join planned from
    # stale statistics scanned every dead row of the claims before) and the staged rows.
    claims = "" if batch["clear"] else (
        f"claims as (delete from catalog_inflight where catalog_id = $1 and uid = any(array("
        f"select s.uid {staged}))), ")
    settle = (f"{claims}done as (delete from {rows} where catalog_id = $1 and batch_id = $2), "
              f"settled as (update catalog_batch set state = 'committed', applied = $3, skipped = $4, "
              f"finished = now() where catalog_id = $1 and batch_id = $2) ")
    # Last: the counter row's lock orders the commits of a catalog, and is held only to the end.
    bump = "update catalog set counter = counter + 1 where id = $1 returning counter"
    if rebuilt:
        await conn.execute(f"with {settle}select 1", cat, bid, applied, skipped)
        await _bulk_build(conn, catalog, rebuilt, bulk)
        counter = await conn.fetchval(bump, cat)
    else:
        # One statement: its parts see the same snapshot, and only the counter row is a new lock.
        counter = await conn.fetchval(f"with {settle}{bump}", cat, bid, applied, skipped)
    return BatchResult(batch_id=batch_id, state="committed", applied=applied, skipped_stale=skipped, counter=counter)


async def _count(conn: asyncpg.Connection, statement: str, *args) -> int:
    """The rows a writing statement ending in ``returning`` wrote, counted in the database: a
    rebuild's commit writes hundreds of thousands, which the service need not hold."""
    return await conn.fetchval(f"with written as ({statement}) select count(*) from written", *args)


async def _bulk_begin(conn: asyncpg.Connection, catalog: Catalog, batch, bulk: Bulk | None) -> list[str]:
    """For a large batch: lift the statement timeout for this transaction; for a large clear batch,
    drop the catalog's secondary indexes too (inside this transaction: an abort brings them
    back) and return their create statements, built again by ``_bulk_build``. The drop takes the
    partition's ACCESS EXCLUSIVE lock, so queries of the catalog wait for this commit
    (docs/decisions/0018): the price of loading without some thirty index updates per row."""
    if bulk is None or not bulk.applies(batch["entries"]):
        return []
    await conn.execute(f"set local statement_timeout = {int(bulk.statement_timeout * 1000)}")
    if not batch["clear"]:
        return []
    statements = []
    for _, name, statement in secondary_indexes(catalog):
        await conn.execute(f"drop index if exists {name}")
        statements.append(statement)
    return statements


async def _bulk_build(conn: asyncpg.Connection, catalog: Catalog, statements: list[str], bulk: Bulk) -> None:
    """Build the indexes ``_bulk_begin`` dropped, over the loaded partition, then ANALYZE it (the
    planner's statistics of a rebuilt catalog are those of its new rows)."""
    began = time.monotonic()
    await conn.execute(f"set local maintenance_work_mem = '{bulk.memory}'")
    for statement in statements:
        await conn.execute(statement)
    await conn.execute(f"analyze {catalog.table}")
    await conn.execute(ANALYZE_TEXT)
    log.info("catalog %s: %d indexes built again after a bulk commit in %.1f s", catalog.name, len(statements),
             time.monotonic() - began)


async def compare(conn: asyncpg.Connection, catalog: Catalog, changes: list[Change]) -> dict[str, dict]:
    """What differs between converted entries and the stored rows (for the connector's verify)."""
    rows = {
        r["uid"]: r
        for r in await conn.fetch(f"select uid, path, (idx || text)::text as idx, meta::text as meta from {catalog.table} "
                                  f"where catalog_id = $1 and uid = any($2::text[])", catalog.id,
                                  [c.uid for c in changes])
    }
    text_names = set(catalog.text_indexes)
    results = {}
    for change in changes:
        row = rows.get(change.uid)
        if change.op != "index" or row is None:
            results[change.uid] = {"missing": row is None, "indexes": [], "metadata": []}
            continue
        stored_idx, stored_meta = orjson.loads(row["idx"]), orjson.loads(row["meta"])
        names = change.idxs if change.idxs is not None else list(catalog.schema.indexes)
        differing = []
        for name in names:
            index = catalog.schema.indexes[name]
            if isinstance(index, ExtendedPathIndex) and index.physical:
                if row["path"] != change.path:
                    differing.append(name)
            elif name in text_names and name not in change.idx:
                continue  # not text now: ZCTextIndex keeps what it had
            elif change.idx.get(name, MISSING) != stored_idx.get(name, MISSING):
                differing.append(name)
        meta = [k for k, v in change.meta.items() if stored_meta.get(k, MISSING) != v]
        results[change.uid] = {"missing": False, "indexes": differing, "metadata": meta}
    return results


# Per text index (documents, words); per (index, word) the documents holding the word; per cell
# (index, word, f bucket, len bucket) of the indexes with cells, the documents in it.
TextProfile = tuple[dict[str, tuple[int, int]], dict[tuple[str, str], int], dict[tuple[str, str, int, int], int]]


class StagedProfile:
    """The text profile of a batch's rows as staged (see _text_profile), kept with the batch.

    Collected per document as the rows hold it: the cell labels of the indexes with cells (their
    words and document frequencies follow from the labels), the distinct words of the others.
    Counted, and taken apart once per distinct label, when the profile is read."""

    def __init__(self) -> None:
        self.docs: dict[str, list[int]] = {}
        # Per index, the documents' distinct words (or cell labels), one document after the other:
        # one count over all of them when the profile is read costs less than a count per document.
        self.words: dict[str, list[str]] = {}
        self.labels: dict[str, list[str]] = {}

    def add(self, name: str, words: list[str], labels: list[str] | None) -> None:
        total = self.docs.setdefault(name, [0, 0])
        total[0] += 1
        total[1] += len(words)
        if labels is not None:
            self.labels.setdefault(name, []).extend(labels)
        else:
            self.words.setdefault(name, []).extend(set(words))

    def _cells(self) -> dict[str, dict[tuple[int, int, str], int]]:
        found = {}
        for name, labels in self.labels.items():
            found[name] = cells = {}
            for label, n in Counter(labels).items():
                fb, lb, word = label.split(":", 2)
                cells[int(fb), int(lb), word] = n
        return found

    def _df(self, cells: dict[str, dict[tuple[int, int, str], int]]) -> dict[str, Counter]:
        df = {name: Counter(words) for name, words in self.words.items()}
        for name, counts in cells.items():
            words = df.setdefault(name, Counter())
            for (_, _, word), n in counts.items():
                words[word] += n
        return df

    def counts(self) -> TextProfile:
        cells = self._cells()
        df = {(name, word): n for name, words in self._df(cells).items() for word, n in words.items()}
        found = {(name, w, fb, lb): n for name, counts in cells.items() for (fb, lb, w), n in counts.items()}
        return {name: (d, w) for name, (d, w) in self.docs.items()}, df, found

    def as_json(self) -> dict:
        cells = self._cells()
        return {"docs": self.docs, "df": self._df(cells),
                "cells": {name: [[w, fb, lb, n] for (fb, lb, w), n in counts.items()]
                          for name, counts in cells.items()}}


def _profile_from_json(text: str | None) -> TextProfile | None:
    if text is None:
        return None  # staged without text indexes
    data = orjson.loads(text)
    if "cells" not in data:
        return None  # staged by a version without cells: recount from the rows
    docs = {name: (d, w) for name, (d, w) in data["docs"].items()}
    df = {(name, word): n for name, words in data["df"].items() for word, n in words.items()}
    found = {(name, w, fb, lb): n for name, entries in data["cells"].items() for w, fb, lb, n in entries}
    return docs, df, found


def _profile_of_rows(catalog: Catalog, texts: list[str | None]) -> TextProfile:
    """The text profile of staged rows from their ``text`` documents (as _text_doc made them)."""
    cell_names = {name for name in catalog.text_indexes if catalog.schema.indexes[name].has_cells}
    profile = StagedProfile()
    for text in texts:
        doc = orjson.loads(text) if text is not None else {}
        for name in catalog.text_indexes:
            words = doc.get(name)
            if isinstance(words, list):
                profile.add(name, words, doc.get(name + CELLS_SUFFIX) if name in cell_names else None)
    return profile.counts()


def _profile_sum(base: TextProfile, plus: TextProfile, minus: TextProfile) -> TextProfile:
    """``base + plus - minus``, per key; keys that come to nothing are left out."""
    def total(part: int) -> dict:
        found: dict = Counter(base[part])
        found.update(plus[part])
        found.subtract(minus[part])
        return {key: n for key, n in found.items() if n}

    docs = {}
    for name in set(base[0]) | set(plus[0]) | set(minus[0]):
        counts = [base[0].get(name, (0, 0)), plus[0].get(name, (0, 0)), minus[0].get(name, (0, 0))]
        d, w = (counts[0][i] + counts[1][i] - counts[2][i] for i in (0, 1))
        if d or w:
            docs[name] = (d, w)
    return docs, total(1), total(2)


def _profile_json(profile: TextProfile) -> dict:
    """``profile`` in the form StagedProfile.as_json writes (and _profile_from_json reads)."""
    docs, df, cells = profile
    words: dict[str, dict[str, int]] = {}
    for (name, word), n in df.items():
        words.setdefault(name, {})[word] = n
    found: dict[str, list] = {}
    for (name, word, fb, lb), n in cells.items():
        found.setdefault(name, []).append([word, fb, lb, n])
    return {"docs": {name: list(dw) for name, dw in docs.items()}, "df": words, "cells": found}


async def _text_profile(conn: asyncpg.Connection, catalog: Catalog, batch_id: str, names: list[str],
                        rows: str = STAGED) -> TextProfile:
    """For the catalog rows of a batch's objects: per text index, (documents, words), the documents
    holding each word and the documents per cell. Taken before and after a commit, the difference
    updates the statistics Okapi relevance needs, without scanning the whole catalog."""
    source = (f"from {rows} s join {catalog.table} t on t.catalog_id = $1 and t.uid = s.uid, jsonb_each(t.text) e "
              f"where s.catalog_id = $1 and s.batch_id = $2 and e.key = any($3::text[]) "
              f"and jsonb_typeof(e.value) = 'array'")
    docs = {
        r["name"]: (r["docs"], r["words"])
        for r in await conn.fetch(
            f"select e.key as name, count(*) as docs, sum(jsonb_array_length(e.value)) as words {source} group by 1",
            catalog.id, batch_id, names)
    }
    if not docs:
        return docs, {}, {}
    words = (f"from {rows} s join {catalog.table} t on t.catalog_id = $1 and t.uid = s.uid, jsonb_each(t.text) e, "
             f"lateral (select x, count(*)::integer from jsonb_array_elements_text(e.value) x group by x) d(w, f) "
             f"where s.catalog_id = $1 and s.batch_id = $2 and e.key = any($3::text[]) "
             f"and jsonb_typeof(e.value) = 'array'")
    cell_names = [name for name in names if catalog.schema.indexes[name].has_cells]
    df: dict[tuple[str, str], int] = {}
    found: dict[tuple[str, str, int, int], int] = {}
    for r in await conn.fetch(
            f"select e.key as name, d.w as word, catalog_text_bucket(d.f) as fb, "
            f"catalog_text_bucket(jsonb_array_length(e.value)) as lb, count(*) as n {words} group by 1, 2, 3, 4",
            catalog.id, batch_id, names):
        df[r["name"], r["word"]] = df.get((r["name"], r["word"]), 0) + r["n"]
        if r["name"] in cell_names:
            found[r["name"], r["word"], r["fb"], r["lb"]] = r["n"]
    return docs, df, found


async def _upsert_deltas(conn: asyncpg.Connection, sql: str, catalog_id: int, before: dict, after: dict) -> None:
    """Add ``after - before`` per key with ``sql`` (unnest of the key columns and the delta). Sorted
    keys: two commits touching the same rows lock them in the same order, so commits running side
    by side never deadlock here."""
    # A batch of new objects has nothing before (a rebuild's every batch).
    delta = after if not before else {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    keys = sorted(k for k, d in delta.items() if d)
    if keys:
        await conn.execute(sql, catalog_id, *([list(column) for column in zip(*keys, strict=True)]),
                           [delta[k] for k in keys])


async def _apply_text_delta(conn: asyncpg.Connection, catalog_id: int, before: TextProfile,
                            after: TextProfile) -> None:
    (docs_before, df_before, cells_before), (docs_after, df_after, cells_after) = before, after
    names = sorted(set(docs_before) | set(docs_after))
    if names:
        await conn.execute(
            "insert into catalog_text_stats (catalog_id, index_name, docs, words) "
            "select $1, n, d, w from unnest($2::text[], $3::bigint[], $4::bigint[]) as u(n, d, w) "
            "on conflict (catalog_id, index_name) do update set docs = catalog_text_stats.docs + excluded.docs, "
            "words = catalog_text_stats.words + excluded.words",
            catalog_id, names,
            [docs_after.get(n, (0, 0))[0] - docs_before.get(n, (0, 0))[0] for n in names],
            [docs_after.get(n, (0, 0))[1] - docs_before.get(n, (0, 0))[1] for n in names])
    await _upsert_deltas(
        conn, "insert into catalog_lexicon (catalog_id, index_name, word, df) "
              "select $1, n, w, d from unnest($2::text[], $3::text[], $4::bigint[]) as u(n, w, d) "
              "on conflict (catalog_id, index_name, word) do update set df = catalog_lexicon.df + excluded.df",
        catalog_id, df_before, df_after)
    await _upsert_deltas(
        conn, "insert into catalog_text_cell (catalog_id, index_name, word, fb, lb, n) "
              "select $1, i, w, f, l, d from unnest($2::text[], $3::text[], $4::smallint[], $5::smallint[], "
              "$6::bigint[]) as u(i, w, f, l, d) "
              "on conflict (catalog_id, index_name, word, fb, lb) do update set n = catalog_text_cell.n + excluded.n",
        catalog_id, cells_before, cells_after)


async def abort(conn: asyncpg.Connection, catalog: Catalog, batch_id: str) -> BatchResult:
    # An unknown id is remembered as aborted, so that a late staging of it is refused.
    await lock_writes(conn, catalog, exclusive=False)
    state = await _lock_or_create(conn, catalog, batch_id, "aborted")
    if state == "committed":
        raise Conflict(f"batch {batch_id!r} is already committed")
    if state == "staged":
        await conn.execute("delete from catalog_staged where catalog_id = $1 and batch_id = $2", catalog.id, batch_id)
        await conn.execute(
            "update catalog_batch set state = 'aborted', finished = now() where catalog_id = $1 and batch_id = $2",
            catalog.id, batch_id)
    counter = await conn.fetchval("select counter from catalog where id = $1", catalog.id)
    return BatchResult(batch_id=batch_id, state="aborted", applied=0, counter=counter)


async def resolve_expired(conn: asyncpg.Connection, ttl_seconds: float, abandon_seconds: float | None = None,
                          bulk: Bulk | None = None) -> list[tuple[str, str, str]]:
    """Resolve staged batches older than the ttl from catalog_txn_outcome: commit those whose ZODB
    transaction committed (the storage recorded the batch id), abort the others.

    A catalog whose client resolves its batches itself (``declare_resolver``) has the first word on
    an unrecorded batch: it is aborted only once older than ``abandon_seconds`` (never if None)."""
    from .catalogs import build

    rows = await conn.fetch(
        "select b.batch_id, b.clear as batch_clear, "
        "exists (select 1 from catalog_batch_resolver r where r.catalog_id = b.catalog_id) as client_resolves, "
        "($2::float8 is not null and b.created < now() - make_interval(secs => $2)) as abandoned, "
        "c.* from catalog_batch b join catalog c on c.id = b.catalog_id "
        "where b.state = 'staged' and b.created < now() - make_interval(secs => $1)", ttl_seconds, abandon_seconds)
    outcomes = []
    for row in rows:
        catalog = build(row)
        async with conn.transaction():
            # The client may have committed or aborted it since it was listed: under the row lock,
            # only a batch that is still staged is resolved.
            await lock_writes(conn, catalog, exclusive=row["batch_clear"])
            if await _batch_state(conn, catalog, row["batch_id"]) != "staged":
                continue
            recorded = await conn.fetchval("select 1 from catalog_txn_outcome where batch_id = $1", row["batch_id"])
            if recorded:
                await commit(conn, catalog, row["batch_id"], bulk=bulk)
                outcomes.append((catalog.name, row["batch_id"], "committed"))
            elif not row["client_resolves"] or row["abandoned"]:
                await abort(conn, catalog, row["batch_id"])
                outcomes.append((catalog.name, row["batch_id"], "aborted"))
    return outcomes


async def staged_older_than(conn: asyncpg.Connection, catalog: Catalog, seconds: float,
                            limit: int) -> list[tuple[str, float]]:
    """The catalog's batches staged more than ``seconds`` ago (by this database's clock), oldest
    first, with their ages in seconds."""
    rows = await conn.fetch(
        "select batch_id, extract(epoch from now() - created)::float8 as age from catalog_batch "
        "where catalog_id = $1 and state = 'staged' and created < now() - make_interval(secs => $2) "
        "order by created limit $3", catalog.id, seconds, limit)
    return [(r["batch_id"], r["age"]) for r in rows]


async def declare_resolver(conn: asyncpg.Connection, catalog: Catalog, by_client: bool) -> None:
    """Record whether the catalog's client resolves its staged batches itself."""
    if by_client:
        await conn.execute("insert into catalog_batch_resolver (catalog_id) values ($1) on conflict do nothing",
                           catalog.id)
    else:
        await conn.execute("delete from catalog_batch_resolver where catalog_id = $1", catalog.id)


async def resolver_of(conn: asyncpg.Connection, catalog: Catalog) -> str:
    found = await conn.fetchval("select 1 from catalog_batch_resolver where catalog_id = $1", catalog.id)
    return "client" if found else "service"


def check_batch(batch: Batch) -> None:
    if not batch.batch_id.isprintable():
        raise BadRequest("batch_id must be printable text")
