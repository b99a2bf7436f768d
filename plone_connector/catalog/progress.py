"""Progress of a rebuild (clearFindAndRebuild, refreshCatalog, reindexIndex): Zope's progress
handler (Products.ZCatalog.ProgressHandler: init, report, info, finish) if one is given, and log
lines with the count and the rate either way, so that an install or a rebuild of a large site
shows how far it is."""

from __future__ import annotations

import logging
import time

import transaction

logger = logging.getLogger("plone_connector.catalog")

# Transaction data key of the rebuild under way in the transaction (not the tool's _v_ attribute:
# the cache GC of a long rebuild may turn the tool into a ghost, and a ghost forgets those).
_KEY = object()


class Progress:
    def __init__(self, what: str, pghandler=None, expected: int = 0, every: int = 1000):
        self.what = what
        self.pghandler = pghandler
        self.expected = expected
        self.every = max(1, every)
        self.done = 0
        self.queued_objects = 0
        self.began = time.monotonic()
        if pghandler is not None:
            # ZLogHandler and StdoutHandler divide by the total for their estimate.
            pghandler.init(what, max(1, expected))
        logger.info("%s: started, %d objects expected", what, expected)

    def queued(self) -> bool:
        """Count an object queued for indexing; True every ``every`` of them (process the queue)."""
        self.queued_objects += 1
        return self.queued_objects % self.every == 0

    def rate(self) -> float:
        return self.done / max(time.monotonic() - self.began, 1e-9)

    def step(self) -> None:
        self.done += 1
        if self.pghandler is not None:
            self.pghandler.report(self.done)
        if self.done % self.every == 0:
            if self.done <= self.expected:
                logger.info("%s: %d/%d objects, %.0f objects/s", self.what, self.done, self.expected, self.rate())
            else:  # the estimate (the catalog's size before) was short
                logger.info("%s: %d objects (%d expected), %.0f objects/s", self.what, self.done, self.expected,
                            self.rate())

    def info(self, text: str) -> None:
        if self.pghandler is not None:
            self.pghandler.info(text)

    def finish(self) -> None:
        if self.pghandler is not None:
            self.pghandler.finish()
        logger.info("%s: %d objects in %.1f s, %.0f objects/s (the catalog changes when the transaction commits)",
                    self.what, self.done, time.monotonic() - self.began, self.rate())


def begin(what: str, pghandler=None, expected: int = 0, every: int = 1000) -> Progress:
    progress = Progress(what, pghandler, expected, every)
    transaction.get().set_data(_KEY, progress)
    return progress


def end(progress: Progress, finished: bool) -> None:
    transaction.get().set_data(_KEY, None)
    if finished:
        progress.finish()


def current() -> Progress | None:
    """The rebuild under way in this transaction, if any."""
    try:
        return transaction.get().data(_KEY)
    except KeyError:
        return None
