"""The client's background thread: order, settling, and forked processes."""

from __future__ import annotations

import os
import signal
import threading
import time

from plone_connector.catalog import client


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
    pid = os.fork()
    if pid == 0:  # the child: settle must not wait for the parent's thread, which is not here
        signal.alarm(15)  # a hung child dies on its own
        code = 1
        try:
            client.settle()
            code = 0 if client.in_background(lambda: 42).result(timeout=10) == 42 else 2
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 20
        while True:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError("the forked process hung waiting for its parent's thread")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        gate.set()
        client.settle()
