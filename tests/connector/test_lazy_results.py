"""Lazy result sequences: every brain once, in order, with few page requests for long results."""

from __future__ import annotations

from plone_connector.catalog.brains import MAX_PAGE, BrainRecord, LazyResults


def records(count: int) -> list[BrainRecord]:
    return [BrainRecord(f"/site/d{i}", i, f"/site/d{i}", None, {}) for i in range(count)]


def lazy(all_records, page_size=100, length=None):
    calls = []

    def fetch_page(start, size):
        calls.append((start, size))
        return all_records[start:start + size]

    length = len(all_records) if length is None else length
    result = LazyResults(lambda r: r.path, fetch_page, all_records[:page_size], 0, length, len(all_records), page_size)
    return result, calls


def test_walking_a_long_result_fetches_growing_pages():
    all_records = records(5000)
    result, calls = lazy(all_records)
    assert list(result) == [r.path for r in all_records]
    assert MAX_PAGE == 1000
    # Pages of 100 would take 49 requests; nothing is fetched twice or past the end.
    assert [size for _, size in calls] == [400, 1000, 1000, 1000, 1000, 500]
    assert [start for start, _ in calls] == [100, 500, 1500, 2500, 3500, 4500]


def test_walking_from_a_first_page_of_twenty():
    all_records = records(500)
    result, calls = lazy(all_records, page_size=20)
    assert list(result) == [r.path for r in all_records]
    # A first page of 20 (what a listing reads), then 80 and the rest: three requests in all.
    assert calls == [(20, 80), (100, 400)]


def test_reading_a_batch_fetches_no_more_than_it_needs():
    all_records = records(1000)
    result, calls = lazy(all_records, page_size=20, length=60)
    assert [result[i] for i in range(60)] == [r.path for r in all_records[:60]]
    assert sum(size for _, size in calls) == 40
    assert result[-1] == "/site/d59"
    assert len(result) == 60
    assert result.actual_result_count == 1000


def test_random_access_past_the_first_page():
    all_records = records(3000)
    result, calls = lazy(all_records)
    assert result[2500] == "/site/d2500"
    assert calls == [(2500, 100)]
    assert result[2599] == "/site/d2599"
    assert len(calls) == 1
    assert [b for b in result[10:13]] == ["/site/d10", "/site/d11", "/site/d12"]
