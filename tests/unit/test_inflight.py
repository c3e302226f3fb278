"""inflight.py: files in flight keep their order, stop after a failure, and
hold no more buffer memory than the budget (#16 item 3)."""

from __future__ import annotations

import threading
import time

from llmkube_stager.acting.inflight import ByteBudget, run_in_flight


def test_outcomes_come_back_in_the_items_order() -> None:
    def work(n: int) -> int:
        time.sleep(0.001 * (10 - n))  # later items finish first
        return n * n

    outcomes = run_in_flight(list(range(10)), work, 4)
    assert [o.value for o in outcomes] == [n * n for n in range(10)]


def test_at_most_limit_items_run_at_once() -> None:
    running, peak = 0, 0
    lock = threading.Lock()
    released = threading.Event()

    def work(n: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        released.wait(0.05)
        with lock:
            running -= 1
        return n

    run_in_flight(list(range(12)), work, 3)
    assert peak == 3


def test_after_a_failure_no_further_item_starts() -> None:
    started: list[int] = []

    def work(n: int) -> int:
        started.append(n)
        if n == 2:
            raise ValueError("two")
        return n

    outcomes = run_in_flight(list(range(50)), work, 1)
    assert started == [0, 1, 2]
    assert isinstance(outcomes[2].error, ValueError)
    assert not outcomes[3].started

    started.clear()
    outcomes = run_in_flight(list(range(50)), work, 4)
    assert isinstance(outcomes[2].error, ValueError)
    assert len(started) < 50  # the rest never started
    assert all(o.started for o in outcomes[: max(started) + 1] if o.value or o.error)


def test_one_at_a_time_runs_in_the_calling_thread() -> None:
    threads = run_in_flight([1, 2], lambda _: threading.current_thread(), 1)
    assert {o.value for o in threads} == {threading.main_thread()}


def test_the_budget_holds_reservations_to_its_total() -> None:
    budget = ByteBudget(100)
    held, peak = 0, 0
    lock = threading.Lock()

    def hold(nbytes: int) -> None:
        nonlocal held, peak
        with budget.reserve(nbytes):
            with lock:
                held += min(nbytes, 100)
                peak = max(peak, held)
            time.sleep(0.01)
            with lock:
                held -= min(nbytes, 100)

    threads = [threading.Thread(target=hold, args=(n,)) for n in (60, 60, 30, 10, 500, 40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert not any(t.is_alive() for t in threads), (
        "a reservation larger than the budget waits forever"
    )
    assert peak <= 100
