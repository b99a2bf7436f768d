"""Plone's standard catalog declarations and a generator of Plone-like content.

Used by ``catalog-service demo`` (and ``serve --demo``) and by the benchmarks: a site ``/plone``
in sections of folders of documents, news items and events, workflow states, sharing, dates, subjects and
searchable text, with the index values a Plone connector would send.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from catalog_schemas.api import CatalogCreate, CatalogSettings, IndexDeclaration
from catalog_schemas.public_values import MISSING, wire_datetime, wire_tuple

I = IndexDeclaration  # noqa: E741 - a table of declarations reads better short

PLONE_INDEXES = [
    I(name="allowedRolesAndUsers", type="KeywordIndex"),
    I(name="Creator", type="FieldIndex"),
    I(name="Date", type="DateIndex"),
    I(name="Description", type="ZCTextIndex", lexicon_id="plone_lexicon"),
    I(name="SearchableText", type="ZCTextIndex", lexicon_id="plone_lexicon"),
    I(name="Subject", type="KeywordIndex"),
    I(name="Title", type="ZCTextIndex", lexicon_id="plone_lexicon"),
    I(name="Type", type="FieldIndex"),
    I(name="UID", type="UUIDIndex"),
    I(name="created", type="DateIndex"),
    I(name="effective", type="DateIndex"),
    I(name="effectiveRange", type="DateRangeIndex", since_field="effective", until_field="expires"),
    I(name="end", type="DateIndex"),
    I(name="exclude_from_nav", type="BooleanIndex"),
    I(name="expires", type="DateIndex"),
    I(name="getId", type="FieldIndex"),
    I(name="getObjPositionInParent", type="GopipIndex"),
    I(name="getRawRelatedItems", type="KeywordIndex"),
    I(name="id", type="FieldIndex"),
    I(name="is_default_page", type="BooleanIndex"),
    I(name="is_folderish", type="BooleanIndex"),
    I(name="meta_type", type="FieldIndex"),
    I(name="modified", type="DateIndex"),
    I(name="object_provides", type="KeywordIndex"),
    I(name="path", type="ExtendedPathIndex"),
    I(name="portal_type", type="FieldIndex"),
    I(name="review_state", type="FieldIndex"),
    I(name="sortable_title", type="FieldIndex"),
    I(name="start", type="DateRecurringIndex"),
    I(name="sync_uid", type="FieldIndex"),
    I(name="total_comments", type="FieldIndex", value_type="number"),
]

PLONE_METADATA = [
    "CreationDate", "Creator", "Date", "Description", "EffectiveDate", "ExpirationDate", "ModificationDate",
    "Subject", "Title", "Type", "UID", "created", "effective", "end", "exclude_from_nav", "expires",
    "getIcon", "getId", "getObjSize", "getRemoteUrl", "id", "is_folderish", "listCreators", "location",
    "meta_type", "mime_type", "modified", "portal_type", "review_state", "start", "total_comments",
]

WORDS = ["plone", "zope", "catalog", "search", "index", "folder", "document", "news", "event", "image", "file", "page", "site", "content", "portal", "python", "postgres", "query", "result", "sort", "order", "path", "depth", "title", "description", "keyword", "subject", "date", "range", "garden", "river", "mountain", "city", "music", "library", "school", "market", "harbour", "museum", "theatre", "station", "bridge", "café", "über", "straße", "naïve", "résumé", "façade", "ångström", "smörgåsbord", "jalapeño", "crème", "brûlée"]
TYPES = [("Document", 0.55), ("News Item", 0.2), ("Event", 0.1), ("File", 0.1), ("Image", 0.05)]
STATES = [("published", 0.6), ("private", 0.3), ("pending", 0.1)]
USERS = ["admin", "editor", "joe", "anna", "li.wei", "søren"]


TYPE_TITLES = {"Document": "Page", "News Item": "News Item", "Event": "Event", "File": "File", "Image": "Image",
               "Folder": "Folder"}
# Plone's metadata for an object without an effective or expiration date (DateTime's floor and
# ceiling that Products.CMFCore's DublinCore gives).
FLOOR = datetime(1969, 12, 31, tzinfo=UTC)
CEILING = datetime(2499, 12, 31, tzinfo=UTC)


def plone_catalog(name: str = "demo", title: str = "Demo site", site: str = "/plone",
                  public_url: str | None = None) -> CatalogCreate:
    return CatalogCreate(id=name, title=title, indexes=PLONE_INDEXES, metadata=PLONE_METADATA,
                         settings=CatalogSettings(site_path=site, public_url=public_url, type_titles=TYPE_TITLES))


def _zope_text_date(dt: datetime | None) -> str:
    """DublinCore's CreationDate() and friends: ISO 8601 with offset, whole seconds, or 'None'."""
    return "None" if dt is None else dt.replace(microsecond=0).isoformat()


def plone_metadata(values: dict, created: datetime, modified: datetime, effective: datetime | None,
                   expires: datetime | None) -> dict:
    """The metadata record a Plone site stores for these index values, in the connector's encoding
    (catalog_schemas.public_values): DateTime values, tuples, Missing.Value."""
    portal_type = values["portal_type"]
    event = "start" in values
    return {
        "CreationDate": _zope_text_date(created), "Creator": values["Creator"],
        "Date": wire_datetime(effective or modified), "Description": values["Description"],
        "EffectiveDate": _zope_text_date(effective), "ExpirationDate": _zope_text_date(expires),
        "ModificationDate": _zope_text_date(modified), "Subject": wire_tuple(values["Subject"]),
        "Title": values["Title"], "Type": TYPE_TITLES.get(portal_type, portal_type), "UID": values["UID"],
        "created": wire_datetime(created), "effective": wire_datetime(effective or FLOOR),
        "end": wire_datetime(datetime.fromisoformat(values["end"])) if event else MISSING,
        "exclude_from_nav": values["exclude_from_nav"], "expires": wire_datetime(expires or CEILING),
        "getIcon": False, "getId": values["getId"], "getObjSize": "0 KB" if values["is_folderish"] else "1 KB",
        "getRemoteUrl": MISSING, "id": values["id"], "is_folderish": values["is_folderish"],
        "listCreators": wire_tuple([values["Creator"]]), "location": "", "meta_type": values["meta_type"],
        "mime_type": "text/plain", "modified": wire_datetime(modified), "portal_type": portal_type,
        "review_state": values["review_state"],
        "start": wire_datetime(datetime.fromisoformat(values["start"]["start"])) if event else MISSING,
        "total_comments": values["total_comments"],
    }


def _pick(rnd: random.Random, table):
    x = rnd.random()
    for value, weight in table:
        x -= weight
        if x <= 0:
            return value
    return table[-1][0]


def _iso(dt: datetime) -> str:
    return dt.isoformat()


def layout(count: int) -> tuple[int, int]:
    """(sections, folders) of a corpus of ``count`` objects: folders of about 100 items each,
    in about sqrt(folders) sections of about sqrt(folders) folders each, so that no folder of the
    tree, the site root included, holds many more than 100 children at any size."""
    folders = max(1, count // 100)
    return max(1, math.isqrt(folders - 1) + 1), folders


def folder_path(number: int, count: int, site: str = "/plone") -> str:
    """The path of folder ``number`` (0 <= number < folders) of a corpus of ``count`` objects."""
    sections, folders = layout(count)
    return f"{site}/section-{number // -(-folders // sections)}/folder-{number}"


def objects(count: int, seed: int = 1, site: str = "/plone") -> Iterator[dict]:
    """``count`` index entries (as JSON-ready dicts): sections of folders of items (see ``layout``)."""
    rnd = random.Random(seed)
    base = datetime(2020, 1, 1, tzinfo=UTC)
    sections, folders = layout(count)
    positions: dict[str, int] = {}
    for i in range(count):
        if i < sections:
            parent, oid, portal_type, folderish = site, f"section-{i}", "Folder", True
        elif i < sections + folders:
            parent, _, oid = folder_path(i - sections, count, site).rpartition("/")
            portal_type, folderish = "Folder", True
        else:
            parent = folder_path(rnd.randrange(folders), count, site)
            portal_type, folderish = _pick(rnd, TYPES), False
            oid = f"{portal_type.lower().replace(' ', '-')}-{i}"
        path = f"{parent}/{oid}"
        position = positions.get(parent, 0)
        positions[parent] = position + 1
        state = "published" if folderish else _pick(rnd, STATES)
        owner = rnd.choice(USERS)
        allowed = ["Anonymous"] if state == "published" else ["Manager", "Site Administrator", "Owner",
                                                              f"user:{owner}", "Reviewer" if state == "pending" else "Editor"]
        created = base + timedelta(minutes=rnd.randrange(0, 60 * 24 * 365 * 5))
        modified = created + timedelta(minutes=rnd.randrange(0, 60 * 24 * 90))
        effective = created if state == "published" else None
        expires = (created + timedelta(days=rnd.randrange(30, 900))) if rnd.random() < 0.05 else None
        words = [rnd.choice(WORDS) for _ in range(rnd.randrange(3, 40))]
        title = " ".join(words[:rnd.randrange(1, 5)]).capitalize() + f" {i}"
        subjects = sorted({rnd.choice(WORDS[:20]) for _ in range(rnd.randrange(0, 4))})
        uid = f"{seed:04x}{i:028x}"
        values = {
            "allowedRolesAndUsers": allowed,
            "Creator": owner,
            "Date": _iso(effective or modified),
            "Description": " ".join(words[:10]),
            "SearchableText": f"{oid} {title} " + " ".join(words),
            "Subject": subjects,
            "Title": title,
            "Type": portal_type,
            "UID": uid,
            "created": _iso(created),
            "effective": _iso(effective) if effective else None,
            "effectiveRange": [_iso(effective) if effective else None, _iso(expires) if expires else None],
            "exclude_from_nav": False,
            "expires": _iso(expires) if expires else None,
            "getId": oid,
            "getObjPositionInParent": position,
            "id": oid,
            "is_default_page": False,
            "is_folderish": folderish,
            "meta_type": "Dexterity Container" if folderish else "Dexterity Item",
            "modified": _iso(modified),
            "object_provides": ["plone.dexterity.interfaces.IDexterityContent"]
            + (["plone.dexterity.interfaces.IDexterityContainer"] if folderish else []),
            "path": path,
            "portal_type": portal_type,
            "review_state": state,
            "sortable_title": title.lower()[:40],
            "total_comments": rnd.randrange(0, 5),
        }
        if portal_type == "Event":
            start = created + timedelta(days=rnd.randrange(0, 400))
            weekly = rnd.random() < 0.3
            values["start"] = {"start": _iso(start), "recurrence": "RRULE:FREQ=WEEKLY;COUNT=10" if weekly else None}
            values["end"] = _iso(start + timedelta(hours=2))
        metadata = plone_metadata(values, created, modified, effective, expires)
        yield {"op": "index", "uid": uid, "path": path, "values": values, "metadata": metadata, "version": 1}
