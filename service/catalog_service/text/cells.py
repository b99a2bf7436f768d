"""Score cells: where the best-scoring documents of a word are (docs/decisions/0007).

For one word, a document's Okapi score (:mod:`catalog_service.text.okapi`) depends on two of its
own numbers only: how often the word occurs in it (``f``) and its length in words (``len``). It
grows with ``f`` and shrinks with ``len``. Both are put in buckets, exact up to 8 and then about
20% wide; a word's *cell* in a document is (bucket of f, bucket of len). Every document of a cell
scores between the score at (lowest f, highest len) and the score at (highest f, lowest len) of
the cell, whatever the catalog's statistics are at query time.

The database holds the same buckets (``catalog_text_bucket`` in migration 0003), a GIN index on
each document's cells and the number of documents per cell. This module is the Python side of the
same definitions, for the commit's statistics and for the tests.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence

__all__ = ["BOUNDS", "EXACT", "bucket", "cell_labels", "cells"]


EXACT = 8  # counts up to this are their own bucket


def _bounds(exact: int = EXACT, ratio: float = 1.2, last: int = 2**24) -> tuple[int, ...]:
    bounds = list(range(1, exact + 1))
    while (step := math.ceil(bounds[-1] * ratio)) <= last:
        bounds.append(step)
    return tuple(bounds)


# The lower ends of the buckets: bucket b (1-based) holds BOUNDS[b - 1] .. BOUNDS[b] - 1.
BOUNDS = _bounds()


def bucket(x: int) -> int:
    """The bucket of a positive count, as ``catalog_text_bucket`` (width_bucket) gives it."""
    return bisect.bisect_right(BOUNDS, x)


def cells(words: Sequence[str]) -> list[tuple[int, int, str]]:
    """The cells of one document's word sequence, one per distinct word: (f bucket, len bucket,
    word). Buckets up to 8 are the number itself. The definition; batches store
    :func:`cell_labels`, which tests hold equal to it."""
    length = bucket(len(words))
    return [(f if f <= EXACT else bucket(f), length, word) for word, f in Counter(words).items()]


def cell_labels(words: Sequence[str]) -> list[str]:
    """The cells of :func:`cells` as the row stores them and the GIN index holds them:
    ``"<f bucket>:<len bucket>:<word>"``, one per distinct word."""
    tail = f":{bucket(len(words))}:"
    return [f"{f if f <= EXACT else bucket(f)}{tail}{word}" for word, f in Counter(words).items()]
