"""A hostile broker in front of Apache Kafka and Tansu (tests/hostile_broker.py): answers
dripped, claiming 2 GiB, cut short, garbled, or carrying a corrupt record batch.  kwire's
Consumer must never hang, never allocate what a frame claims, and never hand out or skip a
record it could not read: each fault is either ridden out (the connection closed and the
request retried -- every record then read exactly once, in order) or raised as a typed error.
Decompression bombs have their own tests (tests/consumer/test_decompression_bomb.py)."""
from __future__ import annotations

import resource
import time

import pytest
from confluent_kafka import Producer

from kwire.consumer import Consumer, TopicPartition
from kwire.errors import CorruptRecordError, KwireError

from .hostile_broker import HostileProxy

N = 300


def _host_port(peer) -> tuple[str, int]:
    host, _, port = peer.bootstrap.rpartition(":")
    return host, int(port)


@pytest.fixture
def hostile(peer, unique_topic, create_topic):
    create_topic(peer, unique_topic, 1)
    p = Producer({"bootstrap.servers": peer.bootstrap, "linger.ms": 5})
    for i in range(N):
        p.produce(unique_topic, value=b"%d" % i, partition=0)
    assert p.flush(15) == 0
    with HostileProxy(*_host_port(peer)) as proxy:
        yield proxy


def _consumer(proxy: HostileProxy, topic: str, **cfg) -> Consumer:
    c = Consumer({"bootstrap.servers": proxy.bootstrap, "auto.offset.reset": "earliest",
                  "request.timeout.ms": 2000, "socket.connection.setup.timeout.ms": 2000,
                  "fetch.wait.max.ms": 100, "fetch.max.bytes": 4096, "max.partition.fetch.bytes": 4096, **cfg})
    c.assign([TopicPartition(topic, 0, 0)])
    return c


def _read_all(c: Consumer, deadline_s: float = 40.0) -> list[int]:
    """Offsets read until all N came or the deadline passed (a hang fails the test)."""
    offsets: list[int] = []
    deadline = time.monotonic() + deadline_s
    while len(offsets) < N and time.monotonic() < deadline:
        for r in c.consume(100, timeout=0.2):
            assert r.value == b"%d" % r.offset
            offsets.append(r.offset)
    return offsets


def test_a_dripped_answer_is_given_up_after_the_request_timeout(hostile, unique_topic):
    hostile.spoil("Fetch", "drip")
    with _consumer(hostile, unique_topic) as c:
        assert _read_all(c) == list(range(N))
    assert hostile.spoiled == {"drip": 1}
    assert hostile.client_closed == 1  # kwire closed the connection it was dripped on


def test_a_frame_claiming_2_gib_closes_the_connection_without_allocating_it(hostile, unique_topic):
    hostile.spoil("Fetch", "huge")
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with _consumer(hostile, unique_topic) as c:
        assert _read_all(c) == list(range(N))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib) / 1024
    assert hostile.spoiled == {"huge": 1}
    assert grown_mib < 200, f"peak RSS grew by {grown_mib:.0f} MiB"


def test_an_answer_cut_short_is_retried(hostile, unique_topic):
    hostile.spoil("Fetch", "truncate", times=2)
    with _consumer(hostile, unique_topic) as c:
        assert _read_all(c) == list(range(N))
    assert hostile.spoiled == {"truncate": 2}


def test_a_garbled_answer_is_retried_and_nothing_is_handed_out_of_it(hostile, unique_topic):
    hostile.spoil("Fetch", "garbage")
    errors: list = []
    with _consumer(hostile, unique_topic, error_cb=errors.append) as c:
        assert _read_all(c) == list(range(N))
    assert hostile.spoiled == {"garbage": 1}
    # the unreadable answer is reported (defect 8 of the churn issue), typed
    assert errors and all(isinstance(e, KwireError) for e in errors), errors


def test_a_corrupt_record_batch_is_a_typed_error_and_nothing_is_skipped(hostile, unique_topic):
    """With check.crcs (off by default, as in librdkafka; Java's client checks by default) the
    batch whose CRC fails is not handed out: error_cb gets a CorruptRecordError naming the
    partition (librdkafka reports it as an error event; the log without error_cb), the position
    goes back to the start of that fetch, and the next Fetch (unspoiled now) reads it again, so
    every record is read exactly once."""
    hostile.spoil("Fetch", "corrupt")
    errors: list = []
    with _consumer(hostile, unique_topic, error_cb=errors.append, **{"check.crcs": True}) as c:
        assert _read_all(c) == list(range(N))
    assert hostile.spoiled == {"corrupt": 1}
    assert len(errors) == 1 and isinstance(errors[0], CorruptRecordError), errors
    assert "crc" in str(errors[0]).lower()
    assert errors[0].partitions == [(unique_topic, 0)] and errors[0].offset >= 0, vars(errors[0])
