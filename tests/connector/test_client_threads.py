"""The client's background thread: order, settling, and forked processes."""

from __future__ import annotations

import os
import threading

from plone_connector.catalog import client
from tests.e2e import forking


def test_background_requests_run_in_order_and_settle_waits_for_them():
    done: list[int] = []
    gate = threading.Event()

    def job(n: int) -> None:
        if n == 0:
            assert gate.wait(10)
        done.append(n)

    futures = [client.in_background(job, n) for n in range(5)]
    assert done == []  # the first one holds the thread
    gate.set()
    client.settle()
    assert done == [0, 1, 2, 3, 4]
    assert all(f.done() for f in futures)


def test_a_forked_process_does_not_wait_for_its_parents_background_requests():
    gate = threading.Event()
    client.in_background(gate.wait, 30)  # in flight in the parent while it forks

    def child(report_fd: int) -> None:
        # settle must not wait for the parent's thread, which is not in the child.
        client.settle()
        assert client.in_background(lambda: 42).result(timeout=10) == 42

    try:
        pid, read_fd = forking.start(child)
        status, _ = forking.finish(pid, read_fd, timeout=20)  # a hung child is killed and fails
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        gate.set()
        client.settle()
