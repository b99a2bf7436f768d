"""Brains and lazy result sequences built from the service's answers.

A brain behaves like a ZCatalog brain: metadata columns are attributes (``Missing.Value`` when the
object had no value), and ``getPath``/``getURL``/``getObject``/``getRID`` work the same way. A result
sequence's ``len()`` is the full count; items past the pages already fetched are fetched on access.
"""

from __future__ import annotations

import Missing
from Acquisition import Implicit, aq_base, aq_get, aq_parent
from Products.ZCatalog.interfaces import ICatalogBrain
from zope.globalrequest import getRequest
from zope.interface import implementer
from ZPublisher.BaseRequest import RequestContainer
from ZTUtils.Lazy import LazyMap

from .wire import decode_metadata

_ABSENT = object()
# The largest page a lazy result asks for at once (the service allows up to 5,000).
MAX_PAGE = 1000


class BrainRecord:
    """What the service returned for one object, shared by the brains made of it (and the cache).

    Metadata columns are decoded when first read: a listing reads a few of some 30 columns, and
    decoding a DateTime costs more than the rest of a brain.
    """

    __slots__ = ("path", "rid", "uid", "score", "raw", "decoded")

    def __init__(self, path: str, rid: int, uid: str, score, raw: dict):
        self.path = path
        self.rid = rid
        self.uid = uid
        self.score = score
        self.raw = raw
        self.decoded: dict = {}

    @classmethod
    def from_item(cls, item: dict) -> BrainRecord:
        """The record of one item of the service's search answer."""
        metadata = item.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {k: v for k, v in item.items() if k not in ("uid", "path", "rid", "score")}
        return cls(path=item["path"], rid=item["rid"], uid=item["uid"], score=item.get("score"), raw=metadata)

    def value(self, name: str):
        try:
            return self.decoded[name]
        except KeyError:
            pass
        raw = self.raw.get(name, _ABSENT)
        # Two threads may decode the same column at once; both get equal values.
        value = Missing.Value if raw is _ABSENT else decode_metadata(raw)
        self.decoded[name] = value
        return value


@implementer(ICatalogBrain)
class CatalogBrain(Implicit):
    # ZPublisher and restricted code may read metadata like on ZCatalog brains.
    __allow_access_to_unprotected_subobjects__ = True

    def __init__(self, record: BrainRecord, schema, top_score=None):
        """``schema``: the metadata column names, or a ``{name: position}`` built once per result.
        ``top_score``: the score of the result's first brain, when it is ranked by relevance."""
        self.__dict__["_record"] = record
        if not isinstance(schema, dict):
            schema = {name: i for i, name in enumerate(schema)}
        self.__dict__["__record_schema__"] = schema
        self.__dict__["data_record_id_"] = record.rid
        score = record.score
        if score is None or top_score is None:
            # Catalog.__getitem__ gives 1 and 1 to brains that are not ranked.
            score = normalized = 1
        else:
            # Catalog.search: normalized to 0-100 from the best score (which is never 0 there:
            # ZCatalog would raise ZeroDivisionError as this does).
            normalized = int(100.0 * score / top_score)
        self.__dict__["data_record_score_"] = score
        self.__dict__["data_record_normalized_score_"] = normalized

    def __getattr__(self, name):
        # Only reached when the attribute is not set yet: a metadata column read the first time.
        if name in self.__dict__["__record_schema__"]:
            value = self.__dict__["_record"].value(name)
            self.__dict__[name] = value
            return value
        raise AttributeError(name)

    def __setattr__(self, name, value):
        # Brains are read-only records, as ZCatalog's are.
        raise AttributeError(f"catalog brains are read-only ({name})")

    def __getitem__(self, key):
        if isinstance(key, int):
            names = list(self.__record_schema__)
            return getattr(self, names[key])
        if key in self.__record_schema__:
            return getattr(self, key)
        raise KeyError(key)

    def __repr__(self):
        return f"<CatalogBrain {self._record.path}>"

    def has_key(self, key):
        return key in self.__record_schema__

    def __contains__(self, name):
        return name in self.__record_schema__

    def getPath(self):
        return self._record.path

    def getURL(self, relative=0):
        request = aq_get(self, "REQUEST", None)
        if request is None:
            request = getRequest()
        return request.physicalPathToURL(self.getPath(), relative)

    def _traversal_root(self):
        parent = aq_parent(self)
        if aq_get(parent, "REQUEST", None) is None:
            request = getRequest()
            if request is not None:
                parent = self.getPhysicalRoot()
                parent = aq_base(parent).__of__(RequestContainer(REQUEST=request))
        return parent

    def _unrestrictedGetObject(self):
        return self._traversal_root().unrestrictedTraverse(self.getPath())

    def getObject(self, REQUEST=None):
        path = self.getPath().split("/")
        if not path:
            return None
        parent = self._traversal_root()
        if len(path) > 1:
            parent = parent.unrestrictedTraverse(path[:-1])
        return parent.restrictedTraverse(path[-1])

    def getRID(self):
        # A rid asked of a brain usually goes to getpath or getIndexDataForRID next, which the
        # service cannot answer by rid: the tool keeps the pair for this transaction.
        parent = aq_parent(self)
        if getattr(aq_base(parent), "_remember_rid", None) is not None:
            parent._remember_rid(self._record.rid, self._record.path)
        return self._record.rid


class LazyResults(LazyMap):
    """A result sequence whose pages are fetched from the service as they are read.

    A LazyMap by class (its state is its own): Plone registers adapters such as IContentListing
    for ZCatalog's LazyMap and LazyCat classes, not for an interface.
    """

    def __init__(self, wrap, fetch_page, first_page: list[BrainRecord], first_start: int,
                 length: int, actual_result_count: int, page_size: int):
        self._wrap = wrap
        self._fetch_page = fetch_page
        self._page_size = page_size
        self._records: dict[int, BrainRecord] = {}
        for offset, record in enumerate(first_page):
            self._records[first_start + offset] = record
        self._len = length
        self.actual_result_count = actual_result_count

    def __len__(self):
        return self._len

    def __getitem__(self, index):
        if isinstance(index, slice):
            return super().__getitem__(index)
        if index < 0:
            index += self._len
        if index < 0 or index >= self._len:
            raise IndexError(index)
        record = self._records.get(index)
        if record is None:
            start = index - index % self._page_size
            size = self._page_size
            if index - 1 in self._records:
                # Read on from what was read: pages grow fourfold (20, 80, 400, ... up to
                # MAX_PAGE), so a caller that walks a long result (navigation trees do) needs a few
                # requests, while one that reads a page or jumps to a batch fetches no more.
                size = max(size, 4 * len(self._records))
            size = min(MAX_PAGE, size, self._len - start)
            for offset, fetched in enumerate(self._fetch_page(start, size)):
                self._records[start + offset] = fetched
            record = self._records.get(index)
            if record is None:
                # The catalog changed between pages; behave like a shorter sequence.
                raise IndexError(index)
        return self._wrap(record)

    def __iter__(self):
        for i in range(self._len):
            try:
                yield self[i]
            except IndexError:
                return
