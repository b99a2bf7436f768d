"""ZCTextIndex declarations: only what the service scores and splits as ZCatalog does is sent."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from Products.CMFPlone.UnicodeSplitter.splitter import I18NNormalizer
from Products.CMFPlone.UnicodeSplitter.splitter import Splitter as PloneSplitter
from Products.ZCatalog.ZCatalog import ZCatalog
from Products.ZCTextIndex.CosineIndex import CosineIndex
from Products.ZCTextIndex.Lexicon import CaseNormalizer, Splitter, StopWordRemover
from Products.ZCTextIndex.OkapiIndex import OkapiIndex
from Products.ZCTextIndex.ZCTextIndex import PLexicon, ZCTextIndex

from plone_connector.catalog.errors import ServiceRejected
from plone_connector.catalog.schema import declaration


def _catalog_with(index_name: str, lexicon_id: str, index_type: str, *elements) -> ZCatalog:
    catalog = ZCatalog("portal_catalog")
    catalog._setObject(lexicon_id, PLexicon(lexicon_id, "", *elements))
    extra = SimpleNamespace(doc_attr=index_name, lexicon_id=lexicon_id, index_type=index_type)
    catalog.addIndex(index_name, ZCTextIndex(index_name, extra=extra, caller=catalog))
    return catalog


def test_plone_lexicon_is_declared():
    catalog = _catalog_with("SearchableText", "plone_lexicon", "Okapi BM25 Rank", PloneSplitter(), I18NNormalizer())
    decl = declaration(catalog._catalog.getIndex("SearchableText"))
    assert (decl.type, decl.lexicon_id, decl.index_type) == ("ZCTextIndex", "plone_lexicon", "Okapi BM25 Rank")


@pytest.mark.parametrize("elements", [
    (Splitter(), CaseNormalizer()),                       # ZCatalog's plaintext_lexicon
    (PloneSplitter(), I18NNormalizer(), StopWordRemover()),  # Plone's, plus stop words
    (PloneSplitter(),),                                   # no case folding
])
def test_other_lexicons_are_refused(elements):
    catalog = _catalog_with("Body", "other_lexicon", "Okapi BM25 Rank", *elements)
    with pytest.raises(ServiceRejected, match="plone_lexicon pipeline"):
        declaration(catalog._catalog.getIndex("Body"))


def test_cosine_measure_is_refused():
    catalog = _catalog_with("Title", "plone_lexicon", "Cosine Measure", PloneSplitter(), I18NNormalizer())
    with pytest.raises(ServiceRejected, match="Okapi BM25 Rank"):
        declaration(catalog._catalog.getIndex("Title"))


def test_an_index_made_with_an_index_factory_is_declared_by_its_ranking():
    catalog = ZCatalog("portal_catalog")
    catalog._setObject("plone_lexicon", PLexicon("plone_lexicon", "", PloneSplitter(), I18NNormalizer()))
    extra = SimpleNamespace(doc_attr="x", lexicon_id="plone_lexicon")
    catalog.addIndex("Cos", ZCTextIndex("Cos", extra=extra, caller=catalog, index_factory=CosineIndex))
    catalog.addIndex("Ok", ZCTextIndex("Ok", extra=extra, caller=catalog, index_factory=OkapiIndex))
    with pytest.raises(ServiceRejected, match="CosineIndex"):
        declaration(catalog._catalog.getIndex("Cos"))
    assert declaration(catalog._catalog.getIndex("Ok")).index_type == "Okapi BM25 Rank"
