"""The demo search page (``GET /`` with ``CATALOG_DEMO_PAGE`` on) in a real browser: Debian's
chromium, headless, driven by Playwright, against a real service over the demo corpus.

A visitor types a query and picks a suggestion with the keyboard, picks a facet, sees highlighted
results and pages on; the counts and pages the page shows are compared with what ``/search``
answers for the same query. The page shows only what Anonymous may see, its demo token is an
Anonymous one, and text from the catalog is never taken for markup. A screenshot of the page
is saved as docs/demo_page.png. Without chromium (``make browser`` installs it) the browser tests
skip and say so.
"""

from __future__ import annotations

import json
import math
import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from catalog_service.demo import objects, plone_catalog
from tests.live import start_service
from tests.service.test_api import commit

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None,
                                    reason="no chromium: `make browser` installs it (apt-get install chromium)")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "demo_page.png"
CORPUS = 1000
PAGE_SIZE = 10  # the page's own (demo.js)
FACETS = "portal_type,review_state,Subject"
# A published object whose title and text carry markup: the page must show it as text.
HOSTILE_TITLE = 'Garden <img src=x onerror="window.pwned=1"> <b>party</b>'
WAIT = 20000


def hostile_entry() -> dict:
    entry = next(objects(1, seed=7))
    entry = json.loads(json.dumps(entry))
    values, metadata = entry["values"], entry["metadata"]
    entry["uid"] = values["UID"] = metadata["UID"] = "hostile" + uuid.uuid4().hex
    entry["path"] = values["path"] = "/plone/hostile"
    values.update(Title=HOSTILE_TITLE, Description=HOSTILE_TITLE, SearchableText="hostile " + HOSTILE_TITLE,
                  sortable_title=HOSTILE_TITLE.lower()[:40], review_state="published",
                  allowedRolesAndUsers=["Anonymous"], portal_type="Document", Subject=[])
    metadata.update(Title=HOSTILE_TITLE, Description=HOSTILE_TITLE, review_state="published",
                    portal_type="Document")
    return entry


@pytest.fixture(scope="module")
def demo_service(database_url):
    """A service with the demo page on and a demo corpus (private and pending content included)."""
    service = start_service(database_url, extra_env={"CATALOG_DEMO_PAGE": "true"})
    name = "demo"  # the page's default catalog; the session's database is its own
    try:
        with service.client() as admin:
            assert admin.post("/catalogs", json=plone_catalog(name).model_dump()).status_code == 201
            entries = list(objects(CORPUS))
            for start in range(0, len(entries), 500):
                commit(admin, name, entries[start:start + 500])
            commit(admin, name, [hostile_entry()])
        yield service, name
    finally:
        with service.client() as admin:
            admin.delete(f"/catalogs/{name}")
        service.stop()


def public_search(service, name: str, query: dict, b_start: int = 0) -> dict:
    """What the page should show: the public /search as Anonymous, the page's own parameters."""
    params = {"catalog": name, "q": json.dumps(query), "b_size": PAGE_SIZE, "b_start": b_start,
              "facets": FACETS, "highlight": "true", "typo": "true"}
    response = httpx.get(service.url + "/search", params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def browser_page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page
            assert errors == []
        finally:
            browser.close()


def open_page(page, service, name: str) -> None:
    page.goto(service.url + "/" if name == "demo" else f"{service.url}/?catalog={name}")
    page.wait_for_function("document.getElementById('status').textContent.includes('results')", timeout=WAIT)


def wait_for_search(page, expected_status: str) -> None:
    from playwright.sync_api import TimeoutError

    try:
        page.wait_for_function("s => document.getElementById('status').textContent === s", arg=expected_status,
                               timeout=WAIT)
    except TimeoutError:
        pytest.fail(f"the page says {page.locator('#status').inner_text()!r}, not {expected_status!r}")


def status_text(answer: dict) -> str:
    if not answer["items_total"]:
        return "no results"
    noun = "result" if answer["items_total"] == 1 else "results"
    return f"{answer['items_total']} {noun}, {answer['b_start'] + 1}–{answer['b_start'] + len(answer['items'])}"


def search_on_page(page, demo_service, text: str) -> dict:
    """Open the page, search for ``text`` (typed, then Enter) and wait for the service's answer."""
    service, name = demo_service
    open_page(page, service, name)
    page.locator("#q").fill(text)
    page.locator("#q").press("Enter")
    answer = public_search(service, name, {"SearchableText": text})
    wait_for_search(page, status_text(answer))
    return answer


def facet_rows(page, facet: str) -> dict[str, int]:
    rows = page.locator(f"#facets input[data-facet='{facet}']")
    return {rows.nth(i).get_attribute("data-value"):
            int(rows.nth(i).locator("xpath=..").locator(".count").inner_text()) for i in range(rows.count())}


def counts(answer: dict, facet: str) -> dict[str, int]:
    return {str(v["value"]): v["count"] for v in answer["facets"][facet]["values"]}


@needs_chromium
def test_type_suggest_facet_highlight_and_page_on(demo_service, browser_page):
    service, name = demo_service
    page = browser_page
    open_page(page, service, name)

    # Suggestions as one types, chosen with the keyboard.
    page.locator("#q").press_sequentially("gard", delay=60)
    page.wait_for_selector("#suggestions li", state="visible", timeout=WAIT)
    suggested = page.locator("#suggestions li").all_inner_texts()
    assert any(text.startswith("garden") for text in suggested), suggested
    words = [w["word"] for w in httpx.get(f"{service.url}/{name}/@suggest", params={"q": "gard", "limit": 6}).json()["words"]]
    assert [t.removesuffix("word") for t in suggested if t.endswith("word")] == words
    first_word = suggested.index(next(t for t in suggested if t.startswith("garden")))
    for _ in range(first_word + 1):
        page.keyboard.press("ArrowDown")
    assert page.locator("#suggestions li[aria-selected=true]").inner_text().startswith("garden")
    page.keyboard.press("Enter")
    assert page.locator("#q").input_value() == "garden"
    answer = public_search(service, name, {"SearchableText": "garden"})
    wait_for_search(page, status_text(answer))
    assert page.locator("#suggestions").is_hidden()

    # Facet counts as the service counts them, Anonymous's only: no private or pending state.
    assert facet_rows(page, "portal_type") == counts(answer, "portal_type")
    assert set(facet_rows(page, "review_state")) == {"published"}

    # Pick a facet: the results are the service's for that filter, with highlights.
    page.locator("#facets input[data-facet='portal_type'][data-value='Document']").check()
    filtered = public_search(service, name, {"SearchableText": "garden", "portal_type": ["Document"]})
    wait_for_search(page, status_text(filtered))
    assert filtered["items_total"] > 2 * PAGE_SIZE  # enough to page on
    # Disjunctive: the type facet still counts the other types (what choosing one would find).
    assert facet_rows(page, "portal_type") == counts(filtered, "portal_type") == counts(answer, "portal_type")
    metas = page.locator("#results .meta").all_inner_texts()
    assert len(metas) == PAGE_SIZE and all(m.startswith("Document") for m in metas)
    assert page.locator("#results li").first.locator("mark").count() > 0
    marked = page.locator("#results mark").all_inner_texts()
    assert marked and all(m.lower() == "garden" for m in marked)
    pages = math.ceil(filtered["items_total"] / PAGE_SIZE)
    assert page.locator("#page-indicator").inner_text() == f"page 1 of {pages}"
    assert page.locator("#prev").is_disabled()
    first_on_page_one = page.locator("#results .meta").first.inner_text()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    # Page on: the service's second page, another first result, the indicator moves.
    page.locator("#next").click()
    second = public_search(service, name, {"SearchableText": "garden", "portal_type": ["Document"]}, PAGE_SIZE)
    wait_for_search(page, status_text(second))
    assert page.locator("#page-indicator").inner_text() == f"page 2 of {pages}"
    first_on_page_two = page.locator("#results .meta").first.inner_text()
    assert first_on_page_two != first_on_page_one
    assert first_on_page_two.endswith(second["items"][0]["path"])
    page.locator("#prev").click()
    wait_for_search(page, status_text(filtered))
    assert page.locator("#page-indicator").inner_text() == f"page 1 of {pages}"


@needs_chromium
def test_did_you_mean(demo_service, browser_page):
    page = browser_page
    service, name = demo_service
    answer = search_on_page(page, demo_service, "musuem")
    assert answer["did_you_mean"] == "museum"
    assert page.locator("#did-you-mean").inner_text() == "Did you mean museum?"
    page.locator("#did-you-mean button").click()
    wait_for_search(page, status_text(public_search(service, name, {"SearchableText": "museum"})))
    assert page.locator("#q").input_value() == "museum"


@needs_chromium
def test_markup_in_content_is_shown_as_text(demo_service, browser_page):
    page = browser_page
    assert search_on_page(page, demo_service, "hostile")["items_total"] == 1
    assert page.locator("#status").inner_text() == "1 result, 1–1"
    title = page.locator("#results .title")
    assert title.inner_text() == HOSTILE_TITLE
    assert page.locator("#results img, #results b").count() == 0
    assert page.evaluate("window.pwned") is None
    # The snippet check itself: only <mark> passes; anything else is refused, entities decoded.
    checked = page.evaluate("""async () => {
        const {markedNodes} = await import('/demo-assets/demo.js');
        const shown = nodes => nodes && nodes.map(n => [n.nodeName, n.textContent]);
        return [shown(markedNodes('a &lt;b&gt; &amp; <mark>c&#x27;s</mark> d')),
                markedNodes('<img src=x onerror=alert(1)>'), markedNodes('<mark onclick=x>a</mark>'),
                markedNodes('<script>alert(1)</script>')];
    }""")
    assert checked == [[["#text", "a <b> & "], ["MARK", "c's"], ["#text", " d"]], None, None, None]


@needs_chromium
def test_demo_token_is_anonymous(demo_service, browser_page):
    service, name = demo_service
    page = browser_page
    open_page(page, service, name)
    sent: list[str | None] = []
    page.on("request", lambda r: sent.append(r.headers.get("authorization")) if "/search?" in r.url else None)
    page.locator("#token-box summary").click()
    page.locator("#demo-token").click()
    page.wait_for_function("document.getElementById('token-status').textContent.startsWith('Anonymous')",
                           timeout=WAIT)
    token = page.locator("#token").input_value()
    page.wait_for_function("document.getElementById('status').textContent.includes('results')", timeout=WAIT)
    assert f"Bearer {token}" in sent
    anonymous = public_search(service, name, {})
    wait_for_search(page, status_text(anonymous))
    assert set(facet_rows(page, "review_state")) == {"published"}


def test_demo_token_sees_what_anonymous_sees(demo_service):
    service, name = demo_service
    response = httpx.post(f"{service.url}/demo-page/token", params={"catalog": name})
    assert response.status_code == 200
    minted = response.json()
    assert minted["principals"] == ["Anonymous"] and minted["ttl"] == 300 and minted["catalog"] == name
    query = {"catalog": name, "facets": FACETS, "b_size": 50, "sort_on": "sortable_title"}
    with service.client() as admin:
        everything = admin.post(f"/catalogs/{name}/query", json={"query": {"path": "/plone"}, "b_size": 1},
                                headers={"X-Catalog-Unrestricted": "1"}).json()
    as_token = httpx.get(service.url + "/search", params=query,
                         headers={"Authorization": f"Bearer {minted['token']}"}).json()
    as_anonymous = httpx.get(service.url + "/search", params=query).json()
    assert as_token == as_anonymous
    assert as_token["items_total"] < everything["items_total"]  # private and pending content exist
    assert {v["value"] for v in as_token["facets"]["review_state"]["values"]} == {"published"}
    # The token is one for this catalog only.
    assert httpx.post(f"{service.url}/demo-page/token", params={"catalog": "no-such-catalog"}).status_code == 404


def test_page_and_assets_are_served(demo_service):
    service, _ = demo_service
    page = httpx.get(service.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/demo-assets/demo.js">' in page.text
    for asset, kind in (("demo.js", "text/javascript"), ("demo.css", "text/css")):
        response = httpx.get(f"{service.url}/demo-assets/{asset}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        assert "http://" not in response.text and "https://" not in response.text  # no CDN, no web fonts
    assert "https://" not in page.text and "http://" not in page.text
    for name in ("index.html", "__init__.py", "..%2F__init__.py", "missing.js"):
        assert httpx.get(f"{service.url}/demo-assets/{name}").status_code == 404


def test_no_demo_page_unless_the_setting_says_so(live_service):
    """Off by default: a production service shows no page and mints no demo tokens."""
    assert httpx.get(live_service.url + "/").status_code == 404
    assert httpx.get(live_service.url + "/demo-assets/demo.js").status_code == 404
    assert httpx.post(live_service.url + "/demo-page/token").status_code in (404, 405)
