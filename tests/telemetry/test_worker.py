"""The bounded worker: producers never block; overflow and handler failures are counted."""

from __future__ import annotations

import threading

from fleetwatch.telemetry.metrics import DropCounter
from fleetwatch.telemetry.worker import BoundedWorker


def test_full_queue_drops_and_counts_instead_of_blocking():
    gate = threading.Event()
    seen: list[int] = []

    def handler(batch):
        gate.wait(30)
        seen.extend(batch)

    drops = DropCounter()
    w = BoundedWorker(handler, stage="x", drops=drops, max_queue=5, max_batch=1)
    w.submit(0)
    w.flush(0.0)
    for i in range(1, 100):
        w.submit(i)
    assert drops.get("x") >= 94
    gate.set()
    assert w.flush(30)
    w.close()
    assert len(seen) + drops.get("x") == 100


def test_handler_exception_loses_only_its_batch():
    drops = DropCounter()
    seen: list[int] = []

    def handler(batch):
        if 3 in batch:
            raise ValueError("boom")
        seen.extend(batch)

    w = BoundedWorker(handler, stage="y", drops=drops, max_batch=2)
    for i in range(6):
        w.submit(i)
        w.flush()
    w.close()
    assert seen == [0, 1, 2, 4, 5]
    assert drops.get("y") == 1


def test_closed_worker_counts_late_items_as_dropped():
    drops = DropCounter()
    w = BoundedWorker(lambda b: None, stage="z", drops=drops)
    w.close()
    w.submit(1)
    assert drops.get("z") == 1


def test_idle_work_runs_on_the_worker_thread_without_traffic():
    ran = threading.Event()
    threads: list[str] = []

    def idle():
        threads.append(threading.current_thread().name)
        ran.set()

    w = BoundedWorker(lambda b: None, stage="i", drops=DropCounter(), on_idle=idle, name="wk")
    w.flush()  # wakes the thread with nothing queued
    assert ran.wait(30)
    w.close()
    assert threads and set(threads) == {"wk"}


def test_a_handler_that_reports_what_it_lost_is_counted_by_that():
    class Lost(Exception):
        lost = 7

    def handler(batch):
        raise Lost("file lost")

    drops = DropCounter()
    w = BoundedWorker(handler, stage="l", drops=drops)
    w.submit(1)
    w.flush()
    w.close()
    assert drops.get("l") == 7
