"""A real Products.ZCatalog, built from the same index declarations the service gets.

The differential tests send the same objects and queries here and to the service; whatever this
catalog answers is, by definition, the right answer. Nothing in this module interprets a query:
it only builds the catalog and reads results back.

Index types map one to one onto ZCatalog's own classes (``FieldIndex``, ``KeywordIndex``,
``BooleanIndex``, ``UUIDIndex``, ``DateIndex``, ``DateRangeIndex``, Products.ExtendedPathIndex,
``ZCTextIndex`` with Plone's lexicon pipeline, Products.DateRecurringIndex), except ``GopipIndex``:
Plone's GopipIndex (plone.folder.nogopip) asks each result's container for the
position, which needs a Plone site. The oracle's ``GopipStandIn`` keeps the position as the
integer attribute ``getObjPositionInParent`` and otherwise behaves as GopipIndex does: it
answers no query (``_apply_index`` returns None, which empties any query naming it), claims a
huge length (which steers ZCatalog's choice of sort algorithm exactly as the real one does), and
sorts by position. That gives the same answers as long as the positions given are the ones the
containers would report.

The catalog lives at ``/plone/portal_catalog`` as in a Plone site: ExtendedPathIndex strips the
part of a query path it shares with its own physical path, which changes ``depth`` > 1 and
``navtree`` answers.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

# Importing the module registers "Unicode Whitespace splitter" and "Unicode Ignoring Accents Case
# Normalizer" with ZCTextIndex's element factory, as Plone's start-up does.
import Products.CMFPlone.UnicodeSplitter  # noqa: F401
import pytest
from OFS.Application import Application
from OFS.Folder import Folder
from OFS.SimpleItem import SimpleItem
from Products.DateRecurringIndex.index import DateRecurringIndex
from Products.ExtendedPathIndex.ExtendedPathIndex import ExtendedPathIndex
from Products.PluginIndexes.BooleanIndex.BooleanIndex import BooleanIndex
from Products.PluginIndexes.DateIndex.DateIndex import DateIndex
from Products.PluginIndexes.DateRangeIndex.DateRangeIndex import DateRangeIndex
from Products.PluginIndexes.FieldIndex.FieldIndex import FieldIndex
from Products.PluginIndexes.interfaces import IPluggableIndex, ISortIndex
from Products.PluginIndexes.KeywordIndex.KeywordIndex import KeywordIndex
from Products.PluginIndexes.PathIndex.PathIndex import PathIndex
from Products.PluginIndexes.UUIDIndex.UUIDIndex import UUIDIndex
from Products.ZCatalog.plan import PriorityMap
from Products.ZCatalog.ZCatalog import ZCatalog
from Products.ZCTextIndex.PipelineFactory import element_factory
from Products.ZCTextIndex.ZCTextIndex import PLexicon, ZCTextIndex
from zope.interface import implementer

from catalog_schemas.api import IndexDeclaration

LEXICON_ID = "plone_lexicon"
# Plone's catalog.xml pipeline for plone_lexicon.
LEXICON_PIPELINE = (
    ("Word Splitter", "Unicode Whitespace splitter"),
    ("Case Normalizer", "Unicode Ignoring Accents Case Normalizer"),
)


def recurrence_attrs(index_name: str) -> tuple[str, str]:
    """The attribute names a DateRecurringIndex reads its rule and its until date from."""
    return f"{index_name}_recurrence", f"{index_name}_recurrence_until"


@dataclass
class CatalogObject:
    """What gets catalogued: a uid, a physical path and the indexed attributes.

    ``attrs`` maps attribute names to Python values as Plone's indexers return them (``DateTime``,
    ``str``, lists, ``bool``, ``int``, ``None``). A name missing from ``attrs`` is an attribute
    the object does not have (ZCatalog then leaves it out of that index).
    """

    uid: str
    path: str
    attrs: dict[str, Any] = field(default_factory=dict)


class _Content:
    """A bare content object: attribute access and a physical path, nothing else."""

    def __init__(self, obj: CatalogObject):
        self.__dict__.update(obj.attrs)
        self._physical_path = tuple(obj.path.split("/"))

    def getPhysicalPath(self):
        return self._physical_path


class OracleError(Exception):
    """ZCatalog raised for a query; ``original`` is what it raised."""

    def __init__(self, original: BaseException):
        super().__init__(f"{type(original).__name__}: {original}")
        self.original = original


@dataclass
class OracleResult:
    """What ZCatalog returned for one query."""

    uids: list[str]  # the returned sequence, in ZCatalog's order
    actual_result_count: int  # what Plone shows as the number of results
    scores: list[float] | None = None  # text relevance, when ZCatalog ranked by score


@implementer(IPluggableIndex, ISortIndex)
class GopipStandIn(SimpleItem):
    """Plone's GopipIndex with the position read from an attribute instead of the container."""

    meta_type = "GopipIndex"

    def __init__(self, id):
        self.id = id
        self._positions = FieldIndex(id)

    def getId(self):
        return self.id

    def __len__(self):
        # What plone.folder's GopipIndex claims; ZCatalog picks its sort algorithm from it.
        return 2**31 - 1

    def index_object(self, documentId, obj, threshold=None):
        return self._positions.index_object(documentId, obj, threshold)

    def unindex_object(self, documentId):
        self._positions.unindex_object(documentId)

    def _apply_index(self, request, resultset=None):
        return None

    def documentToKeyMap(self):
        return self._positions.documentToKeyMap()

    def getEntryForObject(self, documentId, default=None):
        return self._positions.getEntryForObject(documentId, default)

    def getIndexSourceNames(self):
        return [self.id]

    def numObjects(self):
        return 0

    def clear(self):
        self._positions.clear()


def _make_index(decl: IndexDeclaration, catalog: ZCatalog):
    name = decl.name
    attrs = decl.indexed_attrs or None
    extra = types.SimpleNamespace(indexed_attrs=",".join(attrs) if attrs else None)
    kind = decl.type
    if kind == "FieldIndex":
        return FieldIndex(name, extra=extra if attrs else None)
    if kind == "GopipIndex":
        return GopipStandIn(name)
    if kind == "KeywordIndex":
        return KeywordIndex(name, extra=extra if attrs else None)
    if kind == "BooleanIndex":
        return BooleanIndex(name, extra=extra if attrs else None)
    if kind == "UUIDIndex":
        return UUIDIndex(name, extra=extra if attrs else None)
    if kind == "DateIndex":
        index = DateIndex(name, extra=extra if attrs else None)
        index.index_naive_time_as_local = decl.index_naive_time_as_local
        return index
    if kind == "DateRangeIndex":
        return DateRangeIndex(
            name,
            since_field=decl.since_field,
            until_field=decl.until_field,
            precision_value=decl.precision_value,
        )
    if kind == "ExtendedPathIndex":
        return ExtendedPathIndex(name, extra={"indexed_attrs": attrs} if attrs else None)
    if kind == "PathIndex":
        return PathIndex(name)
    if kind == "ZCTextIndex":
        zc_extra = types.SimpleNamespace(
            doc_attr=",".join(attrs) if attrs else name,
            lexicon_id=decl.lexicon_id or LEXICON_ID,
            index_type=decl.index_type,
        )
        return ZCTextIndex(name, extra=zc_extra, caller=catalog)
    if kind == "DateRecurringIndex":
        recurdef, until = recurrence_attrs(name)
        return DateRecurringIndex(name, extra=types.SimpleNamespace(recurdef=recurdef, until=until))
    raise ValueError(f"index type {kind!r} has no oracle")


class ZCatalogOracle:
    """A standalone Products.ZCatalog with the given indexes and metadata columns."""

    def __init__(self, indexes: Iterable[IndexDeclaration], metadata: Iterable[str] = ()):
        app = Application()
        app._setObject("plone", Folder("plone"))
        app.plone._setObject("portal_catalog", ZCatalog("portal_catalog"))
        self.catalog = app.plone.portal_catalog
        lexicon = PLexicon(
            LEXICON_ID,
            "",
            *(element_factory.instantiate(group, name) for group, name in LEXICON_PIPELINE),
        )
        self.catalog._setObject(LEXICON_ID, lexicon)
        self.declarations = {decl.name: decl for decl in indexes}
        for decl in self.declarations.values():
            self.catalog.addIndex(decl.name, _make_index(decl, self.catalog))
        for column in metadata:
            self.catalog.addColumn(column)
        # ZCatalog keys objects by path; the tests speak of uids.
        self._path_by_uid: dict[str, str] = {}
        self._uid_by_path: dict[str, str] = {}

    def index(self, obj: CatalogObject) -> None:
        old_path = self._path_by_uid.get(obj.uid)
        if old_path is not None and old_path != obj.path:
            self.unindex(obj.uid)
        self.catalog.catalog_object(_Content(obj), uid=obj.path)
        self._path_by_uid[obj.uid] = obj.path
        self._uid_by_path[obj.path] = obj.uid

    def unindex(self, uid: str) -> None:
        path = self._path_by_uid.pop(uid, None)
        if path is None:
            return
        self.catalog.uncatalog_object(path)
        del self._uid_by_path[path]

    def clear(self) -> None:
        self.catalog.manage_catalogClear()
        self._path_by_uid.clear()
        self._uid_by_path.clear()

    def __len__(self) -> int:
        return len(self._path_by_uid)

    def rid_of(self, uid: str) -> int:
        return self.catalog._catalog.uids[self._path_by_uid[uid]]

    def run(self, query: dict[str, Any]) -> OracleResult:
        """Run ``query`` (with its sort and batch keys) and return what ZCatalog returned.

        Raises ``OracleError`` when ZCatalog raises.
        """
        # ZCatalog learns an index order from queries slower than 0.1 s (plan.PriorityMap), so on a
        # loaded machine the order, and with it which invalid index raises first, would depend on
        # timing. The service reproduces the order of an unlearned plan: forget what was learned.
        PriorityMap.clear()
        try:
            brains = self.catalog.searchResults(dict(query))
            uids = [self._uid_by_path[brain.getPath()] for brain in brains]
            scores = None
            if brains and getattr(brains[0], "data_record_score_", None) is not None:
                scores = [brain.data_record_score_ for brain in brains]
            return OracleResult(uids, brains.actual_result_count, scores)
        except Exception as exc:  # anything ZCatalog raises is the expected behaviour
            raise OracleError(exc) from exc

    def search(self, query: dict[str, Any]) -> list[str]:
        """The uids ZCatalog returns for ``query``, in ZCatalog's order."""
        return self.run(query).uids

    def count(self, query: dict[str, Any]) -> int:
        """ZCatalog's ``actual_result_count`` for ``query`` (what Plone shows as the total)."""
        return self.run(query).actual_result_count

    def sort_key(self, uid: str, sort_on: list[str]) -> tuple:
        """The key ZCatalog sorts ``uid`` by (``MISSING`` where an index has no value for it)."""
        rid = self.rid_of(uid)
        key = []
        for name in sort_on:
            key_map = self.catalog._catalog.getIndex(name).documentToKeyMap()
            key.append(key_map.get(rid, MISSING) if hasattr(key_map, "get") else key_map[rid])
        return tuple(key)

    def outcomes(self, query: dict[str, Any]) -> list[OracleResult | OracleError]:
        """Every answer ZCatalog gives for ``query``, depending on which sort algorithm it picks.

        ZCatalog chooses how to sort from result and index sizes, and the algorithms differ at
        the edges: iterating the sort index keeps results that lack a secondary sort key (and
        does not subtract results lacking the primary key from ``actual_result_count``; with
        mixed sort orders it raises IndexError), iterating the result set drops them. Both are
        what ZCatalog answers for this query in some catalog, so both are accepted. A huge
        ``sort_limit`` forces the result-set algorithm without changing the page.
        """
        answers: list[OracleResult | OracleError] = []
        variants = [query]
        # Not with b_start: a sort_limit would make ZCatalog honour a b_start it otherwise ignores.
        unpaged = all(query.get(key) is None for key in PAGING_KEYS)
        if sort_names(query) and unpaged:
            variants.append({**query, "sort_limit": 10**9})
        for variant in variants:
            try:
                answers.append(self.run(variant))
            except OracleError as exc:
                answers.append(exc)
        return answers


class _Missing:
    def __repr__(self):
        return "MISSING"

    def __lt__(self, other):
        return False


MISSING = _Missing()
PAGING_KEYS = ("b_start", "b_size", "sort_limit")


def sort_names(query: dict[str, Any]) -> list[str]:
    """The sort indexes a query names, as ZCatalog reads ``sort_on``."""
    sort_on = query.get("sort_on")
    if sort_on is None:
        return []
    if isinstance(sort_on, str):
        return [sort_on]
    return list(sort_on)


def has_unknown_keys(query: dict[str, Any], index_names: Iterable[str]) -> bool:
    """True when the query names something that is neither an index nor a sort/batch key.

    ZCatalog silently ignores such keys; the issue allows the service a clear 4xx instead.
    """
    allowed = set(index_names) | {"sort_on", "sort_order", "sort_limit", "b_start", "b_size"}
    return any(key not in allowed for key in query)


def compare(
    oracle: ZCatalogOracle,
    query: dict[str, Any],
    status: int,
    body: Any,
    paths: dict[str, str],
) -> str | None:
    """Compare one service answer with ZCatalog's; ``None`` if they agree, else what differs.

    ``paths`` maps uid to path for every catalogued object. What "agree" means:

    - ZCatalog raises: the service answers 4xx.
    - Otherwise the service answers 200 and ``items_total`` is ZCatalog's
      ``actual_result_count`` (what Plone shows as the number of results).
    - Sorted queries: the sequence of sort keys of the returned page equals ZCatalog's. Within
      equal keys ZCatalog's order is its record-id order, which means nothing, so only the key
      sequence is compared, and every returned uid must be one ZCatalog finds with that key.
    - Text queries without ``sort_on``: the same, with ZCatalog's relevance score as the key.
    - Unsorted queries: the same set of uids; for a page of an unsorted result (``b_size`` or
      ``sort_limit``), the same number of uids, all from ZCatalog's full result.
    """
    outcomes = oracle.outcomes(query)
    problems = []
    for outcome in outcomes:
        problem = _compare_one(oracle, query, outcome, status, body, paths)
        if problem is None:
            return None
        problems.append(problem)
    if 400 <= status < 500 and has_unknown_keys(query, oracle.declarations):
        return None
    if status == 200 and _is_proper_page(oracle, query, body):
        return None
    return " | or | ".join(problems)


def _is_proper_page(oracle, query, body) -> bool:
    """Whether the service's page is the right slice of ZCatalog's whole sorted result.

    ZCatalog pages from the end of a sorted result (``b_start`` past half of it) by reversing
    the sort, and computes that page with a length that counts results lacking the sort key,
    which it then drops: near the end its pages are shifted (Catalog.sortResults,
    ``switched_reverse``). The service slices the sorted result itself; that is accepted.
    """
    names = sort_names(query)
    size = query.get("b_size")
    if not names or not size:
        return False
    unpaged = {key: value for key, value in query.items() if key not in PAGING_KEYS}
    try:
        whole = oracle.run({**unpaged, "sort_limit": 10**9})
    except OracleError:
        return False
    if body.get("items_total") != len(whole.uids):
        return False
    start = int(query.get("b_start") or 0)
    want = [oracle.sort_key(uid, names) for uid in whole.uids[start:start + int(size)]]
    got_uids = [item.get("uid") for item in body.get("items", [])]
    if not set(got_uids) <= set(whole.uids):
        return False
    return want == [oracle.sort_key(uid, names) for uid in got_uids]


def _compare_one(oracle, query, outcome, status, body, paths) -> str | None:
    if isinstance(outcome, OracleError):
        if 400 <= status < 500:
            return None
        return f"ZCatalog raises {outcome}, service answered {status}: {_short(body)}"
    if status != 200:
        return f"ZCatalog finds {outcome.uids} (total {outcome.actual_result_count}), service answered {status}: {_short(body)}"
    items = body.get("items", [])
    got = [item.get("uid") for item in items]
    for item in items:
        if item.get("uid") in paths and item.get("path") != paths[item["uid"]]:
            return f"item {item.get('uid')} has path {item.get('path')!r}, not {paths[item['uid']]!r}"
    if len(set(got)) != len(got):
        return f"duplicate uids in the answer: {got}"
    totals = {outcome.actual_result_count}
    if sort_names(query):
        # ZCatalog counts results lacking a sort key in actual_result_count on some code paths
        # (iterating the sort index, a page past the end) and not on others.
        unpaged = {key: value for key, value in query.items() if key not in PAGING_KEYS}
        totals.add(len(_full(oracle, {**unpaged, "sort_limit": 10**9}, query, outcome).uids))
    if body.get("items_total") not in totals:
        return (
            f"items_total {body.get('items_total')} not in ZCatalog's actual_result_count "
            f"{sorted(totals)} (ZCatalog returned {outcome.uids}, service {got})"
        )
    unpaged = {key: value for key, value in query.items() if key not in PAGING_KEYS}
    names = sort_names(query)
    if names:
        full = _full(oracle, unpaged, query, outcome)
        if not set(got) <= set(full.uids) or len(got) != len(outcome.uids):
            return f"ZCatalog returns {outcome.uids}, service {got}"
        if any(oracle.catalog._catalog.getIndex(n).meta_type == "KeywordIndex" for n in names):
            # ZCatalog orders by keyword lists in set order (it changes between processes); the
            # service by the sorted lists (docs/decisions/0003): the same objects, any order.
            if unpaged == query and set(got) != set(outcome.uids):
                return f"ZCatalog returns {outcome.uids}, service {got}"
            return None
        want_keys = [oracle.sort_key(uid, names) for uid in outcome.uids]
        got_keys = [oracle.sort_key(uid, names) for uid in got]
        if want_keys != got_keys:
            return f"sort keys differ: ZCatalog {want_keys}, service {got_keys}"
        return None
    if outcome.scores is not None:
        full = _full(oracle, unpaged, query, outcome)
        score_of = dict(zip(full.uids, full.scores or (), strict=False))
        if not set(got) <= set(full.uids) or len(got) != len(outcome.uids):
            return f"ZCatalog returns {outcome.uids}, service {got}"
        want = [score_of[uid] for uid in outcome.uids]
        have = [score_of[uid] for uid in got]
        if want != have:
            return f"relevance order differs: ZCatalog scores {want}, service order has {have}"
        return None
    if any(key in query for key in ("b_size", "sort_limit")):
        full = _full(oracle, unpaged, query, outcome)
        if not set(got) <= set(full.uids) or len(got) != len(outcome.uids):
            return f"page of an unsorted result: ZCatalog {outcome.uids} of {full.uids}, service {got}"
        return None
    if sorted(got) != sorted(outcome.uids):
        return f"ZCatalog finds {sorted(outcome.uids)}, service {sorted(got)}"
    return None


def _full(oracle, unpaged, query, outcome) -> OracleResult:
    """ZCatalog's whole result for the query without its page; the page itself if that raises."""
    if unpaged == query:
        return outcome
    try:
        return oracle.run(unpaged)
    except OracleError:
        return outcome


def _short(body: Any) -> str:
    text = repr(body)
    return text if len(text) < 300 else text[:300] + "..."


# --- the service side ------------------------------------------------------------------------


class ServiceCatalog:
    """One catalog in the running service, loaded and queried over HTTP as the connector would.

    Queries run unrestricted (admin token, ``X-Catalog-Unrestricted: 1``) so that security and
    effective-date filters, which ZCatalog itself does not add, stay out of the comparison.
    """

    def __init__(self, client, catalog_id: str, indexes, metadata):
        self.client = client
        self.id = catalog_id
        response = client.post(
            "/catalogs",
            json={
                "id": catalog_id,
                "indexes": [decl.model_dump(exclude_defaults=True) for decl in indexes],
                "metadata": list(metadata),
            },
        )
        if response.status_code != 201:
            raise AssertionError(f"creating catalog {catalog_id}: {response.status_code} {response.text}")
        self._batches = 0

    def load(self, entries: list[dict[str, Any]]) -> None:
        """Replace the catalog's content with ``entries`` in one batch."""
        self._batches += 1
        response = self.client.post(
            f"/catalogs/{self.id}/batches",
            json={"batch_id": f"{self.id}-{self._batches}", "entries": entries, "clear": True},
        )
        if response.status_code >= 300:
            raise AssertionError(f"indexing batch: {response.status_code} {response.text}")

    def query(self, query: dict[str, Any], batch_ids: list[str] = ()) -> tuple[int, Any]:
        """Run ``query``; with ``batch_ids``, over the catalog as those staged batches leave it."""
        response = self.client.post(
            f"/catalogs/{self.id}/query",
            json={"query": query, "batch_ids": list(batch_ids)},
            headers={"X-Catalog-Unrestricted": "1"},
        )
        try:
            body = response.json()
        except ValueError:
            body = response.text
        return response.status_code, body

    def drop(self) -> None:
        self.client.delete(f"/catalogs/{self.id}")


@pytest.fixture(scope="module", name="service_client")
def service_client_fixture(live_service):
    """An HTTP client for the live service (tests/conftest.py's ``live_service``)."""
    live = live_service
    headers = {"Authorization": f"Bearer {live.admin_token}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=60) as client:
        yield client
