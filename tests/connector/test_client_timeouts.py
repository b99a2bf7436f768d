"""The client's timeout and retries, against a real HTTP server on 127.0.0.1 that answers as told."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from catalog_schemas.api import CatalogCreate, SearchRequest
from plone_connector.catalog.client import CatalogClient
from plone_connector.catalog.errors import ServiceTimeout, ServiceUnavailable
from plone_connector.catalog.settings import ConnectorSettings

EMPTY_RESULT = {"items_total": 0, "b_start": 0, "b_size": None, "items": [], "counter": 1}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self):
        server: StubService = self.server  # type: ignore[assignment]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with server.lock:
            server.requests.append((self.command, self.path))
            server.times.append(time.monotonic())
            how = server.answers.pop(0) if server.answers else server.otherwise
        if how == "stall":
            # Accept the request and never answer (until the test ends).
            server.released.wait(30)
            self.close_connection = True
            return
        headers = {}
        if isinstance(how, RetryAfter):
            headers["Retry-After"] = how.seconds
            how = 503
        status, body = (503, {"title": "Service Unavailable", "status": 503}) if how == 503 else (200, how)
        payload = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, format, *args):
        pass


@dataclass(frozen=True)
class RetryAfter:
    """A 503 with this Retry-After header (the service's answer while its database is away)."""

    seconds: str


class StubService(ThreadingHTTPServer):
    """Answers each request with the next of ``answers`` ("stall", 503, a RetryAfter or a JSON
    body), then ``otherwise``; records every request it received, and when."""

    daemon_threads = True

    def __init__(self, answers, otherwise, port=0):
        super().__init__(("127.0.0.1", port), _Handler)
        self.answers = list(answers)
        self.otherwise = otherwise
        self.requests: list[tuple[str, str]] = []
        self.times: list[float] = []
        self.lock = threading.Lock()
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def stub_service():
    servers = []

    def start(answers=(), otherwise="stall", port=0):
        server = StubService(answers, otherwise, port)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.released.set()
        server.shutdown()
        server.server_close()


def client_for(server, timeout=0.6, retries=3) -> CatalogClient:
    return CatalogClient(ConnectorSettings(url=server.url, token="", timeout=timeout, connect_timeout=0.5,
                                           retries=retries))


def test_a_stalled_search_fails_with_the_timeout_error_within_the_configured_timeout(stub_service):
    server = stub_service(otherwise="stall")
    client = client_for(server, timeout=0.6, retries=3)
    try:
        started = time.monotonic()
        with pytest.raises(ServiceTimeout, match=r"did not answer POST /catalogs/site/query within 0.6 s"):
            client.search("site", SearchRequest(query={"portal_type": "Document"}), ["Anonymous"])
        elapsed = time.monotonic() - started
    finally:
        client.close()
    # The timeout bounds the call, its retries included (three attempts took three timeouts).
    assert 0.5 < elapsed < 1.2
    assert server.requests == [("POST", "/catalogs/site/query")]
    # The error page is registered for ServiceUnavailable: a timeout shows it too.
    assert issubclass(ServiceTimeout, ServiceUnavailable)


def test_an_idempotent_call_is_retried_after_a_503(stub_service):
    server = stub_service(answers=[503], otherwise=EMPTY_RESULT)
    client = client_for(server, timeout=5)
    try:
        result = client.search("site", SearchRequest(query={}), None, unrestricted=True)
    finally:
        client.close()
    assert result.items_total == 0
    assert server.requests == [("POST", "/catalogs/site/query")] * 2


def test_an_idempotent_call_gives_up_after_its_attempts(stub_service):
    server = stub_service(otherwise=503)
    client = client_for(server, timeout=5, retries=3)
    try:
        with pytest.raises(ServiceUnavailable, match="answered 503"):
            client.commit_batch("site", "b1")
    finally:
        client.close()
    assert server.requests == [("POST", "/catalogs/site/batches/b1/commit")] * 3


def test_503s_are_retried_until_the_timeout_when_no_attempts_are_set(stub_service):
    """While the service's database is away, every call answers 503: an idempotent call waits for
    it within its timeout (pauses growing to 1 s), then gives up with the unavailable error."""
    server = stub_service(otherwise=503)
    client = client_for(server, timeout=2.5, retries=0)
    try:
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable, match="answered 503"):
            client.search("site", SearchRequest(query={}), None, unrestricted=True)
        elapsed = time.monotonic() - started
    finally:
        client.close()
    assert 1.4 < elapsed < 2.6
    # 0.1, 0.2, 0.4, 0.8 s apart, then as long as the timeout allows.
    assert len(server.requests) == 5
    pauses = [b - a for a, b in zip(server.times, server.times[1:], strict=False)]
    assert all(0.08 < pause < 1.1 for pause in pauses), pauses
    assert pauses == sorted(pauses)


def test_a_call_waits_out_an_outage_and_succeeds(stub_service):
    server = stub_service(answers=[RetryAfter("1")] * 2 + [503] * 3, otherwise=EMPTY_RESULT)
    client = client_for(server, timeout=10, retries=0)
    try:
        result = client.search("site", SearchRequest(query={}), None, unrestricted=True)
    finally:
        client.close()
    assert result.items_total == 0
    assert len(server.requests) == 6
    # Retry-After: 1 is honoured (up to a second) for the answers that carry it.
    assert server.times[1] - server.times[0] >= 0.95
    assert server.times[2] - server.times[1] >= 0.95


def test_a_refused_connection_is_retried_until_the_service_is_back(stub_service):
    """The service itself restarting (connections refused for a while): a read goes through once
    it listens again, within the call's timeout."""
    from tests.live import free_port

    port = free_port()
    client = CatalogClient(ConnectorSettings(url=f"http://127.0.0.1:{port}", token="", timeout=5, retries=0))
    started = threading.Timer(0.7, stub_service, kwargs={"otherwise": EMPTY_RESULT, "port": port})
    started.start()
    try:
        result = client.search("site", SearchRequest(query={}), None, unrestricted=True)
    finally:
        started.join()
        client.close()
    assert result.items_total == 0


def test_creating_a_catalog_is_not_retried(stub_service):
    server = stub_service(answers=[503], otherwise={"id": "site"})
    client = client_for(server, timeout=5)
    try:
        with pytest.raises(ServiceUnavailable, match="answered 503"):
            client.create_catalog(CatalogCreate(id="site"))
    finally:
        client.close()
    assert server.requests == [("POST", "/catalogs")]


def test_a_refused_connection_is_the_unavailable_error(stub_service):
    server = stub_service()
    url = server.url
    server.shutdown()
    server.server_close()  # the port is closed: connections are refused
    client = CatalogClient(ConnectorSettings(url=url, token="", timeout=2, retries=2))
    try:
        with pytest.raises(ServiceUnavailable, match="is not reachable") as raised:
            client.unique_values("site", "portal_type")
    finally:
        client.close()
    assert not isinstance(raised.value, ServiceTimeout)
