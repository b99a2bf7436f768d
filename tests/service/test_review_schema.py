"""Review: expression indexes of declared indexes (indexes/base.py ``index_ident``).

Regression test for a bug found in review: expression index names were unquoted identifiers,
which PostgreSQL folds to lower case, so 'Subject' and 'subject' shared one SQL index.
"""

from __future__ import annotations

import psycopg
import pytest

from catalog_schemas.api import IndexDeclaration
from tests.service.test_review_support import drained_service, new_catalog


@pytest.fixture(scope="module")
def service(database_url):
    with drained_service(database_url) as service:
        yield service


def gin_indexes_on(dsn: str, catalog: str, key: str) -> list[str]:
    """The SQL indexes on the catalog's partition over the JSON value of index ``key``."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select i.indexname from pg_indexes i join catalog c on i.tablename = 'catalog_object_' || c.id "
            "where c.name = %s and i.indexdef like %s", (catalog, f"%(idx -> '{key}'::text)%")).fetchall()
    return [r[0] for r in rows]


def test_index_names_differing_in_case_get_their_own_sql_indexes(service):
    declarations = [IndexDeclaration(name="Subject", type="KeywordIndex"),
                    IndexDeclaration(name="subject", type="KeywordIndex")]
    with service.client() as admin:
        name, _ = new_catalog(admin, indexes=declarations)
        assert len(gin_indexes_on(service.database_url, name, "Subject")) == 1
        assert len(gin_indexes_on(service.database_url, name, "subject")) == 1
        response = admin.patch(f"/catalogs/{name}/schema", json={"remove_indexes": ["subject"]})
        assert response.status_code == 200, response.text
        assert len(gin_indexes_on(service.database_url, name, "Subject")) == 1


def statistics_on(dsn: str, catalog: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select s.stxname from pg_statistic_ext s join pg_class t on t.oid = s.stxrelid "
            "join catalog c on t.relname = 'catalog_object_' || c.id where c.name = %s order by 1",
            (catalog,)).fetchall()
    return [r[0] for r in rows]


def test_date_range_bounds_have_statistics_that_go_with_the_index(service):
    # The planner estimates the effective-date filter from these (indexes/simple.py DateRangeIndex).
    declarations = [IndexDeclaration(name="effectiveRange", type="DateRangeIndex",
                                     since_field="effective", until_field="expires"),
                    IndexDeclaration(name="portal_type", type="FieldIndex")]
    with service.client() as admin:
        name, _ = new_catalog(admin, indexes=declarations)
        found = statistics_on(service.database_url, name)
        assert [s.rsplit("_", 1)[1] for s in found] == ["hi", "lo"]
        assert all("effectiveRange" in s for s in found)
        response = admin.patch(f"/catalogs/{name}/schema", json={"remove_indexes": ["effectiveRange"]})
        assert response.status_code == 200, response.text
        assert statistics_on(service.database_url, name) == []


def test_catalog_rows_stay_uncompressed_up_to_a_page(service):
    # Plone-sized index values (object_provides lists dozens of names) pass the 2 kB default
    # TOAST threshold; compressed, every condition on idx decompressed the row again.
    with service.client() as admin:
        name, _ = new_catalog(admin, indexes=[IndexDeclaration(name="object_provides", type="KeywordIndex")])
        names = [f"plone.app.contenttypes.interfaces.IInterfaceNumber{i}Something" for i in range(60)]
        response = admin.post(f"/catalogs/{name}/batches", json={"batch_id": "b", "entries": [
            {"op": "index", "uid": "doc", "path": "/plone/doc", "values": {"object_provides": names}}]})
        assert response.status_code == 200, response.text
    with psycopg.connect(service.database_url) as conn:
        table = conn.execute("select 'catalog_object_' || id from catalog where name = %s", (name,)).fetchone()[0]
        options = conn.execute("select reloptions from pg_class where relname = %s", (table,)).fetchone()[0]
        assert "toast_tuple_target=8160" in options
        size, compression = conn.execute(
            f"select pg_column_size(idx), pg_column_compression(idx) from {table}").fetchone()
    assert size > 2048 and compression is None
