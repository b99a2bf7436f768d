"""What a scoped key's filter costs a search: the same page asked anonymously with the filter's
conditions in the request, and with a key holding them as its filter (docs/decisions/0020).

    DATABASE_URL=postgresql://127.0.0.1/test python -m benchmarks.scoped_keys_bench [--objects N] [--rounds R]

Starts a service on DATABASE_URL, makes a catalog of N Plone-like objects in 20 sections, and
prints the median and p95 latency (ms, over HTTP on one connection) of each search.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx

from catalog_schemas.api import CatalogCreate
from tests.live import start_service
from tests.service.test_facets import INDEXES

TYPES = ["Document", "News Item", "Event", "Folder", "Image"]


def objects(count: int):
    rng = random.Random(7)
    past = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    for number in range(count):
        section = f"/plone/section-{number % 20}"
        yield {"op": "index", "uid": f"u{number}", "path": f"{section}/folder-{number % 7}/item-{number}",
               "version": 1, "values": {
                   "allowedRolesAndUsers": ["Anonymous"] if rng.random() < 0.8 else ["Manager"],
                   "portal_type": rng.choice(TYPES), "review_state": "published",
                   "Subject": rng.sample(["a", "b", "c", "d"], 2), "id": f"item-{number}",
                   "effectiveRange": [past, None]},
               "metadata": {"Title": f"Item {number}"}}


def timed(client: httpx.Client, cases: dict, catalog: str, rounds: int) -> dict:
    """Per case (label -> (parameters, headers)): the latencies (ms) of ``rounds`` requests, the
    cases taken in turn, so that a change of the machine's load meets them all alike; and the total."""
    latencies: dict[str, list[float]] = {label: [] for label in cases}
    totals = {}
    for _ in range(rounds):
        for label, (params, headers) in cases.items():
            began = time.perf_counter()
            response = client.get("/search", params={"catalog": catalog, **params}, headers=headers)
            latencies[label].append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, response.text
            totals[label] = response.json()["items_total"]
    return {label: (statistics.median(found), sorted(found)[int(len(found) * 0.95) - 1], totals[label])
            for label, found in latencies.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the catalog (to look at its plans)")
    args = parser.parse_args()
    service = start_service(os.environ["DATABASE_URL"])
    name = "bench-keys-" + uuid.uuid4().hex[:6]
    try:
        with service.client() as admin:
            spec = CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"], settings={"site_path": "/plone"})
            assert admin.post("/catalogs", json=spec.model_dump()).status_code == 201
            batch = list(objects(args.objects))
            for start in range(0, len(batch), 5000):
                response = admin.post(f"/catalogs/{name}/batches",
                                      json={"batch_id": uuid.uuid4().hex, "entries": batch[start:start + 5000]})
                assert response.status_code == 200, response.text
            scope = {"path": "/plone/section-3", "portal_type": ["News Item", "Document"]}
            key = admin.post(f"/catalogs/{name}/keys", json={"name": "bench", "filter": scope}).json()["key"]
        cases = {
            "anonymous, filter in the request": ({"q": '{"path": "/plone/section-3", "portal_type": '
                                                       '["News Item", "Document"]}', "sort_on": "id"}, {}),
            "key, empty request": ({"sort_on": "id"}, {"Authorization": f"Bearer {key}"}),
            "anonymous, + Subject=a": ({"q": '{"path": "/plone/section-3", "portal_type": ["News Item", '
                                             '"Document"], "Subject": "a"}', "sort_on": "id"}, {}),
            "key, Subject=a": ({"Subject": "a", "sort_on": "id"}, {"Authorization": f"Bearer {key}"}),
            "anonymous, facets": ({"q": '{"path": "/plone/section-3", "portal_type": ["News Item", '
                                        '"Document"]}', "facets": "portal_type,Subject"}, {}),
            "key, facets": ({"facets": "portal_type,Subject"}, {"Authorization": f"Bearer {key}"}),
        }
        with httpx.Client(base_url=service.url, timeout=60) as client:
            print(f"{args.objects} objects, {args.rounds} rounds; median / p95 ms, items_total")
            timed(client, cases, name, 20)  # warm
            for label, (median, p95, total) in timed(client, cases, name, args.rounds).items():
                print(f"  {label:36s} {median:6.2f} / {p95:6.2f}  {total}")
    finally:
        if not args.keep:
            with service.client() as admin:
                admin.delete(f"/catalogs/{name}")
        service.stop()


if __name__ == "__main__":
    main()
