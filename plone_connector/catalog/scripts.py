"""``bin/instance run .../scripts.py SITE_ID [--repair]``: verify a site's catalog against ZODB."""

from __future__ import annotations

import argparse
import json
import sys

import transaction
from zope.component.hooks import setSite

from plone_connector.catalog.verify import verify


def main(app, argv=None) -> int:
    parser = argparse.ArgumentParser(prog="catalog-verify")
    parser.add_argument("site")
    parser.add_argument("--repair", action="store_true")
    args = parser.parse_args(argv)
    portal = app.unrestrictedTraverse(args.site)
    setSite(portal)
    report = verify(portal, repair=args.repair)
    if args.repair:
        transaction.get().note(f"catalog verify --repair on {args.site}")
        transaction.commit()
    print(json.dumps(report.as_dict(), indent=2))
    return 0 if report.clean else 1


if __name__ == "__main__" and "app" in globals():
    sys.exit(main(globals()["app"], sys.argv[1:]))
