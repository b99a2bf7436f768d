"""``@@catalog-token``: a logged-in user gets a signed token that searches the catalog service's
public routes with the user's own rights; Anonymous gets 401; a forged token is refused; the
tokens outlive a rotation of the catalog's token by its grace period, and no longer."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import transaction
from plone import api
from plone.testing import zope

from tests.connector.sites import CONNECTED, PASSWORD, delete_from, on_site, service_catalog_id

pytestmark = [pytest.mark.slow, pytest.mark.plone]

PRIVATE, PUBLIC = "token-private-doc", "token-public-doc"


def browser(app, user=None):
    b = zope.Browser(app)
    b.handleErrors = False
    b.raiseHttpErrors = False
    if user:
        b.addHeader("Authorization", f"Basic {user}:{PASSWORD}")
    return b


@pytest.fixture(scope="module")
def content(plone_sites):
    with on_site(CONNECTED) as site:
        api.content.create(site, "Document", id=PRIVATE, title="Private words")
        public = api.content.create(site, "Document", id=PUBLIC, title="Public words")
        api.content.transition(public, "publish")
    yield
    delete_from(CONNECTED, PRIVATE, PUBLIC)


def mint(user=None, **form):
    with zope.zopeApp() as app:
        b = browser(app, user)
        query = "&".join(f"{k}={v}" for k, v in form.items())
        b.open(f"http://nohost/{CONNECTED}/@@catalog-token" + (f"?{query}" if query else ""))
        transaction.abort()
        return b.headers["Status"], b.headers.get("Content-Type"), json.loads(b.contents), b.headers


def found(answer: dict, token: str | None) -> set[str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # (httpx's params would replace the URL's own ``catalog``.)
    response = httpx.get(answer["search_url"] + "&portal_type=Document&b_size=100", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return {item["path"].rsplit("/", 1)[-1] for item in response.json()["items"]}


def test_anonymous_gets_401(content):
    status, content_type, body, _ = mint()
    assert status.startswith("401") and content_type == "application/problem+json"
    assert body["status"] == 401 and "log in" in body["detail"]


def test_a_users_token_searches_with_the_users_rights(content, catalog_service):
    status, content_type, manager, headers = mint("manager")
    assert status.startswith("200") and content_type == "application/json", manager
    assert headers["Cache-Control"] == "no-store"
    assert manager["catalog"] == service_catalog_id()
    assert manager["search_url"] == f"{catalog_service.url}/search?catalog={manager['catalog']}"
    assert abs(datetime.fromisoformat(manager["expires"]) - (datetime.now(UTC) + timedelta(hours=1))) \
        < timedelta(minutes=1)
    _, _, member, _ = mint("member")
    # The manager sees the private document, the member and Anonymous only the published one.
    assert {PRIVATE, PUBLIC} <= found(manager, manager["token"])
    assert PUBLIC in found(member, member["token"]) and PRIVATE not in found(member, member["token"])
    assert PRIVATE not in found(member, None)
    forged = manager["token"][:-2] + ("AA" if not manager["token"].endswith("AA") else "BB")
    response = httpx.get(manager["search_url"], headers={"Authorization": f"Bearer {forged}"}, timeout=30)
    assert response.status_code == 401 and response.headers["content-type"] == "application/problem+json"


def test_ttl_is_bounded(content):
    status, _, short, _ = mint("member", ttl=120)
    assert status.startswith("200")
    assert datetime.fromisoformat(short["expires"]) < datetime.now(UTC) + timedelta(seconds=130)
    for ttl in ("30", "90000", "soon"):
        status, content_type, body, _ = mint("member", ttl=ttl)
        assert status.startswith("400") and content_type == "application/problem+json" and "ttl" in body["detail"]


def test_tokens_outlive_a_rotation_by_its_grace_period(content, catalog_service):
    _, _, minted, _ = mint("manager")
    catalog_id = minted["catalog"]
    admin = {"Authorization": f"Bearer {catalog_service.admin_token}"}
    rotate = f"{catalog_service.url}/catalogs/{catalog_id}/token"
    assert httpx.post(rotate, params={"grace": 3600}, headers=admin, timeout=30).status_code == 200
    assert PRIVATE in found(minted, minted["token"])
    # A token minted now is signed with the new catalog token; the second rotation ends the first
    # catalog token at once, and with it the tokens it signed.
    _, _, fresh, _ = mint("manager")
    assert httpx.post(rotate, params={"grace": 0}, headers=admin, timeout=30).status_code == 200
    response = httpx.get(minted["search_url"], headers={"Authorization": f"Bearer {minted['token']}"}, timeout=30)
    assert response.status_code == 401
    response = httpx.get(fresh["search_url"], headers={"Authorization": f"Bearer {fresh['token']}"}, timeout=30)
    assert response.status_code == 401  # grace 0: the token it replaced ends now too
    _, _, newest, _ = mint("manager")
    assert PRIVATE in found(newest, newest["token"])
