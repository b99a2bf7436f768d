"""Locust users of `make loadtest-search` (loadtests/search_run.py): one mix of search_mix.py.

    LOADSEARCH_MIX=headless LOADSEARCH_CATALOG=loadsearch-100000 LOADSEARCH_OBJECTS=100000 \\
        locust -f loadtests/search_locustfile.py --headless -u 50 -t 60s --host http://127.0.0.1:8080

Each user sends its next request as soon as the last one is answered (no think time, unless
``LOADSEARCH_THINK`` gives some): the figures are the throughput of the server under that many
concurrent users, and the latency it answers with then. Settings (environment): ``LOADSEARCH_MIX`` (``headless`` or ``restapi``),
``LOADSEARCH_CATALOG``, ``LOADSEARCH_OBJECTS`` (the corpus size: the folders the listings pick
from), ``LOADSEARCH_SEARCH_PATH`` (the restapi mix's ``@search`` path), ``LOADSEARCH_HIGHLIGHT``
(a ``name=value`` pair for the site search; empty: none), ``LOADSEARCH_SUGGEST`` (the suggest
route's path; empty: none), ``LOADSEARCH_SEED``, ``LOADSEARCH_THINK`` (``MIN,MAX`` seconds of think
time between a user's actions instead of none), ``LOADSEARCH_SAMPLES`` (a file to write every
response's kind, end time, milliseconds and failure to, as JSON lines, when locust quits).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
import time
from pathlib import Path

from locust import FastHttpUser, between, constant, events, task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_mix import Mix  # noqa: E402

MIX = Mix(mix=os.environ.get("LOADSEARCH_MIX", "headless"), catalog=os.environ.get("LOADSEARCH_CATALOG", "demo"),
          objects=int(os.environ.get("LOADSEARCH_OBJECTS", "2000")),
          search_path=os.environ.get("LOADSEARCH_SEARCH_PATH", ""),
          highlight=os.environ.get("LOADSEARCH_HIGHLIGHT", ""), suggest=os.environ.get("LOADSEARCH_SUGGEST", ""))
SEED = int(os.environ.get("LOADSEARCH_SEED", "1"))
THINK = [float(s) for s in os.environ.get("LOADSEARCH_THINK", "").split(",") if s.strip()]
HEADERS = {"Accept": "application/json"}  # plone.restapi answers JSON only when asked for it
SAMPLES = os.environ.get("LOADSEARCH_SAMPLES", "")
answered: list[tuple[str, float, float, bool]] = []  # (kind, end time, ms, failed)


@events.request.add_listener
def record(name, response_time, exception, **_kw):
    answered.append((name, time.time(), response_time, exception is not None))


@events.quitting.add_listener
def write_samples(**_kw):
    """Every response, so that runs in several rounds give exact percentiles together."""
    if SAMPLES:
        with open(SAMPLES, "w") as f:
            f.writelines(json.dumps(sample) + "\n" for sample in answered)


class SearchUser(FastHttpUser):
    wait_time = between(*THINK) if THINK else constant(0)
    serial = itertools.count()

    def on_start(self):
        # Each user its own generator, seeded by its number: a run draws the same requests in
        # each mix (as far as the users get).
        self.rnd = random.Random(SEED * 100_003 + next(self.serial))

    @task
    def act(self):
        for call in MIX.draw(self.rnd):
            self.client.get(call.url, headers=HEADERS, name=call.kind)
