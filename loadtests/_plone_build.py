"""Make the stock Plone site of `make loadtest-search` from the service's corpus; run by `zconsole run`.

    zconsole run etc/zope.conf loadtests/_plone_build.py OBJECTS

zconsole gives ``app`` (the Zope root, with a request). The site ``plone`` (plone.app.contenttypes
and plone.restapi, stock ZCatalog) gets the objects of ``catalog_service.demo.objects(OBJECTS)``
as Plone content with the same ids, paths, order in their folders, UIDs, titles, descriptions,
texts, subjects, creators, dates, workflow states and event dates. They are added without events
(``_setObject(..., suppress_events=True)``, a commit every 2,000) so that making them costs no
catalog work, each given its workflow state and the permissions that state sets; then ZCatalog's
own ``clearFindAndRebuild()`` catalogs them in one transaction.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime

import pytz
import transaction
from DateTime import DateTime
from persistent.mapping import PersistentMapping
from plone.app.contenttypes.content import Document, Event, File, Folder, Image, NewsItem
from plone.app.textfield.value import RichTextValue
from plone.uuid.interfaces import ATTRIBUTE_NAME
from Products.CMFPlone.factory import addPloneSite
from zope.component.hooks import setSite

from catalog_service.demo import objects

SITE_ID = "plone"
WORKFLOW = "simple_publication_workflow"
CLASSES = {"Document": Document, "News Item": NewsItem, "Event": Event, "File": File, "Image": Image,
           "Folder": Folder}
COMMIT_EVERY = 2000


def zope_date(value: str | None) -> DateTime | None:
    return None if value is None else DateTime(value)


def content(entry: dict):
    """The Plone object of one corpus entry (not yet in its folder)."""
    values = entry["values"]
    obj = CLASSES[values["portal_type"]](values["id"])
    obj.portal_type = values["portal_type"]
    obj.title = values["Title"]
    obj.description = values["Description"]
    obj.subject = tuple(values["Subject"])
    obj.creators = (values["Creator"],)
    obj.creation_date = DateTime(values["created"])
    obj.modification_date = DateTime(values["modified"])
    obj.effective_date = zope_date(values["effective"])
    obj.expiration_date = zope_date(values["expires"])
    setattr(obj, ATTRIBUTE_NAME, values["UID"])
    # The words of the corpus's SearchableText after its id and title: the body text.
    body = values["SearchableText"].split(" ", 1)[1].removeprefix(values["Title"]).strip()
    if values["portal_type"] in ("Document", "News Item", "Event"):
        obj.text = RichTextValue(body, "text/plain", "text/x-html-safe")
    if values["portal_type"] == "Event":
        start = datetime.fromisoformat(values["start"]["start"]).astimezone(pytz.utc)
        obj.start = start
        obj.end = datetime.fromisoformat(values["end"]).astimezone(pytz.utc)
        obj.whole_day = obj.open_end = False
        obj.recurrence = values["start"]["recurrence"]
    obj.manage_setLocalRoles(values["Creator"], ["Owner"])
    obj.workflow_history = PersistentMapping({WORKFLOW: ({
        "action": None, "review_state": values["review_state"], "actor": values["Creator"], "comments": "",
        "time": obj.creation_date,
    },)})
    return obj


def make_site(app):
    if SITE_ID in app.objectIds():
        raise SystemExit(f"the database already holds a site {SITE_ID!r}: build into an empty one")
    site = addPloneSite(app, SITE_ID, title="Load test site", setup_content=False,
                        extension_ids=("plone.app.contenttypes:default", "plone.restapi:default"),
                        default_language="en", portal_timezone="UTC")
    # Every type of the corpus goes through the same workflow (Plone gives File and Image none:
    # they would show their folder's state, not their own).
    site.portal_workflow.setChainForPortalTypes(tuple(CLASSES), WORKFLOW)
    transaction.commit()
    return site


def add_content(site, count: int) -> None:
    workflow = site.portal_workflow[WORKFLOW]
    folders = {f"/{SITE_ID}": site}  # the corpus makes every folder before its content
    began = time.monotonic()
    for n, entry in enumerate(objects(count)):
        parent = folders[entry["path"].rpartition("/")[0]]
        obj = content(entry)
        parent._setObject(obj.getId(), obj, suppress_events=True)
        added = parent[obj.getId()]
        workflow.updateRoleMappingsFor(added)
        if entry["values"]["is_folderish"]:
            folders[entry["path"]] = added
        if n % COMMIT_EVERY == COMMIT_EVERY - 1:
            transaction.commit()
            site._p_jar.cacheGC()
            print(f"added {n + 1:,} objects in {time.monotonic() - began:.0f} s", flush=True)
    transaction.commit()


def main(app, count: int) -> None:
    site = make_site(app)
    setSite(site)
    add_content(site, count)
    began = time.monotonic()
    site.portal_catalog.clearFindAndRebuild()
    transaction.commit()
    cataloged = len(site.portal_catalog)
    print(f"cataloged {cataloged:,} objects in {time.monotonic() - began:.0f} s", flush=True)


main(app, int(sys.argv[-1]))  # noqa: F821 - zconsole defines `app`
