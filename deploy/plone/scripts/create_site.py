"""Create the Plone site with the catalog connector, once; run by `zconsole run`.

zconsole gives ``app`` (the Zope root, with a request) and runs the script as Zope's system user.

Idempotent: an existing site is left alone, so every container start may run it.
Environment: PLONE_SITE_ID, PLONE_SITE_TITLE, PLONE_ADMIN_USER, PLONE_ADMIN_PASSWORD,
PLONE_DEFAULT_LANGUAGE, PLONE_TIMEZONE.
"""

import os

import transaction
from Products.CMFPlone.factory import addPloneSite

EXTENSION_PROFILES = (
    "plone.app.contenttypes:default",
    "plone.restapi:default",
    "plone_connector:default",
)


def ensure_admin(root, user_id: str, password: str) -> None:
    """A Zope Manager to log in with; kept if it exists (its password may have been changed)."""
    users = root.acl_users
    if users.getUserById(user_id) is None:
        if not password:
            raise SystemExit(f"Zope user {user_id!r} does not exist and PLONE_ADMIN_PASSWORD is empty")
        users._doAddUser(user_id, password, ["Manager"], [])


def main(root) -> None:
    ensure_admin(root, os.environ.get("PLONE_ADMIN_USER", "admin"), os.environ.get("PLONE_ADMIN_PASSWORD", ""))
    site_id = os.environ["PLONE_SITE_ID"]
    if site_id in root.objectIds():
        transaction.commit()
        print(f"Plone site {site_id!r} exists; nothing to do")
        return
    addPloneSite(
        root,
        site_id,
        title=os.environ.get("PLONE_SITE_TITLE", "Plone site"),
        extension_ids=EXTENSION_PROFILES,
        setup_content=False,
        default_language=os.environ.get("PLONE_DEFAULT_LANGUAGE", "en"),
        portal_timezone=os.environ.get("PLONE_TIMEZONE", "UTC"),
    )
    transaction.commit()
    print(f"created Plone site {site_id!r} with {', '.join(EXTENSION_PROFILES)}")


main(app)  # noqa: F821 - zconsole defines `app`
