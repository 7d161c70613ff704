"""kwire.confluent without a broker: the behaviours confluent-kafka-python's own broker-less unit
tests check (test_KafkaError, test_TopicPartition, test_Consumer, test_Producer, test_misc,
test_message), written anew, plus the real confluent-kafka as the oracle where it helps."""
from __future__ import annotations

import json
import pickle
import time

import confluent_kafka as real
import pytest

import kwire.confluent as ck
from kwire.confluent import KafkaError, KafkaException, Message, TopicPartition
from kwire.confluent.admin import AdminClient, NewTopic
from kwire.records import Record

NOWHERE = "127.0.0.1:1"  # nothing listens there: connections are refused at once


# --- KafkaError / KafkaException ---------------------------------------------------------------

def test_error_codes_names_and_texts_are_librdkafkas():
    names = [n for n in dir(real.KafkaError) if isinstance(getattr(real.KafkaError, n), int)
             and (n.isupper() or (n.startswith("_") and not n.startswith("__")))]
    assert len(names) > 150
    for n in names:
        code = getattr(real.KafkaError, n)
        assert getattr(KafkaError, n) == code, n
        assert KafkaError(code).name() == real.KafkaError(code).name()
        assert KafkaError(code).str() == real.KafkaError(code).str()
        assert repr(KafkaError(code)) == repr(real.KafkaError(code))


@pytest.mark.parametrize("name", ["_PARTITION_EOF", "_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN",
                                  "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_NO_OFFSET",
                                  "_MSG_TIMED_OUT", "_AUTO_OFFSET_RESET", "_LOG_TRUNCATION"])
def test_internal_codes_kwire_produces(name):
    code = getattr(KafkaError, name)
    assert code < 0 and KafkaError(code).name() == name


def test_unknown_code_and_custom_reason():
    e = KafkaError(12345)
    assert (e.name(), e.str()) == ("ERR_12345?", "Err-12345?")
    assert repr(e) == repr(real.KafkaError(12345))
    e = KafkaError(KafkaError._ALL_BROKERS_DOWN, "Mayday!")
    assert e == KafkaError._ALL_BROKERS_DOWN and e.str() == "Mayday!"
    assert not (e.fatal() or e.retriable() or e.txn_requires_abort())


@pytest.mark.parametrize("flag", ["fatal", "retriable", "txn_requires_abort"])
def test_flags_travel_in_kafka_exception(flag):
    with pytest.raises(KafkaException) as exc:
        raise KafkaException(KafkaError(KafkaError.MEMBER_ID_REQUIRED, **{flag: True}))
    err = exc.value.args[0]
    assert isinstance(err, KafkaError)
    assert {f: getattr(err, f)() for f in ("fatal", "retriable", "txn_requires_abort")} == \
        {f: f == flag for f in ("fatal", "retriable", "txn_requires_abort")}
    assert repr(err).startswith("KafkaError{FATAL," if flag == "fatal" else "KafkaError{code=")


def test_kafka_error_compares_hashes_and_pickles_as_its_code():
    e = KafkaError(KafkaError._PARTITION_EOF)
    assert e == -191 and e != 3 and e < 0 and e <= -191 and e > -192 and e >= -191
    assert e == KafkaError(-191) and hash(e) == hash(-191)
    assert {e: 1}[KafkaError(-191)] == 1
    e2 = pickle.loads(pickle.dumps(KafkaError(3, "why", fatal=True)))
    assert (e2.code(), e2.str(), e2.fatal()) == (3, "why", True)


def test_raising_a_kafka_error_is_caught_as_kafka_exception():
    with pytest.raises(KafkaException, match="Err-12345?") as e:
        raise KafkaError(12345)
    assert e.value.args[0].code() == 12345

    class MyException(KafkaException):
        def __init__(self, code):
            super().__init__(KafkaError(code))

    with pytest.raises(KafkaException, match="Err-12345?") as e:
        raise MyException(12345)
    assert not e.value.args[0].fatal()


def test_kafka_error_needs_an_int():
    with pytest.raises(TypeError):
        KafkaError("x")


# --- TopicPartition -----------------------------------------------------------------------------

def test_topic_partition_ordering_all_six():
    a, b, b2 = TopicPartition("aa", 0), TopicPartition("aa", 19002), TopicPartition("aa", 19002)
    assert b > a and b >= a and a < b and a <= b and b == b2 and a != b and b <= b2 and b >= b2
    assert not (a > b or a >= b or b < a or b <= a or a == b or b != b2)
    assert TopicPartition("ulv", 2) < TopicPartition("xy", 0)
    assert TopicPartition("BaB", 9) != TopicPartition("Card", 9)
    tps = [TopicPartition("topicA", 5), TopicPartition("topic3", 0), TopicPartition("topicA", 5),
           TopicPartition("topic1", 3)]
    assert [(t.topic, t.partition) for t in sorted(tps)] == \
        [("topic1", 3), ("topic3", 0), ("topicA", 5), ("topicA", 5)]


def test_topic_partition_hash_repr_and_fields_match_confluent():
    for args in [("t",), ("t", 1), ("t", 1, 5), ("t", 1, 5, "md"), ("t", 1, 5, "md", 3)]:
        ours, theirs = TopicPartition(*args), real.TopicPartition(*args)
        assert repr(ours) == repr(theirs) and str(ours) == str(theirs)
        assert (ours.topic, ours.partition, ours.offset, ours.metadata, ours.leader_epoch, ours.error) == \
            (theirs.topic, theirs.partition, theirs.offset, theirs.metadata, theirs.leader_epoch, theirs.error)
    assert hash(TopicPartition("test", 99)) != hash(TopicPartition("somethingelse", 12))
    assert hash(TopicPartition("t", 1, 5)) == hash(TopicPartition("t", 1, 9))


def test_topic_partition_mutability_and_type_checks():
    tp = TopicPartition("t", 1)
    tp.offset, tp.partition = 7, 2
    assert (tp.partition, tp.offset) == (2, 7)
    for attr in ("topic", "metadata", "error"):
        with pytest.raises(AttributeError):
            setattr(tp, attr, "x")
    with pytest.raises(TypeError):
        TopicPartition("t", "x")
    with pytest.raises(TypeError):
        TopicPartition(1)
    with pytest.raises(NotImplementedError):
        tp == 3  # noqa: B015 -- as confluent-kafka
    tp2 = pickle.loads(pickle.dumps(TopicPartition("t", 1, 5, "md", 3)))
    assert (tp2.topic, tp2.partition, tp2.offset, tp2.metadata, tp2.leader_epoch) == ("t", 1, 5, "md", 3)


# --- Message -------------------------------------------------------------------------------------

from kwire.confluent import _types  # noqa: E402

try:
    from kwire.confluent import _message as _compiled_message
except ImportError:  # KWIRE_REQUIRE_EXTENSION=1 (CI) makes kwire.confluent's import fail instead
    _compiled_message = None

TWINS = [pytest.param((_types.PyMessage, _types._pure_wrap), id="pure")]
if _compiled_message is not None:
    TWINS.insert(0, pytest.param((_compiled_message.Message, _compiled_message.wrap), id="cython"))


@pytest.fixture(params=TWINS)
def twin(request):
    """Each Message twin in turn: (class, wrap(record))."""
    return request.param


def test_the_compiled_message_is_in_use_when_built():
    import os
    if os.environ.get("KWIRE_PURE", "") not in ("", "0"):
        assert ck.MESSAGE_IMPLEMENTATION == "python" and ck.Message is _types.PyMessage
    else:
        assert _compiled_message is not None, "kwire/confluent/_message.pyx was not built"
        assert ck.MESSAGE_IMPLEMENTATION == "cython" and ck.Message is _compiled_message.Message

METHODS = ("topic", "partition", "offset", "key", "value", "headers", "error", "timestamp",
           "latency", "leader_epoch", "deserialized_key", "deserialized_value", "delivery_count")


def _all(m):
    return tuple(getattr(m, n)() for n in METHODS) + (len(m),)


@pytest.mark.parametrize("kw", [
    {},
    {"topic": "t", "partition": 3, "offset": 5, "key": b"k", "value": "v", "headers": [("a", b"b")],
     "timestamp": (1, 123), "latency": 0.5, "leader_epoch": 2},
    {"topic": "t", "partition": -1, "offset": -1001, "leader_epoch": -1, "latency": -1},
    {"error": real.KafkaError(3)},
])
def test_message_constructed_as_confluent(kw, twin):
    assert _all(twin[0](**kw)) == _all(real.Message(**kw))


def test_message_setters_and_equality_and_pickle(twin):
    Message = twin[0]
    m = Message(topic="t", partition=0, offset=1, value=b"v")
    m.set_value({"deserialized": True})
    m.set_key("k")
    m.set_headers([("h", b"1")])
    m.set_topic("u")
    err = KafkaError(KafkaError._PARTITION_EOF)
    m.set_error(err)
    assert (m.value(), m.key(), m.headers(), m.topic(), m.error()) == \
        ({"deserialized": True}, "k", [("h", b"1")], "u", err)
    a = Message(topic="t", partition=1, offset=2, key=b"k", value=b"v", timestamp=(1, 5), latency=0.1)
    b = Message(topic="t", partition=1, offset=2, key=b"k", value=b"v", timestamp=(1, 5), latency=0.9)
    assert a == b and not (a != b)          # latency is not compared
    assert a != Message(topic="t", partition=1, offset=3, key=b"k", value=b"v", timestamp=(1, 5))
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(TypeError):
        Message(timestamp=5)


@pytest.mark.parametrize("kwire_type,confluent_type", [
    (0, real.TIMESTAMP_CREATE_TIME), (1, real.TIMESTAMP_LOG_APPEND_TIME), (-1, real.TIMESTAMP_NOT_AVAILABLE)])
def test_consumed_message_wraps_a_record(kwire_type, confluent_type, twin):
    _wrap = twin[1]
    r = Record(7, 1234 if kwire_type >= 0 else -1, kwire_type, b"k", b"value", [("h", b"x")], "t", 2, 4)
    m = _wrap(r)
    assert _all(m) == ("t", 2, 7, b"k", b"value", [("h", b"x")], None,
                       (confluent_type, 1234 if kwire_type >= 0 else -1), None, 4, b"k", b"value",
                       None, 5)
    assert _wrap(Record(0, 0, 0, None, None, [], "t", 0, -1)).headers() is None
    assert _wrap(Record(0, 0, 0, None, None, [], "t", 0, -1)).leader_epoch() is None
    m.set_value(b"changed")                          # the record is not touched
    assert (m.value(), m.key(), m.offset(), r.value) == (b"changed", b"k", 7, b"value")
    assert isinstance(m, twin[0]) and m == pickle.loads(pickle.dumps(m))


# --- module level --------------------------------------------------------------------------------

def test_constants_version_libversion():
    for n in ("OFFSET_BEGINNING", "OFFSET_END", "OFFSET_STORED", "OFFSET_INVALID",
              "TIMESTAMP_NOT_AVAILABLE", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME"):
        assert getattr(ck, n) == getattr(real, n), n
    sver, iver = ck.version()
    assert sver == ck.__version__ and iver > 0
    lsver, liver = ck.libversion()
    assert "kwire" in lsver and liver >= 0x000b0400  # feature checks in programs pass
    assert str(ck.ThrottleEvent("broker", 0, 10.0)) == "broker/0 throttled for 10000 ms"


# --- Consumer -------------------------------------------------------------------------------------

def _consumer(**kw):
    return ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "test", "session.timeout.ms": 1000,
                        **kw})


def test_consumer_construction_errors():
    with pytest.raises(TypeError, match="expected configuration dict"):
        ck.Consumer()
    with pytest.raises(ValueError, match="group.id must be set"):
        ck.Consumer({"bootstrap.servers": NOWHERE})
    with pytest.raises(KafkaException) as e:
        ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "no.such.key": 1})
    assert e.value.args[0].code() == KafkaError._INVALID_ARG
    with pytest.raises(KafkaException) as e:
        ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "session.timeout.ms": "abc"})
    assert e.value.args[0].code() == KafkaError._INVALID_ARG
    with pytest.raises(KafkaException, match="group.protocol"):
        ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "group.protocol": "eager"})
    with pytest.raises(KafkaException, match="session.timeout.ms"):  # the broker's, under KIP-848
        ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "group.protocol": "consumer",
                     "session.timeout.ms": 10000})
    c = ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "group.protocol": "consumer"})
    c.close()


def test_consumer_accepts_common_librdkafka_keys():
    c = _consumer(**{"statistics.interval.ms": 0, "log_level": 3, "max.poll.records": 10,
                     "group.protocol": "classic", "fetch.queue.backoff.ms": 10,
                     "queued.min.messages": 1000, "socket.keepalive.enable": True,
                     "broker.address.family": "v4", "enable.metrics.push": False,
                     "api.version.request": True, "linger.ms": 5,
                     "default.topic.config": {"auto.offset.reset": "smallest"}})
    c.close()
    c = ck.Consumer(**{"bootstrap.servers": NOWHERE, "group.id": "g"})  # keyword form
    c.close()


def test_consumer_after_close():
    c = _consumer()
    c.subscribe(["test"])
    c.unsubscribe()
    assert c.close() is None
    assert c.close() is None  # closing again is allowed (confluent-kafka 2.x)
    tp = TopicPartition("test", 0, 42)
    calls = [lambda: c.subscribe(["test"]), c.unsubscribe, c.poll, lambda: c.consume(1, 0),
             lambda: c.assign([tp]), c.unassign, c.assignment,
             lambda: c.store_offsets(offsets=[tp]), c.commit, lambda: c.committed([tp]),
             lambda: c.position([tp]), lambda: c.get_watermark_offsets(tp), lambda: c.seek(tp),
             lambda: c.pause([tp]), lambda: c.resume([tp]), c.list_topics, c.memberid,
             lambda: c.incremental_assign([tp]), lambda: c.incremental_unassign([tp])]
    for call in calls:
        with pytest.raises(RuntimeError, match="^Consumer closed$"):
            call()


def test_consumer_assign_and_argument_checks():
    c = _consumer()
    parts = [TopicPartition("test", p) for p in range(0, 30, 3)]
    c.assign(parts)
    assert c.assignment() == parts
    assert all(isinstance(p, TopicPartition) for p in c.assignment())
    lo, hi = c.get_watermark_offsets(parts[0], cached=True)
    assert (lo, hi) == (real.OFFSET_INVALID, real.OFFSET_INVALID)
    with pytest.raises(TypeError):
        c.subscribe("test")
    with pytest.raises(TypeError):
        c.assign([("test", 0)])
    with pytest.raises(ValueError):
        c.consume(-1)
    with pytest.raises(ValueError):
        c.commit(message=Message(topic="t"), offsets=[TopicPartition("t", 0, 1)])
    t0 = time.monotonic()
    assert c.poll(0.2) is None and c.consume(10, 0.2) == []
    assert time.monotonic() - t0 < 5
    c.unassign()
    assert c.assignment() == []
    with pytest.raises(KafkaException) as e:
        c.commit(asynchronous=False)
    assert e.value.args[0].code() == KafkaError._NO_OFFSET
    c.close()


def test_consumer_subclassing():
    class SubConsumer(ck.Consumer):
        def poll(self, somearg):
            assert isinstance(somearg, str)
            return super().poll(timeout=0.0001)

    sc = SubConsumer({"bootstrap.servers": NOWHERE, "group.id": "test"})
    assert sc.poll("astring") is None
    sc.close()


def test_poll_without_timeout_returns_through_a_subclass_once():
    """poll() (no timeout) waits in 1 s slices inside Consumer: a subclass's poll() -- here
    DeserializingConsumer's -- runs once per message, so a key is deserialized once."""
    seen = []

    def key_deserializer(key, ctx):
        seen.append(key)
        return key.decode()

    c = ck.DeserializingConsumer({"bootstrap.servers": NOWHERE, "group.id": "test",
                                  "key.deserializer": key_deserializer})
    replies = [None, [Record(5, 0, 0, b"k", b"v", [], "t", 0, -1)]]
    c._refill = lambda *args, **kwargs: replies.pop(0)
    m = c.poll()
    assert (m.key(), m.offset(), seen) == ("k", 5, [b"k"])
    c.close()


def test_admin_module_on_first_access_and_star_import():
    """``kwire.confluent.admin`` is imported when first asked for, also by ``import *`` (its
    __all__ lists it): in a fresh interpreter, where nothing imported it yet."""
    import subprocess
    import sys
    code = ("from kwire.confluent import *\n"
            "import kwire.confluent as ck\n"
            "assert admin is ck.admin and ck.admin.AdminClient.__name__ == 'AdminClient'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_consumer_error_cb_all_brokers_down():
    seen = []
    c = _consumer(error_cb=lambda e: seen.append(e))
    c.subscribe(["test"])
    end = time.monotonic() + 20
    while not seen and time.monotonic() < end:
        c.poll(0.5)
    c.close()
    assert seen and isinstance(seen[0], KafkaError)
    assert seen[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def test_consumer_stats_cb():
    docs = []
    c = _consumer(**{"statistics.interval.ms": 100, "stats_cb": docs.append})
    c.assign([TopicPartition("test", 0)])
    end = time.monotonic() + 10
    while len(docs) < 2 and time.monotonic() < end:
        c.poll(0.1)
    c.close()
    assert len(docs) >= 2
    d = json.loads(docs[-1])
    assert d["name"] and d["type"] == "consumer" and d["cgrp"]["assignment_size"] == 1
    assert d["topics"]["test"]["partitions"]["0"]["consumer_lag"] == -1


# --- Producer ---------------------------------------------------------------------------------------

def test_producer_basics_without_a_broker():
    with pytest.raises(TypeError, match="expected configuration dict"):
        ck.Producer()
    with pytest.raises(KafkaException):
        ck.Producer({"should.fail": False})
    with pytest.raises(KafkaException, match="partitioner"):
        ck.Producer({"bootstrap.servers": NOWHERE, "partitioner": "murmur"})
    ck.Producer({"bootstrap.servers": NOWHERE, "partitioner": "murmur2"})
    reports = []
    p = ck.Producer({"bootstrap.servers": NOWHERE, "message.timeout.ms": 300,
                     "log.thread.name": True})
    assert bool(p) and len(p) == 0          # a Producer is true even with nothing queued
    p.produce("mytopic")
    p.produce("mytopic", value="somedata", key="a key", timestamp=1234567,
              headers={"h": "v", "n": None})
    p.produce(topic="another_topic", value="testing", partition=9,
              callback=lambda err, msg: reports.append((err, msg)))
    assert len(p) == 3 and bool(p)
    with pytest.raises(TypeError):
        p.produce("mytopic", 1)
    with pytest.raises(TypeError):
        p.produce("mytopic", b"x", partition="a")
    t0 = time.monotonic()
    assert p.flush(-1) == 0                  # -1: wait until everything failed or was delivered
    assert time.monotonic() - t0 >= 0.2 and len(p) == 0
    (err, msg), = reports
    assert isinstance(err, KafkaError) and err.code() == KafkaError._MSG_TIMED_OUT
    assert "Message timed out" in err.str()
    assert isinstance(msg, Message) and msg.error() is err
    assert (msg.topic(), msg.partition(), msg.value(), msg.offset()) == ("another_topic", 9, b"testing", None)
    assert p.close() is True and p.close() is True
    with pytest.raises(RuntimeError):
        p.produce("mytopic", b"x")


def test_producer_poll_minus_one_waits_for_a_callback():
    p = ck.Producer({"bootstrap.servers": NOWHERE, "message.timeout.ms": 300})
    seen = []
    p.produce("t", b"x", on_delivery=lambda err, msg: seen.append(err.code()))
    assert p.poll(-1) == 1 and seen == [KafkaError._MSG_TIMED_OUT]


def test_producer_default_topic_config_wins():
    seen = []
    p = ck.Producer({"bootstrap.servers": NOWHERE, "message.timeout.ms": 600000,
                     "default.topic.config": {"message.timeout.ms": 300},
                     "on_delivery": lambda err, msg: seen.append(err.code())})
    p.produce("mytopic", value="somedata", key="a key")
    end = time.monotonic() + 10
    while not seen and time.monotonic() < end:
        p.poll(0.5)
    assert seen == [KafkaError._MSG_TIMED_OUT]


def test_producer_error_cb_all_brokers_down():
    seen = []
    p = ck.Producer({"bootstrap.servers": NOWHERE, "error_cb": lambda e: seen.append(e.code())})
    end = time.monotonic() + 10
    while KafkaError._ALL_BROKERS_DOWN not in seen and time.monotonic() < end:
        p.poll(0.5)
    assert KafkaError._ALL_BROKERS_DOWN in seen


def test_transactions_need_transactional_id():
    """As librdkafka: the transactional calls of a producer without transactional.id fail with
    _NOT_CONFIGURED; with it, calls out of order fail with _STATE (neither fatal)."""
    p = ck.Producer({"bootstrap.servers": NOWHERE})
    for call in (p.init_transactions, p.begin_transaction, p.commit_transaction, p.abort_transaction):
        with pytest.raises(KafkaException) as e:
            call()
        assert e.value.args[0].code() == KafkaError._NOT_CONFIGURED and not e.value.args[0].fatal()
    p = ck.Producer({"bootstrap.servers": NOWHERE, "transactional.id": "t"})
    for call in (p.begin_transaction, p.commit_transaction, p.abort_transaction):
        with pytest.raises(KafkaException) as e:
            call()
        assert e.value.args[0].code() == KafkaError._STATE and not e.value.args[0].fatal()
    with pytest.raises(KafkaException) as e:
        p.produce("t", b"v")
    assert e.value.args[0].code() == KafkaError._STATE


# --- AdminClient ------------------------------------------------------------------------------------

def test_admin_client_argument_checks_and_unsupported_calls():
    a = AdminClient({"bootstrap.servers": NOWHERE})
    with pytest.raises(ValueError):
        a.create_topics([])
    with pytest.raises(TypeError):
        a.create_topics(["t"])
    with pytest.raises(ValueError):
        a.create_topics([NewTopic("t", 1, 1), NewTopic("t", 1, 1)])
    with pytest.raises(ValueError):
        a.delete_records([])
    with pytest.raises(KafkaException) as e:
        a.describe_acls(None)
    assert e.value.args[0].code() == KafkaError._NOT_IMPLEMENTED
    fs = a.create_topics([NewTopic("t", 1, 1)], request_timeout=0.5)
    with pytest.raises(KafkaException):
        fs["t"].result(30)
    a.close()


def test_serializers_match_confluent():
    from confluent_kafka import serialization as theirs

    from kwire.confluent import serialization as ours
    for name, obj in [("StringSerializer", "Jämtland"), ("IntegerSerializer", -5),
                      ("DoubleSerializer", 1.5)]:
        assert getattr(ours, name)()(obj) == getattr(theirs, name)()(obj)
        de = name.replace("Serializer", "Deserializer")
        assert getattr(ours, de)()(getattr(ours, name)()(obj)) == obj
        assert getattr(ours, name)()(None) is None
    with pytest.raises(ours.SerializationError):
        ours.IntegerSerializer()("x")
    assert str(ours.MessageField.VALUE) == "value"


def test_without_bootstrap_servers_nothing_is_reachable():
    """As librdkafka with no brokers: requests fail or time out, messages expire, no error_cb."""
    errors, docs = [], []
    p = ck.Producer({"message.timeout.ms": 200, "error_cb": errors.append,
                     "statistics.interval.ms": 50, "stats_cb": docs.append})
    seen = []
    p.produce("t", b"x", on_delivery=lambda err, msg: seen.append(err.code()))
    assert p.flush(10) == 0 and seen == [KafkaError._MSG_TIMED_OUT]
    assert errors == [] and docs and json.loads(docs[-1])["brokers"] == {}
    c = ck.Consumer({"group.id": "g", "bootstrap.servers": None})
    c.subscribe(["t"])
    assert c.poll(0.2) is None
    c.close()


def test_librdkafka_wording_and_codes_of_argument_errors():
    with pytest.raises(KafkaException, match='Invalid value for configuration property "partitioner": murmur'):
        ck.Producer({"partitioner": "murmur"})
    with pytest.raises(KafkaException, match='No such configuration property: "should.fail"'):
        ck.Producer({"should.fail": False})
    p = ck.Producer({"bootstrap.servers": NOWHERE})
    for bad in [("a", "b"), [("malformed_header")], {"anint": 1234}, [(1, b"x")]]:
        with pytest.raises(TypeError):
            p.produce("t", b"v", headers=bad)
    p.produce("t", b"v", headers=[("k", None), ("s", "str"), ("b", b"b")])
    p.produce("t", b"v", headers={"k": None, "s": "str"})
    c = _consumer(**{"enable.auto.offset.store": False})
    c.assign([TopicPartition("test", 0)])
    with pytest.raises(KafkaException) as e:
        c.seek(TopicPartition("test", 0, 123))  # not fetched yet: librdkafka's _STATE too
    assert e.value.args[0].code() == KafkaError._STATE and "Erroneous state" in str(e.value)
    with pytest.raises(KafkaException) as e:
        c.store_offsets(offsets=[TopicPartition("other", 0, 42)])
    assert e.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    c.close()


@pytest.mark.parametrize("name", ["murmur2", "consistent", "fnv1a"])
def test_partitioner_functions_match_confluent(name):
    import random
    rng = random.Random(7)
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 24))) for _ in range(2000)]
    ours, theirs = getattr(ck, name), getattr(real, name)
    for n in (1, 3, 7, 64, 1000):
        assert [ours(k, n) for k in keys] == [theirs(k, n) for k in keys]
    with pytest.raises(ValueError):
        ours(b"k", 0)
    with pytest.raises(TypeError):
        ours("k", 3)


def test_logger_receives_kwire_log_records():
    import logging

    class Collect(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    target = logging.getLogger("test.confluent.logger")
    target.propagate = False
    h = Collect()
    target.addHandler(h)
    target.setLevel(logging.DEBUG)
    c = _consumer(logger=target, log_level=4)   # no error_cb: errors are logged
    c.subscribe(["test"])
    end = time.monotonic() + 20
    while not h.records and time.monotonic() < end:
        c.poll(0.5)
    c.close()
    assert bool(c) is True                       # a Consumer is true (it has no len())
    assert any("_ALL_BROKERS_DOWN" in r.getMessage() for r in h.records)
    n = len(h.records)
    logging.getLogger("kwire.confluent").warning("after close")
    assert len(h.records) == n                   # forwarding ends with the client


def test_admin_client_without_brokers_fails_fast():
    import concurrent.futures
    with pytest.raises(TypeError):
        AdminClient()
    a = AdminClient({"socket.timeout.ms": 10})   # the request timeout, as in librdkafka
    assert a.poll(0.001) == 0
    fs = a.create_topics([NewTopic("mytopic", 3, 2)])
    with pytest.raises(KafkaException) as e:
        for f in concurrent.futures.as_completed(iter(fs.values())):
            f.result(timeout=5)
    assert e.value.args[0].code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
    with pytest.raises(KafkaException) as e:
        a.list_topics(timeout=0.2)
    assert e.value.args[0].code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
    fs = a.delete_records([TopicPartition("t", 0, 5)])
    with pytest.raises(KafkaException):
        fs[TopicPartition("t", 0)].result(timeout=5)
    a.close()


@pytest.mark.parametrize("exc,code", [
    ("KafkaTimeoutError", "_TIMED_OUT"), ("KafkaConnectionError", "_TRANSPORT"),
    ("AuthenticationError", "_AUTHENTICATION"), ("SslAuthenticationError", "_SSL"),
    ("ConfigError", "_INVALID_ARG"), ("NoOffsetForPartitionError", "_AUTO_OFFSET_RESET"),
    ("LogTruncationError", "_LOG_TRUNCATION"), ("CorruptRecordError", "_BAD_MSG"),
    ("MaxPollIntervalExceededError", "_MAX_POLL_EXCEEDED"), ("NotAssignedError", "_UNKNOWN_PARTITION"),
    ("RebalanceInProgressError", "REBALANCE_IN_PROGRESS"), ("ConcurrentUseError", "_STATE"),
    ("ConsumerClosedError", "_DESTROY"), ("DecompressionLimitError", "_BAD_MSG"), ("DataLossError", "_FAIL")])
def test_kwire_errors_become_librdkafka_codes(exc, code):
    from kwire import errors
    from kwire.confluent._types import to_kafka_error
    err = to_kafka_error(getattr(errors, exc)("why"))
    assert err.code() == getattr(KafkaError, code) and "why" in err.str()
    assert err.retriable() == (code in ("_TIMED_OUT", "_TRANSPORT", "REBALANCE_IN_PROGRESS"))


def test_broker_errors_keep_code_and_retriable():
    from kwire import errors
    from kwire.confluent._types import to_kafka_error
    err = to_kafka_error(errors.for_code(6, "t [0]"))      # NOT_LEADER_OR_FOLLOWER
    assert (err.code(), err.name(), err.retriable()) == (6, "NOT_LEADER_FOR_PARTITION", True)
    assert to_kafka_error(errors.for_code(9999)).code() == 9999
