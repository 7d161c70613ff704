"""The confluent-kafka adapter's record path, in process: what kwire.confluent adds per record.

Workload: 100,000 decoded kwire Records (8-byte key, 100-byte value).  The application touches
each value, as bench/clients.py does:

* ``native`` -- kwire's Record objects: ``len(r.value)``;
* ``adapter-consume`` -- kwire.confluent's consume(): each Record wrapped in a Message,
  ``m.error()`` checked and ``len(m.value())``, as a classic confluent-kafka loop does;
* ``adapter-poll`` -- the same through one poll() per message, from a fake kwire consumer
  whose consume() slices pre-decoded records (the driver thread and the network are out of it);
* ``confluent-message-access`` -- real confluent-kafka Message objects (constructed up front:
  only librdkafka can make consumed ones) checked the same way: the floor of its loop.

and ``produce_calls``: 50,000 produce() calls into a producer that sends nothing (no broker
listens, long linger): kwire's Producer, kwire.confluent's, confluent-kafka's.

The end-to-end comparison against confluent-kafka on a broker is bench/clients.py
(``kwire-confluent``, ``kwire-confluent-poll``, ``confluent-kafka``, ``confluent-kafka-poll``).
"""
from __future__ import annotations

import types

import pytest

from kwire.records import Record

N = 100_000


@pytest.fixture(scope="module")
def records():
    return [Record(i, 1_700_000_000_000 + i, 0, b"k%07d" % i, b"v" * 100, [], "t", i % 3, 0)
            for i in range(N)]


def test_native_records(benchmark, report, records):
    def run():
        nb = 0
        for r in records:
            v = r.value
            if v is not None:
                nb += len(v)
        return nb
    assert benchmark(run) == 100 * N
    report("confluent-adapter: native Record loop", N)


def test_adapter_consume(benchmark, report, records):
    from kwire.confluent._types import _wrap_list

    def run():
        nb = 0
        for m in _wrap_list(records):
            if m.error() is not None:
                continue
            v = m.value()
            if v is not None:
                nb += len(v)
        return nb
    assert benchmark(run) == 100 * N
    report("confluent-adapter: consume() loop", N)


class _FakeKConsumer:
    """kwire.Consumer's consume() reduced to slicing pre-decoded records (kwire's own cost per
    call is left out; it is paid once per batch)."""

    def __init__(self, recs):
        self._recs = recs
        self._i = 0
        self._ch = types.SimpleNamespace(last_poll_ms=0)

    def consume(self, n, timeout=None):
        i = self._i
        self._i = i + n
        return self._recs[i:i + n]


def test_adapter_poll(benchmark, report, records):
    from kwire.confluent.consumer import Consumer

    def setup():
        c = Consumer.__new__(Consumer)
        c._c = _FakeKConsumer(records)
        c._closed = False
        c._stats = None
        c._next_check = float("inf")
        c._buf, c._bi, c._batch, c._handed_at = None, 0, 1, 0.0
        return (c,), {}

    def run(c):
        nb = 0
        while True:
            m = c.poll(0)
            if m is None:
                break
            if m.error() is not None:
                continue
            v = m.value()
            if v is not None:
                nb += len(v)
        return nb
    assert benchmark.pedantic(run, setup=setup, rounds=5) == 100 * N
    report("confluent-adapter: poll() loop", N)


def test_confluent_message_access(benchmark, report):
    import confluent_kafka
    msgs = [confluent_kafka.Message(topic="t", partition=i % 3, offset=i, key=b"k%07d" % i,
                                    value=b"v" * 100) for i in range(N)]

    def run():
        nb = 0
        for m in msgs:
            if m.error() is not None:
                continue
            v = m.value()
            if v is not None:
                nb += len(v)
        return nb
    assert benchmark(run) == 100 * N
    report("confluent-adapter: confluent-kafka Message access only", N)


# --- the produce() path: 50,000 calls, nothing sent (no broker listens; long linger) -------------

P = 50_000
_PCONF = {"bootstrap.servers": "127.0.0.1:1", "linger.ms": 300000, "queue.buffering.max.messages": 1_000_000,
          "message.timeout.ms": 600000}


def _produce_loop(make):
    def setup():
        return (make(),), {}

    def run(p):
        v = b"v" * 100
        for i in range(P):
            p.produce("t", v, b"k%d" % i, partition=i % 3)
        return P
    return setup, run


@pytest.mark.parametrize("client", ["kwire", "kwire.confluent", "confluent-kafka"])
def test_produce_calls(benchmark, report, client):
    if client == "kwire":
        from kwire.producer import Producer

        def make():
            return Producer({k: v for k, v in _PCONF.items() if k != "message.timeout.ms"})
    elif client == "kwire.confluent":
        from kwire.confluent import Producer

        def make():
            return Producer(_PCONF)
    else:
        import confluent_kafka

        def make():
            return confluent_kafka.Producer(_PCONF)
    setup, run = _produce_loop(make)
    assert benchmark.pedantic(run, setup=setup, rounds=3) == P
    report(f"confluent-adapter: produce() calls, {client}", P)
