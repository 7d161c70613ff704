"""The application side of a Consumer has one owner at a time (issue 14, defect 5): poll() and
consume() from a second thread while the first is still inside raise ConcurrentUseError at
once, instead of silently taking records from the middle of what the first hands out."""
from __future__ import annotations

import threading
import time

import pytest

from kwire.consumer import Consumer
from kwire.errors import ConcurrentUseError

from ..fake_broker import FakeBroker


def test_concurrent_consume_raises_at_once():
    with FakeBroker() as fb:
        c = Consumer({"bootstrap.servers": fb.bootstrap})
        try:
            inside = threading.Event()
            done = threading.Event()
            first: list = []

            def waiting_consumer():
                inside.set()
                first.append(c.consume(10, timeout=5.0))
                done.set()

            t = threading.Thread(target=waiting_consumer, daemon=True)
            t.start()
            inside.wait(5)
            # the first call waits inside consume() until its timeout (nothing is assigned)
            while not c._ch.in_poll:
                assert not done.is_set()
                time.sleep(0.01)
            with pytest.raises(ConcurrentUseError):
                c.consume(10, timeout=0)
            with pytest.raises(ConcurrentUseError):
                c.poll(0)
            t.join(10)
            assert first == [[]]
            # sequential use from another thread is fine
            assert c.consume(10, timeout=0) == []
            assert c.poll(0) is None
        finally:
            c.close()


# --- after close(), and misuse caught at the call (issue 14, defect 10) ---------------------------

def test_calls_after_close_raise_and_assignment_is_empty():
    from kwire import TopicPartition
    from kwire.errors import ConsumerClosedError
    with FakeBroker() as fb:
        c = Consumer({"bootstrap.servers": fb.bootstrap})
        c.assign([TopicPartition("t", 0, 0)])
        c.consume(10, timeout=0.3)  # the application takes the assignment in
        assert [(tp.topic, tp.partition) for tp in c.assignment()] == [("t", 0)]
        c.close()
        with pytest.raises(RuntimeError) as info:
            c.consume(10, timeout=5)
        assert isinstance(info.value, ConsumerClosedError)
        with pytest.raises(ConsumerClosedError):
            c.poll(5)
        assert c.assignment() == []


def test_invalid_pattern_and_max_poll_below_session_are_config_errors():
    from kwire.errors import ConfigError
    with FakeBroker() as fb:
        with pytest.raises(ConfigError):
            Consumer({"bootstrap.servers": fb.bootstrap, "group.id": "g",
                      "session.timeout.ms": 10000, "max.poll.interval.ms": 5000})
        c = Consumer({"bootstrap.servers": fb.bootstrap, "group.id": "g"})
        try:
            with pytest.raises(ConfigError):
                c.subscribe(["^t[", "plain"])
        finally:
            c.close()
