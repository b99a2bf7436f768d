"""Who is calling, decided from the credential only.

- the admin token (setting ``admin_token``): operators, connector rights on every catalog;
- a catalog token: the connector of that catalog; may name principals (``X-Catalog-Principals``),
  search unrestricted (``X-Catalog-Unrestricted: 1``) and include inactive content;
- a signed token minted by the connector (``POST /catalogs/{id}/tokens``): a frontend acting for
  one user, with the principals and expiry the token carries;
- a scoped key (``csk1.``, ``POST /catalogs/{id}/keys``): a server or a static site, searching as
  the key's principals among the objects of the key's filter only (docs/decisions/0020);
- nothing: Anonymous, effective content only.

A request without a credential where one is needed, or with an ``Authorization`` header that is
not ``Bearer <token>``, or with a token the service does not know, gets 401 (with
``WWW-Authenticate: Bearer``); a valid credential without the right gets 403. A malformed header is
never taken for Anonymous, on the public searches neither.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from ..errors import Forbidden, Unauthorized
from ..planner.plan import UNRESTRICTED, Security
from ..store.catalogs import Catalog
from ..store.keys import KEY_PREFIX, key_id_of

ANONYMOUS = ("Anonymous",)
TOKEN_PREFIX = "cst1."


@dataclass(frozen=True)
class Credential:
    bearer: str | None
    principals_header: str | None
    unrestricted: bool
    # An Authorization header that is not "Bearer <token>".
    malformed: bool = False


@dataclass(frozen=True)
class Caller:
    kind: str  # admin | connector | user | key | anonymous
    principals: tuple[str, ...] | None = None
    show_inactive: bool = False
    # The catalog a connector's, a user's or a key's credential belongs to.
    catalog: str | None = None
    # A scoped key's filter: every search of the caller applies it.
    scope: dict | None = None

    @property
    def trusted(self) -> bool:
        return self.kind in ("admin", "connector")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key_hash: str, body: str) -> bytes:
    return hmac.new(bytes.fromhex(key_hash), body.encode(), hashlib.sha256).digest()


def mint_token(catalog: Catalog, principals: list[str], ttl: int, show_inactive: bool = False) -> str:
    payload = orjson.dumps({"cat": catalog.name, "p": principals, "exp": int(time.time()) + ttl,
                            "in": show_inactive})
    body = _b64(payload)
    return f"{TOKEN_PREFIX}{body}.{_b64(_signature(catalog.token_hash, body))}"


def signed_token_catalog(token: str) -> str | None:
    """The catalog a signed token names (unverified: to find the key that verifies it)."""
    try:
        body = token[len(TOKEN_PREFIX):].split(".")[0]
        name = orjson.loads(_unb64(body)).get("cat")
    except (ValueError, AttributeError, orjson.JSONDecodeError):
        return None
    return name if isinstance(name, str) else None


def _verify_token(catalog: Catalog, token: str) -> Caller:
    try:
        body, sig = token[len(TOKEN_PREFIX):].split(".")
        given = _unb64(sig)
        # Tokens minted before a rotation of the catalog's token stay valid during its grace period.
        if not any(hmac.compare_digest(_signature(key, body), given) for key in catalog.token_keys()):
            raise Unauthorized("invalid token signature")
        payload = orjson.loads(_unb64(body))
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise Unauthorized("malformed token") from exc
    if payload.get("cat") != catalog.name:
        raise Unauthorized("token is for another catalog")
    if payload.get("exp", 0) < time.time():
        raise Unauthorized("token expired")
    principals = payload.get("p")
    if not isinstance(principals, list) or not all(isinstance(p, str) for p in principals):
        raise Unauthorized("malformed token")
    return Caller(kind="user", principals=tuple(principals), show_inactive=bool(payload.get("in")),
                  catalog=catalog.name)


def _verify_key(catalog: Catalog, key: str) -> Caller:
    """The caller a scoped key names on ``catalog``. Unknown (also: another catalog's), revoked
    and expired keys are 401; a catalog loaded without its keys says unknown too, which makes
    the search load it again (api.search.caller_for)."""
    key_id = key_id_of(key)
    found = next((k for k in catalog.keys or () if k.id == key_id), None)
    if found is None or not found.matches(key):
        raise Unauthorized("unknown credential")
    if found.revoked is not None:
        raise Unauthorized("the key was revoked")
    if found.expired(datetime.now(UTC)):
        raise Unauthorized("the key expired")
    return Caller(kind="key", principals=found.principals, catalog=catalog.name, scope=found.filter)


def identify(credential: Credential, catalog: Catalog | None, admin_token: str) -> Caller:
    if credential.malformed:
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    bearer = credential.bearer
    if not bearer:
        return Caller(kind="anonymous", principals=ANONYMOUS)
    if admin_token and hmac.compare_digest(bearer.encode(), admin_token.encode()):
        return Caller(kind="admin")
    if catalog is None:
        raise Unauthorized("unknown credential")
    if bearer.startswith(TOKEN_PREFIX):
        return _verify_token(catalog, bearer)
    if bearer.startswith(KEY_PREFIX):
        return _verify_key(catalog, bearer)
    if catalog.token_matches(bearer):
        return Caller(kind="connector", catalog=catalog.name)
    raise Unauthorized("unknown credential")


def require_trusted(caller: Caller) -> None:
    if caller.kind == "anonymous":
        raise Unauthorized("this needs the catalog's service credential")
    if not caller.trusted:
        raise Forbidden("this needs the catalog's service credential")


def require_admin(caller: Caller) -> None:
    if caller.kind == "anonymous":
        raise Unauthorized("this needs the admin credential")
    if caller.kind != "admin":
        raise Forbidden("this needs the admin credential")


def security_for(caller: Caller, credential: Credential, show_inactive: bool, now) -> Security:
    """The security conditions of a search: from the credential alone."""
    if caller.trusted:
        if credential.unrestricted:
            return UNRESTRICTED
        principals = ANONYMOUS
        if credential.principals_header:
            try:
                parsed = orjson.loads(credential.principals_header)
            except orjson.JSONDecodeError as exc:
                raise Unauthorized("X-Catalog-Principals must be a JSON list of strings") from exc
            if not isinstance(parsed, list) or not all(isinstance(p, str) for p in parsed) or len(parsed) > 1000:
                raise Unauthorized("X-Catalog-Principals must be a JSON list of strings")
            principals = tuple(parsed)
        return Security(principals=principals, effective_at=None if show_inactive else now)
    return Security(principals=caller.principals or ANONYMOUS,
                    effective_at=None if (caller.show_inactive and show_inactive) else now, scope=caller.scope)
