"""Plone code that reads index objects' data itself (not through searches) gets the same answers
from the connector's index objects as from ZCatalog's, also inside a transaction with pending
changes: the search page's type filter, the Keywords vocabulary (all keywords, and those of a
section), the type control panels' counts, plone.app.uuid and plone.app.multilingual's
numObjects; and the path, text and date range indexes' reads and every index's uniqueValuesFor.
"""

from __future__ import annotations

import re

import pytest
import transaction
from plone import api
from plone.app.uuid.utils import uuidToObject, uuidToPhysicalPath
from plone.registry.interfaces import IRegistry
from Products.CMFCore.indexing import processQueue
from zope.component import getMultiAdapter, getUtility
from zope.interface import providedBy
from zope.schema.interfaces import IVocabularyFactory

from plone_connector.catalog.client import get_client
from tests.connector.sites import CONNECTED, SITES, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "index-data"
INDEXES = ("portal_type", "Subject", "review_state", "Creator")


def index_reads(site) -> dict:
    # ZCatalog's index objects show what the indexing queue has applied so far; the connector's
    # process the queue first, as searches do. Processed here, both show the same state.
    processQueue()
    catalog = site.portal_catalog
    found = {}
    for name in INDEXES:
        index = catalog._catalog.getIndex(name)
        found[name] = {
            "getIndex": list(index.uniqueValues()),
            "withLengths": list(index.uniqueValues(withLengths=True)),
            "Indexes": list(catalog.Indexes[name].uniqueValues()),
            "indexes": list(catalog._catalog.indexes[name].uniqueValues()),
            "uniqueValuesFor": catalog.uniqueValuesFor(name),
            "numObjects": index.numObjects(),
            "indexSize": index.indexSize(),
            "other name": list(index.uniqueValues(name="other")),
            # What code that introspects index objects reads (restapi looks adapters up by them).
            "definition": (index.meta_type, index.getId(), list(index.getIndexSourceNames()),
                           list(index.getIndexQueryNames()), list(index.query_options),
                           index.__class__.__name__, sorted(i.__identifier__ for i in providedBy(index))),
        }
    keywords = getUtility(IVocabularyFactory, "plone.app.vocabularies.Keywords")
    found["Keywords"] = [term.value for term in keywords(site)]
    found["Keywords filtered"] = [term.value for term in keywords(site, query="r")]
    # The keywords of a section (the navigation root) use _apply_index of the path and Subject
    # indexes; the setting is not committed (on_site commits only the tests' own actions).
    registry = getUtility(IRegistry)
    registry["plone.subjects_of_navigation_root"] = True
    found["Keywords of section"] = [term.value for term in keywords(site[ROOT])]
    registry["plone.subjects_of_navigation_root"] = False
    search = getMultiAdapter((site, site.REQUEST), name="search")
    found["search types"] = search.types_list()
    found["type counts"] = dict(catalog.Indexes["portal_type"].uniqueValues(withLengths=True))
    doc = site[ROOT]["tagged"]
    site_path = "/".join(site.getPhysicalPath())
    found["uuid path"] = uuidToPhysicalPath(api.content.get_uuid(doc))[len(site_path):]
    found["uuid object"] = uuidToObject(api.content.get_uuid(doc)).getId()
    found["unknown uuid"] = (uuidToPhysicalPath("no-such-uuid"), uuidToPhysicalPath(None))
    # plone.app.event reads an event's occurrences with getIndexDataForRID(brain.getRID()).
    brain = catalog.unrestrictedSearchResults(path={"query": site_path + f"/{ROOT}/tagged", "depth": 0})[0]
    data = catalog.getIndexDataForRID(brain.getRID())
    found["index data"] = (data["portal_type"], sorted(data["Subject"]))
    found["catalog[rid]"] = catalog._catalog[brain.getRID()].getPath()[len(site_path):]
    return found


# Index types whose values differ between the two sites (dates, uuids, names that carry the
# site's id): their reads are compared by outcome and size.
SITE_SPECIFIC = ("DateIndex", "DateRecurringIndex", "UUIDIndex", "DateRangeIndex")
# The local roles of the users who made each site, generated schema names, random event uids.
SITE_SPECIFIC_NAMES = ("allowedRolesAndUsers", "object_provides", "sync_uid")
# CMFUid's cmf_uid: numbers from a counter of each site that only goes up, given to objects as
# content is saved (the site root too, which keeps its number). Other tests make and remove
# content in one site only, so the values and which objects have one depend on each site's
# history, not on the connector: of these reads, only their kind (list, number, error) compares.
HISTORY_NAMES = ("cmf_uid",)
# Date indexes count distinct minutes (DateIndex) or dates: how many depends on whether a site's
# content was made across a minute boundary, so only the kind of that count compares.
DISTINCT_TIMES = ("DateIndex", "DateRecurringIndex")


def outcome(read, site_id):
    """What ``read()`` answers, as a list (without the site's id: a path component, the site
    root's id), or the type of what it raises."""
    try:
        found = read()
    except Exception as exc:  # what ZCatalog raises is the answer to match
        return ("raises", type(exc).__name__)
    if not isinstance(found, (list, tuple)):
        return found
    return [v for v in found if v != site_id and not (isinstance(v, tuple) and v[0] == site_id)]


def sized(found):
    """Of a site-specific read: whether it gave values (their number depends on the minute each
    site's content was made in) or raised; counts are compared."""
    return "values" if isinstance(found, list) else found


def other_index_reads(site) -> dict:
    """The index types Plone reads less often (path, text, date range; every index's
    uniqueValuesFor), as the ZMI's index list and ZCatalog's API give them."""
    processQueue()
    catalog = site.portal_catalog
    site_id = site.getId()
    return {name: index_type_reads(catalog, name, site_id) for name in catalog.indexes()}


def index_type_reads(catalog, name: str, site_id: str) -> dict:
    index = catalog._catalog.getIndex(name)
    reads = {
        "uniqueValuesFor": outcome(lambda: catalog.uniqueValuesFor(name), site_id),
        "uniqueValues": outcome(lambda: list(index.uniqueValues()), site_id),
        "withLengths": outcome(lambda: list(index.uniqueValues(withLengths=True)), site_id),
        "numObjects": outcome(lambda: index.numObjects(), site_id),
        "indexSize": outcome(lambda: index.indexSize(), site_id),
    }
    if index.meta_type == "ExtendedPathIndex":
        reads["getPhysicalPath"] = outcome(lambda: list(index.uniqueValues(name="getPhysicalPath")), site_id)
    if index.meta_type == "DateRangeIndex":
        for attribute in (index.getSinceField(), index.getUntilField()):
            reads[attribute] = outcome(lambda a=attribute: list(index.uniqueValues(name=a)), site_id)
            reads[f"{attribute} withLengths"] = outcome(
                lambda a=attribute: [n for _, n in index.uniqueValues(name=a, withLengths=True)], site_id)
    if index.meta_type in SITE_SPECIFIC or name in SITE_SPECIFIC_NAMES:
        reads = {key: sized(value) for key, value in reads.items()}
    if index.meta_type in DISTINCT_TIMES and isinstance(reads["indexSize"], int):
        reads["indexSize"] = "number"
    if name in HISTORY_NAMES:
        reads = {key: value if isinstance(value, tuple) else type(value).__name__ for key, value in reads.items()}
    return reads


def build(site):
    root = api.content.create(container=site, type="Folder", id=ROOT, title="Index data")
    api.content.create(container=root, type="Document", id="tagged", title="Tagged",
                       subject=("red", "Ärger", "apple"))
    api.content.create(container=root, type="Document", id="red", title="Red", subject=("red",))
    news = api.content.create(container=root, type="News Item", id="news", title="News", subject=("zebra",))
    api.content.transition(news, "publish")
    event = api.content.create(container=root, type="Event", id="event", title="Event")
    event.setCreators(("editor", "manager"))
    event.reindexObject()


def pending_changes(site):
    """Changes inside the transaction that reads: a new type, new keywords, a removed object."""
    root = site[ROOT]
    api.content.create(container=root, type="Link", id="link", title="Link", subject=("pending", "red"))
    api.content.delete(root["news"])
    root["red"].setSubject(("blue",))
    root["red"].reindexObject()


def set_site_creators(site, creators):
    site.setCreators(creators)
    site.reindexObject(idxs=["Creator"])


@pytest.fixture
def index_content(plone_sites):
    # The two site roots were made by different users; the indexes list the whole site.
    creators = {}
    for name in SITES:
        with on_site(name) as site:
            creators[name] = site.listCreators()
            set_site_creators(site, ("admin",))
            build(site)
    yield
    for name in SITES:
        delete_from(name, ROOT)
        with on_site(name) as site:
            set_site_creators(site, creators[name])


def assert_same(stock: dict, connected: dict, step: str):
    for key in stock:
        assert connected[key] == stock[key], f"{step}: {key}"


def reads_on_both_sites(reads) -> tuple[dict, dict]:
    """``reads(site)`` of each site, committed and inside a transaction with pending changes."""
    committed, pending = {}, {}
    for name in SITES:
        with on_site(name, commit=False) as site:
            committed[name] = reads(site)
        with on_site(name, commit=False) as site:
            pending_changes(site)
            pending[name] = reads(site)
    return committed, pending


def test_index_data_reads_match_zcatalog(index_content):
    committed, pending = reads_on_both_sites(index_reads)
    stock, connected = committed[STOCK], committed[CONNECTED]
    assert_same(stock, connected, "committed")
    # What the test's content must show, so a comparison of two empty answers cannot pass.
    assert {"red", "Ärger", "apple", "zebra"} <= set(stock["Keywords"])
    assert ("News Item", 1) in stock["portal_type"]["withLengths"]
    assert "editor" in stock["Creator"]["getIndex"]
    assert stock["uuid path"] == f"/{ROOT}/tagged"
    assert_same(pending[STOCK], pending[CONNECTED], "pending changes")
    assert stock["index data"] == ("Document", ["apple", "red", "Ärger"])
    assert "pending" in pending[STOCK]["Keywords"] and "zebra" not in pending[STOCK]["Keywords"]
    assert "Link" in pending[STOCK]["search types"] or "Link" in pending[STOCK]["portal_type"]["getIndex"]


def test_other_index_types_answer_as_zcatalog(index_content):
    """Path, text and date range indexes (and every index's uniqueValuesFor): the same values,
    counts and errors as ZCatalog's, committed and with pending changes."""
    committed, pending = reads_on_both_sites(other_index_reads)
    stock = committed[STOCK]
    for step, answers in (("committed", committed), ("pending changes", pending)):
        differing = {name: (reads, answers[CONNECTED][name]) for name, reads in answers[STOCK].items()
                     if answers[CONNECTED][name] != reads}
        assert not differing, f"{step}: {sorted(differing)} {differing}"
    # What ZCatalog answers here, so that two wrong answers cannot agree.
    assert stock["path"]["uniqueValues"][0] is None and ROOT in stock["path"]["uniqueValues"]
    assert stock["path"]["withLengths"] == ("raises", "TypeError")
    assert stock["SearchableText"]["uniqueValuesFor"] == ("raises", "NotImplementedError")
    assert stock["SearchableText"]["numObjects"] > stock["SearchableText"]["indexSize"] > 0
    assert stock["getObjPositionInParent"]["uniqueValuesFor"] == ("raises", "AttributeError")
    assert stock["effectiveRange"]["numObjects"] == stock["path"]["numObjects"] > 0
    assert stock["effectiveRange"]["effective"] == "values"
    assert pending[STOCK]["path"]["numObjects"] == stock["path"]["numObjects"]  # one added, one deleted
    assert "link" in pending[STOCK]["path"]["uniqueValues"] and "news" not in pending[STOCK]["path"]["uniqueValues"]


def test_published_item_has_is_default_page(index_content):
    """An item created and published in one transaction: the publish transition's
    reindexObjectSecurity must not find it before its queued index runs (it did, through the
    position the connector had sent alone, and queued it without the request in its acquisition
    chain, so the is_default_page indexer failed and the entry had no value)."""
    entries = {}
    for name in SITES:
        with on_site(name, commit=False) as site:
            processQueue()
            catalog = site.portal_catalog
            brain = catalog.unrestrictedSearchResults(
                path={"query": "/".join(site.getPhysicalPath()) + f"/{ROOT}/news", "depth": 0})[0]
            entries[name] = bool(catalog.getIndexDataForRID(brain.getRID()).get("is_default_page", "none"))
    assert entries[STOCK] is False
    assert entries[CONNECTED] is False


def test_index_data_of_a_brain_costs_one_request(index_content):
    """getpath of a rid a brain gave needs no walk over the catalog (one request per event in
    plone.app.event's listings would otherwise be one per hundred catalog entries)."""
    client = get_client()
    with on_site(CONNECTED, commit=False) as site:
        catalog = site.portal_catalog
        brains = catalog.unrestrictedSearchResults(portal_type="Document", path="/".join(site.getPhysicalPath()))
        rid = brains[0].getRID()
        before = client.requests_sent
        assert catalog.getpath(rid) == brains[0].getPath()
        assert catalog.getIndexDataForRID(rid)["portal_type"] == "Document"
        assert client.requests_sent - before == 1  # the entry's data; no page of brains


def test_install_upgrade_and_uninstall_set_the_catalog_class(plone_sites):
    """Install makes the moved ``_catalog`` a ServiceCatalog, the upgrade step does so for a site
    installed before, uninstall makes it a plain Catalog again (with its data in the objects)."""
    from Acquisition import aq_base
    from plone.app.testing import SITE_OWNER_NAME, applyProfile
    from plone.testing import zope
    from Products.CMFPlone.factory import addPloneSite
    from Products.GenericSetup.interfaces import IBody
    from Products.GenericSetup.testing import DummySetupEnviron
    from Products.ZCatalog.Catalog import Catalog
    from zope.component.hooks import setSite

    from plone_connector.catalog.indexes import ServiceCatalog
    from plone_connector.catalog.setuphandlers import uninstall_service_catalog

    site_id = "index-data-install"
    with zope.zopeApp() as app:
        addPloneSite(app, site_id, title="Install", extension_ids=("plone.app.contenttypes:default",))
        site = app[site_id]
        setSite(site)
        zope.login(app["acl_users"], SITE_OWNER_NAME)
        api.content.create(container=site, type="Document", id="doc", title="Doc", subject=("kept",))
        applyProfile(site, "plone_connector:default")
        transaction.commit()
        try:
            catalog = site.portal_catalog
            assert type(aq_base(catalog._catalog)) is ServiceCatalog
            assert catalog._catalog.getIndex("Subject").uniqueValues() == ["kept"]
            # The ZMI's index list reads every index's counts (DTML, so through security checks).
            assert "Subject" in catalog.manage_catalogIndexes(catalog, site.REQUEST)
            # catalog.xml export and import (add-ons' profiles) read and set index properties.
            environ = DummySetupEnviron()
            environ._should_purge = False  # as an add-on's profile applies
            xml = getMultiAdapter((catalog, environ), IBody)
            assert re.search(rb'<index name="Subject" meta_type="KeywordIndex">\s*<indexed_attr value="Subject"/>',
                             xml.body)
            xml.body = (b'<object name="portal_catalog"><index name="doc_ids" meta_type="FieldIndex">'
                        b'<indexed_attr value="getId"/></index></object>')
            assert catalog._catalog.getIndex("doc_ids").getIndexSourceNames() == ["getId"]
            catalog.reindexIndex("doc_ids", site.REQUEST)
            assert "doc" in catalog._catalog.getIndex("doc_ids").uniqueValues()

            # A site installed at profile version 1 has a plain Catalog until the upgrade step.
            aq_base(catalog._catalog).__class__ = Catalog
            setup = site.portal_setup
            setup.setLastVersionForProfile("plone_connector:default", "1")
            assert list(site.portal_catalog._catalog.getIndex("Subject").uniqueValues()) == []
            setup.upgradeProfile("plone_connector:default")
            assert type(aq_base(site.portal_catalog._catalog)) is ServiceCatalog
            assert site.portal_catalog._catalog.getIndex("Subject").uniqueValues() == ["kept"]
            transaction.commit()

            uninstall_service_catalog(site)
            transaction.commit()
            catalog = site.portal_catalog
            assert type(aq_base(catalog._catalog)) is Catalog
            processQueue()  # ZCatalog's index objects show the rebuild once the queue is processed
            assert list(catalog._catalog.getIndex("Subject").uniqueValues()) == ["kept"]
        finally:
            setSite(None)
            app.manage_delObjects([site_id])
            transaction.commit()
