"""plone.app.testing layers run from pytest, and helpers to act on two sites in one Zope app.

Site ``plone`` keeps the stock ZCatalog; site ``conn`` gets the connector. Both get the same
content, users, groups and actions, so every query can be asked of both and compared.
"""

from __future__ import annotations

import contextlib

import transaction
from plone.app.testing import PLONE_FIXTURE, SITE_OWNER_NAME, PloneSandboxLayer, applyProfile
from plone.app.testing import login as plone_login
from plone.app.testing import logout as plone_logout
from plone.testing import zope
from zope.component.hooks import setSite

STOCK = "plone"
CONNECTED = "conn"
SITES = (STOCK, CONNECTED)
WORKFLOW = "simple_publication_workflow"
USERS = {
    # user id: (roles, groups)
    "editor": (["Member", "Editor"], ["staff"]),
    "member": (["Member"], []),
    "reviewer": (["Member", "Reviewer"], ["staff"]),
    "manager": (["Manager"], []),
}
PASSWORD = "secret-pw-123"


def _prepare(site):
    site.portal_workflow.setDefaultChain(WORKFLOW)
    pas = site.acl_users
    site.portal_groups.addGroup("staff")
    for user_id, (roles, groups) in USERS.items():
        pas.source_users.addUser(user_id, user_id, PASSWORD)
        for role in roles:
            pas.portal_role_manager.doAssignRoleToPrincipal(user_id, role)
        for group in groups:
            site.portal_groups.addPrincipalToGroup(user_id, group)


class ConnectorLayer(PloneSandboxLayer):
    defaultBases = (PLONE_FIXTURE,)

    def setUpZope(self, app, configurationContext):
        import plone.app.contenttypes
        import plone.restapi

        import plone_connector

        self.loadZCML(package=plone.app.contenttypes)
        self.loadZCML(package=plone.restapi)
        self.loadZCML(package=plone_connector)

    def setUpPloneSite(self, portal):
        from Products.CMFPlone.factory import addPloneSite

        app = portal.aq_parent
        applyProfile(portal, "plone.app.contenttypes:default")
        _prepare(portal)
        addPloneSite(app, CONNECTED, title="Plone site", extension_ids=("plone.app.contenttypes:default",))
        connected = app[CONNECTED]
        setSite(connected)
        _prepare(connected)
        applyProfile(connected, "plone_connector:default")
        setSite(portal)


CONNECTOR_LAYER = ConnectorLayer(name="ConnectorLayer")


def _ordered_layers(layer):
    order: list = []

    def visit(item):
        for base in getattr(item, "__bases__", ()):
            visit(base)
        if item not in order:
            order.append(item)

    visit(layer)
    return order


def set_up(layer):
    layers = _ordered_layers(layer)
    for item in layers:
        item.setUp()
    return layers


def tear_down(layers):
    for item in reversed(layers):
        with contextlib.suppress(NotImplementedError):
            item.tearDown()


@contextlib.contextmanager
def on_site(name: str, user: str | None = "manager", commit: bool = True, db=None):
    """The site ``name`` in a fresh connection, as ``user`` (None: anonymous); commits at the end.
    ``db``: the database to connect to, if not the current layer's."""
    with zope.zopeApp(db=db) as app:
        site = app[name]
        setSite(site)
        try:
            if user is None:
                plone_logout()
            else:
                plone_login(site, user)
            yield site
            if commit:
                transaction.commit()
            else:
                transaction.abort()
        except BaseException:
            transaction.abort()
            raise
        finally:
            plone_logout()
            setSite(None)


def add_site(app, site_id: str, title: str):
    """A new Plone site ``site_id`` in ``app`` with plone.app.contenttypes, made the current site,
    as its owner. For tests that install the connector on a site of their own."""
    from Products.CMFPlone.factory import addPloneSite

    addPloneSite(app, site_id, title=title, extension_ids=("plone.app.contenttypes:default",))
    site = app[site_id]
    setSite(site)
    zope.login(app["acl_users"], SITE_OWNER_NAME)
    return site


def delete_site(site_id: str) -> None:
    """Delete the site ``site_id`` a test added, so that the layer's other tests never see it."""
    with zope.zopeApp() as app:
        setSite(None)
        zope.login(app["acl_users"], SITE_OWNER_NAME)
        app.manage_delObjects([site_id])
        transaction.commit()


def service_catalog_id(name: str = CONNECTED) -> str:
    """The id of the service catalog that site ``name`` writes to: the site id by default, but a
    layer may name it otherwise (the JSONB layer does, so its runs never share the service's rows
    with the FileStorage layer's). Opens a connection of its own and ends its transaction: call it
    outside any other."""
    with on_site(name, commit=False) as site:
        return site.portal_catalog.catalog_id()


def catalog_paths(site, **query) -> list[str]:
    """The sorted paths an unrestricted catalog query of ``site`` answers."""
    return sorted(b.getPath() for b in site.portal_catalog.unrestrictedSearchResults(**query))


def delete_from(name: str, *ids: str) -> None:
    """Delete the objects ``ids`` of site ``name`` that exist. Other test modules compare the two
    sites, so tests that create extra content remove it afterwards."""
    from plone import api

    with on_site(name) as site:
        for object_id in ids:
            if object_id in site:
                api.content.delete(site[object_id])
