"""Producer.purge() and produce_batch(): kwire's own producer on Apache Kafka, and
kwire.confluent side by side with confluent-kafka on the same broker -- queued records purged
before they are sent (Apache Kafka), records purged in flight while the path to the broker is
stalled (Tansu behind a proxy it advertises, so every connection can be paused)."""
from __future__ import annotations

import json
import time

import confluent_kafka
import pytest

import kwire.confluent
from kwire.admin import LATEST, Admin
from kwire.errors import PurgedError
from kwire.producer import Producer

from .tansu_util import ProxiedTansu

MODULES = {"confluent_kafka": confluent_kafka, "kwire.confluent": kwire.confluent}


def _latest(bootstrap, topic, partition=0):
    with Admin({"bootstrap.servers": bootstrap}) as a:
        return a.list_offsets({(topic, partition): LATEST})[(topic, partition)].offset


def test_purge_in_queue_native(kafka, create_topic, unique_topic):
    assert create_topic(kafka, unique_topic, 1) == 1
    reports = []
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 60_000})
    try:
        for i in range(5):
            p.produce(unique_topic, b"v%d" % i, partition=0,
                      on_delivery=lambda err, r: reports.append((err, r.offset())))
        p.poll(0.2)
        assert len(p) == 5 and reports == []
        p.purge(in_flight=False)
        assert reports == []  # served by poll()/flush(), not by purge()
        assert p.flush(10) == 0 and len(p) == 0
        assert [(type(e), e.in_flight, off) for e, off in reports] == [(PurgedError, False, -1001)] * 5
        # still usable: the next records go out
        p.produce(unique_topic, b"after", partition=0, on_delivery=lambda err, r: reports.append((err, r.offset())))
        assert p.flush(10) == 0 and reports[-1] == (None, 0)
    finally:
        p.close()
    assert _latest(kafka.bootstrap, unique_topic) == 1  # nothing purged was written


def test_purge_in_flight_native():
    """A Produce written to a stalled path: purged in flight, its late answer ignored."""
    with ProxiedTansu() as t:
        topic = "purge-in-flight"
        with Admin({"bootstrap.servers": t.bootstrap}) as a:
            a.create_topics([(topic, 1, 1)], wait_for_leaders=True)
        reports = []
        p = Producer({"bootstrap.servers": t.bootstrap, "linger.ms": 0, "request.timeout.ms": 60_000})
        try:
            p.produce(topic, b"warm", partition=0, on_delivery=lambda err, r: reports.append(err))
            assert p.flush(10) == 0 and reports == [None]
            t.proxy.paused = True
            for i in range(3):
                p.produce(topic, b"v%d" % i, partition=0, on_delivery=lambda err, r: reports.append(err))
            end = time.monotonic() + 10
            while not p._flying:  # written, waiting for the answer
                assert time.monotonic() < end
                p.poll(0.05)
            p.purge(in_queue=False)
            assert p.flush(10) == 0 and len(p) == 0
            assert [(type(e), e.in_flight) for e in reports[1:]] == [(PurgedError, True)] * 3
            t.proxy.paused = False
            p.produce(topic, b"after", partition=0, on_delivery=lambda err, r: reports.append(err))
            assert p.flush(10) == 0
            assert len(reports) == 5 and reports[-1] is None  # the late answer reported nothing
        finally:
            t.proxy.paused = False
            p.close()


def _purge_queue_program(ck, bootstrap, topic):
    codes = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 60_000})
    for i in range(5):
        p.produce(topic, b"v%d" % i, partition=0,
                  on_delivery=lambda err, msg: codes.append(err.name() if err else msg.offset()))
    p.poll(0.2)
    before = len(p)
    p.purge(in_flight=False)
    served_by_purge = list(codes)
    left = p.flush(10)
    purged = list(codes)
    p.produce(topic, b"after", partition=0,
              on_delivery=lambda err, msg: codes.append(err.name() if err else msg.offset()))
    p.flush(10)
    return {"before": before, "served_by_purge": served_by_purge, "left": left, "len": len(p),
            "purged": purged, "after": codes[len(purged):], "written": _latest(bootstrap, topic)}


def test_purge_in_queue_same_as_confluent_kafka(kafka, create_topic, unique_topic):
    res = {}
    for i, (name, ck) in enumerate(MODULES.items()):
        t = f"{unique_topic}-{i}"
        assert create_topic(kafka, t, 1) == 1
        res[name] = _purge_queue_program(ck, kafka.bootstrap, t)
    assert res["kwire.confluent"] == res["confluent_kafka"]
    assert res["kwire.confluent"]["purged"] == ["_PURGE_QUEUE"] * 5
    assert res["kwire.confluent"]["after"] == [0] and res["kwire.confluent"]["written"] == 1


def _purge_in_flight_program(ck, bootstrap, proxy, topic):
    codes, docs = [], []
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "request.timeout.ms": 60_000,
                     "statistics.interval.ms": 50, "stats_cb": docs.append})

    def report(err, msg):
        codes.append(err.name() if err else "ok")
    p.produce(topic, b"warm", partition=0, on_delivery=report)
    p.flush(10)
    proxy.paused = True
    try:
        for i in range(3):
            p.produce(topic, b"v%d" % i, partition=0, on_delivery=report)
        end = time.monotonic() + 10

        def in_flight() -> int:  # the statistics of either client say when the request is out
            for d in docs[::-1]:
                part = json.loads(d)["topics"].get(topic, {}).get("partitions", {}).get("0")
                if part is not None:
                    return part["msgs_inflight"]
            return 0
        while in_flight() != 3:
            assert time.monotonic() < end, docs[-1:]
            p.poll(0.05)
        p.purge(in_queue=False)
        left = p.flush(10)
        purged = list(codes)
    finally:
        proxy.paused = False
    p.produce(topic, b"after", partition=0, on_delivery=report)
    p.flush(10)
    return {"left": left, "purged": purged, "all": codes, "len": len(p)}


def test_purge_in_flight_same_as_confluent_kafka():
    with ProxiedTansu() as t:
        res = {}
        for i, (name, ck) in enumerate(MODULES.items()):
            topic = f"purge-flight-{i}"
            with Admin({"bootstrap.servers": t.bootstrap}) as a:
                a.create_topics([(topic, 1, 1)], wait_for_leaders=True)
            res[name] = _purge_in_flight_program(ck, t.bootstrap, t.proxy, topic)
    assert res["kwire.confluent"] == res["confluent_kafka"]
    assert res["kwire.confluent"]["purged"] == ["ok"] + ["_PURGE_INFLIGHT"] * 3
    assert res["kwire.confluent"]["all"] == ["ok"] + ["_PURGE_INFLIGHT"] * 3 + ["ok"]


def _batch_program(ck, bootstrap, topic):
    seen = []
    p = ck.Producer({"bootstrap.servers": bootstrap})
    msgs = [{"value": b"a", "key": b"k1"},
            {"value": "b", "partition": 1, "headers": {"ignored": b"1"}},
            {"value": b"c", "callback": lambda err, msg: seen.append(("own", err, msg.value()))}]
    n = p.produce_batch(topic, msgs, partition=0,
                        on_delivery=lambda err, msg: seen.append(("batch", err, msg.value(), msg.partition())))
    assert p.flush(10) == 0
    bad = []  # (none of these may queue anything: "written" below counts)
    for call in (lambda: p.produce_batch(topic, "not a list"), lambda: p.produce_batch(topic, [b"x"]),
                 lambda: p.produce_batch(topic, [{"value": b"ok"}, {"value": 5}]),
                 lambda: p.produce_batch(topic, [{"value": b"x", "partition": "0"}]),
                 lambda: p.produce_batch(topic, [{"value": b"x", "timestamp": 0}])):
        try:
            call()
            bad.append(None)
        except Exception as exc:
            bad.append(type(exc).__name__)
    assert p.flush(10) == 0
    return {"queued": n, "errors": [m.get("_error") for m in msgs], "seen": sorted(seen, key=repr),
            "bad": bad, "written": (_latest(bootstrap, topic, 0), _latest(bootstrap, topic, 1))}


def test_produce_batch_same_as_confluent_kafka(kafka, create_topic, unique_topic):
    res = {}
    for i, (name, ck) in enumerate(MODULES.items()):
        t = f"{unique_topic}-{i}"
        assert create_topic(kafka, t, 2) == 2
        res[name] = _batch_program(ck, kafka.bootstrap, t)
    assert res["kwire.confluent"] == res["confluent_kafka"]
    # (confluent-kafka 2.16 ignores a message's own "partition": the batch's applies)
    assert res["kwire.confluent"]["queued"] == 3 and res["kwire.confluent"]["written"] == (3, 0)


@pytest.mark.parametrize("name", list(MODULES))
def test_purge_after_close_raises(name):
    p = MODULES[name].Producer({"bootstrap.servers": "127.0.0.1:1"})
    p.close(0)
    with pytest.raises(RuntimeError):
        p.purge()
