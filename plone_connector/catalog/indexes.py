"""The service tool's index objects, with their data read from the catalog service.

The tool keeps ZCatalog's index objects for what they define (type, indexed attributes,
properties); they hold no data. Plone reads some index data straight from them: the search page's
type filter (``_catalog.getIndex("portal_type").uniqueValues()``), the Keywords vocabulary (the
Subject index's ``_index``, or ``uniqueValues`` and ``_apply_index`` of ``_catalog.indexes``), the
type control panels (``Indexes["portal_type"].uniqueValues(withLengths=True)``), plone.app.uuid
(``Indexes["UID"]._index.get(uuid)``, then ``getpath(rid)``), plone.app.multilingual
(``numObjects()``); the ZMI's index list reads every index's ``numObjects`` and ``indexSize``.
``ServiceCatalog``, the class of the tool's ``_catalog``, hands its index objects out in proxies
(zope.proxy) that answer those reads from the service for every index type as ZCatalog's index
classes answer them (or raise), seeing the transaction's pending changes as the tool's searches
do. Everything else (``meta_type``,
properties, the interfaces adapters are looked up by, writes) reaches the index object itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from Acquisition import Implicit, aq_base, aq_chain, aq_parent
from BTrees.IIBTree import IITreeSet
from DateTime import DateTime
from Products.ZCatalog.Catalog import Catalog
from zope.proxy import ProxyBase, getProxiedObject, non_overridable

from .interfaces import is_service_tool

# Index types whose values the service lists (unique_values_sql), as ZCatalog's UnIndex does.
VALUE_INDEXES = ("FieldIndex", "KeywordIndex", "UUIDIndex", "DateIndex", "DateRecurringIndex")
PATH_INDEXES = ("ExtendedPathIndex", "PathIndex")
# Index types that store nothing (plone.folder's GopipIndex): their own answers are right.
STUB_INDEXES = ("GopipIndex",)


def definitions(catalog) -> dict:
    """The catalog's stored index objects by name, never proxies (a ghost catalog's __dict__ is
    empty until it is activated)."""
    base = aq_base(catalog)
    base._p_activate()
    return base.__dict__["indexes"]


def definition(catalog, name: str):
    """The index object itself (never a proxy), wrapped in ``catalog``."""
    return definitions(catalog)[name].__of__(catalog)


def service_tool(obj):
    """The ServiceCatalogTool ``obj`` was reached through, or None."""
    parent = aq_parent(obj)  # the usual case: obj is the catalog, reached as the tool's _catalog
    if parent is not None and is_service_tool(parent):
        return parent
    for item in aq_chain(obj):
        if is_service_tool(item):
            return item
    return None


def service_index(index, tool):
    """``index`` (wrapped in its catalog) in the proxy that reads its data from ``tool``."""
    if tool is None:
        return index
    meta_type = getattr(index, "meta_type", None)
    if meta_type in STUB_INDEXES:
        return index
    if meta_type in VALUE_INDEXES:
        return ValueIndexView(index, tool)
    if meta_type == "BooleanIndex":
        return BooleanIndexView(index, tool)
    if meta_type in PATH_INDEXES:
        return PathIndexView(index, tool)
    if meta_type == "DateRangeIndex":
        return DateRangeIndexView(index, tool)
    if meta_type == "ZCTextIndex":
        return TextIndexView(index, tool)
    return IndexView(index, tool)


class ServiceCatalog(Catalog):
    """The class of the service tool's ``_catalog`` (install sets it, uninstall puts Catalog back).

    ``getIndex`` and ``indexes`` give proxies when the catalog is reached through the tool; the
    stored ``indexes`` dict holds the index objects themselves, as in ZCatalog.
    """

    def _get_indexes(self):
        # Called on the unwrapped catalog; IndexMap is Implicit, so acquisition wraps it in the
        # catalog's context, where its reads find the tool.
        return IndexMap(self.__dict__["indexes"])

    def _set_indexes(self, value):
        if isinstance(value, IndexMap):  # Catalog.addIndex/delIndex assign back what they read
            value = value.definitions
        self.__dict__["indexes"] = value
        self._p_changed = True

    indexes = property(_get_indexes, _set_indexes)

    def getIndex(self, name):
        return service_index(definition(self, name), service_tool(self))

    def __getitem__(self, index):
        """The brain of a rid (or of a (score, normalized score, rid) tuple), as Catalog's."""
        tool = service_tool(self)
        if tool is None:
            return Catalog.__getitem__(self, index)
        rid = index[2] if isinstance(index, tuple) else index
        brain = tool._brain_for_path(tool.getpath(rid))
        if brain is None:
            raise KeyError(rid)
        return brain


class IndexMap(Implicit):
    """``_catalog.indexes``: the stored mapping of index objects, read as proxies."""

    def __init__(self, definitions: dict):
        self.definitions = definitions

    def _proxy(self, index):
        catalog = aq_parent(self)
        if catalog is None:  # reached without the tool (an unwrapped catalog): the object itself
            return index
        return service_index(index.__of__(catalog), service_tool(catalog))

    def __getitem__(self, name):
        return self._proxy(self.definitions[name])

    def get(self, name, default=None):
        index = self.definitions.get(name)
        return default if index is None else self._proxy(index)

    def __setitem__(self, name, index):
        self.definitions[name] = index

    def __delitem__(self, name):
        del self.definitions[name]

    def __contains__(self, name):
        return name in self.definitions

    def __iter__(self):
        return iter(self.definitions)

    def __len__(self):
        return len(self.definitions)

    def keys(self):
        return self.definitions.keys()

    def values(self):
        return [self._proxy(index) for index in self.definitions.values()]

    def items(self):
        return [(name, self._proxy(index)) for name, index in self.definitions.items()]


class IndexView(ProxyBase):
    """An index object whose data reads go to the service (any index type)."""

    __slots__ = ("_tool",)

    def __new__(cls, index, tool):
        return ProxyBase.__new__(cls, index)

    def __init__(self, index, tool):
        ProxyBase.__init__(self, index)
        self._tool = tool

    @non_overridable
    def _apply_index(self, request, resultset=None):
        """The rids (an IITreeSet) the index's part of ``request`` matches, as ZCatalog answers."""
        name = self.getId()
        if hasattr(request, "form"):
            request = request.form
        if name not in request:
            return None
        return IITreeSet(self._tool._rids_for({name: request[name]})), (name,)

    @non_overridable
    def clear(self):
        """As ZCatalog's index clear() (GenericSetup's importers call it after changing the index's
        properties): the service's index is emptied too, when the transaction commits."""
        getProxiedObject(self).clear()  # the index object itself (it holds nothing)
        self._tool._index_cleared(self.getId())

    @non_overridable
    def getEntryForObject(self, documentId, default=None):
        try:
            entry = self._tool.getIndexDataForRID(documentId)
        except KeyError:
            return default
        return entry.get(self.getId(), default)


class ValueIndexView(IndexView):
    """A Field, Keyword, UUID, Date or DateRecurring index: ZCatalog's UnIndex reads."""

    __slots__ = ()

    def _values(self, lengths: bool = False):
        found = self._tool._unique_values(self.getId(), lengths)
        if self._tool.value_type(self.getId()) == "datetime":
            return [DateTime(v) for v in found.values], found
        return list(found.values), found  # a copy: the answer may be cached

    @non_overridable
    def uniqueValues(self, name=None, withLengths=0):
        if name is not None and name != self.getId():
            return []
        values, found = self._values(bool(withLengths))
        if withLengths:
            return list(zip(values, found.lengths, strict=True))
        return values

    @non_overridable
    def numObjects(self):
        return self._values(lengths=True)[1].objects

    @non_overridable
    def indexSize(self):
        return len(self._values()[0])

    @property
    def _index(self):
        return ForwardIndex(self)


class BooleanIndexView(IndexView):
    """ZCatalog's BooleanIndex lists both values, the indexed one (its ``_index_value``) first."""

    __slots__ = ()

    @non_overridable
    def uniqueValues(self, name=None, withLengths=0):
        if name is not None and name != self.getId():
            return []
        indexed = bool(getattr(self, "_index_value", 1))
        keys = (indexed, not indexed)
        if not withLengths:
            return list(keys)
        found = self._tool._unique_values(self.getId(), lengths=True)
        counts = {bool(v): n for v, n in zip(found.values, found.lengths, strict=True)}
        return [(key, counts.get(key, 0)) for key in keys]

    @non_overridable
    def numObjects(self):
        return self._tool._unique_values(self.getId(), lengths=True).objects


class PathIndexView(IndexView):
    """ZCatalog's PathIndex and ExtendedPathIndex list the components of the indexed paths (at any
    level), ExtendedPathIndex with its None terminator first."""

    __slots__ = ()

    @non_overridable
    def uniqueValues(self, name=None, withLengths=0):
        # A generator, as PathIndex.uniqueValues is: nothing is read (or raised) before iterating.
        if name not in (None, self.getId(), "getPhysicalPath"):
            return
        if not withLengths:
            yield from self._tool._unique_values(self.getId()).values
            return
        found = self._tool._unique_values(self.getId(), lengths=True)
        if self.meta_type == "ExtendedPathIndex" and found.values:
            # Its withLengths counts each key with PathIndex's _search, which fails on the None
            # key every indexed object has (Products.ExtendedPathIndex 4.x): the same error.
            raise TypeError("'NoneType' object is not subscriptable")
        yield from zip(found.values, found.lengths, strict=True)

    @non_overridable
    def numObjects(self):
        return self._tool._unique_values(self.getId(), lengths=True).objects

    @non_overridable
    def indexSize(self):
        return self.numObjects()  # PathIndex counts objects in its length too


class DateRangeIndexView(IndexView):
    """ZCatalog's DateRangeIndex indexes every object (numObjects), never counts its length
    (indexSize is 0), and lists values only for its since and until attribute names."""

    __slots__ = ()

    @non_overridable
    def uniqueValues(self, name=None, withLengths=0):
        # A generator, as DateRangeIndex.uniqueValues is.
        if name not in (self.getSinceField(), self.getUntilField()):
            return
        found = self._tool._unique_values(self.getId(), bool(withLengths), attribute=name)
        if withLengths:
            yield from zip(found.values, found.lengths, strict=True)
        else:
            yield from found.values

    @non_overridable
    def numObjects(self):
        return self._tool._unique_values(self.getId(), lengths=True).objects


class TextIndexView(IndexView):
    """ZCTextIndex: numObjects counts distinct words, indexSize documents (its uniqueValues
    raises NotImplementedError, as the index object's own does)."""

    __slots__ = ()

    @non_overridable
    def numObjects(self):
        return self._tool._text_index_size(self.getId()).words

    @non_overridable
    def indexSize(self):
        return self._tool._text_index_size(self.getId()).documents


class ForwardIndex(Mapping):
    """An UnIndex's ``_index`` (value -> rids) read from the service: iterating gives the unique
    values in order; a lookup gives the rid (UUIDIndex) or an IITreeSet of rids."""

    def __init__(self, view: ValueIndexView):
        self._view = view

    def __iter__(self):
        return iter(self._view._values()[0])

    def __len__(self):
        return len(self._view._values()[0])

    def __getitem__(self, key):
        if not isinstance(key, (str, int, float, DateTime)):
            # None (or a list) would be no value of the query but a query of another kind.
            raise KeyError(key)
        rids = self._view._tool._rids_for({self._view.getId(): key})
        if not rids:
            raise KeyError(key)
        if self._view.meta_type == "UUIDIndex":
            return rids[0]
        return IITreeSet(rids)

    def __contains__(self, key):
        try:
            self[key]
        except KeyError:
            return False
        return True
