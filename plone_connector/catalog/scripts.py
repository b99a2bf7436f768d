"""Verify a site's catalog against ZODB (``--repair``: and fix it)::

    bin/instance run .../scripts.py SITE_ID [--repair]
    zconsole run etc/zope.conf .../scripts.py SITE_ID [--repair]
"""

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


def script_args(argv: list[str], script: str) -> list[str]:
    """The arguments after the script's path: ``bin/instance run`` leaves ``sys.argv`` as
    ``[script, *args]``, ``zconsole run`` as its own command line (``zconsole run CONF script ...``)."""
    if script in argv:
        return argv[argv.index(script) + 1:]
    return argv[1:]


if __name__ == "__main__" and "app" in globals():
    # Both runners compile the file under the path given on their command line.
    sys.exit(main(globals()["app"], script_args(sys.argv, sys._getframe().f_code.co_filename)))
