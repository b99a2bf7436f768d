"""A whole schema update that changes only where the client reads an index's values (its
``indexed_attrs``, a text index's lexicon, a date range's fields) keeps the values, as ZCatalog
keeps an index's data when its properties change; a change of what the values are (the index's
type or value type) replaces the index and drops them. On a real PostgreSQL, on the store."""

from __future__ import annotations

from catalog_schemas.api import IndexDeclaration, SchemaUpdate
from tests.service.test_schema_additions_and_versioned_clear import _catalog, _commit, _index, db, run  # noqa: F401

D = IndexDeclaration


async def _ranked(conn, registry, *entries):
    """A catalog with a portal_type and a rank FieldIndex, holding ``entries``."""
    catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"), D(name="rank", type="FieldIndex"))
    await _commit(conn, catalog, list(entries))
    return catalog


async def _redeclare(conn, registry, catalog, remove_indexes=(), **rank):
    """The whole update declaring rank with ``rank``'s fields (and removing ``remove_indexes``)."""
    update = SchemaUpdate(indexes=[D(name="portal_type", type="FieldIndex"), D(name="rank", type="FieldIndex", **rank)],
                          remove_indexes=list(remove_indexes))
    return await registry.update_schema(conn, catalog, update)


async def _rank_values(conn, catalog) -> dict[str, str | None]:
    return {r["uid"]: r["rank"] for r in await conn.fetch(f"select uid, idx->>'rank' as rank from {catalog.table}")}


def test_a_changed_indexed_attrs_keeps_the_values(db):  # noqa: F811
    async def work(conn, registry):
        catalog = await _ranked(conn, registry, _index("a", 1, rank="3"), _index("b", 2, rank="4"))
        updated = await _redeclare(conn, registry, catalog, indexed_attrs=["getRank"])
        assert updated.schema.indexes["rank"].decl.indexed_attrs == ["getRank"]
        assert await _rank_values(conn, updated) == {"a": "3", "b": "4"}
        # Still queryable through its SQL index and declaration.
        result = await _commit(conn, updated, [_index("c", 3, rank="5")])
        assert result.applied == 1

    run(db, work)


def test_a_changed_value_type_replaces_the_index(db):  # noqa: F811
    async def work(conn, registry):
        catalog = await _ranked(conn, registry, _index("a", 1, rank="3"))
        updated = await _redeclare(conn, registry, catalog, value_type="number")
        assert updated.schema.indexes["rank"].decl.value_type == "number"
        assert await _rank_values(conn, updated) == {"a": None}

    run(db, work)


def test_a_removed_and_declared_index_is_replaced_even_if_only_indexed_attrs_changed(db):  # noqa: F811
    # The connector sends an index it replaces (cleared, removed and added again) as removed and
    # declared: that drops the values, whatever changed.
    async def work(conn, registry):
        catalog = await _ranked(conn, registry, _index("a", 1, rank="3"))
        updated = await _redeclare(conn, registry, catalog, remove_indexes=["rank"], indexed_attrs=["getRank"])
        assert "rank" in updated.schema.indexes
        assert await _rank_values(conn, updated) == {"a": None}

    run(db, work)
