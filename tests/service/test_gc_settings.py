"""Each worker sets Python's garbage collector thresholds from its settings when it starts
(Settings.gc_thresholds; app.tune_gc)."""

from __future__ import annotations

import asyncio
import gc

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from catalog_service.app import create_app
from catalog_service.settings import Settings


def test_a_worker_sets_the_collector_thresholds_when_it_starts(database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    before = gc.get_threshold()

    async def started() -> tuple[int, int, int]:
        app = create_app(Settings(gc_thresholds=(12345, 6, 7)))
        async with app.router.lifespan_context(app):
            return gc.get_threshold()

    try:
        gc.set_threshold(700, 10, 10)
        assert asyncio.run(started()) == (12345, 6, 7)
    finally:
        gc.set_threshold(*before)


def test_the_default_thresholds_and_bad_ones(monkeypatch):
    monkeypatch.delenv("CATALOG_GC_THRESHOLDS", raising=False)
    assert Settings().gc_thresholds == (20000, 20, 10)
    monkeypatch.setenv("CATALOG_GC_THRESHOLDS", "[700, 10, 10]")
    assert Settings().gc_thresholds == (700, 10, 10)
    for bad in ("[-1, 10, 10]", "[700, 10]", "fast"):
        monkeypatch.setenv("CATALOG_GC_THRESHOLDS", bad)
        with pytest.raises((ValidationError, SettingsError)):  # a bad value, or not JSON at all
            Settings()
