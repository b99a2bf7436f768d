"""A page on another origin calls /search from a real browser (Debian's chromium, headless,
driven by Playwright) and renders the results: CORS as a frontend meets it.

``make test`` installs chromium (``make browser``); without it, and where it cannot be
installed, the test skips and says so.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from catalog_schemas.api import CatalogCreate
from tests.live import free_port, start_service
from tests.service.test_api import INDEXES, commit, entry

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>listing</title></head>
<body>
<ul id="results"></ul><p id="status">loading</p>
<script>
const params = new URLSearchParams({catalog: "%(catalog)s", portal_type: "Document", sort_on: "sortable_title",
                                    metadata: "Title"});
fetch("%(service)s/search?" + params, {headers: {"Accept": "application/json"}})
  .then(r => r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status)))
  .then(result => {
    for (const item of result.items) {
      const li = document.createElement("li");
      li.textContent = item.metadata ? item.metadata.Title : item.title;
      document.getElementById("results").appendChild(li);
    }
    document.getElementById("status").textContent = "done " + result.items_total;
  })
  .catch(e => { document.getElementById("status").textContent = "failed " + e; });
</script>
</body></html>
"""


@pytest.fixture
def page_server(tmp_path):
    """A static page server on a port of its own: another origin than the service's."""
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{port}"
    server.shutdown()
    server.server_close()


def _render(page_url: str) -> tuple[list[str], str]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(page_url)
            page.wait_for_function("!document.getElementById('status').textContent.startsWith('loading')",
                                   timeout=20000)
            return page.locator("#results li").all_inner_texts(), page.locator("#status").inner_text()
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `make browser` installs it (apt-get install chromium)")
@pytest.mark.parametrize("allowed", [True, False])
def test_page_on_another_origin_renders_search_results(database_url, page_server, allowed):
    directory, origin = page_server
    service = start_service(database_url, extra_env={"CATALOG_CORS_ORIGINS": f'["{origin}"]' if allowed else "[]"})
    name = "b-" + uuid.uuid4().hex[:10]
    try:
        with service.client() as admin:
            spec = CatalogCreate(id=name, indexes=[*INDEXES, type(INDEXES[0])(name="sortable_title", type="FieldIndex")],
                                 metadata=["Title"])
            assert admin.post("/catalogs", json=spec.model_dump()).status_code == 201
            entries = [entry(uid, f"/plone/{uid}", title=title) for uid, title in
                       (("a", "Zebra crossing"), ("b", "Apple pie"), ("c", "Mango lassi"))]
            for item in entries:
                item["values"]["sortable_title"] = item["metadata"]["Title"].lower()
            entries.append(entry("f", "/plone/f", portal_type="Folder", title="A folder"))
            entries.append(entry("p", "/plone/p", allowed=("Manager",), title="Private page"))
            commit(admin, name, entries)
        (directory / "index.html").write_text(PAGE % {"catalog": name, "service": service.url})
        rows, status = _render(origin + "/index.html")
        if allowed:
            assert status == "done 3"
            assert rows == ["Apple pie", "Mango lassi", "Zebra crossing"]
        else:
            # The browser itself refuses the answer: the page never sees it.
            assert status.startswith("failed") and rows == []
    finally:
        with service.client() as admin:
            admin.delete(f"/catalogs/{name}")
        service.stop()
