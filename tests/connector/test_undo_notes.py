"""The paths a transaction notes for an undo to follow (plone_connector/catalog/undo.py): each once,
per catalog tool, kept within what FileStorage stores of a transaction's extension (64 KiB), and a
clear or too many paths noted as the whole catalog."""

from __future__ import annotations

import pickle

import pytest
import transaction

from plone_connector.catalog import undo


class Tool:
    def __init__(self, path: str):
        self.path = path

    def getPhysicalPath(self):
        return tuple(self.path.split("/"))


@pytest.fixture
def txn():
    manager = transaction.TransactionManager()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(undo.transaction, "get", manager.get)
        yield manager.get()
    manager.abort()


def test_each_path_once_per_tool(txn):
    first, second = Tool("/site/portal_catalog"), Tool("/other/portal_catalog")
    for path in ("/site/a", "/site/b", "/site/a"):
        undo.note(first, path)
    undo.note(second, "/other/a")
    assert txn.extension[undo.EXTENSION_KEY] == {"/site/portal_catalog": ["/site/a", "/site/b"],
                                                  "/other/portal_catalog": ["/other/a"]}


def test_a_clear_notes_the_whole_catalog(txn):
    tool = Tool("/site/portal_catalog")
    undo.note(tool, "/site/a")
    undo.note(tool, None)
    undo.note(tool, "/site/b")
    assert txn.extension[undo.EXTENSION_KEY] == {"/site/portal_catalog": None}


def test_too_many_paths_note_the_whole_catalog_and_fit_a_filestorage_extension(txn):
    tool = Tool("/site/portal_catalog")
    for i in range(5000):
        undo.note(tool, f"/site/folder-with-a-long-name/document-number-{i:05d}")
    assert txn.extension[undo.EXTENSION_KEY] == {"/site/portal_catalog": None}


def test_the_largest_note_fits_a_filestorage_extension(txn):
    tool = Tool("/site/portal_catalog")
    i = 0
    while txn.extension.get(undo.EXTENSION_KEY, {}).get("/site/portal_catalog", []) is not None:
        before = pickle.dumps(txn.extension, protocol=3)
        undo.note(tool, f"/site/日本語-{i:06d}")
        i += 1
    assert len(before) < 65535 - 2000  # room left for the batch ids and other extension keys
