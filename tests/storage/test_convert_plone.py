"""Migration of a real Plone site: a FileStorage converted into JsonbStorage by zodbconvert.

The site (Plone 6 with plone.app.contenttypes) is built by Plone itself in a FileStorage: the
fixture's objects, then the site's set-up, folders, pages, news items, events, links, files,
users, a group, an image, local roles, a portlet, relations, a registry change, second
revisions of a page and of a blob, and an undone edit, as the transactions Plone commits. The
``zodbconvert`` console script copies it; then every object of the FileStorage is loaded from
both storages and compared (conversion.py), and the converted site is read through ZODB.
"""

from __future__ import annotations

import datetime
import io

import pytest
import ZODB
from ZODB.FileStorage import FileStorage

from plone_connector.storage import JsonbStorage
from tests.storage.conversion import (
    assert_same_history,
    assert_same_objects,
    filestorage_section,
    write_config,
    zodbconvert,
)
from tests.storage.test_jsonstate_plone import plone_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

SITE_TITLE = "Converted site ✓"
EDITED_TITLE = "Page 3, edited"
FILE_V2 = b"second revision of the file \x00\xff" * 50


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (3, 2), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def _more_content(portal) -> None:
    """What the common content (test_jsonstate_plone._fill_site) lacks, one transaction each."""
    import transaction
    from plone import api
    from plone.namedfile.file import NamedBlobImage

    api.group.create(groupname="reviewers", title="Réviseurs", roles=["Reviewer"])
    api.group.add_user(groupname="reviewers", username="user2")
    transaction.commit()
    folder = portal["folder-1"]
    image = folder[folder.invokeFactory("Image", "image", title="Image")]
    image.image = NamedBlobImage(_png(), filename="pixel.png")
    transaction.commit()
    api.portal.set_registry_record("plone.site_title", SITE_TITLE)
    transaction.commit()
    # Second revisions: a page, and a blob written again in place.
    portal["folder-2"]["page 3"].title = EDITED_TITLE
    with portal["folder-1"]["file"].file._blob.open("w") as blob_file:
        blob_file.write(FILE_V2)
    transaction.commit()
    # An undone edit: FileStorage writes records that point back to older data.
    portal["folder-3"]["page 2"].title = "Not for long"
    transaction.commit()
    db = portal._p_jar.db()
    db.undo(db.undoLog(0, 1)[0]["id"])
    transaction.commit()
    portal["folder-9"].manage_delObjects(["link"])


@pytest.fixture(scope="module")
def plone_filestorage(tmp_path_factory):
    """(Data.fs, blob directory) of a Plone site, the FileStorage closed."""
    directory = tmp_path_factory.mktemp("plone-filestorage")
    path, blobs = directory / "Data.fs", directory / "blobs"
    with plone_site(storage=lambda: FileStorage(str(path), blob_dir=str(blobs)), more=_more_content):
        pass
    return path, blobs


def _convert(plone_filestorage, dsn, tmp_path, *, history_preserving: bool):
    path, blobs = plone_filestorage
    config = write_config(
        tmp_path / "convert.conf",
        filestorage_section(path, blobs),
        dsn,
        tmp_path / "converted-blobs",
        history_preserving=history_preserving,
    )
    zodbconvert(config, "--clear")
    source = FileStorage(str(path), blob_dir=str(blobs), read_only=True)
    destination = JsonbStorage(
        dsn, blob_dir=str(tmp_path / "check-blobs"), history_preserving=history_preserving
    )
    return source, destination


def _assert_plone_objects(compared) -> None:
    print(
        f"\n{sum(n for name, n in compared.items() if name != 'blob files')} objects,"
        f" {len(compared) - 1} classes, {compared['blob files']} blob files"
    )
    assert sum(compared.values()) > 1000, compared  # a real site, not a root and a few objects
    for class_name in (
        "OFS.Application.Application",
        "Products.CMFPlone.Portal.PloneSite",
        "plone.app.contenttypes.content.Folder",
        "plone.app.contenttypes.content.Document",
        "plone.app.contenttypes.content.NewsItem",
        "plone.app.contenttypes.content.Event",
        "plone.app.contenttypes.content.Link",
        "plone.app.contenttypes.content.File",
        "plone.app.contenttypes.content.Image",
        "plone.namedfile.file.NamedBlobFile",
        "plone.namedfile.file.NamedBlobImage",
        "ZODB.blob.Blob",
        "z3c.relationfield.relation.RelationValue",
        "plone.app.portlets.portlets.navigation.Assignment",
        "plone.app.registry.registry.Registry",
        "plone.registry.field.TextLine",
        "BTrees.OOBTree.OOBTree",
    ):
        assert compared[class_name], class_name
    assert compared["blob files"] == compared["ZODB.blob.Blob"] >= 11  # ten files and the image


def _read_site(storage) -> None:
    """The converted site through ZODB (the application classes, no Zope set-up)."""
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            portal = conn.root()["Application"]._getOb("plone")
            folder = portal._getOb("folder-0")
            assert folder.title == "Folder 0 é"
            assert sorted(folder.__ac_local_roles__["user1"]) == ["Editor", "Reader"]
            page = folder._getOb("page 0")
            assert page.title == "Page 0 — ü"
            assert page.text.raw == "<p>Body 0 &amp; more</p>"
            assert page.subject == ("alpha", "tag0")
            assert portal._getOb("folder-2")._getOb("page 3").title == EDITED_TITLE
            assert portal._getOb("folder-3")._getOb("page 2").title == "Page 2 — ü"
            event = folder._getOb("event")
            assert (event.start, event.end) == (
                datetime.datetime(2024, 5, 1, 10),
                datetime.datetime(2024, 5, 1, 12),
            )
            assert folder._getOb("file").file.data == b"\x00binary\xff" * 100
            assert portal._getOb("folder-1")._getOb("file").file.data == FILE_V2
            assert portal._getOb("folder-1")._getOb("image").image.data == _png()
            assert not portal._getOb("folder-9").hasObject("link")
            # Four pages relate to one target: one intid, shared.
            targets = {
                portal._getOb(f"folder-{n}")._getOb("page 1").relatedItems[0].to_id for n in range(1, 5)
            }
            assert len(targets) == 1 and isinstance(targets.pop(), int)
            assert portal.portal_registry.records._values["plone.site_title"] == SITE_TITLE
            groups = portal.acl_users.source_groups
            assert "reviewers" in groups._principal_groups["user2"]
            assert {f"user{number}" for number in range(5)} <= set(
                portal.acl_users.source_users._user_passwords
            )
    finally:
        db.close()


def test_plone_site_converted_history_free(plone_filestorage, fresh_dsn, tmp_path):
    source, destination = _convert(plone_filestorage, fresh_dsn, tmp_path, history_preserving=False)
    try:
        _assert_plone_objects(assert_same_objects(source, destination))
        _read_site(destination)
    finally:
        source.close()
        destination.close()


def test_plone_site_converted_history_preserving(plone_filestorage, fresh_dsn, tmp_path):
    """Every transaction of the FileStorage, with every revision (the first blob file of the
    rewritten file, the records the undo pointed back with), is in the converted storage."""
    source, destination = _convert(plone_filestorage, fresh_dsn, tmp_path, history_preserving=True)
    try:
        history = assert_same_history(source, destination)
        print(f"history: {dict(history)}")
        compared = assert_same_objects(source, destination)
        _assert_plone_objects(compared)
        # Older revisions were compared too: a blob's first file, the undone edit's records.
        assert history["revisions"] > compared.total() - compared["blob files"], history
        assert history["blob files"] > compared["blob files"], history
        assert history["back pointers"], history
        _read_site(destination)
    finally:
        source.close()
        destination.close()
