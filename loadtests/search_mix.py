"""The requests of `make loadtest-search`: a headless frontend's search traffic, as plain functions.

Two mixes of the same request kinds, drawn from one seeded random generator:

- ``headless``: what a headless frontend (Volto, Next.js, an app) sends to the service's
  ``GET /search``: a site search with facets (and highlighted snippets, once the route offers
  them), the live search as the user types (``SearchableText=word*``, as Plone's livesearch asks),
  a news listing, a folder listing; and suggestions as the user types (``@suggest``, once the
  route exists);
- ``restapi``: the part of it that plone.restapi's ``@search`` can express, the same queries
  without facets, highlights and suggestions, sent to an ``@search`` (plone.restapi's on a stock
  Plone site, or the service's own);
- ``floor``: the bare floor's one folder listing (``/q?folder=N``, a FastAPI + asyncpg endpoint
  that does nothing else): what the same users get from the least a server can do on the machine.

The words searched are the corpus's words that are never subjects (``catalog_service.demo``:
subjects come from the first 20 words): Plone's SearchableText of a page holds its subjects
too, the corpus's does not, and a word that could be a subject would find more pages in Plone.
Text searches ask for the types whose Plone text index holds their body text (pages, news items,
events: File and Image have no rich text in Plone, so their words are not Plone's).

A request is a :class:`Call` (a name for the statistics, and the path with its query string), so
the load generator (``search_locustfile.py``), the run's check that both sides count the same
items (``search_run.py``) and the tests share it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from urllib.parse import urlencode

from catalog_service.demo import WORDS, folder_path, layout

SEARCH_WORDS = WORDS[20:]
TEXT_TYPES = ("Document", "News Item", "Event")
FACETS = "portal_type,review_state,Subject"
# How often each kind is drawn (a user's next action).
WEIGHTS = {"site search": 4, "live search": 2, "news listing": 2, "folder listing": 2, "suggest": 3}
SHARED = ("site search", "live search", "news listing", "folder listing")  # what @search expresses
FLOOR_KIND = "floor listing"
FLOOR_FOLDERS = 1000  # the floor's table holds folders /plone/f0 to /plone/f999


@dataclass(frozen=True)
class Call:
    kind: str  # the request kind (WEIGHTS), the name in locust's statistics
    url: str  # path and query string


@dataclass
class Mix:
    """The requests one mix sends. ``search_path`` is the @search address of the restapi mix
    (``/plone/@search``, ``/{catalog}/@search``); ``highlight`` a ``name=value`` pair added to
    the headless site search (empty: none); ``suggest`` the suggest route's path (empty: none)."""

    mix: str  # "headless" or "restapi"
    catalog: str
    objects: int
    search_path: str = ""
    highlight: str = ""
    suggest: str = ""
    site: str = "/plone"
    kinds: list[str] = field(init=False)

    def __post_init__(self):
        if self.mix not in ("headless", "restapi", "floor"):
            raise ValueError(f"mix must be headless, restapi or floor, not {self.mix!r}")
        if self.mix == "restapi" and not self.search_path:
            raise ValueError("the restapi mix needs the @search path")
        if self.mix == "floor":
            self.kinds = [FLOOR_KIND]
            return
        self.kinds = [k for k in WEIGHTS if k in SHARED or (self.mix == "headless" and self.suggest)]

    def draw(self, rnd: random.Random) -> list[Call]:
        """The requests of one user action (several for suggestions as the user types)."""
        if self.mix == "floor":
            return self.calls(FLOOR_KIND, rnd)
        kind = rnd.choices(self.kinds, weights=[WEIGHTS[k] for k in self.kinds])[0]
        return self.calls(kind, rnd)

    def calls(self, kind: str, rnd: random.Random) -> list[Call]:
        if kind == FLOOR_KIND:
            return [Call(kind, f"/q?folder={rnd.randrange(FLOOR_FOLDERS)}")]
        word = rnd.choice(SEARCH_WORDS)
        if kind == "suggest":  # one request per key stroke from the second letter on
            return [Call(kind, f"{self.suggest}?" + urlencode({"q": word[:n]})) for n in range(2, min(len(word), 5) + 1)]
        if kind == "site search":
            params = [("SearchableText", word), *(("portal_type", t) for t in TEXT_TYPES), ("b_size", "20")]
            if self.mix == "headless":
                params.append(("facets", FACETS))
                if self.highlight:
                    params.append(tuple(self.highlight.split("=", 1)))
        elif kind == "live search":
            params = [("SearchableText", word[:rnd.randrange(3, min(len(word), 5) + 1)] + "*"),
                      *(("portal_type", t) for t in TEXT_TYPES), ("b_size", "10")]
        elif kind == "news listing":
            params = [("portal_type", "News Item"), ("sort_on", "modified"), ("sort_order", "reverse"),
                      ("b_size", "10")]
        elif kind == "folder listing":
            folder = folder_path(rnd.randrange(layout(self.objects)[1]), self.objects, self.site)
            params = [("path.query", folder), ("path.depth:int", "1"), ("sort_on", "getObjPositionInParent"),
                      ("b_size", "20")]
        else:
            raise ValueError(f"unknown request kind {kind!r}")
        if self.mix == "headless":
            return [Call(kind, "/search?" + urlencode([("catalog", self.catalog), *params]))]
        return [Call(kind, f"{self.search_path}?" + urlencode(params))]


def shared_sample(count: int, seed: int = 7) -> list[tuple[str, int]]:
    """``count`` (kind, seed) pairs over the shared kinds: the sample both sides must count alike."""
    rnd = random.Random(seed)
    return [(SHARED[n % len(SHARED)], rnd.randrange(2**32)) for n in range(count)]


def same_request(kind: str, seed: int, *mixes: Mix) -> list[Call]:
    """The request of ``kind`` drawn from ``seed``, on each mix: the same query in each one's form."""
    return [mix.calls(kind, random.Random(seed))[0] for mix in mixes]
