"""Events are posted off the pass, in order, and a full queue drops rather than blocks."""

from __future__ import annotations

import threading

from grpo_operator.children.meta import RunRef
from grpo_operator.recorder import EventRecorder

RUN = RunRef("r", "ns", "u")


def test_events_are_posted_in_order_by_one_thread_and_flushed_at_stop():
    posted, threads = [], set()
    release = threading.Event()

    def post(run, type_, reason, message):
        release.wait(5)  # a slow API server: record() must not wait for it
        posted.append(reason)
        threads.add(threading.current_thread().name)

    recorder = EventRecorder(post)
    for reason in ("Accepted", "Provisioning", "Running"):
        recorder.record(RUN, "Normal", reason, "m")
    assert posted == []
    release.set()
    recorder.flush(5)
    assert posted == ["Accepted", "Provisioning", "Running"]
    assert threads == {"events"}


def test_a_full_queue_drops_the_event_and_a_failing_post_stops_nothing():
    release, taken = threading.Event(), threading.Event()
    posted = []

    def post(run, type_, reason, message):
        taken.set()
        release.wait(5)
        if reason == "Bad":
            raise RuntimeError("the API server said no")
        posted.append(reason)

    recorder = EventRecorder(post, capacity=2)
    for reason in ("Bad", "A", "B", "Dropped"):  # "Bad" is being posted, A and B fill it
        recorder.record(RUN, "Normal", reason, "m")
        if reason == "Bad":
            assert taken.wait(5)
    release.set()
    recorder.flush(5)
    assert posted == ["A", "B"]
