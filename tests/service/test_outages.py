"""Database outages: while PostgreSQL is away or restarting, the service answers 503 with
``Retry-After`` and a problem-details body (never a 500, never a traceback), and it answers again
within 2 s of PostgreSQL being back; what it answered 200 to is kept.

The service runs on a PostgreSQL of this module's own (tests/restartable_pg.py), stopped and
started while reader and writer threads send searches, reads and batches in a loop.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest

from tests.live import start_service
from tests.restartable_pg import RestartablePostgres
from tests.service.test_api import UNRESTRICTED, entry
from tests.service.test_review_support import new_catalog

# Recovery must be this quick once PostgreSQL accepts connections again.
RECOVERY_SECONDS = 2.0


@pytest.fixture(scope="module")
def private_pg():
    server = RestartablePostgres()
    server.start()
    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("create database catalog")
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="module")
def service(private_pg):
    service = start_service(private_pg.url("catalog"), extra_env={"CATALOG_LOG_LEVEL": "info"})
    try:
        yield service
    finally:
        service.stop()


@dataclass
class Answer:
    at: float
    kind: str
    status: int
    headers: httpx.Headers | None = None
    body: str = ""


@dataclass
class Traffic:
    """Threads that search, read and write until stopped, recording every answer."""

    service: object
    catalog: str
    answers: list[Answer] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # uids of writes answered 200
    stopped: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, kind: str, response: httpx.Response | None, error: Exception | None = None) -> None:
        if response is None:
            answer = Answer(time.monotonic(), kind, 0, None, repr(error))
        else:
            answer = Answer(time.monotonic(), kind, response.status_code, response.headers, response.text[:2000])
        with self.lock:
            self.answers.append(answer)

    def _loop(self, kind: str, send) -> None:
        with self.service.client() as client:
            while not self.stopped.is_set():
                try:
                    response = send(client)
                except httpx.TransportError as exc:  # the service itself must stay up: recorded as 0
                    self._record(kind, None, exc)
                    time.sleep(0.05)
                    continue
                self._record(kind, response)
                time.sleep(0.01)

    def _query(self, client: httpx.Client) -> httpx.Response:
        return client.post(f"/catalogs/{self.catalog}/query", headers=UNRESTRICTED,
                           json={"query": {"portal_type": "Document", "sort_on": "id"}, "b_size": 5})

    def _anonymous_search(self, client: httpx.Client) -> httpx.Response:
        return httpx.get(f"{self.service.url}/search", params={"catalog": self.catalog, "SearchableText": "hello"},
                         timeout=10)

    def _read(self, client: httpx.Client) -> httpx.Response:
        return client.get(f"/catalogs/{self.catalog}")

    def _write(self, client: httpx.Client) -> httpx.Response:
        uid = uuid.uuid4().hex
        response = client.post(f"/catalogs/{self.catalog}/batches",
                               json={"batch_id": uid, "entries": [entry(uid, f"/plone/{uid}", text="hello")]})
        if response.status_code == 200:
            with self.lock:
                self.written.append(uid)
        return response

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._loop, args=(kind, send), daemon=True) for kind, send in (
            ("query", self._query), ("query", self._query), ("search", self._anonymous_search),
            ("read", self._read), ("write", self._write))]
        for thread in threads:
            thread.start()
        return threads


def server_errors(service) -> list[str]:
    """The end of the error of every request the service logged as answered 500."""
    found = []
    with open(service.log_path, errors="replace") as log:
        for line in log:
            if '"status":500' in line:
                found.append(json.loads(line).get("exc", "")[-600:])
    return found


def _outage(private_pg: RestartablePostgres, mode: str, away: float) -> float:
    """Stop PostgreSQL, keep it away ``away`` seconds, start it; return when it was back."""
    private_pg.stop(mode)
    time.sleep(away)
    private_pg.start()
    return time.monotonic()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgresql_restart_answers_only_2xx_or_503_and_recovers(service, private_pg, mode):
    with service.client() as admin:
        name, _ = new_catalog(admin)
        seed = admin.post(f"/catalogs/{name}/batches",
                          json={"batch_id": uuid.uuid4().hex, "entries": [entry("seed", "/plone/seed", text="hello")]})
        assert seed.status_code == 200, seed.text
    traffic = Traffic(service, name)
    threads = traffic.start()
    try:
        time.sleep(1.0)
        went = time.monotonic()
        back = _outage(private_pg, mode, away=1.5)
        time.sleep(RECOVERY_SECONDS + 2.0)
    finally:
        traffic.stopped.set()
        for thread in threads:
            thread.join(30)
    answers = traffic.answers

    bad = [a for a in answers if not (200 <= a.status < 300 or a.status == 503)]
    assert not bad, f"{len(bad)} answers neither 2xx nor 503, e.g. {bad[:3]}; {server_errors(service)[:3]}"
    during = [a for a in answers if went <= a.at <= back]
    unavailable = [a for a in answers if a.status == 503]
    assert unavailable, "PostgreSQL was away and no request noticed"
    assert during, "no request was answered while PostgreSQL was away"
    for a in unavailable:
        assert a.headers["content-type"] == "application/problem+json", a
        assert int(a.headers["retry-after"]) >= 1, a
        assert '"status":503' in a.body, a
        assert "Traceback" not in a.body and "asyncpg" not in a.body, a
    # Every kind of request works again within RECOVERY_SECONDS of PostgreSQL being back.
    for kind in ("query", "search", "read", "write"):
        late = [a for a in answers if a.kind == kind and a.at > back + RECOVERY_SECONDS]
        assert late, f"no {kind} was sent after recovery"
        assert all(200 <= a.status < 300 for a in late), (kind, [a for a in late if a.status >= 300][:3])
        first_ok = min(a.at for a in answers if a.kind == kind and a.at > back and 200 <= a.status < 300)
        print(f"{mode}: {kind} answered 2xx {first_ok - back:.3f} s after PostgreSQL was back")
    # What was answered 200 is there.
    with service.client() as admin:
        for uid in traffic.written:
            found = admin.get(f"/catalogs/{name}/objects/{uid}")
            assert found.status_code == 200, (uid, found.text)


def _terminate_service_backends(private_pg: RestartablePostgres) -> int:
    with psycopg.connect(private_pg.url(), autocommit=True) as conn:
        return conn.execute("select count(pg_terminate_backend(pid)) from pg_stat_activity "
                            "where application_name = 'catalog-service'").fetchone()[0]


def test_terminated_backends_cost_no_failed_request(service, private_pg):
    """pg_terminate_backend of every session of the service under load, every second: each
    request that meets a dead connection, kept or pooled, idle or in the middle of its statements,
    runs again on a fresh one."""
    with service.client() as admin:
        name, _ = new_catalog(admin)
    traffic = Traffic(service, name)
    threads = traffic.start()
    terminated = 0
    try:
        time.sleep(0.5)
        for _ in range(6):
            terminated += _terminate_service_backends(private_pg)
            time.sleep(1.0)
    finally:
        traffic.stopped.set()
        for thread in threads:
            thread.join(30)
    assert terminated >= 6
    failed = [a for a in traffic.answers if not 200 <= a.status < 300]
    assert not failed, f"{len(failed)} of {len(traffic.answers)} failed, e.g. {failed[:3]}; {server_errors(service)[:3]}"
    assert {a.kind for a in traffic.answers} == {"query", "search", "read", "write"}


def test_requests_after_terminated_idle_backends_all_succeed(service, private_pg):
    """The case of the kept search connections: the service idle, its sessions terminated, then
    one request of each kind (each met a dead connection, none failed)."""
    with service.client() as admin:
        name, _ = new_catalog(admin)
    statuses = []
    with service.client() as client:
        for _ in range(5):
            assert _terminate_service_backends(private_pg) >= 1
            time.sleep(0.1)
            uid = uuid.uuid4().hex
            for response in (
                    client.post(f"/catalogs/{name}/query", headers=UNRESTRICTED, json={"query": {}}),
                    client.post(f"/catalogs/{name}/query", headers=UNRESTRICTED, json={"query": {}}),
                    httpx.get(f"{service.url}/search", params={"catalog": name}),
                    client.get(f"/catalogs/{name}"),
                    client.post(f"/catalogs/{name}/batches",
                                json={"batch_id": uid, "entries": [entry(uid, f"/plone/{uid}")]})):
                statuses.append((response.status_code, response.text[:300]))
    assert [s for s in statuses if s[0] != 200] == [], server_errors(service)[:3]


def test_idle_session_timeout_costs_no_failed_request(service, private_pg):
    """The server closes connections idle longer than idle_session_timeout; the service's kept
    and pooled connections are then closed when the next request comes."""
    with service.client() as admin:
        name, _ = new_catalog(admin)
    with psycopg.connect(private_pg.url(), autocommit=True) as conn:
        conn.execute("alter database catalog set idle_session_timeout = '200ms'")
    try:
        _terminate_service_backends(private_pg)  # new sessions take the setting
        statuses = []
        with service.client() as client:
            for _ in range(8):
                time.sleep(0.4)
                for response in (
                        client.post(f"/catalogs/{name}/query", headers=UNRESTRICTED, json={"query": {}}),
                        httpx.get(f"{service.url}/search", params={"catalog": name}),
                        client.get(f"/catalogs/{name}")):
                    statuses.append((response.status_code, response.text[:300]))
    finally:
        with psycopg.connect(private_pg.url(), autocommit=True) as conn:
            conn.execute("alter database catalog reset idle_session_timeout")
        _terminate_service_backends(private_pg)
    assert [s for s in statuses if s[0] != 200] == [], server_errors(service)[:3]
