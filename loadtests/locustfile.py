"""Locust scenarios for a running catalog service.

    locust -f loadtests/locustfile.py --headless -u 20 -r 5 -t 30s --host http://127.0.0.1:8080

Three kinds of users (see loadtests/README.md):

- ``AnonymousVisitor``: a headless frontend's GET /search (site search, news listing, folder
  listing), no credentials.
- ``PloneConnector``: Plone pages through the connector, POST /catalogs/{id}/query with the
  user's principals in X-Catalog-Principals (folder listing, navigation tree, collection).
- ``Indexer``: Plone transactions that change content: a batch staged and then committed
  (what the connector does at tpc_vote / tpc_finish), re-indexing a fixed pool of objects under
  /plone/loadtest-N with a newer version each time, so the catalog does not grow during a run.

Settings come from the environment: ``CATALOG_ID`` (default ``demo``, the catalog ``make run``
loads), ``CATALOG_TOKEN`` (the catalog's connector token or the admin token; without one only
anonymous visitors run), ``LOADTEST_BATCH`` (entries per batch, default 50), ``LOADTEST_OBJECTS``
(with a token, create the catalog with this many demo objects when it is missing; default 2000).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time

from locust import HttpUser, between, events, task
from locust.exception import StopUser

from catalog_service.demo import WORDS, objects, plone_catalog

CATALOG = os.environ.get("CATALOG_ID", "demo")
TOKEN = os.environ.get("CATALOG_TOKEN", "")
BATCH = int(os.environ.get("LOADTEST_BATCH", "50"))
OBJECTS = int(os.environ.get("LOADTEST_OBJECTS", "2000"))
TYPES = ["Document", "News Item", "Event"]
# Principals of a logged-in member, as Plone's catalog tool computes them.
PRINCIPALS = json.dumps(["Anonymous", "Authenticated", "Member", "user:joe", "AuthenticatedUsers"])

# Paths of the demo corpus's folders (~100 objects each, in sections: catalog_service.demo.layout);
# found at start.
folders = ["/plone"]


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


@events.test_start.add_listener
def prepare(environment, **_kw):
    """Find the corpus size; with a token, create and fill the catalog when it is missing."""
    global folders
    import httpx

    with httpx.Client(base_url=environment.host, timeout=600) as client:
        info = client.get(f"/catalogs/{CATALOG}", headers=auth()) if TOKEN else None
        if info is not None and info.status_code == 404:
            created = client.post("/catalogs", headers=auth(), json=plone_catalog(CATALOG).model_dump(mode="json"))
            created.raise_for_status()
            entries = list(objects(OBJECTS))
            for start in range(0, len(entries), 2000):
                client.post(f"/catalogs/{CATALOG}/batches", headers=auth(),
                            json={"batch_id": f"loadtest-setup-{start}", "entries": entries[start:start + 2000]},
                            ).raise_for_status()
        # The folders, as the searches below will see them: folderish objects two levels down.
        # (The connector's route: physical paths, and no public page limit.)
        answer = client.post(f"/catalogs/{CATALOG}/query", headers={**auth(), "X-Catalog-Unrestricted": "1"},
                             json={"query": {"portal_type": "Folder", "path": {"query": "/plone", "depth": 2}},
                                   "b_size": 5000})
        answer.raise_for_status()
        found = [item["path"] for item in answer.json()["items"] if item["path"].count("/") == 3]
        folders = found or folders


# The uids each indexer indexes (its own pool under /plone/loadtest-N): unindexed when the test
# stops, so that a run leaves the catalog with the objects it found.
indexed_uids: set[str] = set()


@events.test_stop.add_listener
def clean_up(environment, **_kw):
    import httpx

    if not TOKEN or not indexed_uids:
        return
    entries = [{"op": "unindex", "uid": uid, "version": time.time_ns()} for uid in sorted(indexed_uids)]
    with httpx.Client(base_url=environment.host, timeout=600) as client:
        client.post(f"/catalogs/{CATALOG}/batches", headers=auth(),
                    json={"batch_id": f"loadtest-cleanup-{time.time_ns()}", "entries": entries}).raise_for_status()
    indexed_uids.clear()


def folder() -> str:
    return random.choice(folders)


class AnonymousVisitor(HttpUser):
    weight = 6
    wait_time = between(0.5, 2)

    @task(3)
    def site_search(self):
        self.client.get("/search", params={"catalog": CATALOG, "SearchableText": random.choice(WORDS),
                                           "b_size": 20}, name="/search SearchableText")

    @task(2)
    def news_listing(self):
        self.client.get("/search", params={"catalog": CATALOG, "portal_type": "News Item", "sort_on": "modified",
                                           "sort_order": "reverse", "b_size": 10}, name="/search news")

    @task(2)
    def folder_listing(self):
        query = {"path": {"query": folder(), "depth": 1}, "sort_on": "getObjPositionInParent"}
        self.client.get("/search", params={"catalog": CATALOG, "q": json.dumps(query), "b_size": 20},
                        name="/search folder listing")


class PloneConnector(HttpUser):
    weight = 3
    wait_time = between(0.2, 1)

    def on_start(self):
        if not TOKEN:
            raise StopUser()  # the connector's queries need its credential

    def query(self, query: dict, b_size: int, name: str):
        self.client.post(f"/catalogs/{CATALOG}/query", json={"query": query, "b_size": b_size},
                         headers={**auth(), "X-Catalog-Principals": PRINCIPALS}, name=name)

    @task(4)
    def folder_listing(self):
        self.query({"path": {"query": folder(), "depth": 1}, "portal_type": TYPES,
                    "sort_on": "getObjPositionInParent"}, 20, "query folder listing")

    @task(2)
    def navigation_tree(self):
        self.query({"path": {"query": folder() + "/document-x", "navtree": 1}, "sort_on": "getObjPositionInParent"},
                   200, "query navigation tree")

    @task(1)
    def collection(self):
        self.query({"portal_type": ["News Item", "Event"], "modified": {"query": "2023-01-01", "range": "min"},
                    "sort_on": "modified", "sort_order": "reverse"}, 20, "query collection")


class Indexer(HttpUser):
    weight = 1
    wait_time = between(1, 3)
    # Each indexer re-indexes its own slice of a fixed pool, so versions only grow per object.
    serial = itertools.count()

    def on_start(self):
        if not TOKEN:
            raise StopUser()
        serial = next(self.serial)
        self.pool = list(objects(BATCH * 4, seed=1000 + serial, site=f"/plone/loadtest-{serial}"))
        indexed_uids.update(entry["uid"] for entry in self.pool)
        self.round = 0

    @task
    def transaction(self):
        """One Plone transaction's batch: staged at tpc_vote, committed at tpc_finish."""
        start = (self.round % 4) * BATCH
        self.round += 1
        version = time.time_ns()
        entries = [{**entry, "version": version} for entry in self.pool[start:start + BATCH]]
        batch_id = f"loadtest-{id(self):x}-{version}"
        with self.client.post(f"/catalogs/{CATALOG}/batches?stage=true", json={"batch_id": batch_id,
                              "entries": entries}, headers=auth(), name="batch stage", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"{r.status_code}: {r.text[:200]}")
                return
        self.client.post(f"/catalogs/{CATALOG}/batches/{batch_id}/commit", headers=auth(), name="batch commit")
