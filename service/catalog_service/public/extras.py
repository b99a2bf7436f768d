"""The opt-in parts of a public search, ``highlight`` and ``typo``, for every public route.

A route reads the two parameters into :class:`SearchExtras` (None when neither is asked, and then
nothing here runs and the answer is byte for byte what it is without this module). The search
calls :meth:`SearchExtras.prepare` with the catalog before it runs (names checked, the metadata
highlighting reads), :meth:`SearchExtras.after` on the same connection once the page is found
(corrected matches appended, the page's highlights read), and the route's serializer adds what
they found with :meth:`SearchExtras.item` and :meth:`SearchExtras.answer`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store.catalogs import Catalog
from ..store.search import Page
from ..text.snippets import QueryTerms
from .highlight import HighlightFields, check_page_size, highlight_fields, page_highlights, query_terms
from .query import FALSY
from .typo import Typos, typo_requested, with_corrections

PARAMETERS = ("highlight", "typo")
# The two query parameters in the OpenAPI description of the GET routes.
EXTRA_DESCRIPTIONS = [
    {"name": "highlight", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "array", "items": {"type": "string"}},
     "description": "Snippets of each item of the page with the text query's words in <mark>, HTML-escaped: "
                    "true (Title, Description, SearchableText, those the catalog has) or field names "
                    "(metadata columns, text indexes; repeat, or separate with commas). Pages of at most 100 "
                    "items"},
    {"name": "typo", "in": "query", "required": False, "schema": {"type": "boolean"},
     "description": "Correct words of the text query that no visible object holds (1 edit for words of 5-8 "
                    "characters, 2 for longer): the corrected matches follow the exact ones, with "
                    "did_you_mean and corrections in the answer"},
]


@dataclass
class SearchExtras:
    highlight: object = None  # the parameter as given: a boolean, field names, or text
    typo: bool = False
    fields: HighlightFields | None = None
    typos: Typos | None = None
    highlights: list[dict] | None = None

    @classmethod
    def of(cls, highlight=None, typo=None) -> SearchExtras | None:
        """The extras a request asks for, None when it asks for neither (``highlight`` absent or
        false, ``typo`` absent or false)."""
        wanted = typo_requested(typo)
        if isinstance(highlight, list | tuple) and len(highlight) == 1:
            highlight = highlight[0]
        off = highlight is None or highlight is False or (isinstance(highlight, str)
                                                          and highlight.strip().lower() in FALSY)
        if off and not wanted:
            return None
        return cls(highlight=None if off else highlight, typo=wanted)

    def prepare(self, catalog: Catalog, b_size: int | None) -> list[str]:
        """Check the parameters against ``catalog`` and the page size; the metadata columns the
        highlights read."""
        self.fields = highlight_fields(self.highlight, catalog)
        if self.fields is None:
            return []
        check_page_size(b_size)
        return sorted(self.fields.metadata)

    def metadata(self, catalog: Catalog, b_size: int | None, read):
        """:meth:`prepare`, and ``read`` (the metadata the search reads: names, or ``"*"`` or
        None for all) with the columns the highlights read."""
        highlighted = self.prepare(catalog, b_size)
        return read if read in (None, "*") else list(dict.fromkeys([*read, *highlighted]))

    async def after(self, catalog: Catalog, reader, body, page: Page) -> Page:
        """The page with the corrected matches after the exact ones (typo), its highlights read."""
        if self.typo:
            page, self.typos = await with_corrections(reader, catalog, body, page)
        if self.fields is not None:
            corrections = self.typos.corrections if self.typos else {}
            terms = query_terms(body.query, catalog) | QueryTerms(
                frozenset(w for found in corrections.values() for w in found))
            self.highlights = await page_highlights(reader, catalog, page.brains, self.fields, terms,
                                                    reader.security(body.show_inactive))
        return page

    def item(self, position: int, item: dict) -> dict:
        """The item at ``position`` of the page with its highlights and whether it is a corrected
        match."""
        if self.highlights is not None:
            item["highlight"] = self.highlights[position]
        if self.typos is not None:
            item["corrected"] = self.typos.exact is not None and position >= self.typos.exact
        return item

    def answer(self, answer: dict) -> dict:
        if self.typos is not None:
            answer["did_you_mean"] = self.typos.did_you_mean
            answer["corrections"] = self.typos.corrections
        return answer
