"""``catalog-service keys {create,list,revoke}``: scoped API keys, on the database directly (as
``catalog create`` works), with the checks of the admin API (``api/keys.py``)."""

from __future__ import annotations

import argparse
import sys

import orjson


class KeyFailure(Exception):
    """What the operator can fix (no such catalog or key, a filter the catalog cannot apply): the
    command line prints it as one line."""


def add_parser(sub, formatter) -> None:
    keys = sub.add_parser(
        "keys", help="scoped API keys for servers and static sites: create, list, revoke",
        formatter_class=formatter,
        description="A scoped key searches one catalog's public routes as its principals (Anonymous unless "
                    "given), among the objects its filter selects only. `create` prints the key once, on "
                    "stdout; the service keeps its hash. docs/api.md, 'Scoped API keys'.")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a key and print it",
                                description="Create a key; its description (JSON, without the key) goes to "
                                            "stderr, the key to stdout.")
    create.add_argument("catalog", help="catalog id")
    create.add_argument("--name", required=True, help="what the key is for (shown by list)")
    create.add_argument("--filter", default="{}", type=_json_object,
                        help="a ZCatalog query of index conditions, e.g. '{\"path\": \"/plone/news\", "
                             "\"portal_type\": [\"News Item\"]}' (physical paths; default {}: the whole catalog)")
    create.add_argument("--principals", default='["Anonymous"]', type=_json_list,
                        help='the principals it searches as, a JSON list (default ["Anonymous"])')
    ends = create.add_mutually_exclusive_group()
    ends.add_argument("--ttl", type=int, help="seconds until it expires (default: never)")
    ends.add_argument("--expires", help="when it expires, ISO 8601 with an offset (default: never)")
    listing = actions.add_parser("list", help="list a catalog's keys (never their secrets), as JSON lines")
    listing.add_argument("catalog", help="catalog id")
    revoke = actions.add_parser("revoke", help="revoke a key: every search with it is refused from now on")
    revoke.add_argument("catalog", help="catalog id")
    revoke.add_argument("key_id", help="the key's id (the part after csk1., before the dot; list shows it)")


def _json_object(text: str) -> dict:
    value = _json(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("a JSON object")
    return value


def _json_list(text: str) -> list:
    value = _json(text)
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError("a JSON list of strings")
    return value


def _json(text: str):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc


async def run(args, connect, dsn: str) -> int:
    """The command ``args`` names, on a connection ``connect(dsn)`` opens. What the operator can fix
    is a KeyFailure."""
    from pydantic import ValidationError

    from catalog_schemas.keys import KeyCreate

    from .api.deps import limits_of
    from .errors import CatalogError
    from .planner.scope import check_filter
    from .settings import get_settings
    from .store.catalogs import CatalogRegistry
    from .store.keys import create_key, revoke_key

    conn = await connect(dsn)
    try:
        try:
            catalog, _ = await CatalogRegistry().get(conn, args.catalog)
            if args.action == "list":
                for key in catalog.keys or ():
                    print(key.info(catalog.name).model_dump_json())
                return 0
            if args.action == "revoke":
                key = await revoke_key(conn, catalog, args.key_id)
                print(key.info(catalog.name).model_dump_json())
                return 0
            try:
                spec = KeyCreate(name=args.name, filter=args.filter, principals=args.principals, ttl=args.ttl,
                                 expires=args.expires)
            except ValidationError as exc:
                raise KeyFailure("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                           for e in exc.errors()[:5])) from exc
            check_filter(spec.filter, catalog.schema, limits_of(get_settings()))
            key, text = await create_key(conn, catalog, spec)
        except CatalogError as exc:
            raise KeyFailure(exc.detail) from exc
        print(key.info(catalog.name).model_dump_json(), file=sys.stderr)
        print(text)
        return 0
    finally:
        await conn.close()

