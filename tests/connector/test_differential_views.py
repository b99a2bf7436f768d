"""What Plone shows, compared between a stock ZCatalog site and a connector site.

test_differential_plone.py compares catalog queries; this module compares what Plone builds from
them, in one content tree (nested folders, private and published items, exclude_from_nav, an
expired and a not yet effective item, a default page, a navigation root, events, a link, a file,
a related item) given to both sites with the same UIDs and dates:

- breadcrumbs, the global navigation, the navigation portlet, @@sitemap, folder listings,
  Collection pages, event listings and the search page, rendered through the publisher (the test
  browser), anonymous and as several users;
- every operation of plone.app.querystring's registry through its QueryBuilder (the code a
  Collection runs), for several users;
- plone.restapi's @search, @querystring-search, @navigation, @contextnavigation and
  @breadcrumbs through the publisher, anonymous and authenticated;
- a group with a local Reader role on a private folder: its members (also through a nested group)
  see the same on both sites, a non-member sees neither;
- the same pages and collections again after reorders, moves, a rename and a delete.

Dates are set relative to the time the tree is built and never come near the moment a query is
asked (see ``stable_day``), so the sites answer the same whatever the clock says.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
import time
import uuid
from urllib.parse import unquote, urlencode

import lxml.html
import pytest
import transaction
from DateTime import DateTime
from plone import api
from plone.app.querystring.querybuilder import QueryBuilder
from plone.base.interfaces import INavigationRoot
from plone.namedfile.file import NamedBlobFile
from plone.registry.interfaces import IRegistry
from plone.testing import zope
from plone.testing.zope import Browser
from plone.uuid.interfaces import IMutableUUID
from zope.component import getUtility
from zope.interface import alsoProvides

from tests.connector.sites import CONNECTED, PASSWORD, SITES, STOCK, delete_from, on_site
from tests.connector.test_differential_plone import on_both, relative

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "views"
OP = "plone.app.querystring.operation."
# Operations registered in plone.app.querystring whose parser function does not exist in the
# installed release: a Collection using them fails on a stock site, and must fail alike here.
BROKEN_OPERATIONS = {OP + "path.isWithin", OP + "path.isWithinRelative"}

# user id: (global roles, groups). "b-inner" is itself a member of "b-readers".
EXTRA_USERS = {
    "reader": (["Member"], ["b-readers"]),
    "nested-reader": (["Member"], ["b-inner"]),
    "outsider": (["Member"], []),
}
GROUPS = {"b-readers": [], "b-inner": ["b-readers"]}
PAGE_VIEWERS = (None, "editor", "reader", "outsider", "manager")
QUERY_VIEWERS = (None, "member", "editor", "reader", "nested-reader", "outsider", "manager")
API_VIEWERS = (None, "editor", "reader", "outsider")

# relative path: (portal_type, title, state, options). Titles are unique: every ordered
# comparison sorts on them, and ZCatalog's order among equal keys means nothing.
# Options: created/modified/effective/expires are day offsets from the build time; creator; subject;
# exclude (exclude_from_nav); start (day offset, events).
TREE = {
    "": ("Folder", "Views root", "published", {"created": -40, "subject": ("red",)}),
    "section-a": ("Folder", "Section A", "published", {"created": -30}),
    "section-a/sub": ("Folder", "Sub A", "published", {"created": -20, "modified": 3}),
    "section-a/sub/subsub": ("Folder", "Sub sub A", "published", {"created": -12}),
    "section-a/sub/subsub/deep-doc": ("Document", "Deep doc alpha", "published",
                                      {"created": -9, "subject": ("blue", "Zürich"),
                                       "description": "gamma delta"}),
    "section-a/sub/draft": ("Document", "Draft in sub", "private",
                            {"created": -1, "creator": "editor", "subject": ("red", "blue")}),
    "section-a/hidden": ("Folder", "Hidden folder", "published", {"created": -8, "exclude": True}),
    "section-a/hidden/inside-hidden": ("Document", "Inside hidden alpha", "published", {"created": -7}),
    "section-a/hidden-doc": ("Document", "Hidden doc", "published", {"created": -6, "exclude": True}),
    "section-a/expired-news": ("News Item", "Expired news", "published",
                               {"created": -5, "expires": -1, "subject": ("red",)}),
    # Expired, but its owner may see inactive content where it is (CatalogTool.allow_inactive).
    "section-a/editors-expired": ("Document", "Editors expired", "published",
                                  {"created": -6, "expires": -2, "creator": "editor"}),
    "section-a/future-doc": ("Document", "Future doc", "published",
                             {"created": -4, "effective": 5, "subject": ("green",)}),
    "section-b": ("Folder", "Section B", "private", {"created": -25}),
    "section-b/secret": ("Document", "Secret B alpha", "private", {"created": -3, "subject": ("red",)}),
    "section-b/open-in-b": ("Document", "Open in B", "published", {"created": -2}),
    # Local roles not inherited: the group's Reader role on section-b stops here.
    "section-b/blocked": ("Folder", "Blocked B", "private", {"created": -2, "block": True}),
    "section-b/blocked/inner": ("Document", "Inner blocked alpha", "private", {"created": -2}),
    "section-c": ("Folder", "Section C", "published", {"created": -15}),
    "section-c/index-c": ("Document", "Index C", "published", {"created": -14}),
    "section-c/other-c": ("Document", "Other C", "published", {"created": -13, "expires": 3}),
    "subsite": ("Folder", "Subsite", "published", {"created": -35}),
    "subsite/sub-page": ("Document", "Subsite page", "published", {"created": -11}),
    "subsite/sub-folder": ("Folder", "Subsite folder", "published", {"created": -10}),
    "subsite/sub-folder/leaf": ("Document", "Subsite leaf", "private", {"created": 0}),
    "event-1": ("Event", "Event one", "published", {"created": -3, "start": 2}),
    "event-2": ("Event", "Event two", "private", {"created": -6, "start": -3}),
    "event-3": ("Event", "Event three", "published", {"created": 0, "start": 0}),
    "link-1": ("Link", "Link one", "published", {"created": -2}),
    "file-1": ("File", "File one", None, {"created": -1}),
    "editors-page": ("Document", "Editors page", "published", {"created": 0, "creator": "editor",
                                                               "subject": ("green", "red")}),
    # Three hours after the other events' time of day: occurrences never tie with them on start.
    "event-daily": ("Event", "Event daily", "published", {"created": -8, "start": -2 + 3 / 24, "fields": {
        "recurrence": "RRULE:FREQ=DAILY;COUNT=5"}}),
    # Titles whose order depends on how text is compared: punctuation, accents, digits, scripts.
    "sorting": ("Folder", "Sorting", "published", {"created": -16}),
    **{f"sorting/s{number}": ("Document", title, "published", {"created": -16})
       for number, title in enumerate(("a b", "a-b", "a_b", "ab", "A.b", "Ärger", "arg", "Zebra", "10 items",
                                       "9 items", "Ω omega", "日本", "[bracket]", "~tilde", "é"))},
    # More children than the connector fetches in one page (100), every third one private.
    "many": ("Folder", "Many", "published", {"created": -17}),
    **{f"many/m{number:03}": ("Document", f"Many {number:03}", "private" if number % 3 == 0 else "published",
                              {"created": -17})
       for number in range(110)},
    # Collections as an editor makes them: a batched listing with a limit, and a table.
    "collection-1": ("Collection", "Collection recent", "published", {"created": -1, "fields": {
        "query": [{"i": "path", "o": "plone.app.querystring.operation.string.relativePath", "v": "..::-1"},
                  {"i": "portal_type", "o": "plone.app.querystring.operation.selection.any",
                   "v": ["Document", "News Item", "Event"]}],
        "sort_on": "effective", "sort_reversed": True, "limit": 8, "item_count": 3}}),
    "section-a/collection-2": ("Collection", "Collection red", "published", {"created": -1, "fields": {
        "query": [{"i": "path", "o": "plone.app.querystring.operation.string.absolutePath", "v": f"/{ROOT}"},
                  {"i": "Subject", "o": "plone.app.querystring.operation.selection.any", "v": ["red"]}],
        "sort_on": "sortable_title", "customViewFields": ["Title", "Creator", "review_state", "Type"]},
        "layout": "tabular_view"}),
}
DATE_INDEXES = ["created", "modified", "effective", "expires", "effectiveRange", "Date", "start", "end"]


def stable_day() -> None:
    """Wait out the last minutes of a day: the date operations compare with today's bounds, and
    the two sites must be asked on the same day."""
    now = datetime.datetime.now()
    midnight = (now + datetime.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if midnight - now < datetime.timedelta(minutes=6):
        time.sleep((midnight - now).total_seconds() + 60)


def fixed_uid(rel: str) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"differential-views/{rel}").hex


def parent_of(rel: str) -> str:
    return rel.rpartition("/")[0] if "/" in rel else ""


def build(site, base: DateTime) -> None:
    site_root = site
    objects = {}
    for rel, (portal_type, title, _state, options) in TREE.items():
        container = site_root if rel == "" else objects[parent_of(rel)]
        object_id = ROOT if rel == "" else rel.rpartition("/")[2]
        extra = dict(options.get("fields", {}))
        if portal_type == "Link":
            extra["remoteUrl"] = "https://plone.org"
        if portal_type == "File":
            extra["file"] = NamedBlobFile(data=b"file body", filename="notes.txt", contentType="text/plain")
        if portal_type == "Event":
            start = (base + options["start"]).asdatetime()
            extra.update(start=start, end=start + datetime.timedelta(hours=2))
        obj = api.content.create(container=container, type=portal_type, id=object_id, title=title,
                                 subject=options.get("subject", ()),
                                 description=options.get("description", ""), **extra)
        # The same UID in both sites, set before anything indexes it, so answers compare by UID.
        IMutableUUID(obj).set(fixed_uid(rel))
        if options.get("layout"):
            obj.setLayout(options["layout"])
        objects[rel] = obj
    for rel, (_type, _title, state, options) in TREE.items():
        obj = objects[rel]
        if state == "published":
            api.content.transition(obj, "publish")
        if options.get("exclude"):
            obj.exclude_from_nav = True
        if options.get("block"):
            obj.__ac_local_roles_block__ = True
            obj.reindexObjectSecurity()
        creator = options.get("creator")
        if creator:
            obj.setCreators((creator,))
            obj.manage_setLocalRoles(creator, ["Owner"])
            obj.reindexObjectSecurity()
    objects["section-c"].setDefaultPage("index-c")
    alsoProvides(objects["subsite"], INavigationRoot)
    api.relation.create(source=objects["section-a/sub/subsub/deep-doc"], target=objects["section-c/index-c"],
                        relationship="relatedItems")
    api.group.grant_roles(groupname="b-readers", roles=["Reader"], obj=objects["section-b"])
    objects["section-b"].reindexObjectSecurity()
    settle(objects, base)


def settle(objects: dict, base: DateTime) -> None:
    """Give every object its dates (workflow and edits set them to the clock, which differs
    between the sites by seconds) and reindex them without touching the modification date."""
    for position, (rel, (_type, _title, _state, options)) in enumerate(TREE.items()):
        obj = objects[rel]
        # Distinct minutes keep created sorts free of ties (DateIndex keeps minutes), so day
        # offsets are whole days.
        created = base + options["created"] - (position + 1) / 1440.0
        obj.creation_date = created
        obj.setEffectiveDate(base + options["effective"] if "effective" in options else created)
        obj.setExpirationDate(base + options["expires"] if "expires" in options else None)
        obj.setModificationDate(created + options.get("modified", 1))
        obj.reindexObject(idxs=DATE_INDEXES + ["object_provides", "exclude_from_nav", "is_default_page",
                                               "Creator", "getRawRelatedItems"])


def add_principals(site) -> None:
    pas = site.acl_users
    groups = site.portal_groups
    for group_id in GROUPS:
        groups.addGroup(group_id)
    for group_id, parents in GROUPS.items():
        for parent in parents:
            groups.addPrincipalToGroup(group_id, parent)
    for user_id, (roles, member_of) in EXTRA_USERS.items():
        pas.source_users.addUser(user_id, user_id, PASSWORD)
        for role in roles:
            pas.portal_role_manager.doAssignRoleToPrincipal(user_id, role)
        for group_id in member_of:
            groups.addPrincipalToGroup(user_id, group_id)


def remove_principals(site) -> None:
    for user_id, (roles, _groups) in EXTRA_USERS.items():
        site.acl_users.source_users.removeUser(user_id)
        for role in roles:
            site.acl_users.portal_role_manager.doRemoveRoleFromPrincipal(user_id, role)
    for group_id in GROUPS:
        site.portal_groups.removeGroup(group_id)


THEME_ENABLED = "plone.app.theming.interfaces.IThemeSettings.enabled"
USE_REST_API = "plone.restapi: Use REST API"


@pytest.fixture(scope="module")
def tree(plone_sites):
    stable_day()
    # Whole minutes: ZCatalog's DateIndex keeps minutes, so no value sits on a rounding edge.
    base = DateTime(int(DateTime().timeTime()) // 60 * 60 - 60)
    themes, rest_api = {}, {}

    def prepare(site):
        # The layer's two sites differ in their Diazo theme (the stock one is themed, the one
        # made by addPloneSite is not); the pages are compared as Plone renders them, unthemed.
        themes[site.getId()] = api.portal.get_registry_record(THEME_ENABLED)
        api.portal.set_registry_record(THEME_ENABLED, False)
        # The layer loads plone.restapi's ZCML without its profile, whose rolemap lets everyone
        # use the API; without it every service but a Manager's answers 401 alike.
        roles = [r["name"] for r in site.rolesOfPermission(USE_REST_API) if r["selected"]]
        rest_api[site.getId()] = (roles, bool(site.acquiredRolesAreUsedBy(USE_REST_API)))
        site.manage_permission(USE_REST_API, ["Anonymous"], acquire=True)
        add_principals(site)

    def restore(site):
        remove_principals(site)
        api.portal.set_registry_record(THEME_ENABLED, themes[site.getId()])
        roles, acquire = rest_api[site.getId()]
        site.manage_permission(USE_REST_API, roles, acquire=acquire)

    on_both(prepare)
    on_both(lambda site: build(site, base))
    yield base
    for name in SITES:
        delete_from(name, ROOT)
    on_both(restore)


# -- normalising what the two sites answer ----------------------------------------------------------

SITE_URL = re.compile(rf"(https?://[^/\s\"'<>]+)/(?:{STOCK}|{CONNECTED})(?=[/\"'?#\s<>]|$)")


# A physical path in a query string of a link (the search page's sort links carry its path=).
SITE_PARAM = re.compile(rf"(?<==)/(?:{STOCK}|{CONNECTED})(?=/|&|$)")


def same_site(text: str) -> str:
    return SITE_PARAM.sub("/SITE", SITE_URL.sub(r"\1/SITE", text))


SITE_PATH = re.compile(rf"(^|[=&])/(?:{STOCK}|{CONNECTED})(?=/|&|$)")


def site_neutral(value):
    """JSON with both sites' URLs and physical paths written alike (also inside query strings)."""
    if isinstance(value, str):
        if "%2F" in value:
            value = unquote(value)
        return SITE_PATH.sub(r"\1/SITE", same_site(value))
    if isinstance(value, list):
        return [site_neutral(v) for v in value]
    if isinstance(value, dict):
        return {k: site_neutral(v) for k, v in value.items()}
    return value


def browser_for(user: str | None, app) -> Browser:
    browser = Browser(app)
    browser.handleErrors = True
    browser.raiseHttpErrors = False
    if user is not None:
        browser.addHeader("Authorization", f"Basic {user}:{PASSWORD}")
    return browser


def status(browser) -> int:
    return int(browser.headers["Status"].split(" ", 1)[0])


def difference(stock, connected) -> str:
    """A readable diff of two answers (HTML split at its tags, JSON at its lines)."""
    def lines(value):
        if isinstance(value, str):
            return re.sub(r">\s*<", ">\n<", value).splitlines()
        return json.dumps(value, indent=1, sort_keys=True, default=str).splitlines()

    diff = difflib.unified_diff(lines(stock), lines(connected), "stock", "connector", n=2, lineterm="")
    return "\n".join(diff)[:6000]


def assert_alike(stock: dict, connected: dict, user: str | None) -> None:
    """The connector site's answers (by key) are the stock site's, as ``user`` got them."""
    for key in stock:
        assert connected[key] == stock[key], (
            f"{key!r} as {user or 'anonymous'}\n" + difference(stock[key], connected[key]))


def fragment(element) -> str:
    text = lxml.html.tostring(element, encoding="unicode")
    return re.sub(r"\s+", " ", text).strip()


def ours(element) -> bool:
    """Whether a top-level navigation entry is the site's home or in this module's tree: other
    test modules leave content of their own in one of the sites."""
    link = element.find(".//a")
    href = "" if link is None else link.get("href", "")
    return href.rstrip("/").endswith("/SITE") or re.search(rf"/SITE/{ROOT}(/|$)", href) is not None


def ours_only(menu) -> str:
    """The list ``menu`` as a fragment, without its items that link outside the compared tree."""
    for item in menu.findall("li"):
        if not ours(item):
            menu.remove(item)
    return fragment(menu)


def page_parts(html: str) -> dict:
    doc = lxml.html.fromstring(same_site(html))
    parts = {}
    crumbs = doc.get_element_by_id("portal-breadcrumbs", None)
    parts["breadcrumbs"] = None if crumbs is None else fragment(crumbs)
    globalnav = doc.get_element_by_id("portal-globalnav", None)
    parts["globalnav"] = None if globalnav is None else ours_only(globalnav)
    parts["navigation portlet"] = [fragment(p) for p in doc.find_class("portletNavigationTree")]
    # The page's own content: folder listings, collection results, event listings.
    content = doc.get_element_by_id("content-core", None)
    parts["content"] = None if content is None else fragment(content)
    for element_id in ("search-results", "search-results-number"):
        found = doc.get_element_by_id(element_id, None)
        if found is not None:
            parts[element_id] = fragment(found)
    sitemap = doc.get_element_by_id("portal-sitemap", None)
    if sitemap is not None:
        parts["sitemap"] = ours_only(sitemap)
    return parts


PAGES = (
    "",
    "section-a",
    "section-a/sub/subsub/deep-doc",
    "section-a/hidden/inside-hidden",
    "section-a/expired-news",
    "section-b",
    "section-b/open-in-b",
    "section-c",
    "section-c/index-c",
    "subsite/sub-page",
    "subsite/sub-folder",
    "sorting",
    "many/m050",
    "many?b_start:int=90",
    "collection-1",
    "collection-1?b_start:int=3",
    "section-a/collection-2",
    "@@event_listing?mode=all",
    "@@event_listing?mode=future",
    # Plone's search page, a view of navigation roots: a leading "/" starts at the site, and
    # {site} is the site's id (the path is a physical one).
    "/@@search?SearchableText=alpha&path=/{site}/" + ROOT,
    "/@@search?SearchableText=many&sort_on=sortable_title&b_start:int=10&path=/{site}/" + ROOT,
    "/@@search?SearchableText=a*&sort_on=Date&portal_type:list=Document&portal_type:list=Event"
    "&created.query:record:date=2000-01-01&created.range:record=min&path=/{site}/" + ROOT,
    "subsite/@@search?SearchableText=subsite",
)


def rendered(name: str, user: str | None) -> dict:
    found = {}
    with zope.zopeApp() as app:
        browser = browser_for(user, app)
        for page in PAGES:
            where = page.format(site=name)
            where = where if where.startswith("/") else f"/{ROOT}/{where}"
            browser.open(f"http://nohost/{name}{where}".rstrip("/"))
            code = status(browser)
            # A login redirect names the page it came from, quoted.
            found[page, "status"] = (code, site_neutral(unquote(browser.url)))
            if code == 200:
                for part, value in page_parts(browser.contents).items():
                    found[page, part] = value
        browser.open(f"http://nohost/{name}/@@sitemap")
        found["@@sitemap", "status"] = (status(browser), same_site(browser.url))
        found["@@sitemap", "sitemap"] = page_parts(browser.contents).get("sitemap")
        transaction.abort()
    return found


def test_breadcrumbs_navigation_and_sitemap_render_alike(tree):
    pages = {}
    for user in PAGE_VIEWERS:
        stock, connected = rendered(STOCK, user), rendered(CONNECTED, user)
        assert connected.keys() == stock.keys(), user
        assert_alike(stock, connected, user)
        pages[user] = stock

    # The comparison saw real navigation: what some users' pages show and others' do not.
    editor, anonymous, manager = pages["editor"], pages[None], pages["manager"]
    deep = "section-a/sub/subsub/deep-doc"
    assert "Sub sub A" in editor[deep, "breadcrumbs"]
    assert "Deep doc alpha" in editor[deep, "navigation portlet"][0]
    assert "Hidden folder" not in editor[deep, "navigation portlet"][0]
    sitemap = ("@@sitemap", "sitemap")
    assert "Section B" in editor[sitemap] and "Section B" not in anonymous[sitemap]
    assert "Expired news" in manager[sitemap] and "Expired news" not in editor[sitemap]
    assert "login" in anonymous["section-b", "status"][1]
    assert {key: value[0] for key, value in manager.items() if key[1] == "status"} == dict.fromkeys(
        (key for key in manager if key[1] == "status"), 200)
    assert "111" in manager["/@@search?SearchableText=many&sort_on=sortable_title&b_start:int=10&path=/{site}/"
                            + ROOT, "search-results-number"]


# -- Collections: plone.app.querystring ------------------------------------------------------------


def querystring_cases(base: DateTime) -> list[tuple[str, str, list, dict]]:
    """(label, context path relative to the tree, rows, QueryBuilder options)."""
    within = {"i": "path", "o": OP + "string.absolutePath", "v": f"/{ROOT}"}
    title = {"sort_on": "sortable_title"}

    def day(offset: int) -> str:
        return (base + offset).strftime("%Y-%m-%d %H:%M")

    def case(label, rows, context="", **options):
        return (label, context, rows, {**title, **options})

    def row(index, operation, value=None):
        return {"i": index, "o": OP + operation, "v": value}

    cases = []
    for field in ("created", "modified", "effective", "expires", "start", "end"):
        for operation, value in (
            ("date.lessThan", day(-6)),
            ("date.largerThan", day(-6)),
            ("date.between", [day(-13), day(1)]),
            ("date.lessThanRelativeDate", "4"),
            ("date.largerThanRelativeDate", "10"),
            ("date.today", ""),
            ("date.afterToday", ""),
            ("date.beforeToday", ""),
            ("date.beforeRelativeDate", "2"),
            ("date.afterRelativeDate", "1"),
        ):
            cases.append(case(f"{field} {operation}", [within, row(field, operation, value)]))
    cases += [
        case("isFolderish true", [within, row("is_folderish", "boolean.isTrue")]),
        case("isFolderish false", [within, row("is_folderish", "boolean.isFalse")]),
        case("default page true", [within, row("is_default_page", "boolean.isTrue")]),
        case("default page false", [within, row("is_default_page", "boolean.isFalse")]),
        # The registry's own field name, which is no index: both catalogs must ignore it alike.
        case("registry field isFolderish", [within, row("isFolderish", "boolean.isTrue")]),
        case("position is", [within, row("getObjPositionInParent", "int.is", "1")]),
        case("position less", [within, row("getObjPositionInParent", "int.lessThan", "1")]),
        case("position larger", [within, row("getObjPositionInParent", "int.largerThan", "2")]),
        case("position intselection", [within, row("getObjPositionInParent", "intselection.is", ["0", "2"])]),
        case("subject list contains", [within, row("Subject", "list.contains", ["red"])]),
        case("subject any", [within, row("Subject", "selection.any", ["blue", "green"])]),
        case("subject all", [within, row("Subject", "selection.all", ["red", "blue"])]),
        case("subject none", [within, row("Subject", "selection.none", ["red"])]),
        case("subject non-ascii", [within, row("Subject", "selection.any", ["Zürich"])]),
        case("type any", [within, row("portal_type", "selection.any", ["Document", "Event"])]),
        case("type none", [within, row("portal_type", "selection.none", ["Document", "Folder"])]),
        case("state is", [within, row("review_state", "selection.is", ["private"])]),
        case("state none", [within, row("review_state", "selection.none", ["published"])]),
        case("creator any", [within, row("Creator", "selection.any", ["editor"])]),
        case("creator current user", [within, row("Creator", "string.currentUser")]),
        case("id is", [within, row("getId", "string.is", "open-in-b")]),
        case("id is not", [within, row("getId", "string.isNot", "open-in-b")]),
        case("title is", [within, row("sortable_title", "string.is", "section c")]),
        case("title is not", [within, row("sortable_title", "string.isNot", "section c")]),
        case("text contains", [within, row("SearchableText", "string.contains", "alpha")]),
        case("title contains", [within, row("Title", "string.contains", "sub*")]),
        case("description contains", [within, row("Description", "string.contains", "gamma")]),
        case("title index contains", [within, row("sortable_title", "string.contains", "index c")]),
        # Plone 6 has no getRawRelatedItems indexer (the index stays empty in both sites), so the
        # operation is also asked of the UID index, where it finds something.
        case("related items", [within, row("getRawRelatedItems", "reference.is", fixed_uid("section-c/index-c"))]),
        case("reference by uid", [within, row("UID", "reference.is", fixed_uid("section-c/index-c"))]),
        case("reference by path", [within, row("UID", "reference.is", f"/{ROOT}/section-b/open-in-b")]),
        case("related items by path", [within, row("getRawRelatedItems", "reference.is", f"/{ROOT}/section-c/index-c")]),
        case("inactive for editors", [within, row("show_inactive", "string.showInactive", ["Editor", "Manager"])]),
        case("inactive for nobody", [within, row("show_inactive", "string.showInactive", ["Site Administrator"])]),
        case("absolute path", [row("path", "string.absolutePath", f"/{ROOT}/section-a")]),
        case("absolute path depth", [row("path", "string.absolutePath", f"/{ROOT}/section-a::1")]),
        case("absolute path by uid", [row("path", "string.absolutePath", fixed_uid("section-a") + "::2")]),
        case("two paths", [row("path", "string.absolutePath", f"/{ROOT}/section-b::1"),
                           row("path", "string.absolutePath", f"/{ROOT}/section-c::1")]),
        case("relative parent", [row("path", "string.relativePath", "..::1")], context="section-a/sub"),
        case("relative sibling", [row("path", "string.relativePath", "../hidden")], context="section-a/sub"),
        case("relative child", [row("path", "string.relativePath", "subsub::-1")], context="section-a/sub"),
        case("navigation path", [row("path", "string.path", "/")], context="subsite/sub-folder"),
        case("navigation path depth", [row("path", "string.path", "/sub-folder::1")], context="subsite/sub-page"),
        case("legacy isWithin", [row("path", "path.isWithin", f"/{ROOT}")]),
        case("legacy isWithinRelative", [row("path", "path.isWithinRelative", "..")], context="section-a"),
        # Orders and bounds a Collection asks for.
        case("newest first", [within], sort_on="created", sort_order="reverse"),
        case("folder order", [row("path", "string.absolutePath", f"/{ROOT}/section-a::1")],
             sort_on="getObjPositionInParent"),
        case("by effective", [within, row("review_state", "selection.any", ["published"])], sort_on="effective"),
        case("events by start", [within, row("portal_type", "selection.any", ["Event"])], sort_on="start"),
        case("limited", [within], limit=4),
        case("many", [row("path", "string.absolutePath", f"/{ROOT}/many::1")]),
        case("own expired item", [row("path", "string.absolutePath", f"/{ROOT}/section-a/editors-expired::0")]),
        case("many batch across a page", [row("path", "string.absolutePath", f"/{ROOT}/many::1")],
             batch=True, b_start=95, b_size=10),
        case("many limited", [row("path", "string.absolutePath", f"/{ROOT}/many")], limit=105,
             sort_on="created", sort_order="descending"),
        case("batched", [within], batch=True, b_start=3, b_size=4),
        case("reversed titles", [within, row("portal_type", "selection.any", ["Document"])],
             sort_order="descending"),
    ]
    return cases


def registered_operations() -> set[str]:
    registry = getUtility(IRegistry)
    return {key[: -len(".operation")] for key in registry.records
            if key.startswith(OP) and key.endswith(".operation")}


def collection_answers(name: str, user: str | None, base: DateTime) -> dict:
    found = {}
    with on_site(name, user=user, commit=False) as site:
        request = site.REQUEST
        for label, context_path, rows, options in querystring_cases(base):
            context = site.unrestrictedTraverse(f"{ROOT}/{context_path}".rstrip("/"), None)
            if context is None:  # moved away by the last test
                found[label] = "no context"
                continue
            try:
                results = QueryBuilder(context, request)(query=rows, brains=True, **options)
            except Exception as error:  # the same failure on both sites is an answer too
                found[label] = ("error", type(error).__name__)
                continue
            if options.get("batch"):
                results = list(results)
                count = len(results)
            else:
                count = results.actual_result_count
            found[label] = (count, [(b.UID, relative(site, b.getPath())) for b in results])
    return found


def test_every_querystring_operation_answers_alike(tree):
    stock_answers = {}
    for user in QUERY_VIEWERS:
        stock, connected = collection_answers(STOCK, user, tree), collection_answers(CONNECTED, user, tree)
        assert_alike(stock, connected, user)
        stock_answers[user] = stock

    with on_site(STOCK, commit=False):
        registered = registered_operations()
    used = {row["o"] for _label, _context, rows, _options in querystring_cases(tree) for row in rows}
    assert registered - used == set(), "operations of the registry without a case"
    manager = stock_answers["manager"]
    errors = {label for label, answer in manager.items() if answer[0] == "error"}
    assert errors == {"legacy isWithin", "legacy isWithinRelative"}
    empty = sorted(label for label, answer in manager.items() if answer[0] == 0)
    # Most cases find something, so equal answers mean something; the few empty ones are
    # operations whose fields this content leaves empty (no expiry today, and so on).
    assert len(empty) < len(manager) // 4, empty
    assert manager["creator current user"] != stock_answers["editor"]["creator current user"]
    assert manager["inactive for nobody"][0] < manager["inactive for editors"][0]
    assert stock_answers["editor"]["own expired item"][0] == 1 and stock_answers["member"]["own expired item"][0] == 0


# -- plone.restapi through the publisher ---------------------------------------------------------


def api_answers(name: str, user: str | None, base: DateTime) -> dict:
    found = {}
    tree_path = f"/{name}/{ROOT}"
    url = f"http://nohost/{name}"
    searches = {
        "tree": [("path.query", tree_path), ("sort_on", "sortable_title")],
        "children": [("path.query", tree_path), ("path.depth", "1"), ("sort_on", "getObjPositionInParent")],
        "text": [("path.query", tree_path), ("SearchableText", "alpha"), ("sort_on", "sortable_title")],
        # Plone's own search settings (friendly types; relevance order, as the live search asks).
        "site search": [("path.query", tree_path), ("SearchableText", "alpha"),
                        ("use_site_search_settings", "1")],
        "published documents": [("path.query", tree_path), ("portal_type", "Document"),
                                ("review_state", "published"), ("sort_on", "created"), ("sort_order", "reverse")],
        "two sort keys": [("path.query", tree_path), ("sort_on", "portal_type"), ("sort_on", "sortable_title")],
        "sorting folder": [("path.query", tree_path + "/sorting"), ("sort_on", "sortable_title"),
                           ("sort_order", "descending")],
        "subjects": [("path.query", tree_path), ("Subject", "red"), ("Subject", "green"),
                     ("sort_on", "sortable_title")],
        "batch": [("path.query", tree_path), ("sort_on", "sortable_title"), ("b_start", "4"), ("b_size", "5")],
        "many across a page": [("path.query", tree_path + "/many"), ("sort_on", "getObjPositionInParent"),
                               ("b_start", "95"), ("b_size", "10")],
        "own expired item": [("path.query", tree_path + "/section-a/editors-expired"), ("path.depth", "0")],
        "many whole": [("path.query", tree_path + "/many"), ("sort_on", "sortable_title"), ("b_size", "200")],
        "inactive": [("path.query", tree_path), ("sort_on", "sortable_title"), ("show_inactive", "1")],
        "events": [("path.query", tree_path), ("portal_type", "Event"), ("sort_on", "start"),
                   ("start.query", (base - 30).ISO8601()), ("start.range", "min")],
    }
    collections = {
        "types": {"query": [{"i": "path", "o": OP + "string.absolutePath", "v": f"/{ROOT}"},
                            {"i": "portal_type", "o": OP + "selection.any", "v": ["Document", "News Item"]}],
                  "sort_on": "sortable_title"},
        "relative": {"query": [{"i": "path", "o": OP + "string.relativePath", "v": ".::2"}],
                     "sort_on": "sortable_title"},
        "mine": {"query": [{"i": "path", "o": OP + "string.absolutePath", "v": f"/{ROOT}"},
                           {"i": "Creator", "o": OP + "string.currentUser", "v": ""}],
                 "sort_on": "sortable_title"},
        "recent": {"query": [{"i": "path", "o": OP + "string.absolutePath", "v": f"/{ROOT}"},
                             {"i": "created", "o": OP + "date.largerThanRelativeDate", "v": "7"}],
                   "sort_on": "created", "sort_order": "descending", "b_size": 3},
    }
    with zope.zopeApp() as app:
        browser = browser_for(user, app)
        browser.addHeader("Accept", "application/json")

        def answer():
            return status(browser), site_neutral(json.loads(browser.contents))

        for label, params in searches.items():
            params = params + [("metadata_fields", "UID"), ("metadata_fields", "review_state"),
                               ("metadata_fields", "Subject")]
            if "b_size" not in dict(params):
                params.append(("b_size", "50"))
            browser.open(f"{url}/@search?{urlencode(params)}")
            found[f"@search {label}"] = answer()
        for label, body in collections.items():
            body = {"metadata_fields": ["UID", "review_state"], **body}
            browser.post(f"{url}/{ROOT}/@querystring-search", json.dumps(body), content_type="application/json")
            found[f"@querystring-search {label}"] = answer()
        for page in ("section-a/sub/subsub/deep-doc", "section-b/open-in-b", "subsite/sub-folder"):
            for service in ("@breadcrumbs", "@contextnavigation", "@navigation?expand.navigation.depth=3"):
                browser.open(f"{url}/{ROOT}/{page}/{service}")
                code, body = answer()
                if service.startswith("@navigation") and code == 200:
                    body["items"] = [item for item in body["items"] if ours_json(item)]
                found[f"{page} {service}"] = (code, body)
        transaction.abort()
    return found


def ours_json(item: dict) -> bool:
    url = item.get("@id", "")
    return url.rstrip("/").endswith("/SITE") or re.search(rf"/SITE/{ROOT}(/|$)", url) is not None


def test_restapi_answers_alike_through_the_publisher(tree):
    answers = {}
    for user in API_VIEWERS:
        stock, connected = api_answers(STOCK, user, tree), api_answers(CONNECTED, user, tree)
        assert_alike(stock, connected, user)
        answers[user] = stock
        assert {label: stock[label][0] for label in stock} == dict.fromkeys(stock, 200), user

    editor, anonymous = answers["editor"], answers[None]
    code, body = editor["@search tree"]
    assert code == 200 and body["items_total"] > anonymous["@search tree"][1]["items_total"] > 5
    # The editor's third item is expired: found only where the editor may see inactive content.
    assert editor["@querystring-search mine"][1]["items_total"] == 2
    assert editor["@search own expired item"][1]["items_total"] == 1
    assert anonymous["@search own expired item"][1]["items_total"] == 0
    assert "Secret B alpha" in json.dumps(answers["reader"]["@search text"])
    assert "Secret B alpha" not in json.dumps(answers["outsider"]["@search text"])
    assert len(answers["outsider"]["@search many whole"][1]["items"]) == 1 + 73  # the folder and its public children


# -- groups and local roles ------------------------------------------------------------------------


def visible(name: str, user: str) -> list[str]:
    with on_site(name, user=user, commit=False) as site:
        brains = site.portal_catalog(path="/".join(site.getPhysicalPath()) + f"/{ROOT}/section-b",
                                     sort_on="sortable_title")
        return [relative(site, b.getPath()) for b in brains]


def test_a_group_local_role_opens_a_private_folder_to_its_members_only(tree):
    private = [f"/{ROOT}/section-b", f"/{ROOT}/section-b/secret"]
    blocked = [f"/{ROOT}/section-b/blocked", f"/{ROOT}/section-b/blocked/inner"]
    for user in ("reader", "nested-reader", "outsider", "member"):
        stock, connected = visible(STOCK, user), visible(CONNECTED, user)
        assert connected == stock, user
        member = user in ("reader", "nested-reader")
        assert all(path in stock for path in private) is member, (user, stock)
        assert any(path in stock for path in private) is member, (user, stock)
        assert not any(path in stock for path in blocked), (user, stock)
    # What the group gives must also reach the page renders and the collections compared above.
    reader_pages = rendered(CONNECTED, "reader")
    assert reader_pages["section-b", "status"][0] == 200
    assert "Secret B alpha" in reader_pages["section-b", "navigation portlet"][0]
    assert "insufficient-privileges" in rendered(CONNECTED, "outsider")["section-b", "status"][1]

    def revoke(site):
        api.group.revoke_roles(groupname="b-readers", roles=["Reader"], obj=site[ROOT]["section-b"])
        site[ROOT]["section-b"].reindexObjectSecurity()

    def grant(site):
        api.group.grant_roles(groupname="b-readers", roles=["Reader"], obj=site[ROOT]["section-b"])
        site[ROOT]["section-b"].reindexObjectSecurity()

    on_both(revoke)
    try:
        for user in ("reader", "nested-reader"):
            stock, connected = visible(STOCK, user), visible(CONNECTED, user)
            assert connected == stock and not any(path in stock for path in private), user
    finally:
        on_both(grant)


# -- after the tree changes ------------------------------------------------------------------------


def test_views_still_agree_after_reordering_moving_renaming_and_deleting(tree):
    """Navigation sorts on the position in the folder, which ZCatalog asks the folder for and
    the connector stores; moves and renames rewrite paths of whole subtrees. Runs last: it
    changes the tree the tests above compare."""

    def change(site):
        root = site[ROOT]
        section_a = root["section-a"]
        section_a.moveObjectsToTop(["hidden-doc"])
        section_a.moveObjectsByDelta(["sub"], 2)
        api.content.rename(obj=root["section-c"]["other-c"], new_id="other-c-renamed")
        api.content.move(source=root["subsite"]["sub-page"], target=section_a)
        api.content.delete(obj=section_a["future-doc"])
        section_a["hidden"].exclude_from_nav = False
        section_a["hidden"].reindexObject(idxs=["exclude_from_nav"])
        api.content.transition(section_a["sub"]["subsub"], "retract")
        api.content.move(source=section_a["sub"], target=root["section-c"], id="sub-moved")
        # Moves and renames set the modification date to the clock; listings show it by the
        # minute, so give it back a value both sites share.
        for _id, obj in root.ZopeFind(root, search_sub=True):
            if obj is not None:
                obj.setModificationDate(obj.creation_date + 1)
                obj.reindexObject(idxs=["modified"])

    on_both(change)
    for user in (None, "editor", "manager"):
        stock, connected = rendered(STOCK, user), rendered(CONNECTED, user)
        assert connected.keys() == stock.keys(), user
        assert_alike(stock, connected, user)
        stock, connected = collection_answers(STOCK, user, tree), collection_answers(CONNECTED, user, tree)
        assert_alike(stock, connected, user)

    order = collection_answers(STOCK, "manager", tree)["folder order"][1]
    assert [path for _uid, path in order][:2] == [f"/{ROOT}/section-a/hidden-doc", f"/{ROOT}/section-a/hidden"]
