"""Browser views: the error page when the service is down, the cache report, and verify."""

from __future__ import annotations

import html
import json
import logging

from AccessControl import getSecurityManager
from plone.protect.interfaces import IDisableCSRFProtection
from Products.Five import BrowserView
from zope.component.hooks import getSite
from zope.interface import alsoProvides

from .cache import memo_stats, query_cache
from .verify import verify

logger = logging.getLogger("plone_connector.catalog")


def service_stats() -> dict:
    """The query cache, transaction memo, service requests and page-render counts of this process."""
    from . import stats
    from .client import get_client
    from .committed import batch_watch

    return {
        "cache": query_cache.stats(),
        # Answers to repeated queries within a transaction that has pending catalog changes.
        "transaction_memo": memo_stats(),
        "service_requests_sent": get_client().requests_sent,
        "page_renders": stats.totals.as_dict(),
        "incomplete_answers": batch_watch.incomplete_answers,
        "waits_for_commits": batch_watch.waits,
    }


class ServiceUnavailableView(BrowserView):
    """Shown instead of Plone's generic error page when the catalog service cannot be reached."""

    def __call__(self):
        self.request.response.setStatus(503)
        self.request.response.setHeader("Retry-After", "30")
        logger.warning("catalog service unavailable: %s", self.context)
        # The reason names the service's address: only site managers see it, everyone else the
        # plain explanation (the log has it too).
        site = getSite()
        detail = ""
        if site is not None and getSecurityManager().checkPermission("Manage portal", site):
            detail = f"<p><small>{html.escape(str(self.context))}</small></p>"
        return (
            "<!DOCTYPE html><html><head><title>Search is temporarily unavailable</title></head>"
            "<body><h1>Search is temporarily unavailable</h1>"
            "<p>This site could not reach its catalog service, so this page cannot be shown and "
            "nothing was changed. Please try again in a moment.</p>"
            f"{detail}</body></html>"
        )


class ServiceStatsView(BrowserView):
    """``@@catalog-service-stats``: JSON of :func:`service_stats`."""

    def __call__(self):
        self.request.response.setHeader("Content-Type", "application/json")
        return json.dumps(service_stats(), indent=2)


class VerifyView(BrowserView):
    """``@@catalog-service-verify``: the drift report; POST with ``repair=1`` also fixes it.

    A repair writes (the catalog counter in ZODB, a batch for the service), so it is refused on
    GET: plone.protect aborts writes of a GET request anyway, and did so after the report had
    claimed the repair. The POST needs no CSRF token (it is meant for scripts: ``curl -X POST``):
    all a forged one could do is make the catalog match ZODB, as a manager's report costs as much.
    """

    def __call__(self):
        response = self.request.response
        repair = self.request.form.get("repair") in ("1", "true", "yes")
        if repair and self.request.get("REQUEST_METHOD", "GET") != "POST":
            response.setStatus(405)
            response.setHeader("Allow", "POST")
            response.setHeader("Content-Type", "application/problem+json")
            return json.dumps({
                "title": "Method Not Allowed",
                "status": 405,
                "detail": "repair=1 changes the catalog: send it as a POST request",
            })
        if repair:
            alsoProvides(self.request, IDisableCSRFProtection)
        report = verify(self.context, repair=repair)
        response.setHeader("Content-Type", "application/json")
        return json.dumps(report.as_dict(), indent=2)
